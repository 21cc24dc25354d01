#include "bench/throughput.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "common/rng.h"
#include "engine/engine.h"
#include "kernels/bandwidth.h"

namespace kimi {

std::vector<ThroughputLevel> run_throughput_bench(Model& model, const ThroughputOptions& o) {
  if (o.input_len < 1 || o.output_len < 1) throw Error("bench throughput: --input-len and --output-len must be positive");
  const ModelConfig& c = model.config();
  const int64_t ordinary = std::max<int64_t>(1, c.vocab_size - 256);
  std::vector<ThroughputLevel> out;
  for (int64_t conc : o.concurrency) {
    if (conc < 1) throw Error("bench throughput: concurrency levels must be positive");
    ThroughputLevel L;
    L.concurrency = conc;
    L.prompts = o.prompts_per_level > 0 ? o.prompts_per_level : std::max<int64_t>(4, 2 * conc);
    Rng rng(o.seed);
    std::vector<std::vector<int32_t>> prompts(size_t(L.prompts), std::vector<int32_t>(size_t(o.input_len)));
    for (auto& p : prompts) {
      if (int64_t(o.prompt.size()) > o.input_len) {  // a slice of the text at a random offset
        const uint64_t at = rng.next_u64() % uint64_t(int64_t(o.prompt.size()) - o.input_len);
        std::copy_n(o.prompt.begin() + int64_t(at), o.input_len, p.begin());
      } else {
        for (auto& t : p) t = int32_t(rng.next_u64() % uint64_t(ordinary));
      }
    }

    EngineConfig ec;
    ec.scheduler.max_num_seqs = conc;
    ec.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
    ec.scheduler.max_model_len = o.input_len + o.output_len + 1;
    ec.enable_prefix_caching = false;  // random prompts share nothing; keep the comparison pure
    ec.kv_cache_dtype = o.kv_cache_dtype;
    ec.kv_cache_bytes = size_t(conc + 1) * size_t(ec.scheduler.max_model_len + 16) *
                        KvStorage::bytes_per_block(c, 1, o.kv_cache_dtype);
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = o.output_len;
    sp.ignore_eos = true;
    Engine engine(model, nullptr, ec);
    const auto t0 = std::chrono::steady_clock::now();
    const auto results = engine.generate(prompts, sp);
    L.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& r : results) L.output_tokens += int64_t(r[0].token_ids.size());
    if (o.speculative.enabled()) {
      ec.speculative = o.speculative;
      Engine spec_engine(model, nullptr, ec);
      const auto s0 = std::chrono::steady_clock::now();
      int64_t tokens = 0;
      for (const auto& r : spec_engine.generate(prompts, sp)) tokens += int64_t(r[0].token_ids.size());
      L.spec_output_tokens_per_s =
          double(tokens) / std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      L.spec_acceptance_length = spec_engine.stats().spec_acceptance_length();
    }
    L.prompt_tokens = L.prompts * o.input_len;
    L.output_tokens_per_s = double(L.output_tokens) / L.seconds;
    L.total_tokens_per_s = double(L.output_tokens + L.prompt_tokens) / L.seconds;
    L.requests_per_s = double(L.prompts) / L.seconds;
    L.flops_per_s = 2.0 * double(model.weights().active_params_per_token) *
                    double(L.output_tokens + L.prompt_tokens) / L.seconds;
    out.push_back(L);
  }
  if (o.measure_limits) {
    const double peak = measure_matmul_flops(model.pool(), model.bf16_activations());
    for (auto& L : out) L.matmul_peak_flops = peak;
  }
  return out;
}

std::string format_throughput_report(const std::vector<ThroughputLevel>& levels) {
  std::string s;
  char line[256];
  const double peak = levels.empty() ? 0.0 : levels.front().matmul_peak_flops;
  if (peak > 0) {
    std::snprintf(line, sizeof line, "matmul peak measured in the same run: %.2f GFLOP/s\n", peak / 1e9);
    s += line;
  }
  s += "concurrency  prompts  seconds  output tok/s  total tok/s  req/s  speed-up  GFLOP/s  of peak\n";
  for (const auto& L : levels) {
    std::snprintf(line, sizeof line, "%11lld  %7lld  %7.2f  %12.1f  %11.1f  %5.2f  %7.2fx  %7.2f  %6.1f%%\n",
                  (long long)L.concurrency, (long long)L.prompts, L.seconds, L.output_tokens_per_s,
                  L.total_tokens_per_s, L.requests_per_s, L.output_tokens_per_s / levels.front().output_tokens_per_s,
                  L.flops_per_s / 1e9, peak > 0 ? 100.0 * L.flops_per_s / peak : 0.0);
    s += line;
  }
  if (!levels.empty() && levels.front().spec_acceptance_length > 0) {
    s += "\nwith speculative decoding (same prompts, right after each plain level)\n"
         "concurrency  plain tok/s  spec tok/s  spec/plain  accept len\n";
    for (const auto& L : levels) {
      std::snprintf(line, sizeof line, "%11lld  %11.1f  %10.1f  %9.2fx  %10.2f\n", (long long)L.concurrency,
                    L.output_tokens_per_s, L.spec_output_tokens_per_s, L.spec_output_tokens_per_s / L.output_tokens_per_s,
                    L.spec_acceptance_length);
      s += line;
    }
  }
  s += "(speed-up: output tok/s over the first level; GFLOP/s: 2 x active parameters per prompt and\n"
       " output token; of peak: against the matmul peak above. Decode at low concurrency is bound by\n"
       " memory, not compute: kimi bench latency reports it against the read bandwidth)\n";
  return s;
}

}  // namespace kimi
