// Checks one `kimi bench serve --save-result` JSON against vLLM's definitions, recomputing every
// summary figure from the per-request arrays. Usage:
//   node check_result.js FILE key=value...   (num_prompts, output_len, rate, max_concurrency,
//                                             metrics=ttft,tpot,itl,e2el, percentiles=50,90,99,
//                                             bounded=1 for a run cut short by --max-duration)
'use strict';
const fs = require('fs');

const [file, ...opts] = process.argv.slice(2);
const want = Object.fromEntries(opts.map((o) => o.split('=')));
const r = JSON.parse(fs.readFileSync(file, 'utf8'));
const fail = (msg) => {
  console.error(`${file}: ${msg}`);
  process.exit(1);
};
const check = (cond, msg) => cond || fail(msg);
const near = (a, b, what, rel = 1e-6) =>
  check(Math.abs(a - b) <= rel * Math.max(1, Math.abs(a), Math.abs(b)), `${what}: ${a} != ${b}`);
const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const mean = (xs) => (xs.length ? sum(xs) / xs.length : 0);
const percentile = (xs, p) => {  // numpy's linear interpolation
  if (!xs.length) return 0;
  const v = [...xs].sort((a, b) => a - b);
  const rank = (p / 100) * (v.length - 1), lo = Math.floor(rank), hi = Math.ceil(rank);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
};

check(r.num_prompts === Number(want.num_prompts), `num_prompts ${r.num_prompts} != ${want.num_prompts}`);
// With --max-duration (bounded=1) only the requests issued in time count, and some were not.
const n = want.bounded ? r.num_sent : r.num_prompts;
if (want.bounded) check(n > 0 && n < r.num_prompts, `num_sent ${n} of ${r.num_prompts} under --max-duration`);
else check(r.num_sent === n, `num_sent ${r.num_sent} != ${n}`);
check(r.completed + r.failed === n, `completed ${r.completed} + failed ${r.failed} != ${n}`);
check(r.failed === 0, `${r.failed} requests failed: ${JSON.stringify(r.errors.filter((e) => e))}`);
for (const k of ['input_lens', 'output_lens', 'ttfts', 'itls', 'latencies', 'start_times', 'generated_texts', 'errors'])
  check(Array.isArray(r[k]) && r[k].length === n, `${k} does not hold one entry per request`);
if (want.rate) check(String(r.request_rate) === want.rate, `request_rate ${r.request_rate} != ${want.rate}`);
if (want.max_concurrency) {
  check(r.max_concurrency === Number(want.max_concurrency), `max_concurrency ${r.max_concurrency}`);
  check(r.max_concurrent_requests <= r.max_concurrency, `${r.max_concurrent_requests} requests were in flight at once`);
} else {
  check(r.max_concurrency === null, `max_concurrency ${r.max_concurrency} != null`);
}

// Totals and throughputs.
check(r.total_output_tokens === sum(r.output_lens), `total_output_tokens ${r.total_output_tokens} != sum of output_lens`);
check(r.total_input_tokens === sum(r.input_lens), `total_input_tokens ${r.total_input_tokens} != sum of input_lens`);
check(r.input_lens.every((x) => x > 0), 'a request has no input tokens');
if (want.output_len) {  // --ignore-eos and --random-range-ratio 0: every request runs to its length
  const bad = r.output_lens.filter((x) => x !== Number(want.output_len));
  check(bad.length === 0, `output_lens ${JSON.stringify(r.output_lens)} != ${want.output_len}`);
}
check(r.duration > 0, 'duration');
if (want.rate && want.rate !== 'inf' && !want.bounded)  // the last request is issued at num_prompts / rate
  check(r.duration >= (0.99 * n) / Number(want.rate), `duration ${r.duration} < num_prompts / rate`);
near(r.request_throughput, r.completed / r.duration, 'request_throughput');
near(r.output_throughput, r.total_output_tokens / r.duration, 'output_throughput');
near(r.total_token_throughput, (r.total_input_tokens + r.total_output_tokens) / r.duration, 'total_token_throughput');

// Per request: TTFT <= E2EL, the ITLs are the gaps after the first token and add up to E2EL - TTFT,
// at most one gap per output token after the first; everything ends within the run.
for (let i = 0; i < n; ++i) {
  const ttft = r.ttfts[i], lat = r.latencies[i], itl = r.itls[i];
  check(ttft > 0 && ttft <= lat, `request ${i}: ttft ${ttft} latency ${lat}`);
  check(itl.every((g) => g >= 0), `request ${i}: negative ITL`);
  check(itl.length <= r.output_lens[i] - 1, `request ${i}: ${itl.length} ITLs for ${r.output_lens[i]} tokens`);
  near(sum(itl), lat - ttft, `request ${i}: sum of ITLs vs latency - ttft`, 1e-6);
  check(r.start_times[i] >= 0 && r.start_times[i] + lat <= r.duration + 1e-6, `request ${i} outside the run`);
}
check(r.max_output_tokens_per_s > 0 && r.max_output_tokens_per_s <= r.total_output_tokens, 'max_output_tokens_per_s');

// The summary statistics, recomputed (TPOT excludes the first token; ITL pools all gaps).
const samples = {
  ttft: r.ttfts,
  tpot: r.output_lens.map((o, i) => (o > 1 ? (r.latencies[i] - r.ttfts[i]) / (o - 1) : null)).filter((x) => x !== null),
  itl: r.itls.flat(),
  e2el: r.latencies,
};
const metrics = (want.metrics || 'ttft,tpot,itl').split(',');
const ps = (want.percentiles || '99').split(',');
for (const m of metrics) {
  const xs = samples[m].map((s) => s * 1000);
  for (const k of [`mean_${m}_ms`, `median_${m}_ms`, `std_${m}_ms`, ...ps.map((p) => `p${p}_${m}_ms`)])
    check(typeof r[k] === 'number' && Number.isFinite(r[k]) && r[k] >= 0, `${k} missing or not a number`);
  near(r[`mean_${m}_ms`], mean(xs), `mean_${m}_ms`);
  near(r[`median_${m}_ms`], percentile(xs, 50), `median_${m}_ms`);
  near(r[`std_${m}_ms`], Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2))), `std_${m}_ms`, 1e-5);
  for (const p of ps) near(r[`p${p}_${m}_ms`], percentile(xs, Number(p)), `p${p}_${m}_ms`);
  for (let i = 1; i < ps.length; ++i)
    check(r[`p${ps[i - 1]}_${m}_ms`] <= r[`p${ps[i]}_${m}_ms`], `p${ps[i - 1]}_${m}_ms > p${ps[i]}_${m}_ms`);
  check(Math.min(...xs) <= r[`mean_${m}_ms`] + 1e-9 && r[`mean_${m}_ms`] <= Math.max(...xs) + 1e-9, `mean_${m}_ms outside the samples`);
}
for (const m of ['ttft', 'tpot', 'itl', 'e2el'].filter((x) => !metrics.includes(x)))
  check(!(`mean_${m}_ms` in r), `mean_${m}_ms present but not asked for`);
console.log(`${file}: ok (${r.completed} requests, ${r.total_output_tokens} output tokens in ${r.duration.toFixed(2)} s)`);
