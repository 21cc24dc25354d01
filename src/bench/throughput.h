#pragma once
// `kimi bench throughput`: offline generation through the serving engine (no HTTP), as vLLM's
// `bench throughput`, swept over concurrency levels so that the gain from batching shows as a
// ratio measured in the same run, with the compute done per second against the matmul kernel's
// peak measured in the same run (batching moves decode from the memory roofline towards it).
// With --speculative-config each level also runs with speculation, showing where it stops paying.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "spec/spec_config.h"

namespace kimi {

struct ThroughputOptions {
  std::vector<int64_t> concurrency = {1, 8, 32};
  int64_t input_len = 64;
  int64_t output_len = 32;
  int64_t prompts_per_level = 0;  // 0: 2 x concurrency (at least 4)
  int64_t max_num_batched_tokens = 2048;
  uint64_t seed = 0;
  bool measure_limits = true;  // measure the matmul peak after the levels
  std::vector<int32_t> prompt;  // a real text's ids: each prompt a slice of it; empty: random ids
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Float32;  // the CLI's default is kimi serve's (auto)
  // With speculation enabled, each level runs plain and then speculative, in the same run.
  spec::SpeculativeConfig speculative;
};

struct ThroughputLevel {
  int64_t concurrency = 0, prompts = 0;
  double seconds = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double output_tokens_per_s = 0, total_tokens_per_s = 0, requests_per_s = 0;
  double flops_per_s = 0;        // 2 x active parameters x (prompt + output tokens) / seconds
  double matmul_peak_flops = 0;  // the same for every level; 0 when not measured
  // The same level with speculative decoding (when configured): its output tok/s and
  // acceptance length (1 + accepted / drafts).
  double spec_output_tokens_per_s = 0, spec_acceptance_length = 0;
};

std::vector<ThroughputLevel> run_throughput_bench(Model& model, const ThroughputOptions& options);
std::string format_throughput_report(const std::vector<ThroughputLevel>& levels);

}  // namespace kimi
