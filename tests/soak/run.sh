#!/usr/bin/env bash
# ctest entry: the soak test (soak.mjs) against `kimi serve` on a loopback port, then a check
# that the server exited 0 after its SIGTERM drain. Small sizes: it also runs under ASan+UBSan.
# Usage: run.sh KIMI_BINARY WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../serve_port.sh"
kimi=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
server_pid=
cleanup() { [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT
fail() {
  echo "server_soak: $*" >&2
  tail -n 40 "$work/server.log" >&2 || true
  exit 1
}
"$kimi" make-model "$work/tiny" --preset tiny >/dev/null
"$kimi" serve "$work/tiny" --host 127.0.0.1 --port 0 --served-model-name soak --max-model-len 256 \
  --max-num-seqs 8 --kv-cache-memory 4000000 >"$work/server.log" 2>&1 &
server_pid=$!
wait_for_port "$work/server.log" "$server_pid"
node "$here/soak.mjs" "http://127.0.0.1:$port" "$server_pid" "${SOAK_WAVES:-4}" "${SOAK_PER_WAVE:-16}" "${SOAK_SEED:-7}" ||
  fail "soak.mjs failed"
status=0
for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$server_pid" 2>/dev/null && fail "the server did not exit within 30 s of SIGTERM"
wait "$server_pid" || status=$?
server_pid=
[ "$status" -eq 0 ] || fail "the server exited with status $status after SIGTERM"
echo "server_soak: passed"
