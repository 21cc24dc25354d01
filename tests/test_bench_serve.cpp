// kimi bench serve's pieces: percentiles, arrivals, dataset lengths, SSE parsing, stream timing,
// metrics and the summary table, and the PNG chart (decoded here with zlib).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "bench/serve_arrivals.h"
#include "bench/serve_client.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "bench/serve_plot.h"
#include "bench/serve_sse.h"
#include "common/error.h"
#include "test_util.h"

namespace kimi {
namespace {

TEST(BenchServePercentile, InterpolatesLinearlyAsNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0);
}

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }
double cv_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  return std::sqrt(var / double(v.size())) / m;
}
std::vector<double> gaps(const std::vector<double>& t) {
  std::vector<double> g = {t[0]};
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}

TEST(BenchServeArrivals, PoissonGapsAreExponentialAndScaledToTheRate) {
  const size_t n = 20000;
  const std::vector<double> t = arrival_times(n, 10.0, 1.0, 7);
  ASSERT_EQ(t.size(), n);
  EXPECT_NEAR(t.back(), n / 10.0, 1e-9);  // rescaled so the offered load is exact
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  const std::vector<double> g = gaps(t);
  EXPECT_NEAR(mean_of(g), 0.1, 1e-9);
  EXPECT_NEAR(cv_of(g), 1.0, 0.04);  // exponential: std == mean
  // About 1 - e^-1 of exponential gaps are below the mean.
  const double below = double(std::count_if(g.begin(), g.end(), [](double x) { return x < 0.1; })) / double(n);
  EXPECT_NEAR(below, 1 - std::exp(-1.0), 0.015);
  EXPECT_EQ(arrival_times(n, 10.0, 1.0, 7), t);  // seeded
  EXPECT_NE(arrival_times(n, 10.0, 1.0, 8), t);
}

TEST(BenchServeArrivals, BurstinessShapesTheGaps) {
  EXPECT_NEAR(cv_of(gaps(arrival_times(20000, 5.0, 4.0, 1))), 0.5, 0.03);   // gamma: cv = 1/sqrt(k)
  EXPECT_NEAR(cv_of(gaps(arrival_times(20000, 5.0, 0.25, 1))), 2.0, 0.15);  // burstier
  const std::vector<double> even = arrival_times(10, 4.0, INFINITY, 1);
  for (size_t i = 0; i < even.size(); ++i) EXPECT_NEAR(even[i], 0.25 * double(i + 1), 1e-12);
  for (double x : arrival_times(5, INFINITY, 1.0, 1)) EXPECT_EQ(x, 0.0);
  EXPECT_THROW(arrival_times(5, 0.0, 1.0, 1), Error);
  EXPECT_THROW(arrival_times(5, 1.0, -1.0, 1), Error);
}

TEST(BenchServeArrivals, GammaSamplerHasTheRightMoments) {
  for (const double shape : {0.5, 1.0, 3.0}) {
    Rng rng(3);
    std::vector<double> v;
    for (int i = 0; i < 40000; ++i) v.push_back(sample_gamma(rng, shape, 2.0));
    EXPECT_NEAR(mean_of(v), shape * 2.0, 0.04 * shape * 2.0) << shape;
    EXPECT_NEAR(cv_of(v), 1 / std::sqrt(shape), 0.04) << shape;
  }
}

