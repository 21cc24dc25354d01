// Prometheus metrics: recorded values, the exposition text line by line, and concurrent use.
#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <sstream>
#include <thread>

#include "engine/metrics.h"

namespace kimi {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// The block of lines of one metric family: from its # HELP to the next # HELP.
std::vector<std::string> family(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  bool in = false;
  for (const std::string& l : lines_of(text)) {
    if (l.rfind("# HELP ", 0) == 0) in = l.rfind("# HELP " + name + " ", 0) == 0;
    if (in) out.push_back(l);
  }
  return out;
}

TEST(Metrics, SnapshotCountsEverything) {
  Metrics m(100);
  m.on_step(3, 2, 0.25);
  m.on_prompt_tokens(10);
  m.on_prompt_tokens(-5);  // counters never decrease
  m.on_generation_tokens(4);
  m.on_preemption();
  m.on_preemption(2);
  m.on_prefix_cache_query(100, 25);
  m.on_first_token(0.03);
  m.on_token(0.02);
  m.on_token(0.5);
  m.on_finished("stop", 1.2, 10, 4);
  m.on_finished("length", 0.4, 7, 16);
  const MetricsSnapshot s = m.snapshot();
  EXPECT_EQ(s.num_requests_running, 3);
  EXPECT_EQ(s.num_requests_waiting, 2);
  EXPECT_DOUBLE_EQ(s.kv_cache_usage_perc, 0.25);
  EXPECT_EQ(s.prompt_tokens, 10u);
  EXPECT_EQ(s.generation_tokens, 4u);
  EXPECT_EQ(s.num_preemptions, 3u);
  EXPECT_EQ(s.prefix_cache_queries, 100u);
  EXPECT_EQ(s.prefix_cache_hits, 25u);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 0.25);
  EXPECT_EQ(s.request_success.at("stop"), 1u);
  EXPECT_EQ(s.request_success.at("length"), 1u);
  EXPECT_EQ(s.request_success.at("abort"), 0u);
  EXPECT_EQ(s.time_to_first_token.count, 1u);
  EXPECT_EQ(s.inter_token_latency.count, 2u);
  EXPECT_DOUBLE_EQ(s.inter_token_latency.sum, 0.52);
  EXPECT_EQ(s.request_prompt_tokens.bounds, (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(Metrics().snapshot().prefix_cache_hit_rate, 0.0);
}

TEST(Metrics, RendersTheExpositionFormat) {
  Metrics m(10);  // prompt/generation buckets 1, 2, 5, 10
  m.on_step(1, 0, 0.5);
  m.on_prompt_tokens(7);
  m.on_finished("stop", 0.9, 5, 12);
  m.on_finished("length", 3.0, 2, 1);
  const std::string text = m.render_prometheus("kimi-k2.5");

  EXPECT_EQ(family(text, "kimi:num_requests_running"),
            (std::vector<std::string>{"# HELP kimi:num_requests_running Number of requests in model execution batches.",
                                      "# TYPE kimi:num_requests_running gauge",
                                      "kimi:num_requests_running{model_name=\"kimi-k2.5\"} 1"}));
  EXPECT_EQ(family(text, "kimi:kv_cache_usage_perc")[2], "kimi:kv_cache_usage_perc{model_name=\"kimi-k2.5\"} 0.5");
  EXPECT_EQ(family(text, "kimi:prompt_tokens_total"),
            (std::vector<std::string>{"# HELP kimi:prompt_tokens_total Number of prefill tokens processed.",
                                      "# TYPE kimi:prompt_tokens_total counter",
                                      "kimi:prompt_tokens_total{model_name=\"kimi-k2.5\"} 7"}));
  EXPECT_EQ(family(text, "kimi:request_success_total"),
            (std::vector<std::string>{
                "# HELP kimi:request_success_total Count of successfully processed requests.",
                "# TYPE kimi:request_success_total counter",
                "kimi:request_success_total{model_name=\"kimi-k2.5\",finished_reason=\"abort\"} 0",
                "kimi:request_success_total{model_name=\"kimi-k2.5\",finished_reason=\"length\"} 1",
                "kimi:request_success_total{model_name=\"kimi-k2.5\",finished_reason=\"stop\"} 1"}));
  EXPECT_EQ(family(text, "kimi:request_generation_tokens"),
            (std::vector<std::string>{
                "# HELP kimi:request_generation_tokens Number of generation tokens processed.",
                "# TYPE kimi:request_generation_tokens histogram",
                "kimi:request_generation_tokens_bucket{model_name=\"kimi-k2.5\",le=\"1\"} 1",
                "kimi:request_generation_tokens_bucket{model_name=\"kimi-k2.5\",le=\"2\"} 1",
                "kimi:request_generation_tokens_bucket{model_name=\"kimi-k2.5\",le=\"5\"} 1",
                "kimi:request_generation_tokens_bucket{model_name=\"kimi-k2.5\",le=\"10\"} 1",
                "kimi:request_generation_tokens_bucket{model_name=\"kimi-k2.5\",le=\"+Inf\"} 2",
                "kimi:request_generation_tokens_sum{model_name=\"kimi-k2.5\"} 13",
                "kimi:request_generation_tokens_count{model_name=\"kimi-k2.5\"} 2"}));
  const auto e2e = family(text, "kimi:e2e_request_latency_seconds");
  EXPECT_EQ(e2e[2], "kimi:e2e_request_latency_seconds_bucket{model_name=\"kimi-k2.5\",le=\"0.3\"} 0");
  EXPECT_EQ(e2e[4], "kimi:e2e_request_latency_seconds_bucket{model_name=\"kimi-k2.5\",le=\"0.8\"} 0");
  EXPECT_EQ(e2e[5], "kimi:e2e_request_latency_seconds_bucket{model_name=\"kimi-k2.5\",le=\"1\"} 1");
  EXPECT_EQ(e2e[e2e.size() - 3], "kimi:e2e_request_latency_seconds_bucket{model_name=\"kimi-k2.5\",le=\"+Inf\"} 2");
  EXPECT_EQ(e2e[e2e.size() - 2], "kimi:e2e_request_latency_seconds_sum{model_name=\"kimi-k2.5\"} 3.9");

  // Every family is exported, and every line is a well-formed comment or sample.
  for (const char* name :
       {"kimi:num_requests_running", "kimi:num_requests_waiting", "kimi:kv_cache_usage_perc",
        "kimi:prompt_tokens_total", "kimi:generation_tokens_total", "kimi:num_preemptions_total",
        "kimi:prefix_cache_queries_total", "kimi:prefix_cache_hits_total", "kimi:request_success_total",
        "kimi:time_to_first_token_seconds", "kimi:inter_token_latency_seconds", "kimi:e2e_request_latency_seconds",
        "kimi:request_prompt_tokens", "kimi:request_generation_tokens"})
    EXPECT_GE(family(text, name).size(), 3u) << name;
  const std::regex comment(R"(# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (gauge|counter|histogram)))");
  const std::regex sample(
      R"([a-zA-Z_:][a-zA-Z0-9_:]*\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*")*\} ([-+]?[0-9.e+-]+|\+Inf|NaN))");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (const std::string& l : lines_of(text))
    EXPECT_TRUE(std::regex_match(l, comment) || std::regex_match(l, sample)) << l;
}

