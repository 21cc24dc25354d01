#!/usr/bin/env bash
# ctest entry: `kimi serve` on the tiny model (loopback, random port), then e2e.js drives
# /v1/responses with the official openai SDK and /v1/messages with the official Anthropic SDK.
# The pinned npm packages are installed into the work dir once.
# Usage: run.sh KIMI_BINARY WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../serve_port.sh"
kimi=$1
work=$2
mkdir -p "$work"
rm -rf "$work/tiny" "$work/server.log"
server_pid=
cleanup() { [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT
fail() {
  echo "apis_e2e: $*" >&2
  tail -n 40 "$work/server.log" >&2 || true
  exit 1
}
cp "$here/package.json" "$here/e2e.js" "$here/../e2e_common/e2e_helpers.js" "$work/"
if [ ! -d "$work/node_modules/openai" ] || [ ! -d "$work/node_modules/@anthropic-ai/sdk" ]; then
  (cd "$work" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
"$kimi" make-model "$work/tiny" --preset tiny >/dev/null
"$kimi" serve "$work/tiny" --host 127.0.0.1 --port 0 --served-model-name tiny --max-model-len 512 \
  --api-key secret --reasoning-parser kimi_k2 --tool-call-parser kimi_k2 --enable-auto-tool-choice \
  >"$work/server.log" 2>&1 &
server_pid=$!
wait_for_port "$work/server.log" "$server_pid"
node "$work/e2e.js" "http://127.0.0.1:$port" || fail "e2e.js failed"
