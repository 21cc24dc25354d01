#pragma once
// The engine's Prometheus metrics, with vLLM's names under the prefix "kimi:" (vLLM's are
// "vllm:"), so that dashboards written for vLLM work after a rename. The engine thread records;
// any thread may snapshot or render. All methods are thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

struct HistogramSnapshot {
  std::vector<double> bounds;    // upper bounds (inclusive), ascending, without +Inf
  std::vector<uint64_t> counts;  // per bucket, not cumulative; bounds.size() + 1 (the last: +Inf)
  double sum = 0;
  uint64_t count = 0;
};

// The KV cache's fixed shape, set once when the engine starts.
struct KvCacheInfo {
  int64_t block_size = 0, num_blocks = 0;
  std::string cache_dtype;     // "float32", "bfloat16", "fp8_e4m3"
  int64_t bytes_per_token = 0;  // all layers, a speculative draft's own cache included
  int64_t capacity_tokens() const { return block_size * num_blocks; }
};

struct MetricsSnapshot {
  int64_t num_requests_running = 0, num_requests_waiting = 0;
  double kv_cache_usage_perc = 0;  // 0..1
  uint64_t prompt_tokens = 0, generation_tokens = 0, num_preemptions = 0;
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // tokens
  double prefix_cache_hit_rate = 0;  // hits / queries (0 before any query); not exported
  std::map<std::string, uint64_t> request_success;  // by finished_reason
  HistogramSnapshot time_to_first_token, inter_token_latency, e2e_request_latency;
  HistogramSnapshot request_prompt_tokens, request_generation_tokens;
  KvCacheInfo kv_cache;
  // Speculative decoding (vLLM's spec_decode_* counters): verification steps with drafts, draft
  // tokens verified, accepted, and accepted at each draft position (index 0: the first draft).
  uint64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  // Disaggregated prefill, on a consumer: loads from producers (those with blocks to pull),
  // those that failed, the bytes and the prompt tokens whose KV arrived.
  uint64_t kv_transfer_loads = 0, kv_transfer_failures = 0, kv_transfer_bytes = 0, kv_transfer_tokens = 0;
  // Mean acceptance length: 1 + accepted / drafts (the bonus or replacement token counted), 0
  // before any draft.
  double spec_mean_acceptance_length() const {
    return spec_num_drafts ? 1.0 + double(spec_num_accepted_tokens) / double(spec_num_drafts) : 0.0;
  }
};

class Metrics {
 public:
  // max_model_len bounds the 1-2-5 buckets of the per-request token histograms (as in vLLM).
  explicit Metrics(int64_t max_model_len = 262144);

  // Exported as vLLM's info gauge cache_config_info (labels block_size, cache_dtype,
  // num_gpu_blocks, value 1) and as the gauges kv_cache_bytes_per_token and
  // kv_cache_capacity_tokens (no vLLM counterpart).
  void set_kv_cache_info(const KvCacheInfo& info);
  // Once per engine step: the gauges.
  void on_step(int64_t running, int64_t waiting, double kv_cache_usage);
  // Tokens processed: prompt tokens when a request's prefill completes, generated tokens as
  // they are sampled (counters only; the histograms below are separate).
  void on_prompt_tokens(int64_t n);
  void on_generation_tokens(int64_t n);
  void on_preemption(int64_t n = 1);
  // At admission: prompt tokens looked up in the prefix cache, and how many were found.
  void on_prefix_cache_query(int64_t queried_tokens, int64_t hit_tokens);
  void on_first_token(double seconds_since_arrival);   // time to first token
  void on_token(double seconds_since_prev);            // each later token: inter-token latency
  // One request's verification: num_draft_tokens drafts verified, the first num_accepted kept.
  void on_spec_decode(int64_t num_draft_tokens, int64_t num_accepted);
  // A consumer's load of a prompt's KV from a producer ended (exported only once one happened).
  void on_kv_transfer(bool ok, int64_t bytes, int64_t tokens);
  // reason: "stop", "length" or "abort" (others get their own label value).
  void on_finished(std::string_view reason, double e2e_seconds, int64_t prompt_tokens, int64_t generation_tokens);

  MetricsSnapshot snapshot() const;
  // Prometheus text exposition format (version 0.0.4), every series labelled model_name.
  std::string render_prometheus(const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot s_;  // the live values, guarded by mu_ (prefix_cache_hit_rate filled on read)
};

// Several engines' metrics (data-parallel replicas) in one exposition: each family once, its
// series labelled engine="<index>" when there is more than one engine.
std::string render_prometheus(std::span<const Metrics* const> engines, const std::string& model_name);

// Used by the renderer; exposed for tests.
std::string escape_label_value(std::string_view v);  // backslash, double quote, newline
std::string format_prometheus_number(double v);      // shortest round-trip; NaN, +Inf, -Inf

}  // namespace kimi
