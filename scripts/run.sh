#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, and serve the committed `mini` model
# with the OpenAI-compatible API on port 8000 (KIMI_PORT). Extra arguments go to
# `kimi serve` (e.g. --api-key KEY). Stop it with Ctrl-C: in-flight requests finish first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target kimi
# The committed `mini` (reference/README-mini.md: trained on Debian's documentation); KIMI_MODEL
# points elsewhere, e.g. at a `kimi make-model` checkpoint.
model=${KIMI_MODEL:-$root/models/mini}
name=${KIMI_SERVED_NAME:-kimi-$(basename "$model")}
port=${KIMI_PORT:-8000}
cat <<MSG
Serving $model as "$name" on http://127.0.0.1:$port, for example:
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$name", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'
MSG
exec "$root/build/kimi" serve "$model" --served-model-name "$name" --port "$port" \
  --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --enable-auto-tool-choice "$@"
