# Sourced by the shell tests that start `kimi serve --port 0`: wait_for_port LOG PID sets `port`
# to the one the server reports in its start-up line, calling `fail` (the sourcing script's) if
# the server exits first or reports none within 60 s.
wait_for_port() {
  local log=$1 pid=$2
  port=
  for _ in $(seq 600); do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9][0-9]*\) .*|\1|p' "$log" | head -n 1)
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the server exited"
    sleep 0.1
  done
  fail "the server did not report its port"
}