TEST(BenchServeDataset, RangeRatioSamplesTheWholeIntegerRange) {
  Rng rng(1);
  RandomDatasetOptions o;
  o.input_len = 100, o.output_len = 10, o.range_ratio = 0.5;
  const RandomLengths r = sample_random_lengths(4000, o, 1000, rng);
  EXPECT_EQ(r.input_low, 50);
  EXPECT_EQ(r.input_high, 150);
  EXPECT_EQ(r.output_low, 5);
  EXPECT_EQ(r.output_high, 15);
  EXPECT_EQ(*std::min_element(r.input.begin(), r.input.end()), 50);
  EXPECT_EQ(*std::max_element(r.input.begin(), r.input.end()), 150);
  EXPECT_EQ(*std::min_element(r.output.begin(), r.output.end()), 5);
  EXPECT_EQ(*std::max_element(r.output.begin(), r.output.end()), 15);
  EXPECT_NEAR(std::accumulate(r.input.begin(), r.input.end(), 0.0) / 4000, 100, 2);
  for (int64_t off : r.offsets) EXPECT_TRUE(off >= 0 && off < 1000);

  o.range_ratio = 0, o.output_len = 0;
  const RandomLengths fixed = sample_random_lengths(50, o, 1000, rng);
  for (int64_t x : fixed.input) EXPECT_EQ(x, 100);
  for (int64_t x : fixed.output) EXPECT_EQ(x, 1);  // never asks for zero tokens
  o.range_ratio = 1.0;
  EXPECT_THROW(sample_random_lengths(1, o, 1000, rng), Error);
  o.range_ratio = 0, o.input_len = 0;
  EXPECT_THROW(sample_random_lengths(1, o, 1000, rng), Error);
}

TEST(BenchServeDataset, RandomPromptsReEncodeToTheirLength) {
  test::TempDir d;
  const auto dir = test::make_tiny_model(d);
  const auto codec = make_local_codec(dir);
  RandomDatasetOptions o;
  o.input_len = 40, o.output_len = 6, o.prefix_len = 8, o.range_ratio = 0.25, o.seed = 5;
  const std::vector<ServeRequest> reqs = make_random_dataset(*codec, 12, o);
  ASSERT_EQ(reqs.size(), 12u);
  for (const ServeRequest& r : reqs) {
    EXPECT_EQ(int64_t(codec->encode(r.prompt).size()), r.prompt_len);
    EXPECT_GE(r.prompt_len, 8 + 30 - 2);
    EXPECT_LE(r.prompt_len, 8 + 50 + 2);
    EXPECT_GE(r.output_len, 4);
    EXPECT_LE(r.output_len, 8);
  }
  const std::vector<ServeRequest> again = make_random_dataset(*codec, 12, o);
  EXPECT_EQ(again[3].prompt, reqs[3].prompt);  // seeded
}

TEST(BenchServeDataset, CustomJsonlFile) {
  test::TempDir d;
  const auto path = d.path() / "p.jsonl";
  std::ofstream(path) << "{\"prompt\": \"hello\", \"output_tokens\": 5}\n\n{\"prompt\": \"world\"}\n";
  FileDatasetOptions o;
  o.format = "custom";
  const auto reqs = load_file_dataset(path, 3, o, nullptr);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].output_len, 5);
  EXPECT_EQ(reqs[1].output_len, 256);
  EXPECT_EQ(reqs[2].prompt, "hello");  // cycled
  std::ofstream(path) << "not json\n";
  EXPECT_THROW(load_file_dataset(path, 1, o, nullptr), Error);
}

std::vector<std::string> parse_all(const std::string& stream, const std::vector<size_t>& cuts) {
  std::vector<std::string> events;
  SseParser p([&](const std::string& e) { events.push_back(e); });
  size_t at = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(stream).substr(at, c - at));
    at = c;
  }
  p.feed(std::string_view(stream).substr(at));
  p.finish();
  return events;
}

TEST(BenchServeSse, EventsSurviveAnyChunkBoundaries) {
  const std::string stream =
      ": ping\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\nevent: x\ndata:{\"c\":3}\r\rdata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\n2}", "{\"c\":3}", "[DONE]"};
  EXPECT_EQ(parse_all(stream, {}), want);
  // Every single cut point, and every byte on its own.
  for (size_t c = 1; c < stream.size(); ++c) EXPECT_EQ(parse_all(stream, {c}), want) << "cut at " << c;
  std::vector<size_t> all(stream.size() - 1);
  std::iota(all.begin(), all.end(), 1);
  EXPECT_EQ(parse_all(stream, all), want);
  // A last event without its blank line is still delivered at the end of the stream.
  EXPECT_EQ(parse_all("data: tail", {}), std::vector<std::string>{"tail"});
}

