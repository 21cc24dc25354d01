#pragma once
// The figures of a `kimi bench serve` run, computed as `vllm bench serve` computes them, its
// summary table, and its result JSON (same key names), so existing tooling reads ours.
//   TPOT = (E2EL - TTFT) / (output tokens - 1), over requests with more than one output token;
//   ITL  = every gap between token chunks, pooled over all requests;
//   percentiles interpolate linearly (numpy.percentile); std is the population deviation;
//   the throughputs divide successful requests' totals by the run's duration;
//   peak output throughput counts token chunks in each whole second from the first request's
//   start, as vLLM does. Peak concurrency is the most requests in flight at one instant;
//   vLLM counts the requests active at any time within one such second, which can exceed
//   --max-concurrency, so ours reads lower where requests are short.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench/serve_client.h"

namespace kimi {

double percentile(std::vector<double> values, double p);  // p in [0, 100]; 0 for no values

struct MetricStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

struct ServeMetrics {
  int64_t completed = 0, failed = 0, total_input = 0, total_output = 0;
  double duration = 0, request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::vector<int64_t> output_lens;  // per request; 0 for failed ones
  MetricStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;  // the busiest one-second bucket
  int64_t max_concurrent_requests = 0;
};

ServeMetrics compute_serve_metrics(const std::vector<ServeOutcome>& outcomes, double duration,
                                   const std::vector<double>& percentiles);

// What the run was asked to do (the JSON's header and the table's configured lines).
struct ServeRunInfo {
  std::string date;  // YYYYmmdd-HHMMSS
  std::string backend = "openai";  // "openai" (completions) or "openai-chat"
  std::string label, model_id, tokenizer_id, base_url, endpoint, dataset_name;
  int64_t num_prompts = 0, num_sent = 0;
  double request_rate = 0;  // inf: all at once
  double burstiness = 1;
  int64_t max_concurrency = 0;  // 0: none
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99};
};

std::string format_serve_summary(const ServeMetrics& m, const ServeRunInfo& info);
nlohmann::ordered_json serve_result_json(const ServeMetrics& m, const std::vector<ServeOutcome>& outcomes,
                                         const ServeRunInfo& info);
// vLLM's name: {label}-{rate}qps[-concurrency{N}]-{model basename}-{date}.json
std::string serve_result_filename(const ServeRunInfo& info);
// As Python prints a float: 20.0, 0.5, inf.
std::string python_float(double x);
// "99", "99.9": the p in a key such as p99_ttft_ms.
std::string percentile_word(double p);

}  // namespace kimi
