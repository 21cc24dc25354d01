#!/usr/bin/env bash
# Regenerates the golden logits the C++ tests compare against: writes the tiny preset with
# `kimi make-model` and runs the independent PyTorch reference on a few fixed prompts.
# Needs Debian's python3-torch and python3-numpy (scripts/install-deps.sh --reference). Usage: reference/make_golden.sh [path/to/kimi]
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

# The trained models/mini on two sentences of English (ids from `kimi tokenize --model models/mini`).
mini_out=$here/../tests/data/golden/mini
/usr/bin/python3 "$here/deepseek_v3_reference.py" --model "$here/../models/mini" --out "$mini_out" \
  --prompt-ids 425,666,2377,811,115,1138,466,266,686,2039,44,310,266,846,1415,2295,2209,1008,291,3733,343,46 \
  --prompt-ids 3599,1263,45,841,291,811,258,666,46,412,613,1940,1558,283,1446,331,103,278,44,595,714,343,378,434,2118,392,372,266,1558,863,46
echo "golden logits written to $mini_out"
# The Eagle3 draft of mini on mini's captured hidden states (tests/test_eagle3_draft.cpp).
/usr/bin/python3 "$here/eagle3_golden.py"
echo "Eagle3 golden written to $here/../tests/data/golden/mini-eagle3"
# The MTP layer of the tiny preset (make-model --mtp-layers 1) on the reference target's states
# (tests/test_mtp.cpp).
mtp_model=$(mktemp -d)
trap 'rm -rf "$model" "$mtp_model"' EXIT
"$kimi" make-model "$mtp_model" --preset tiny --seed 0 --mtp-layers 1
/usr/bin/python3 "$here/mtp_golden.py" --model "$mtp_model"
echo "MTP golden written to $here/../tests/data/golden/tiny-mtp"
