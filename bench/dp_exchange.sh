#!/usr/bin/env bash
# The MoE blocks' exchange across data-parallel replicas (--all2all-backend), measured in one run
# on the same server shape and load: `kimi serve MODEL -dp 2 --enable-expert-parallel` with
# naive (all-gather + all-reduce), allgather_reducescatter (vLLM's default) and alltoallv (each
# token only to the ranks holding its experts); output throughput and TPOT with ratios to naive.
#
# Usage: bench/dp_exchange.sh KIMI_BINARY MODEL_DIR [OUT_DIR]
#   env: DP (2), TP (1), THREADS (1 per rank), NUM_PROMPTS (32), CONCURRENCY (8), INPUT_LEN (128),
#        OUTPUT_LEN (64), BACKENDS ("naive allgather_reducescatter alltoallv")
set -euo pipefail
kimi=$1
model=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
backends=${BACKENDS:-naive allgather_reducescatter alltoallv}

for b in $backends; do
  log="$out/$b.log"
  rpc=$(( 20000 + RANDOM % 20000 ))
  "$kimi" serve "$model" --host 127.0.0.1 --port 0 --max-model-len 1024 --kv-cache-memory 268435456 \
    -dp "${DP:-2}" -tp "${TP:-1}" --enable-expert-parallel --all2all-backend "$b" --threads "${THREADS:-1}" \
    --data-parallel-rpc-port "$rpc" >/dev/null 2>"$log" &
  pids+=($!)
  port=""
  for _ in $(seq 900); do
    port=$(grep -o 'on http://127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && break
    sleep 0.2
  done
  [ -n "$port" ] || { echo "kimi serve did not start: $(cat "$log")" >&2; exit 1; }
  "$kimi" bench serve --base-url "http://127.0.0.1:$port" --model "$model" --tokenizer "$model" \
    --dataset-name random --random-input-len "${INPUT_LEN:-128}" --random-output-len "${OUTPUT_LEN:-64}" \
    --num-prompts "${NUM_PROMPTS:-32}" --max-concurrency "${CONCURRENCY:-8}" --seed 1 --disable-tqdm \
    --save-result --result-dir "$out" --result-filename "$b.json" --label "$b" >"$out/$b.txt"
  cleanup; pids=()
done

python3 - "$out" $backends <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
r = {n: json.load(open(f"{out}/{n}.json")) for n in names}
base = names[0]
print(f"{'backend':<26}{'output tok/s':>14}{'mean TPOT ms':>14}{'mean TTFT ms':>14}{'tok/s vs ' + base:>24}")
for n in names:
    x = r[n]
    print(f"{n:<26}{x['output_throughput']:>14.2f}{x['mean_tpot_ms']:>14.1f}{x['mean_ttft_ms']:>14.1f}"
          f"{x['output_throughput'] / r[base]['output_throughput']:>23.2f}x")
PY
