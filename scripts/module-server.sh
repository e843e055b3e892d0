# Sourced by the measuring scripts (callgrind.sh, compare-modules.sh): a throwaway module-enabled
# redis-server on a free loopback port, and a scratch directory ($work); both go when the script exits.

work=$(mktemp -d)
server_pid=""
trap 'stop_server; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server MODULE [WRAPPER ...]: starts ${RL_REDIS_SERVER:-redis-server} with MODULE (none for -; under
# WRAPPER, e.g. valgrind, when given) and waits until it answers; sets $port and $server_pid.
start_server() {
  local module=$1 load=()
  shift
  [ "$module" = - ] || load=(--loadmodule "$module")
  port=$(free_port)
  "$@" "${RL_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    "${load[@]}" >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 400); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "the server on port $port did not start" >&2
  return 1
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