TEST(BenchServeStream, CompletionTimingsAndUsage) {
  StreamRecorder r(false, 1.0);
  r.on_event(R"({"choices":[{"text":"a"}]})", 1.5);
  r.on_event(R"({"choices":[{"text":""}]})", 1.75);
  r.on_event(R"({"choices":[{"text":"c"}]})", 2.0);
  r.on_event(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}})", 2.1);
  r.on_event("[DONE]", 2.2);
  const ServeOutcome o = r.finish(7, "");
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_DOUBLE_EQ(o.ttft, 0.5);
  EXPECT_EQ(o.itl, (std::vector<double>{0.25, 0.25}));
  EXPECT_DOUBLE_EQ(o.latency, 1.0);  // the last token, not the usage chunk
  EXPECT_EQ(o.output_tokens, 3);
  EXPECT_EQ(o.prompt_len, 7);  // the dataset's count, as vLLM reports it
  StreamRecorder uncounted(false, 0.0);
  uncounted.on_event(R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":9,"completion_tokens":1}})", 0.5);
  EXPECT_EQ(uncounted.finish(0, "").prompt_len, 9);  // custom prompts without a tokenizer
  EXPECT_EQ(o.generated_text, "ac");
}

TEST(BenchServeStream, ChatRoleChunkIsNoTokenAndChunksCountWithoutUsage) {
  StreamRecorder r(true, 0.0);
  r.on_event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.1);
  r.on_event(R"({"choices":[{"delta":{"content":"x"}}]})", 0.3);
  r.on_event(R"({"choices":[{"delta":{"reasoning_content":"y"}}]})", 0.4);
  const ServeOutcome o = r.finish(4, "");
  ASSERT_TRUE(o.success);
  EXPECT_DOUBLE_EQ(o.ttft, 0.3);
  EXPECT_EQ(o.output_tokens, 2);
  EXPECT_EQ(o.prompt_len, 4);
  EXPECT_EQ(o.generated_text, "x");
}

TEST(BenchServeStream, FailuresAreOutcomesWithTheirText) {
  StreamRecorder bad(false, 0);
  bad.on_event(R"({"choices":[{"text":"a"}]})", 0.1);
  bad.on_event("{not json", 0.2);
  EXPECT_FALSE(bad.finish(1, "").success);
  StreamRecorder err(false, 0);
  err.on_event(R"({"error":{"message":"boom","code":500}})", 0.1);
  const ServeOutcome e = err.finish(1, "");
  EXPECT_FALSE(e.success);
  EXPECT_NE(e.error.find("boom"), std::string::npos);
  StreamRecorder empty(false, 0);
  EXPECT_FALSE(empty.finish(1, "").success);
  StreamRecorder refused(false, 0);
  EXPECT_EQ(refused.finish(1, "connection refused").error, "connection refused");
}

TEST(BenchServeClient, RequestBodiesAndBaseUrls) {
  ServeClientConfig c;
  c.model = "m";
  c.ignore_eos = true;
  auto b = make_request_body(c, {"hi", 2, 7});
  EXPECT_EQ(b["prompt"], "hi");
  EXPECT_EQ(b["max_tokens"], 7);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  c.endpoint = "/v1/chat/completions";
  b = make_request_body(c, {"hi", 2, 7});
  EXPECT_EQ(b["messages"][0]["content"], "hi");
  EXPECT_EQ(b["max_completion_tokens"], 7);
  const BaseUrl u = parse_base_url("http://127.0.0.1:9/api/");
  EXPECT_EQ(u.scheme_host_port, "http://127.0.0.1:9");
  EXPECT_EQ(u.path_prefix, "/api");
  EXPECT_THROW(parse_base_url("https://x"), Error);
  EXPECT_THROW(parse_base_url("127.0.0.1:8000"), Error);
  // Nothing listens on port 1 of loopback: an outcome, not an exception.
  c.base_url = "http://127.0.0.1:1";
  const ServeOutcome o = send_streaming_request(c, {"hi", 1, 1}, std::chrono::steady_clock::now());
  EXPECT_FALSE(o.success);
  EXPECT_FALSE(o.error.empty());
}

