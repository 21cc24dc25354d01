#include "engine/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace kimi {

namespace {

// vLLM's buckets (v1/metrics/loggers.py), so that the same dashboards' quantiles line up.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// 1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10)
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(double(m * scale));
    }
}

HistogramSnapshot make_histogram(std::vector<double> bounds) {
  HistogramSnapshot h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void observe(HistogramSnapshot& h, double v) {
  if (std::isnan(v)) return;
  // Buckets are "less than or equal": the first bound >= v.
  const size_t i = size_t(std::lower_bound(h.bounds.begin(), h.bounds.end(), v) - h.bounds.begin());
  ++h.counts[i];
  h.sum += v;
  ++h.count;
}

uint64_t nonneg(int64_t n) { return n > 0 ? uint64_t(n) : 0; }  // counters never go down

// Families in the order first written, each with its samples: several engines (DP replicas)
// render through one Writer so that a family's samples stay together under one header, as the
// exposition format requires.
class Writer {
 public:
  explicit Writer(const std::string& model_name) : model_label_("model_name=\"" + escape_label_value(model_name) + "\"") {}

  // Series written from now on also carry engine="<engine>".
  void set_engine(int engine) {
    engine_label_ = engine < 0 ? "" : ",engine=\"" + std::to_string(engine) + "\"";
  }
  void header(const std::string& name, const char* type, const char* help) {
    auto [it, added] = index_.emplace(name, families_.size());
    if (added) families_.push_back("# HELP " + name + ' ' + help + "\n# TYPE " + name + ' ' + type + '\n');
    current_ = it->second;
  }
  // A sample of the family of the last header().
  void sample(const std::string& name, const std::string& extra_labels, const std::string& value) {
    families_[current_] += name + '{' + model_label_ + engine_label_ + extra_labels + "} " + value + '\n';
  }
  void gauge(const std::string& name, const char* help, double v) {
    header(name, "gauge", help);
    sample(name, "", format_prometheus_number(v));
  }
  void counter(const std::string& name, const char* help, uint64_t v) {
    header(name, "counter", help);
    sample(name, "", std::to_string(v));
  }
  void histogram(const std::string& name, const char* help, const HistogramSnapshot& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cum += h.counts[i];
      const std::string le = i < h.bounds.size() ? format_prometheus_number(h.bounds[i]) : "+Inf";
      sample(name + "_bucket", ",le=\"" + le + "\"", std::to_string(cum));
    }
    sample(name + "_sum", "", format_prometheus_number(h.sum));
    sample(name + "_count", "", std::to_string(h.count));
  }
  std::string str() const {
    std::string out;
    for (const std::string& f : families_) out += f;
    return out;
  }

 private:
  std::string model_label_, engine_label_;
  std::vector<std::string> families_;
  std::map<std::string, size_t> index_;
  size_t current_ = 0;
};

void write_snapshot(Writer& w, const MetricsSnapshot& s);

}  // namespace

Metrics::Metrics(int64_t max_model_len) {
  s_.time_to_first_token = make_histogram(kTtftBuckets);
  s_.inter_token_latency = make_histogram(kItlBuckets);
  s_.e2e_request_latency = make_histogram(kE2eBuckets);
  s_.request_prompt_tokens = make_histogram(buckets_1_2_5(max_model_len));
  s_.request_generation_tokens = make_histogram(buckets_1_2_5(max_model_len));
  // Present from the start (at 0), as vLLM does, so that rate() sees each series begin.
  for (const char* r : {"stop", "length", "abort"}) s_.request_success[r] = 0;
}

void Metrics::set_kv_cache_info(const KvCacheInfo& info) {
  std::lock_guard lock(mu_);
  s_.kv_cache = info;
}

void Metrics::on_step(int64_t running, int64_t waiting, double kv_cache_usage) {
  std::lock_guard lock(mu_);
  s_.num_requests_running = running;
  s_.num_requests_waiting = waiting;
  s_.kv_cache_usage_perc = kv_cache_usage;
}

void Metrics::on_prompt_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  s_.prompt_tokens += nonneg(n);
}

void Metrics::on_generation_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  s_.generation_tokens += nonneg(n);
}

void Metrics::on_preemption(int64_t n) {
  std::lock_guard lock(mu_);
  s_.num_preemptions += nonneg(n);
}

void Metrics::on_prefix_cache_query(int64_t queried_tokens, int64_t hit_tokens) {
  std::lock_guard lock(mu_);
  s_.prefix_cache_queries += nonneg(queried_tokens);
  s_.prefix_cache_hits += nonneg(hit_tokens);
}

void Metrics::on_first_token(double seconds_since_arrival) {
  std::lock_guard lock(mu_);
  observe(s_.time_to_first_token, seconds_since_arrival);
}

void Metrics::on_token(double seconds_since_prev) {
  std::lock_guard lock(mu_);
  observe(s_.inter_token_latency, seconds_since_prev);
}

void Metrics::on_spec_decode(int64_t num_draft_tokens, int64_t num_accepted) {
  if (num_draft_tokens <= 0) return;
  std::lock_guard lock(mu_);
  ++s_.spec_num_drafts;
  s_.spec_num_draft_tokens += nonneg(num_draft_tokens);
  s_.spec_num_accepted_tokens += nonneg(num_accepted);
  if (s_.spec_accepted_per_pos.size() < size_t(num_draft_tokens)) s_.spec_accepted_per_pos.resize(size_t(num_draft_tokens));
  for (int64_t j = 0; j < num_accepted && j < num_draft_tokens; ++j) ++s_.spec_accepted_per_pos[size_t(j)];
}

