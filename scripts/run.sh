#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, write the default tiny model and
# run it. Extra arguments go to `kimi generate` (e.g. --max-tokens 32 --temperature 0.8).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target kimi
model=${KIMI_MODEL:-$root/models/tiny}
[ -f "$model/config.json" ] || "$root/build/kimi" make-model "$model" --preset tiny
# The tokenizer is not there yet: the prompt is given as token ids.
exec "$root/build/kimi" generate --model "$model" --prompt-ids 17,923,4,511,88,1000 --max-tokens 16 "$@"
