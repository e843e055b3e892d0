#!/usr/bin/env bash
# The rate limit service's container image, built and tested the way scripts/containers.sh builds and
# tests the module's: podman on this project's machines (runc, explicit ulimits, base images made
# locally from Debian's packages with mmdebstrap), Docker where an engine runs (RL_CONTAINER_ENGINE).
#
#   rls/scripts/container.sh build   the binary on the host (cargo build --release), then the image
#                                    redis-ratelimit-rls:<version> (rls/Dockerfile, BINARY_FROM=context)
#   rls/scripts/container.sh test    build, then a module-enabled redis-server on a free loopback port
#                                    (the host's, with target/release/libredis_ratelimit.so) and the
#                                    image beside it with a configuration mounted read-only: its
#                                    /healthcheck, /json (OK three times, then 429) and /metrics over
#                                    its ports; the container and the server removed however it ends
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
action=${1:?usage: rls/scripts/container.sh build|test}
cache=${RL_CONTAINER_CACHE:-$HOME/.cache/redis-ratelimit/containers}
mkdir -p "$cache"
version=$(awk -F'"' '/^version/ {print $2; exit}' rls/Cargo.toml)
image=redis-ratelimit-rls

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

runtime_image() {
  if [ "$engine" = docker ]; then echo docker.io/library/debian:bookworm-slim; return; fi
  local name=localhost/rl-base-rls:trixie
  if ! podman image exists "$name"; then
    echo "making $name from Debian's packages (once per machine) ..." >&2
    local tar=$cache/rl-base-rls.tar
    mmdebstrap --quiet --variant=minbase --include=ca-certificates trixie "$tar" "deb $(mirror) trixie main" >&2
    podman import --quiet "$tar" "$name" >/dev/null
    rm -f "$tar"
  fi
  echo "$name"
}

build() {
  cargo build --release --workspace --bin redis-ratelimit-rls --quiet
  # A context of the Dockerfile and the host's binary alone.
  local context
  context=$(mktemp -d)
  mkdir -p "$context/target/release"
  cp rls/Dockerfile "$context/Dockerfile"
  cp target/release/redis-ratelimit-rls "$context/target/release/"
  local runtime
  runtime=$(runtime_image)
  $engine build --quiet --format docker --build-arg BINARY_FROM=context --build-arg RUNTIME_IMAGE="$runtime" \
    -t "$image:$version" -t "$image:latest" "$context" >/dev/null
  rm -rf "$context"
  local size
  size=$($engine image inspect --format '{{.Size}}' "$image:$version")
  echo "built $image:$version ($((size / 1024 / 1024)) MiB)"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

case $action in
  build) build ;;
  test)
    build
    [ -f target/release/libredis_ratelimit.so ] || cargo build --release --workspace --lib --quiet
    work=$(mktemp -d)
    redis_port=$(free_port); grpc_port=$(free_port); http_port=$(free_port)
    name=rls-test-$$
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
      --loadmodule "$root/target/release/libredis_ratelimit.so" --dir "$work" >"$work/redis.log" 2>&1 &
    redis_pid=$!
    trap '$engine rm -f "$name" >/dev/null 2>&1 || true; kill "$redis_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
    for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    mkdir -p "$work/runtime/config"
    printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n' \
      >"$work/runtime/config/edge.yaml"
    chmod -R a+rX "$work/runtime"
    $engine run -d --name "$name" --network host -v "$work/runtime:/data:ro" \
      -e RUNTIME_ROOT=/data -e REDIS_URL="127.0.0.1:$redis_port" -e GRPC_HOST=127.0.0.1 -e GRPC_PORT="$grpc_port" \
      -e HOST=127.0.0.1 -e PORT="$http_port" -e LOG_FORMAT=json "$image:$version" >/dev/null
    healthy=
    for _ in $(seq 100); do
      if [ "$(curl -s "http://127.0.0.1:$http_port/healthcheck")" = OK ]; then healthy=1; break; fi
      sleep 0.1
    done
    [ -n "$healthy" ] || { $engine logs "$name" >&2; echo "the container never became healthy" >&2; exit 1; }
    echo "=== $image:$version on 127.0.0.1:$grpc_port (gRPC) and :$http_port (HTTP), Redis 127.0.0.1:$redis_port"
    echo "runs as: $($engine exec "$name" id -un 2>/dev/null || echo '?')"
    body='{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}'
    codes=$(for _ in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' -d "$body" "http://127.0.0.1:$http_port/json"; done)
    echo "/json, 4 requests on a limit of 3: $codes"
    [ "$codes" = "200 200 200 429 " ] || { echo "expected 200 200 200 429" >&2; exit 1; }
    hits=$(curl -s "http://127.0.0.1:$http_port/metrics" | grep '^ratelimit_service_rate_limit_total_hits{domain="edge",key1="remote_address"}' | awk '{print $2}')
    echo "/metrics total_hits: $hits"
    [ "$hits" = 4 ] || { echo "expected total_hits 4" >&2; exit 1; }
    $engine logs "$name" 2>&1 | head -1 | python3 -c 'import json,sys; e=json.loads(sys.stdin.readline()); print("log line as JSON:", e["level"], e["message"])'
    echo "container test passed"
    ;;
  *) echo "usage: rls/scripts/container.sh build|test" >&2; exit 2 ;;
esac
