#!/usr/bin/env bash
# Tensor parallelism's cost per decoded token on this machine: `kimi generate --json` at tp 1
# (THREADS threads) and tp 2 (half each, same cores), each run twice with different output lengths
# so that the difference isolates decode steps (prefill and start-up cancel out). Prints rank 0's
# collective calls, payload bytes and seconds per decoded token, the decode step time of both, and
# the collectives' share of a tp 2 step.
#
# Usage: bench/tp_collectives.sh KIMI_BINARY MODEL_DIR
#   env: THREADS (2), SHORT (8), LONG (40) output tokens, PROMPT_IDS (64 ids), EP (0; 1 runs the
#   tp 2 side with --enable-expert-parallel: whole experts per rank instead of slices)
set -euo pipefail
kimi=$1
model=$2
threads=${THREADS:-2}
half=$(( threads / 2 > 0 ? threads / 2 : 1 ))
short=${SHORT:-8}
long=${LONG:-40}
ids=${PROMPT_IDS:-$(seq -s, 100 163)}
port=$(( 29600 + RANDOM % 1000 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # run NAME TOKENS ARGS...
  local name=$1 n=$2; shift 2
  "$kimi" generate --model "$model" --prompt-ids "$ids" --max-tokens "$n" --ignore-eos --json --warmup "$@" \
    2>"$out/$name.log" | grep '^{' | tail -1 >"$out/$name.json"
}
run tp1_short "$short" --threads "$threads"
run tp1_long "$long" --threads "$threads"
ep=()
[[ "${EP:-0}" == 1 ]] && ep=(--enable-expert-parallel)
run tp2_short "$short" -tp 2 "${ep[@]}" --threads "$half" --data-parallel-rpc-port "$port"
run tp2_long "$long" -tp 2 "${ep[@]}" --threads "$half" --data-parallel-rpc-port "$((port + 1))"

python3 - "$out" "$threads" "$half" <<'EOF'
import json, sys
out, threads, half = sys.argv[1], sys.argv[2], sys.argv[3]
j = {n: json.load(open(f"{out}/{n}.json")) for n in ("tp1_short", "tp1_long", "tp2_short", "tp2_long")}
def per_token(a, b, f):
    return (f(j[b]) - f(j[a])) / (len(j[b]["tokens"]) - len(j[a]["tokens"]))
step1 = per_token("tp1_short", "tp1_long", lambda x: x["decode_seconds"]) * 1000
step2 = per_token("tp2_short", "tp2_long", lambda x: x["decode_seconds"]) * 1000
if j["tp2_long"]["tokens"] != j["tp1_long"]["tokens"]:
    print("warning: tp 2 generated other tokens than tp 1")
ep = " with expert parallelism" if j["tp2_long"]["tensor_parallel"].get("expert_parallel") else ""
print(f"decode step: tp 1 ({threads} threads) {step1:.2f} ms, tp 2{ep} ({half} each) {step2:.2f} ms "
      f"(tp 2 / tp 1 = {step2 / step1:.2f}x)")
total = 0.0
for k in ("all_reduce", "all_gather", "broadcast"):
    calls = per_token("tp2_short", "tp2_long", lambda x: x["tensor_parallel"][k]["calls"])
    nbytes = per_token("tp2_short", "tp2_long", lambda x: x["tensor_parallel"][k]["bytes"])
    ms = per_token("tp2_short", "tp2_long", lambda x: x["tensor_parallel"][k]["seconds"]) * 1000
    total += ms
    print(f"  {k:<11} per decoded token: {calls:6.1f} calls, {nbytes / 1024:8.1f} KiB payload, {ms:6.2f} ms")
print(f"collectives: {total:.2f} ms of a {step2:.2f} ms tp 2 step = {100 * total / step2:.0f}% "
      f"(time inside the calls, including waiting for the slower rank)")
EOF