void Metrics::on_kv_transfer(bool ok, int64_t bytes, int64_t tokens) {
  std::lock_guard lock(mu_);
  ++s_.kv_transfer_loads;
  if (!ok) ++s_.kv_transfer_failures;
  s_.kv_transfer_bytes += nonneg(bytes);
  s_.kv_transfer_tokens += nonneg(tokens);
}

void Metrics::on_finished(std::string_view reason, double e2e_seconds, int64_t prompt_tokens,
                          int64_t generation_tokens) {
  std::lock_guard lock(mu_);
  ++s_.request_success[std::string(reason)];
  observe(s_.e2e_request_latency, e2e_seconds);
  observe(s_.request_prompt_tokens, double(prompt_tokens));
  observe(s_.request_generation_tokens, double(generation_tokens));
}

MetricsSnapshot Metrics::snapshot() const {
  MetricsSnapshot s;
  {
    std::lock_guard lock(mu_);
    s = s_;
  }
  s.prefix_cache_hit_rate = s.prefix_cache_queries ? double(s.prefix_cache_hits) / double(s.prefix_cache_queries) : 0.0;
  return s;
}

std::string Metrics::render_prometheus(const std::string& model_name) const {
  const Metrics* self = this;
  return kimi::render_prometheus(std::span<const Metrics* const>(&self, 1), model_name);
}

std::string render_prometheus(std::span<const Metrics* const> engines, const std::string& model_name) {
  Writer w(model_name);
  for (size_t d = 0; d < engines.size(); ++d) {
    w.set_engine(engines.size() > 1 ? int(d) : -1);
    // Snapshots are formatted outside the lock: the engine never waits on a scrape.
    write_snapshot(w, engines[d]->snapshot());
  }
  return w.str();
}

namespace {

void write_snapshot(Writer& w, const MetricsSnapshot& s) {
  w.gauge("kimi:num_requests_running", "Number of requests in model execution batches.", double(s.num_requests_running));
  w.gauge("kimi:num_requests_waiting", "Number of requests waiting to be processed.", double(s.num_requests_waiting));
  w.gauge("kimi:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_cache_usage_perc);
  if (s.kv_cache.num_blocks > 0) {
    w.header("kimi:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    w.sample("kimi:cache_config_info",
             ",block_size=\"" + std::to_string(s.kv_cache.block_size) + "\",cache_dtype=\"" +
                 escape_label_value(s.kv_cache.cache_dtype) + "\",num_gpu_blocks=\"" +
                 std::to_string(s.kv_cache.num_blocks) + "\"",
             "1");
    w.gauge("kimi:kv_cache_bytes_per_token", "KV-cache bytes per cached token, all layers.",
            double(s.kv_cache.bytes_per_token));
    w.gauge("kimi:kv_cache_capacity_tokens", "Tokens the KV cache can hold (blocks x block size).",
            double(s.kv_cache.capacity_tokens()));
  }
  w.counter("kimi:prompt_tokens_total", "Number of prefill tokens processed.", s.prompt_tokens);
  w.counter("kimi:generation_tokens_total", "Number of generation tokens processed.", s.generation_tokens);
  w.counter("kimi:num_preemptions_total", "Cumulative number of preemption from the engine.", s.num_preemptions);
  w.counter("kimi:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_cache_queries);
  w.counter("kimi:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_cache_hits);
  if (s.kv_transfer_loads > 0) {
    w.counter("kimi:kv_transfer_loads_total", "Prompt KV loads from prefill instances.", s.kv_transfer_loads);
    w.counter("kimi:kv_transfer_failures_total", "Prompt KV loads that failed (recomputed or failed per policy).",
              s.kv_transfer_failures);
    w.counter("kimi:kv_transfer_bytes_total", "KV bytes received from prefill instances.", s.kv_transfer_bytes);
    w.counter("kimi:kv_transfer_tokens_total", "Prompt tokens whose KV was received from prefill instances.",
              s.kv_transfer_tokens);
  }
  if (s.spec_num_drafts > 0) {
    w.counter("kimi:spec_decode_num_drafts_total", "Number of spec decoding drafts.", s.spec_num_drafts);
    w.counter("kimi:spec_decode_num_draft_tokens_total", "Number of draft tokens.", s.spec_num_draft_tokens);
    w.counter("kimi:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", s.spec_num_accepted_tokens);
    const std::string per_pos = "kimi:spec_decode_num_accepted_tokens_per_pos_total";
    w.header(per_pos, "counter", "Accepted tokens per draft's position.");
    for (size_t j = 0; j < s.spec_accepted_per_pos.size(); ++j)
      w.sample(per_pos, ",position=\"" + std::to_string(j) + "\"", std::to_string(s.spec_accepted_per_pos[j]));
  }
  const std::string success = "kimi:request_success_total";
  w.header(success, "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : s.request_success)
    w.sample(success, ",finished_reason=\"" + escape_label_value(reason) + "\"", std::to_string(n));
  w.histogram("kimi:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              s.time_to_first_token);
  w.histogram("kimi:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              s.inter_token_latency);
  w.histogram("kimi:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              s.e2e_request_latency);
  w.histogram("kimi:request_prompt_tokens", "Number of prefill tokens processed.", s.request_prompt_tokens);
  w.histogram("kimi:request_generation_tokens", "Number of generation tokens processed.",
              s.request_generation_tokens);
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace kimi
