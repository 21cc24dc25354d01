#!/usr/bin/env bash
# Regenerates the golden logits the C++ tests compare against: writes the tiny preset with
# `kimi make-model` and runs the independent PyTorch reference on a few fixed prompts.
# Needs Debian's python3-torch and python3-numpy. Usage: reference/make_golden.sh [path/to/kimi]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kimi=${1:-$here/../build/kimi}
out=$here/../tests/data/golden/tiny
model=$(mktemp -d)
trap 'rm -rf "$model"' EXIT

"$kimi" make-model "$model" --preset tiny --seed 0
# Fixed prompts: a long one (rope at many positions), a short one, and one that starts with the
# special-token block (ids >= vocab - 256) and repeats tokens.
/usr/bin/python3 "$here/deepseek_v3_reference.py" --model "$model" --out "$out" \
  --prompt-ids 17,923,4,511,88,1000,250,3,77,640,641,642,12,9,801,333,999,58,2,700,145,1013,60,5,321,17,480,66,901,230 \
  --prompt-ids 5,900,31,7 \
  --prompt-ids 1024,1027,88,88,88,1189,12,1279,640,3,3,255
echo "golden logits written to $out"
