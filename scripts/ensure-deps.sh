#!/usr/bin/env bash
# Installs what building and testing need, when it is missing: redis-server and redis-cli, and
# libclang with clang's headers (bindgen, used by the redis-module crate, needs both).
# On Debian/Ubuntu it installs with apt-get (as root, or through sudo); elsewhere it says what to install.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
has_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null &&
    compgen -G "/usr/lib/llvm-*/lib/clang/*/include/stddef.h" >/dev/null
}
has_libclang || missing+=(libclang-dev)
# The clock-fault tests build a small LD_PRELOAD shim with the system C compiler.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
for extra in "$@"; do
  case "$extra" in
    faketime) compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || missing+=(faketime) ;;
    fonts-dejavu-core) [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core) ;;
    go) command -v go >/dev/null 2>&1 || missing+=(golang-go) ;;
    golang-gopkg-redis.v5-dev) [ -d /usr/share/gocode/src/gopkg.in/redis.v5 ] || missing+=(golang-gopkg-redis.v5-dev) ;;
    python3-venv) python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv) ;;
    nodejs) command -v node >/dev/null 2>&1 || missing+=(nodejs) ;;
    golang-github-containernetworking-plugin-dnsname) [ -e /usr/lib/cni/dnsname ] || missing+=("$extra") ;;
    mmdebstrap) command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap) ;;
    *) command -v "$extra" >/dev/null 2>&1 || missing+=("$extra") ;;
  esac
done

[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "Missing: ${missing[*]} (Debian package names). Install the equivalents with your package manager:" >&2
  echo "  redis-server 7.0+ (or valkey-server), libclang and clang's headers (set LIBCLANG_PATH if unusual)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "Missing: ${missing[*]}. Run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
echo "Installing ${missing[*]} ..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
