# Sourced by the scripts that need a throwaway server (callgrind.sh, compare-modules.sh, examples.sh,
# check-cli-example.sh, go.sh demo): a module-enabled (or stock) redis-server on a free loopback port,
# ready by testkit's rule, and a scratch directory ($work); both go when the script exits.

work=$(mktemp -d)
server_pid=""
trap 'stop_server; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ready PORT PID: true once the server answering on PORT is process PID (not another that took the port
# first) and has loaded its data: INFO's process_id and loading:0, testkit's rule. False when PID
# exits first, or after 20 s.
ready() {
  local port=$1 pid=$2 info
  for _ in $(seq 400); do
    kill -0 "$pid" 2>/dev/null || return 1
    info=$(redis-cli -p "$port" info 2>/dev/null | tr -d '\r') || info=""
    grep -qx "process_id:$pid" <<<"$info" && grep -qx "loading:0" <<<"$info" && return 0
    sleep 0.05
  done
  return 1
}

# start_server MODULE [WRAPPER ...]: starts ${RL_REDIS_SERVER:-redis-server} with MODULE (none for -; under
# WRAPPER, e.g. valgrind, when given) in $work and waits until it is ready, on another free port when the
# one chosen was taken meanwhile; sets $port and $server_pid. Its log: $work/server.log.
start_server() {
  local module=$1 load=()
  shift
  [ "$module" = - ] || load=(--loadmodule "$module")
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    "$@" "${RL_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$work" "${load[@]}" >"$work/server.log" 2>&1 &
    server_pid=$!
    ready "$port" "$server_pid" && return 0
    stop_server
  done
  echo "the server did not start; its log:" >&2
  cat "$work/server.log" >&2
  return 1
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
