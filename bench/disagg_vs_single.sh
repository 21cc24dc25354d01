#!/usr/bin/env bash
# One instance against 1P1D behind `kimi proxy`, on the same cores, under the same mixed load
# (long prompts arriving while others decode), measured in one run: TTFT and TPOT side by side
# with their ratios, and the KV bytes the consumer pulled per prompt token.
#
# Usage: bench/disagg_vs_single.sh KIMI_BINARY MODEL_DIR [OUT_DIR]
#   env: THREADS (2: the single instance's; each of P and D gets half), NUM_PROMPTS (24),
#        RATE (0.25 req/s, Poisson), INPUT_LEN (512), RANGE (0.9: inputs 51..973), OUTPUT_LEN (48)
set -euo pipefail
kimi=$1
model=$2
out=${3:-$(mktemp -d)}
threads=${THREADS:-2}
half=$(( threads / 2 > 0 ? threads / 2 : 1 ))
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# serve LOG VAR ARGS...: starts `kimi serve MODEL ARGS...` in the background and sets VAR to its
# port once it listens (no command substitution: the server would hold its pipe open).
serve() {
  local log=$1 var=$2 port=""; shift 2
  "$kimi" serve "$model" --host 127.0.0.1 --port 0 --max-model-len 2048 "$@" >/dev/null 2>"$log" &
  pids+=($!)
  for _ in $(seq 600); do
    port=$(grep -o 'on http://127.0.0.1:[0-9]*' "$log" | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && { printf -v "$var" '%s' "$port"; return; }
    sleep 0.2
  done
  echo "kimi serve did not start: $(cat "$log")" >&2
  exit 1
}

load() {  # load PORT LABEL
  "$kimi" bench serve --base-url "http://127.0.0.1:$1" --model "$model" --tokenizer "$model" \
    --dataset-name random --random-input-len "${INPUT_LEN:-512}" --random-range-ratio "${RANGE:-0.9}" \
    --random-output-len "${OUTPUT_LEN:-48}" --num-prompts "${NUM_PROMPTS:-24}" --request-rate "${RATE:-0.25}" \
    --seed 1 --percentile-metrics ttft,tpot,itl --metric-percentiles 50,90,99 --disable-tqdm \
    --save-result --result-dir "$out" --result-filename "$2.json" --label "$2" >"$out/$2.txt"
}

echo "single instance: $threads threads"
serve "$out/single.log" single --threads "$threads"
load "$single" single
cleanup; pids=()

echo "1P1D behind kimi proxy: $half thread(s) each"
serve "$out/prefill.log" prod --threads "$half" \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_ip":"127.0.0.1","kv_port":0}'
serve "$out/decode.log" cons --threads "$half" \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
"$kimi" proxy --host 127.0.0.1 --port 0 --prefiller-hosts 127.0.0.1 --prefiller-ports "$prod" \
  --decoder-hosts 127.0.0.1 --decoder-ports "$cons" >/dev/null 2>"$out/proxy.log" &
pids+=($!)
proxy=""
for _ in $(seq 100); do
  proxy=$(grep -o 'http://[0-9.]*:[0-9]*' "$out/proxy.log" | head -1 | sed 's/.*://') || true
  [ -n "$proxy" ] && break
  sleep 0.2
done
[ -n "$proxy" ] || { echo "kimi proxy did not start: $(cat "$out/proxy.log")" >&2; exit 1; }
load "$proxy" disagg
curl -s "http://127.0.0.1:$cons/metrics" >"$out/decode.metrics"
curl -s "http://127.0.0.1:$proxy/metrics" >"$out/proxy.metrics"

python3 - "$out" <<'EOF'
import json, re, sys
out = sys.argv[1]
s = json.load(open(f"{out}/single.json")); d = json.load(open(f"{out}/disagg.json"))
print(f"{'metric':<22}{'single':>12}{'1P1D':>12}{'1P1D/single':>14}")
for k in ["median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "median_itl_ms",
          "p99_itl_ms", "output_throughput", "request_throughput"]:
    a, b = s.get(k), d.get(k)
    if a is None or b is None: continue
    print(f"{k:<22}{a:>12.1f}{b:>12.1f}{(b / a if a else float('nan')):>13.2f}x")
m = open(f"{out}/decode.metrics").read()
def val(name):
    x = re.search(r"^" + re.escape(name) + r"\{[^}]*\} ([0-9.e+]+)", m, re.M)
    return float(x.group(1)) if x else float("nan")
loads, fails, nbytes, toks = (val("kimi:kv_transfer_" + n) for n in ("loads_total", "failures_total", "bytes_total", "tokens_total"))
print(f"consumer: {loads:.0f} KV loads, {fails:.0f} failed, {nbytes / 2**20:.1f} MiB for {toks:.0f} prompt tokens"
      f" ({nbytes / toks if toks else float('nan'):.0f} bytes per transferred token;"
      f" prompt tokens sent: {d.get('total_input_tokens', float('nan'))})")
p = open(f"{out}/proxy.metrics").read()
for line in p.splitlines():
    if line.startswith("kimi_proxy_decode_without_kv_total"): print("proxy:", line)
EOF
