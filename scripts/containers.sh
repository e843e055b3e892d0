#!/usr/bin/env bash
# make docker / make docker-test: container images of the module (Redis and Valkey) and of the demo
# application, with podman on this project's machines (no Docker engine, no registry), or with Docker
# where an engine runs (RL_CONTAINER_ENGINE=docker, official base images from Docker Hub).
#
#   scripts/containers.sh build   builds redis-ratelimit, valkey-ratelimit and redis-ratelimit-app
#   scripts/containers.sh test    builds the Redis image, starts it on a free loopback port, runs the
#                                 integration suite against it (RL_TEST_REDIS_URL), removes it
#   scripts/containers.sh compose docker/compose.yaml up (podman-compose from PyPI with podman), the
#                                 seed's HTTP sequence against the application, down
#
# With podman, the base images are made locally from Debian's packages (mmdebstrap, from this machine's
# own apt mirror, then `podman import`): trixie with redis-server (Redis 8.0) and with valkey-server,
# and a builder with the host's Rust toolchain mounted read-only. They are built once and reused while
# `podman image exists`. Podman runs with runc and explicit ulimits (containers.conf below): crun 1.8
# refuses these machines' hybrid cgroups and root cannot raise its resource limits here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
action=${1:?usage: scripts/containers.sh build|test}
cache=${RL_CONTAINER_CACHE:-$HOME/.cache/redis-ratelimit/containers}
mkdir -p "$cache"
version=$(awk -F'"' '/^version/ {print $2; exit}' Cargo.toml)

engine=${RL_CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker; else engine=podman; fi
fi

scripts/ensure-deps.sh curl
if [ "$engine" = podman ]; then
  scripts/ensure-deps.sh podman runc mmdebstrap
  cat >"$cache/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$cache/containers.conf
fi

mirror() {
  local uri
  uri=$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "no Debian mirror in this machine's apt sources" >&2; exit 1; }
  echo "$uri"
}

# A local base image: Debian trixie (minbase) with the given packages, made once.
base_image() {
  local name=$1; shift
  if ! podman image exists "$name"; then
    echo "making $name from Debian's packages (once per machine) ..." >&2
    local tar=$cache/${name//[:\/]/_}.tar
    mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "$*")" trixie "$tar" "deb $(mirror) trixie main" >&2
    podman import --quiet "$tar" "$name" >/dev/null
    rm -f "$tar"
  fi
  echo "$name"
}

build() { # image dockerfile build-args...
  local image=$1 file=$2; shift 2
  local mounts=()
  if [ "$engine" = podman ]; then
    # The builder stage reaches crates.io and Debian's mirror with the host's network and CA bundle,
    # and runs the host's Rust toolchain, mounted read-only.
    mounts=(--network host --format docker -v /etc/ssl/certs:/etc/ssl/certs:ro
            -v "$HOME/.rustup:/usr/local/rustup:ro" -v "$HOME/.cargo/bin:/usr/local/cargo/bin:ro")
  fi
  $engine build --quiet "${mounts[@]}" -f "$file" "$@" -t "$image:$version" -t "$image:latest" . >/dev/null
  local size
  size=$($engine image inspect --format '{{.Size}}' "$image:$version")
  echo "built $image:$version ($((size / 1024 / 1024)) MiB)"
}

args_for() { # redis|valkey|app -> build arguments for this engine
  if [ "$engine" = docker ]; then
    case $1 in valkey) echo "--build-arg SERVER=valkey --build-arg RUNTIME_IMAGE=docker.io/valkey/valkey:8" ;; esac
    return
  fi
  local builder runtime
  case $1 in
    redis) runtime=$(base_image localhost/rl-base-redis:trixie redis-server) ;;
    valkey) runtime=$(base_image localhost/rl-base-valkey:trixie valkey-server) ;;
    app) runtime=$(base_image localhost/rl-base-redis:trixie redis-server) ;;
  esac
  local from=${RL_MODULE_FROM:-context}
  echo "--build-arg RUNTIME_IMAGE=$runtime --build-arg MODULE_FROM=$from"
  if [ "$from" = builder ]; then
    builder=$(base_image localhost/rl-base-builder:trixie ca-certificates gcc libc6-dev libclang-dev)
    echo "--build-arg BUILDER_IMAGE=$builder"
  fi
  if [ "$1" = valkey ]; then echo "--build-arg SERVER=valkey"; fi
}

prebuild() {
  # MODULE_FROM=context takes the host's build (the default here: fast, and the trixie images' glibc is
  # newer than the host's); RL_MODULE_FROM=builder compiles inside the builder stage instead.
  # --workspace: the feature set make build and make test build with (`-p` would build a second one).
  cargo build --release --workspace --lib --example server --quiet
}