TEST(Metrics, ReportsTheKvCacheShape) {
  Metrics m;
  EXPECT_EQ(m.render_prometheus("m").find("cache_config_info"), std::string::npos);  // not set yet
  m.set_kv_cache_info({16, 1000, "bfloat16", 70272});
  const std::string text = m.render_prometheus("m");
  EXPECT_NE(text.find("# TYPE kimi:cache_config_info gauge\n"
                      "kimi:cache_config_info{model_name=\"m\",block_size=\"16\",cache_dtype=\"bfloat16\","
                      "num_gpu_blocks=\"1000\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kimi:kv_cache_bytes_per_token{model_name=\"m\"} 70272\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kimi:kv_cache_capacity_tokens{model_name=\"m\"} 16000\n"), std::string::npos) << text;
  EXPECT_EQ(m.snapshot().kv_cache.capacity_tokens(), 16000);
}

TEST(Metrics, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  Metrics m;
  const std::string text = m.render_prometheus("we\"ird\\model\n");
  EXPECT_NE(text.find("kimi:num_requests_running{model_name=\"we\\\"ird\\\\model\\n\"} 0\n"), std::string::npos);
  EXPECT_EQ(format_prometheus_number(0.1), "0.1");
  EXPECT_EQ(format_prometheus_number(2560.0), "2560");
  EXPECT_EQ(format_prometheus_number(std::numeric_limits<double>::infinity()), "+Inf");
}

TEST(Metrics, ConcurrentRecordingWhileRendering) {
  Metrics m;
  constexpr int kThreads = 4, kEvents = 5000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const std::string text = m.render_prometheus("m");
      ASSERT_NE(text.find("kimi:generation_tokens_total"), std::string::npos);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < kEvents; ++i) {
        m.on_step(i, i, 0.5);
        m.on_generation_tokens(1);
        m.on_token(0.01 * (i % 10));
        m.on_prefix_cache_query(2, 1);
        if (i % 100 == 0) m.on_finished(i % 200 ? "stop" : "abort", 1.0, 3, 4);
      }
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  const MetricsSnapshot s = m.snapshot();
  EXPECT_EQ(s.generation_tokens, uint64_t(kThreads * kEvents));
  EXPECT_EQ(s.inter_token_latency.count, uint64_t(kThreads * kEvents));
  EXPECT_EQ(s.prefix_cache_queries, uint64_t(2 * kThreads * kEvents));
  EXPECT_EQ(s.request_success.at("stop") + s.request_success.at("abort"), uint64_t(kThreads * kEvents / 100));
  uint64_t cum = 0;
  for (uint64_t c : s.inter_token_latency.counts) cum += c;
  EXPECT_EQ(cum, s.inter_token_latency.count);
}

}  // namespace
}  // namespace kimi
