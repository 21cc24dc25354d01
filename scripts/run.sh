#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, write the default tiny model and
# serve it with the OpenAI-compatible API on port 8000 (KIMI_PORT). Extra arguments go to
# `kimi serve` (e.g. --api-key KEY). Stop it with Ctrl-C: in-flight requests finish first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target kimi
model=${KIMI_MODEL:-$root/models/tiny}
[ -f "$model/config.json" ] || "$root/build/kimi" make-model "$model" --preset tiny
port=${KIMI_PORT:-8000}
cat <<MSG
Serving $model as "kimi-tiny" on http://127.0.0.1:$port, for example:
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "kimi-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'
MSG
exec "$root/build/kimi" serve "$model" --served-model-name kimi-tiny --port "$port" \
  --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --enable-auto-tool-choice "$@"
