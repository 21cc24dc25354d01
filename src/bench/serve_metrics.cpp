#include "bench/serve_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace kimi {

namespace {

using ojson = nlohmann::ordered_json;

MetricStats stats_of(const std::vector<double>& seconds, const std::vector<double>& ps) {
  MetricStats s;
  if (!seconds.empty()) {
    const double n = double(seconds.size());
    const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
    double var = 0;
    for (double x : seconds) var += (x - mean) * (x - mean);
    s.mean_ms = mean * 1000;
    s.std_ms = std::sqrt(var / n) * 1000;
    s.median_ms = percentile(seconds, 50) * 1000;
  }
  for (double p : ps) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000);
  return s;
}

std::string row(const std::string& label, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}
std::string row(const std::string& label, int64_t v) { return row(label, std::to_string(v)); }
std::string row(const std::string& label, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return row(label, std::string(buf));
}
// Python's "{s:{c}^{n}}": centred, the odd padding character on the right.
std::string banner(const std::string& s, char c, size_t n = 50) {
  const size_t pad = s.size() < n ? n - s.size() : 0;
  return std::string(pad / 2, c) + s + std::string(pad - pad / 2, c) + "\n";
}

bool selected(const ServeRunInfo& info, const std::string& m) {
  return std::find(info.percentile_metrics.begin(), info.percentile_metrics.end(), m) != info.percentile_metrics.end();
}

struct MetricName {
  const char* key;
  const char* short_name;
  const char* header;
  const MetricStats ServeMetrics::*stats;
};
constexpr MetricName kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &ServeMetrics::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &ServeMetrics::tpot},
    {"itl", "ITL", "Inter-token Latency", &ServeMetrics::itl},
    {"e2el", "E2EL", "End-to-end Latency", &ServeMetrics::e2el},
};

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

std::string python_float(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string percentile_word(double p) {
  if (p == std::floor(p)) return std::to_string(int64_t(p));
  return python_float(p);
}

ServeMetrics compute_serve_metrics(const std::vector<ServeOutcome>& outcomes, double duration,
                                   const std::vector<double>& ps) {
  ServeMetrics m;
  m.duration = duration;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const ServeOutcome& o : outcomes) {
    if (!o.success) {
      ++m.failed;
      m.output_lens.push_back(0);
      continue;
    }
    ++m.completed;
    m.output_lens.push_back(o.output_tokens);
    m.total_input += o.prompt_len;
    m.total_output += o.output_tokens;
    if (o.output_tokens > 1) tpots.push_back((o.latency - o.ttft) / double(o.output_tokens - 1));
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
  }
  if (duration > 0) {
    m.request_throughput = double(m.completed) / duration;
    m.output_throughput = double(m.total_output) / duration;
    m.total_token_throughput = double(m.total_input + m.total_output) / duration;
  }
  m.ttft = stats_of(ttfts, ps);
  m.tpot = stats_of(tpots, ps);
  m.itl = stats_of(itls, ps);
  m.e2el = stats_of(e2els, ps);

  // Peak output tokens in any one-second bucket, and the peak number of requests in flight.
  double t0 = INFINITY, t1 = -INFINITY;
  for (const ServeOutcome& o : outcomes)
    if (o.success) t0 = std::min(t0, o.start_time), t1 = std::max(t1, o.start_time + o.latency);
  if (t0 <= t1) {
    std::vector<double> buckets(size_t(std::ceil(t1 - t0)) + 1, 0.0);
    std::vector<std::pair<double, int>> events;
    for (const ServeOutcome& o : outcomes) {
      if (!o.success) continue;
      double t = o.start_time + o.ttft;
      const auto add = [&](double at) {
        const double b = std::floor(at - t0);
        if (b >= 0 && size_t(b) < buckets.size()) buckets[size_t(b)] += 1;
      };
      add(t);
      for (double gap : o.itl) add(t += gap);
      events.emplace_back(o.start_time, 1);
      events.emplace_back(o.start_time + o.latency, -1);
    }
    m.max_output_tokens_per_s = *std::max_element(buckets.begin(), buckets.end());
    std::sort(events.begin(), events.end());  // at equal times, -1 (an end) sorts first
    int64_t cur = 0;
    for (const auto& e : events) m.max_concurrent_requests = std::max(m.max_concurrent_requests, cur += e.second);
  }
  return m;
}