case $action in
  build)
    prebuild
    # shellcheck disable=SC2046
    build redis-ratelimit docker/Dockerfile $(args_for redis)
    # shellcheck disable=SC2046
    build valkey-ratelimit docker/Dockerfile $(args_for valkey)
    # shellcheck disable=SC2046
    build redis-ratelimit-app docker/Dockerfile.app $(args_for app)
    ;;
  test)
    prebuild
    # shellcheck disable=SC2046
    build redis-ratelimit docker/Dockerfile $(args_for redis)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    name=rl-test-$$
    trap '$engine rm -f "$name" >/dev/null 2>&1 || true' EXIT
    health=(); [ "$engine" = podman ] && health=(--health-interval disable)
    # (podman logs that it cannot reach systemd for timed health checks; `healthcheck run` below works)
    $engine run -d --name "$name" --network host "${health[@]}" -e RL_PORT="$port" "redis-ratelimit:$version" \
      --port "$port" --bind 127.0.0.1 >/dev/null 2>"$cache/run.log" || { cat "$cache/run.log" >&2; exit 1; }
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "=== $(redis-cli -p "$port" info server | grep -E '^redis_version' | tr -d '\r') in redis-ratelimit:$version on 127.0.0.1:$port"
    redis-cli -p "$port" module list
    if [ "$engine" = podman ] && podman healthcheck run "$name" >/dev/null 2>&1; then echo "health check: healthy"; fi
    RL_TEST_REDIS_URL="redis://127.0.0.1:$port/" scripts/cargo-tests.sh redis-ratelimit
    # The demo application's image against the module's: the seed's HTTP sequence over a real socket.
    # shellcheck disable=SC2046
    build redis-ratelimit-app docker/Dockerfile.app $(args_for app)
    app_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    trap '$engine rm -f "$name" "$name-app" >/dev/null 2>&1 || true' EXIT
    $engine run -d --name "$name-app" --network host -e REDIS_URL="redis://127.0.0.1:$port/" \
      -e LISTEN="127.0.0.1:$app_port" "redis-ratelimit-app:$version" >/dev/null
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$app_port/health" >/dev/null && break; sleep 0.1; done
    codes=$(for _ in $(seq 11); do curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$app_port/api/items"; done)
    echo "app container, 11 requests: $codes"
    [ "$codes" = "200 200 200 200 200 200 200 200 200 200 429 " ] || { echo "unexpected statuses" >&2; exit 1; }
    ;;
  compose)
    prebuild
    if [ "$engine" = podman ]; then
      # Service names resolve through CNI's dnsname plugin; podman-compose comes from PyPI.
      scripts/ensure-deps.sh golang-github-containernetworking-plugin-dnsname
      [ -x "$cache/compose/bin/podman-compose" ] ||
        { python3 -m venv "$cache/compose" && "$cache/compose/bin/pip" install -q "podman-compose==1.5.0"; }
      compose=("$cache/compose/bin/podman-compose" -f docker/compose.yaml
               --podman-build-args "--format docker $(args_for redis | tr '\n' ' ')")
    else
      compose=(docker compose -f docker/compose.yaml)
    fi
    export RL_APP_PORT=${RL_APP_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
    trap '"${compose[@]}" down >/dev/null 2>&1 || true' EXIT
    "${compose[@]}" up -d --build >"$cache/compose.log" 2>&1 || { cat "$cache/compose.log" >&2; exit 1; }
    for _ in $(seq 100); do
      [ "$(curl -s "http://127.0.0.1:$RL_APP_PORT/api/items" -o /dev/null -w '%{http_code}')" = 200 ] && break
      sleep 0.2
    done
    "${compose[@]}" down >/dev/null 2>&1; "${compose[@]}" up -d >/dev/null 2>&1   # a fresh bucket
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$RL_APP_PORT/health" >/dev/null && break; sleep 0.2; done
    codes=$(for _ in $(seq 11); do curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$RL_APP_PORT/api/items"; done)
    echo "compose: app -> redis, 11 requests: $codes"
    degraded=$(curl -s -D - -o /dev/null "http://127.0.0.1:$RL_APP_PORT/api/items" | grep -ci '^x-ratelimit-degraded' || true)
    [ "$codes" = "200 200 200 200 200 200 200 200 200 200 429 " ] && [ "$degraded" = 0 ] ||
      { echo "unexpected answers (degraded headers: $degraded)" >&2; exit 1; }
    ;;
  *) echo "usage: scripts/containers.sh build|test|compose" >&2; exit 2 ;;
esac