ServeOutcome ok(double start, double ttft, std::vector<double> itl, int64_t in, int64_t out) {
  ServeOutcome o;
  o.success = true;
  o.start_time = start, o.ttft = ttft, o.itl = std::move(itl);
  o.latency = ttft + std::accumulate(o.itl.begin(), o.itl.end(), 0.0);
  o.prompt_len = in, o.output_tokens = out;
  return o;
}

TEST(BenchServeMetrics, FiguresFollowVllmsDefinitions) {
  std::vector<ServeOutcome> outs = {ok(0.0, 0.1, {0.1, 0.1, 0.1}, 10, 4), ok(0.2, 0.2, {0.3}, 20, 2)};
  ServeOutcome failed;
  failed.error = "x";
  failed.prompt_len = 5;
  outs.push_back(failed);
  const ServeMetrics m = compute_serve_metrics(outs, 2.0, {50, 99});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_EQ(m.output_lens, (std::vector<int64_t>{4, 2, 0}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 18.0);
  EXPECT_NEAR(m.tpot.mean_ms, (100.0 + 300.0) / 2, 1e-9);  // (0.3/3, 0.3/1)
  EXPECT_NEAR(m.itl.median_ms, 100, 1e-9);                  // pooled {0.1,0.1,0.1,0.3}
  EXPECT_NEAR(m.ttft.mean_ms, 150, 1e-9);
  EXPECT_NEAR(m.ttft.std_ms, 50, 1e-9);
  EXPECT_NEAR(m.e2el.percentiles_ms[0].second, 450, 1e-9);
  EXPECT_EQ(m.max_concurrent_requests, 2);  // [0, 0.4) and [0.2, 0.7) overlap
}

TEST(BenchServeMetrics, SummaryTableAndJsonInVllmsLayout) {
  std::vector<ServeOutcome> outs = {ok(0.0, 0.1, {0.1}, 10, 2)};
  const ServeMetrics m = compute_serve_metrics(outs, 1.0, {99});
  ServeRunInfo info;
  info.model_id = "/models/tiny/";
  info.date = "20250101-000000";
  info.request_rate = 20;
  info.num_prompts = 1;
  info.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  const std::string s = format_serve_summary(m, info);
  EXPECT_EQ(s.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_NE(s.find("Successful requests:                     1         \n"), std::string::npos) << s;
  EXPECT_NE(s.find("Request rate configured (RPS):           20.00     \n"), std::string::npos) << s;
  EXPECT_NE(s.find("---------------Time to First Token----------------\n"), std::string::npos) << s;
  EXPECT_NE(s.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos) << s;
  EXPECT_NE(s.find("P99 E2EL (ms):                           200.00    \n"), std::string::npos) << s;
  EXPECT_EQ(s.substr(s.size() - 51), std::string(50, '=') + "\n");
  const auto j = serve_result_json(m, outs, info);
  EXPECT_EQ(j["request_rate"], 20.0);
  EXPECT_EQ(j["total_output_tokens"], 2);
  EXPECT_TRUE(j.contains("p99_tpot_ms"));
  EXPECT_TRUE(j.contains("median_e2el_ms"));
  EXPECT_EQ(serve_result_filename(info), "openai-20.0qps-tiny-20250101-000000.json");
  info.request_rate = INFINITY;
  info.max_concurrency = 4;
  EXPECT_EQ(serve_result_filename(info), "openai-infqps-concurrency4-tiny-20250101-000000.json");
  EXPECT_EQ(serve_result_json(m, outs, info)["request_rate"], "inf");
  EXPECT_EQ(percentile_word(99.9), "99.9");
  EXPECT_EQ(python_float(0.5), "0.5");
}

// A minimal PNG reader: checks the structure and CRCs, inflates IDAT, undoes filter type 0.
struct DecodedPng {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
DecodedPng decode_png(const std::vector<uint8_t>& png) {
  DecodedPng out;
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_TRUE(png.size() > 8 && std::equal(sig, sig + 8, png.begin()));
  std::vector<uint8_t> idat;
  size_t at = 8;
  bool end = false;
  while (at + 12 <= png.size() && !end) {
    const uint32_t len = be32(&png[at]);
    const std::string type(png.begin() + long(at + 4), png.begin() + long(at + 8));
    EXPECT_LE(at + 12 + len, png.size());
    EXPECT_EQ(crc32(0, &png[at + 4], len + 4), be32(&png[at + 8 + len])) << type;
    const uint8_t* data = &png[at + 8];
    if (type == "IHDR") {
      out.width = be32(data), out.height = be32(data + 4);
      EXPECT_EQ(data[8], 8);  // bit depth
      EXPECT_EQ(data[9], 2);  // RGB
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    } else if (type == "IEND") {
      end = true;
    }
    at += 12 + len;
  }
  EXPECT_TRUE(end);
  uLongf raw_len = uLongf((out.width * 3 + 1) * out.height);
  std::vector<uint8_t> raw(raw_len);
  EXPECT_EQ(uncompress(raw.data(), &raw_len, idat.data(), uLong(idat.size())), Z_OK);
  EXPECT_EQ(raw_len, raw.size());
  for (uint32_t y = 0; y < out.height; ++y) {
    const uint8_t* row = &raw[size_t(y) * (out.width * 3 + 1)];
    EXPECT_EQ(row[0], 0);
    out.rgb.insert(out.rgb.end(), row + 1, row + 1 + out.width * 3);
  }
  return out;
}

TEST(BenchServePlot, ChartIsAValidPngWithTheDataWhereTheAxesSay) {
  const std::vector<ServePlotPoint> pts = {{1, 50, 10, 30}, {INFINITY, 400, 40, 120}, {4, 180, 20, 60}};
  ServePlotOptions o;
  ChartFrame f;
  const Canvas c = render_serve_plot(pts, o, &f);
  const DecodedPng png = decode_png(encode_png(c));
  ASSERT_EQ(png.width, 800u);
  ASSERT_EQ(png.height, 500u);
  EXPECT_EQ(png.rgb, c.rgb());
  const auto at = [&](int x, int y) {
    const size_t i = (size_t(y) * png.width + size_t(x)) * 3;
    return Rgb{png.rgb[i], png.rgb[i + 1], png.rgb[i + 2]};
  };
  EXPECT_EQ(at(2, 2), (Rgb{255, 255, 255}));
  EXPECT_EQ(at(f.left, (f.top + f.bottom) / 2), (Rgb{0, 0, 0}));  // the y axis
  EXPECT_GE(f.x_max, 400);
  EXPECT_GE(f.y_max, 120);
  for (const ServePlotPoint& p : pts) {
    EXPECT_EQ(at(f.px(p.output_throughput), f.py(p.median_ms)), kMedianColor);
    EXPECT_EQ(at(f.px(p.output_throughput), f.py(p.tail_ms)), kTailColor);
  }
  // The lines join the points in throughput order: the midpoint of the first median segment.
  EXPECT_EQ(at((f.px(50) + f.px(180)) / 2, (f.py(10) + f.py(20)) / 2), kMedianColor);
  test::TempDir d;
  write_serve_plot(d.path() / "p.png", pts, o);
  EXPECT_GT(std::filesystem::file_size(d.path() / "p.png"), 1000u);
}

}  // namespace
}  // namespace kimi