std::string format_serve_summary(const ServeMetrics& m, const ServeRunInfo& info) {
  std::string s = banner(" Serving Benchmark Result ", '=');
  s += row("Successful requests:", m.completed);
  s += row("Failed requests:", m.failed);
  if (info.max_concurrency > 0) s += row("Maximum request concurrency:", info.max_concurrency);
  if (!std::isinf(info.request_rate)) s += row("Request rate configured (RPS):", info.request_rate);
  s += row("Benchmark duration (s):", m.duration);
  s += row("Total input tokens:", m.total_input);
  s += row("Total generated tokens:", m.total_output);
  s += row("Request throughput (req/s):", m.request_throughput);
  s += row("Output token throughput (tok/s):", m.output_throughput);
  s += row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  s += row("Peak concurrent requests:", double(m.max_concurrent_requests));
  s += row("Total token throughput (tok/s):", m.total_token_throughput);
  for (const MetricName& mn : kMetrics) {
    if (!selected(info, mn.key)) continue;
    const MetricStats& st = m.*(mn.stats);
    s += banner(mn.header, '-');
    s += row(std::string("Mean ") + mn.short_name + " (ms):", st.mean_ms);
    s += row(std::string("Median ") + mn.short_name + " (ms):", st.median_ms);
    for (const auto& [p, v] : st.percentiles_ms) {
      std::string label = "P";  // appended piecewise: GCC 12 misreads "P" + std::string (-Wrestrict)
      label.append(percentile_word(p)).append(" ").append(mn.short_name).append(" (ms):");
      s += row(label, v);
    }
  }
  s += std::string(50, '=') + "\n";
  return s;
}

ojson serve_result_json(const ServeMetrics& m, const std::vector<ServeOutcome>& outcomes, const ServeRunInfo& info) {
  ojson j;
  j["date"] = info.date;
  j["endpoint_type"] = info.backend;
  j["backend"] = info.backend;
  j["label"] = info.label.empty() ? ojson(nullptr) : ojson(info.label);
  j["model_id"] = info.model_id;
  j["tokenizer_id"] = info.tokenizer_id.empty() ? ojson(nullptr) : ojson(info.tokenizer_id);
  j["base_url"] = info.base_url;
  j["endpoint"] = info.endpoint;
  j["dataset_name"] = info.dataset_name;
  j["num_prompts"] = info.num_prompts;
  j["num_sent"] = info.num_sent;
  j["request_rate"] = std::isinf(info.request_rate) ? ojson("inf") : ojson(info.request_rate);
  j["burstiness"] = std::isinf(info.burstiness) ? ojson("inf") : ojson(info.burstiness);
  j["max_concurrency"] = info.max_concurrency > 0 ? ojson(info.max_concurrency) : ojson(nullptr);
  j["duration"] = m.duration;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = nullptr;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  ojson input_lens = ojson::array(), ttfts = ojson::array(), itls = ojson::array(), latencies = ojson::array(),
        starts = ojson::array(), texts = ojson::array(), errors = ojson::array();
  for (const ServeOutcome& o : outcomes) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    latencies.push_back(o.latency);
    starts.push_back(o.start_time);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = m.output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["latencies"] = latencies;
  j["start_times"] = starts;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  for (const MetricName& mn : kMetrics) {
    if (!selected(info, mn.key)) continue;
    const MetricStats& st = m.*(mn.stats);
    const std::string k = mn.key;
    j["mean_" + k + "_ms"] = st.mean_ms;
    j["median_" + k + "_ms"] = st.median_ms;
    j["std_" + k + "_ms"] = st.std_ms;
    for (const auto& [p, v] : st.percentiles_ms) {
      std::string key = "p";
      key.append(percentile_word(p)).append("_").append(k).append("_ms");
      j[key] = v;
    }
  }
  return j;
}

std::string serve_result_filename(const ServeRunInfo& info) {
  std::string model = info.model_id;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  const size_t slash = model.find_last_of('/');
  if (slash != std::string::npos) model = model.substr(slash + 1);
  std::string name = (info.label.empty() ? info.backend : info.label) + "-" + python_float(info.request_rate) + "qps";
  if (info.max_concurrency > 0) name += "-concurrency" + std::to_string(info.max_concurrency);
  return name + "-" + model + "-" + info.date + ".json";
}

}  // namespace kimi
