#!/usr/bin/env bash
# Tokenizer encoding speed: kimi.cpp against the npm `tiktoken` package (WASM build of OpenAI's
# Rust core, the engine tokenization_kimi.py runs) and `js-tiktoken`, in one run, on the same
# vocabulary, pattern and text, one core each.
#  - vocabulary: `kimi train-tokenizer` on 1 MB of Debian copyright files + 1 MB of libstdc++
#    headers (up to 32768 ranks), so that most pieces are whole tokens, as with Kimi's 163,840;
#  - text: the next 2 MB of each (English prose and C++), 4 MB in all, not seen in training.
# Prints MB per CPU second of each (best of 3; CPU time so that a busy machine does not skew the
# comparison) and the ratio, and checks that the ids agree.
# usage: bench/tokenizer_bench.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/kimi, node, npm)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
kimi=$build/kimi
work=$build/tokenizer_bench
npm_dir=$build/tokenizer_parity  # shared with the parity test's npm install
mkdir -p "$work/corpus" "$npm_dir"
if [ ! -d "$npm_dir/node_modules/tiktoken" ] || [ ! -d "$npm_dir/node_modules/js-tiktoken" ]; then
  cp "$repo/tests/tokenizer_parity/package.json" "$npm_dir/"
  (cd "$npm_dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error)
fi

prose() { find /usr/share/doc -name copyright -type f | LC_ALL=C sort | xargs cat 2>/dev/null; }
code() { find /usr/include/c++ -name '*.h' -type f | LC_ALL=C sort | xargs cat 2>/dev/null; }
set +o pipefail  # head closing the pipe early is the point here
prose | head -c 3000000 > "$work/prose.txt"
code | head -c 3000000 > "$work/code.txt"
set -o pipefail
head -c 1000000 "$work/prose.txt" > "$work/corpus/prose.txt"
head -c 1000000 "$work/code.txt" > "$work/corpus/code.txt"
# The rest, cut at line ends so that no UTF-8 character is split at the seams.
{ tail -c +1000001 "$work/prose.txt" | sed '$d'; tail -c +1000001 "$work/code.txt" | sed '$d'; } > "$work/text.txt"

"$kimi" train-tokenizer "$work/model" "$work/corpus" --ranks 32768 >/dev/null
best=0
for _ in 1 2 3; do
  mbs=$("$kimi" tokenize --model "$work/model" --file "$work/text.txt" --stats 2>&1 >"$work/kimi.ids" |
        sed -E 's/.* ([0-9.]+) MB per CPU second/\1/')
  best=$(awk -v a="$best" -v b="$mbs" 'BEGIN { print (b > a ? b : a) }')
done
ranks=$(wc -l < "$work/model/tiktoken.model")
bytes=$(wc -c < "$work/text.txt")
json=$(NODE_PATH="$npm_dir/node_modules" node "$repo/bench/tokenizer_bench.js" "$work/model" "$work/text.txt" "$work/kimi.ids")
wasm=$(echo "$json" | sed -E 's/.*"tiktoken_wasm_mb_s":([0-9.]+).*/\1/')
jsmb=$(echo "$json" | sed -E 's/.*"js_tiktoken_mb_s":([0-9.]+).*/\1/')
same=$(echo "$json" | sed -E 's/.*"ids_equal":(true|false).*/\1/')
echo "text: $bytes bytes (English prose + C++), vocabulary: $ranks ranks + 256 specials"
printf 'kimi.cpp          %7.2f MB/s (per CPU second, one thread)\n' "$best"
printf 'tiktoken (WASM)   %7.2f MB/s   kimi.cpp is %.2fx faster\n' "$wasm" "$(awk -v a="$best" -v b="$wasm" 'BEGIN { print a / b }')"
printf 'js-tiktoken       %7.2f MB/s   kimi.cpp is %.2fx faster\n' "$jsmb" "$(awk -v a="$best" -v b="$jsmb" 'BEGIN { print a / b }')"
echo "ids identical to tiktoken's: $same"
[ "$same" = true ]
