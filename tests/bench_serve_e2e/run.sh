#!/usr/bin/env bash
# ctest entry: `kimi bench serve` end to end against `kimi serve` on a loopback port.
# Writes the tiny model, starts the server (port 0: the kernel picks a free one), runs the
# benchmark on both endpoints (Poisson rate, --max-concurrency, a custom JSONL file,
# --max-duration, a sweep with --plot) and checks every saved result with check_result.js and the chart with
# check_png.js; then the failures that must end the run early (server down, wrong model name,
# wrong API key). Small workloads: it also runs under ASan+UBSan.
# Usage: run.sh KIMI_BINARY WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../serve_port.sh"
kimi=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() {
  echo "bench_serve_e2e: $*" >&2
  echo "--- server log:" >&2
  tail -n 30 "$work/server.log" >&2 || true
  exit 1
}

"$kimi" make-model "$work/tiny" --preset tiny >/dev/null

# The server, on a port of the kernel's choosing, with an API key and a served name.
"$kimi" serve "$work/tiny" --host 127.0.0.1 --port 0 --served-model-name kimi-tiny --api-key e2e-key \
  --max-model-len 512 >"$work/server.log" 2>&1 &
server_pid=$!
wait_for_port "$work/server.log" "$server_pid"
base=http://127.0.0.1:$port
node -e '
  const url = process.argv[1] + "/health";
  (async () => {
    for (let i = 0; i < 600; ++i) {
      try { if ((await fetch(url)).status === 200) return; } catch {}
      await new Promise((r) => setTimeout(r, 100));
    }
    console.error("no /health from " + url); process.exit(1);
  })();' "$base" || fail "the server never became healthy"

bench() {  # the common flags; the dataset comes from the local tokenizer
  "$kimi" bench serve --base-url "$base" --model kimi-tiny --tokenizer "$work/tiny" --api-key e2e-key \
    --disable-tqdm --save-result --result-dir "$work/results" "$@"
}
results=$work/results

# 1. /v1/completions, Poisson arrivals at 20 req/s, every metric and three percentiles.
bench --endpoint /v1/completions --dataset-name random --num-prompts 24 --random-input-len 16 \
  --random-output-len 8 --ignore-eos --request-rate 20 --seed 1 --percentile-metrics ttft,tpot,itl,e2el \
  --metric-percentiles 50,90,99 --result-filename completions.json | tee "$work/completions.txt"
grep -q '^============ Serving Benchmark Result ============$' "$work/completions.txt" || fail "no summary table"
for row in 'Successful requests:' 'Request rate configured (RPS):' 'Output token throughput (tok/s):' \
           'P90 TPOT (ms):' 'Median ITL (ms):' 'P99 E2EL (ms):'; do
  grep -qF "$row" "$work/completions.txt" || fail "the summary lacks '$row'"
done
node "$here/check_result.js" "$results/completions.json" num_prompts=24 output_len=8 rate=20 \
  metrics=ttft,tpot,itl,e2el percentiles=50,90,99

# 2. /v1/chat/completions, all at once but at most 4 in flight, a shared prefix.
bench --endpoint /v1/chat/completions --dataset-name random --num-prompts 24 --random-input-len 16 \
  --random-output-len 8 --random-prefix-len 4 --ignore-eos --max-concurrency 4 --result-filename chat.json \
  --metric-percentiles 50,99 >"$work/chat.txt"
grep -qF 'Maximum request concurrency:             4' "$work/chat.txt" || fail "the summary lacks the concurrency"
node "$here/check_result.js" "$results/chat.json" num_prompts=24 output_len=8 rate=inf max_concurrency=4 \
  percentiles=50,99

# 3. A custom JSONL file (cycled: 3 prompts for 6 requests), each line's output length, ignoring EOS.
printf '%s\n' '{"prompt": "The licence grants you the right", "output_tokens": 5}' '' \
  '{"prompt": "héllo wörld, ✓ and more", "output_tokens": 3}' '{"prompt": "Why?", "output_tokens": 4}' \
  >"$work/prompts.jsonl"
bench --dataset-name custom --dataset-path "$work/prompts.jsonl" --num-prompts 6 --ignore-eos \
  --result-filename custom.json >/dev/null
node "$here/check_result.js" "$results/custom.json" num_prompts=6
node -e '
  const r = require(process.argv[1]);
  if (JSON.stringify(r.output_lens) !== "[5,3,4,5,3,4]") { console.error("custom output_lens " + r.output_lens); process.exit(1); }' \
  "$results/custom.json"

# 4. Bounded by time: at 10 req/s, --max-duration 1 issues about 10 of the 100 prompts.
bench --num-prompts 100 --random-input-len 8 --random-output-len 4 --request-rate 10 --max-duration 1 \
  --result-filename bounded.json >"$work/bounded.txt"
grep -q -- '--max-duration reached' "$work/bounded.txt" || fail "--max-duration did not stop the run"
node "$here/check_result.js" "$results/bounded.json" num_prompts=100 output_len=4 rate=10 bounded=1

# 5. A sweep of request rates drawn as throughput against latency.
bench --num-prompts 12 --random-input-len 16 --random-output-len 8 --request-rate 10,inf \
  --result-filename sweep.json --plot "$work/sweep.png" >"$work/sweep.txt"
[ "$(grep -c '^============ Serving Benchmark Result' "$work/sweep.txt")" = 2 ] || fail "the sweep did not run twice"
node "$here/check_result.js" "$results/sweep-10.0qps.json" num_prompts=12 output_len=8 rate=10
node "$here/check_result.js" "$results/sweep-infqps.json" num_prompts=12 output_len=8 rate=inf
node "$here/check_png.js" "$work/sweep.png" 800 500

# 6. Misconfigurations end the run at the first request, with the server's reason, exit code != 0.
expect_failure() {  # WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  local rc=0
  "$kimi" bench serve --disable-tqdm --num-prompts 4 --random-input-len 8 --random-output-len 4 \
    --tokenizer "$work/tiny" "$@" >"$work/fail.txt" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "$what: exit code 0"
  grep -q "$pattern" "$work/fail.txt" || fail "$what: no '$pattern' in: $(cat "$work/fail.txt")"
}
expect_failure "wrong model name" "does not exist" --base-url "$base" --api-key e2e-key --model no-such-model
expect_failure "wrong API key" "401" --base-url "$base" --api-key wrong-key --model kimi-tiny
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=
if grep -qE 'Sanitizer|runtime error:' "$work/server.log"; then fail "the server reported a sanitizer error"; fi
expect_failure "server down" "cannot connect" --base-url "$base" --model kimi-tiny

echo "bench_serve_e2e: ok"
