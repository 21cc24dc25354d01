#include "bench/latency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "common/rng.h"
#include "engine/sampler.h"
#include "kernels/bandwidth.h"

namespace kimi {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

LatencyResult run_latency_bench(Model& model, const LatencyOptions& o) {
  const ModelConfig& c = model.config();
  if (o.input_len < 1 || o.output_len < 1 || o.iterations < 1)
    throw Error("bench latency: --input-len, --output-len and --num-iters must be positive");
  Rng rng(o.seed);
  std::vector<int32_t> prompt(static_cast<size_t>(o.input_len));
  // Ordinary (non-special) ids: the top 256 of the vocabulary are the special-token block.
  const int64_t ordinary = std::max<int64_t>(1, c.vocab_size - 256);
  for (auto& t : prompt) t = int32_t(rng.next_u64() % uint64_t(ordinary));

  LatencyResult r;
  r.prefill_seconds = r.decode_seconds = 1e30;
  for (int it = 0; it < o.iterations; ++it) {
    KvCache cache = model.new_cache(o.input_len + o.output_len);
    auto t0 = Clock::now();
    std::vector<float> logits = model.forward(prompt, cache);
    r.prefill_seconds = std::min(r.prefill_seconds, seconds_since(t0));

    t0 = Clock::now();
    for (int64_t i = 0; i < o.output_len; ++i) {
      const int32_t next = argmax(logits);
      logits = model.forward({&next, 1}, cache);
    }
    r.decode_seconds = std::min(r.decode_seconds, seconds_since(t0));
  }
  r.prefill_tokens_per_s = double(o.input_len) / r.prefill_seconds;
  r.decode_tokens_per_s = double(o.output_len) / r.decode_seconds;

  // Decode reads every active weight once and the cache rows of every layer at each step.
  const double mean_ctx = double(o.input_len) + double(o.output_len + 1) / 2.0;
  const double kv_row_bytes = double(c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float);
  r.decode_bytes_per_token =
      double(model.weights().active_bytes_per_token) + mean_ctx * double(c.num_hidden_layers) * kv_row_bytes;
  r.prefill_flops_per_token = 2.0 * double(model.weights().active_params_per_token);
  if (o.measure_limits) {
    r.read_bandwidth = measure_read_bandwidth(model.pool());
    r.matmul_peak_flops = measure_matmul_flops(model.pool());
    r.decode_roofline_fraction = r.decode_bytes_per_token * r.decode_tokens_per_s / r.read_bandwidth;
    r.prefill_roofline_fraction = r.prefill_flops_per_token * r.prefill_tokens_per_s / r.matmul_peak_flops;
  }
  return r;
}

std::string format_latency_report(const Model& model, const LatencyOptions& o, const LatencyResult& r) {
  char buf[2048];
  const ModelConfig& c = model.config();
  std::snprintf(buf, sizeof buf,
                "model: %lld layers, hidden %lld, %lld experts (%lld active), %.1f MB of weights, "
                "%.1f MB active per token\n"
                "threads: %d, input %lld tokens, output %lld tokens, best of %d\n"
                "prefill: %9.1f tokens/s  (%.3f s)  %7.2f GFLOP/s of a measured matmul peak of %.2f GFLOP/s "
                "= %.1f%% of roofline\n"
                "decode:  %9.1f tokens/s  (%.3f s)  %7.2f GB/s of a measured read bandwidth of %.2f GB/s "
                "= %.1f%% of roofline\n",
                (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.n_routed_experts,
                (long long)c.num_experts_per_tok, double(model.weights().total_bytes) / 1e6,
                double(model.weights().active_bytes_per_token) / 1e6, model.num_threads(),
                (long long)o.input_len, (long long)o.output_len, o.iterations, r.prefill_tokens_per_s,
                r.prefill_seconds, r.prefill_flops_per_token * r.prefill_tokens_per_s / 1e9,
                r.matmul_peak_flops / 1e9, 100.0 * r.prefill_roofline_fraction, r.decode_tokens_per_s,
                r.decode_seconds, r.decode_bytes_per_token * r.decode_tokens_per_s / 1e9, r.read_bandwidth / 1e9,
                100.0 * r.decode_roofline_fraction);
  return buf;
}

}  // namespace kimi
