# Shared by the scripts that start a server on this machine and measure it (bench_serve_vs.sh,
# bench_prefix_vs.sh): a free port, waiting for /health, stopping the server. Sourced, not run.

# An unused loopback TCP port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (up to 10 minutes) until the server on port $1 answers GET /health.
wait_healthy() {
  for _ in $(seq 3000); do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0
    sleep 0.2
  done
  return 1
}

# Stops the server the caller started last (its pid in server_pid), if any.
server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}

# Stops the server when the script ends, however: Ctrl-C or SIGTERM end the whole script (a
# client interrupted by them would otherwise just fail its run and the script go on).
stop_server_on_exit() {
  trap stop_server EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
