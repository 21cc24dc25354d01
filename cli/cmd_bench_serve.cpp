// `kimi bench serve`: vLLM's `vllm bench serve` against any OpenAI-compatible endpoint.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "args.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "bench/serve_plot.h"
#include "bench/serve_runner.h"
#include "bench/serve_spec_metrics.h"
#include "common/error.h"

namespace kimi::cli {

namespace {

void usage() {
  std::printf(
      "usage: kimi bench serve [--base-url http://127.0.0.1:8000 | --host H --port P] [options]\n\n"
      "Load-tests an OpenAI-compatible server (kimi serve, vllm serve, llama-server) as `vllm bench\n"
      "serve` does: streamed requests at Poisson arrivals, then TTFT, TPOT, ITL and end-to-end latency.\n\n"
      "  --endpoint /v1/completions|/v1/chat/completions   --model NAME (default: the server's first)\n"
      "  --tokenizer MODEL_DIR   tokenizer for the random prompts (default: --model when it is a model\n"
      "                          directory, else the server's /tokenize and /detokenize)\n"
      "  --dataset-name random|sharegpt|custom  --dataset-path FILE (sharegpt JSON, custom JSONL)\n"
      "  --random-input-len 1024 --random-output-len 128 --random-range-ratio 0 --random-prefix-len 0\n"
      "  --input-len N --output-len N (set the dataset's lengths)  --sharegpt-output-len N\n"
      "  --custom-output-len 256  --random-vocab-size N (with a server tokenizer that cannot be probed)\n"
      "  --num-prompts 1000  --request-rate inf|R[,R...] (a list sweeps)  --burstiness 1\n"
      "  --max-concurrency N  --max-duration SECONDS (stop issuing requests)  --request-timeout 600\n"
      "  --ignore-eos (on for the random dataset, as in vLLM)  --temperature T  --seed 0\n"
      "  --percentile-metrics ttft,tpot,itl[,e2el]  --metric-percentiles 99[,50,90...]\n"
      "  --save-result  --result-dir DIR  --result-filename NAME  --label NAME  --disable-tqdm\n"
      "  --plot FILE.png  --plot-metric ttft|tpot|itl|e2el (tpot): throughput against latency, one\n"
      "                   point per request rate\n"
      "  --api-key KEY (default: $OPENAI_API_KEY)\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double parse_number(const std::string& flag, const std::string& v) {
  if (v == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw Error("--" + flag + " expects numbers (or inf), got '" + v + "'");
  return x;
}

std::string now_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

bool is_model_dir(const std::string& p) { return !p.empty() && std::filesystem::exists(std::filesystem::path(p) / "tiktoken.model"); }

}  // namespace

int run_bench_serve(int argc, char** argv) {
  const Args a(argc, argv, 3,
               {"base-url", "host", "port", "endpoint", "model", "served-model-name", "tokenizer", "dataset-name",
                "dataset-path", "random-input-len", "random-output-len", "random-range-ratio", "random-prefix-len",
                "random-vocab-size", "input-len", "output-len", "sharegpt-output-len", "custom-output-len",
                "num-prompts", "request-rate", "burstiness", "max-concurrency", "max-duration", "request-timeout",
                "seed", "temperature", "percentile-metrics", "metric-percentiles", "result-dir", "result-filename",
                "label", "plot", "plot-metric", "api-key", "backend"},
               {"help", "ignore-eos", "save-result", "save-detailed", "disable-tqdm"});
  if (a.has("help")) {
    usage();
    return 0;
  }
  ServeClientConfig client;
  client.base_url = a.get("base-url", "http://" + a.get("host", "127.0.0.1") + ":" + std::to_string(a.get_int("port", 8000)));
  while (client.base_url.size() > 7 && client.base_url.back() == '/') client.base_url.pop_back();
  parse_base_url(client.base_url);  // a bad URL is an error now, not N failed requests
  client.endpoint = a.get("endpoint", "/v1/completions");
  if (client.endpoint.empty() || client.endpoint[0] != '/') client.endpoint = "/" + client.endpoint;
  if (a.has("backend") && a.get("backend", "") != (client.chat() ? "openai-chat" : "openai"))
    throw Error("--backend must match --endpoint: openai for /v1/completions, openai-chat for /v1/chat/completions");
  const char* env_key = std::getenv("OPENAI_API_KEY");
  client.api_key = a.get("api-key", env_key ? env_key : "");
  client.request_timeout_s = a.get_double("request-timeout", 600);
  if (a.has("temperature")) client.extra_body["temperature"] = a.get_double("temperature", 0);

  std::string model_id = a.get("model", "");
  if (model_id.empty()) {
    const auto models = http_get_json(client, "/v1/models");
    if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() || !models["data"][0].contains("id"))
      throw Error(client.base_url + "/v1/models lists no model: pass --model");
    model_id = models["data"][0]["id"].get<std::string>();
    std::printf("Model not specified, using the server's first model: %s\n", model_id.c_str());
  }
  client.model = a.get("served-model-name", model_id);

  const std::string dataset = a.get("dataset-name", "random");
  const int64_t num_prompts = a.get_int("num-prompts", 1000);
  if (num_prompts <= 0) throw Error("--num-prompts must be positive");
  const uint64_t seed = uint64_t(a.get_int("seed", 0));
  std::string tokenizer_dir = a.get("tokenizer", is_model_dir(model_id) ? model_id : "");
  std::unique_ptr<TokenCodec> codec;
  if (!tokenizer_dir.empty()) codec = make_local_codec(tokenizer_dir);
  else if (dataset != "custom") codec = make_server_codec(client, int32_t(a.get_int("random-vocab-size", 0)));

  std::vector<ServeRequest> requests;
  if (dataset == "random") {
    if (a.has("dataset-path")) throw Error("the random dataset takes no --dataset-path");
    RandomDatasetOptions o;
    o.input_len = a.get_int("input-len", a.get_int("random-input-len", o.input_len));
    o.output_len = a.get_int("output-len", a.get_int("random-output-len", o.output_len));
    o.range_ratio = a.get_double("random-range-ratio", o.range_ratio);
    o.prefix_len = a.get_int("random-prefix-len", o.prefix_len);
    o.seed = seed;
    requests = make_random_dataset(*codec, size_t(num_prompts), o);
    client.ignore_eos = true;  // as vLLM: random prompts run to their intended length
  } else {
    FileDatasetOptions o;
    o.format = dataset;
    o.seed = seed;
    o.output_len = a.get_int("output-len", a.get_int(dataset + "-output-len", 0));
    if (dataset != "sharegpt" && dataset != "custom") throw Error("--dataset-name must be random, sharegpt or custom");
    requests = load_file_dataset(a.require("dataset-path"), size_t(num_prompts), o, codec.get());
  }
  if (a.has("ignore-eos")) client.ignore_eos = true;

  ServeRunInfo info;
  info.backend = client.chat() ? "openai-chat" : "openai";
  info.label = a.get("label", "");
  info.model_id = model_id;
  info.tokenizer_id = codec ? codec->name() : "";
  info.base_url = client.base_url;
  info.endpoint = client.endpoint;
  info.dataset_name = dataset;
  info.num_prompts = num_prompts;
  info.burstiness = parse_number("burstiness", a.get("burstiness", "1"));
  info.max_concurrency = a.get_int("max-concurrency", 0);
  if (info.max_concurrency < 0) throw Error("--max-concurrency must be positive");
  info.percentile_metrics = split(a.get("percentile-metrics", "ttft,tpot,itl"));
  for (const std::string& m : info.percentile_metrics)
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") throw Error("--percentile-metrics: unknown metric '" + m + "' (ttft, tpot, itl, e2el)");
  info.metric_percentiles.clear();
  for (const std::string& p : split(a.get("metric-percentiles", "99"))) {
    const double x = parse_number("metric-percentiles", p);
    if (!(x >= 0 && x <= 100)) throw Error("--metric-percentiles must lie in [0, 100]");
    info.metric_percentiles.push_back(x);
  }
  std::vector<double> rates;
  for (const std::string& r : split(a.get("request-rate", "inf"))) rates.push_back(parse_number("request-rate", r));
  if (rates.empty()) throw Error("--request-rate is empty");
  const std::string plot_metric = a.get("plot-metric", "tpot");
  if (plot_metric != "ttft" && plot_metric != "tpot" && plot_metric != "itl" && plot_metric != "e2el")
    throw Error("--plot-metric must be ttft, tpot, itl or e2el");

  ServeRunOptions ro;
  ro.burstiness = info.burstiness;
  ro.max_concurrency = info.max_concurrency;
  ro.max_duration_s = a.get_double("max-duration", 0);
  ro.seed = seed;
  ro.progress = !a.has("disable-tqdm");
  // As vLLM: one request first, so that a wrong URL, endpoint, model name or key ends the run
  // with the server's answer instead of a table of failures.
  std::printf("Starting initial single prompt test run...\n");
  std::fflush(stdout);
  const ServeOutcome probe = send_streaming_request(client, requests.front(), std::chrono::steady_clock::now());
  if (!probe.success)
    throw Error("initial test run failed (check --base-url, --endpoint, --model and --api-key): " + probe.error);
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  bool any_run_failed_entirely = false;
  std::vector<ServePlotPoint> plot_points;
  for (const double rate : rates) {
    ro.request_rate = info.request_rate = rate;
    std::printf("Traffic request rate: %s\nBurstiness factor: %s (%s)\nMaximum request concurrency: %s\n",
                python_float(rate).c_str(), python_float(info.burstiness).c_str(),
                info.burstiness == 1.0 ? "Poisson process" : "Gamma distribution",
                info.max_concurrency > 0 ? std::to_string(info.max_concurrency).c_str() : "None");
    std::fflush(stdout);
    // The server's speculative-decoding counters around the run (none: it does not speculate, or
    // serves no /metrics).
    auto spec_counters = [&]() -> std::optional<SpecDecodeCounters> {
      try {
        return parse_spec_decode_counters(http_get_text(client, "/metrics"));
      } catch (const Error&) {
        return std::nullopt;
      }
    };
    const std::optional<SpecDecodeCounters> spec_before = spec_counters();
    const ServeRun run = run_serve_load(client, requests, ro);
    const std::optional<SpecDecodeCounters> spec_after = spec_counters();
    std::optional<SpecDecodeStats> spec_stats;
    if (spec_after) spec_stats = spec_decode_delta(spec_before.value_or(SpecDecodeCounters{}), *spec_after);
    info.num_sent = int64_t(run.outcomes.size());
    info.date = now_stamp();
    const ServeMetrics m = compute_serve_metrics(run.outcomes, run.duration, info.metric_percentiles);
    if (m.failed > 0) {
      std::printf("Failed requests during benchmark run detected (capping to 10):\n");
      int shown = 0;
      for (const ServeOutcome& o : run.outcomes)
        if (!o.success && shown < 10) std::printf("Error %d: %s\n", shown++, o.error.c_str());
    }
    if (info.num_sent < num_prompts)
      std::printf("--max-duration reached: %lld of %lld requests were sent\n", (long long)info.num_sent, (long long)num_prompts);
    if (m.completed == 0) any_run_failed_entirely = true;
    std::fputs(format_serve_summary(m, info).c_str(), stdout);
    if (spec_stats && spec_stats->drafts > 0) std::fputs(format_spec_decode_stats(*spec_stats).c_str(), stdout);
    std::fflush(stdout);
    if (a.has("save-result")) {
      std::filesystem::path file = a.get("result-filename", serve_result_filename(info));
      if (a.has("result-filename") && rates.size() > 1)  // one file per rate even with a fixed name
        file = file.stem().string() + "-" + python_float(rate) + "qps" + file.extension().string();
      if (a.has("result-dir")) {
        std::filesystem::create_directories(a.get("result-dir", ""));
        file = std::filesystem::path(a.get("result-dir", "")) / file;
      }
      std::ofstream out(file);
      nlohmann::ordered_json result = serve_result_json(m, run.outcomes, info);
      if (spec_stats && spec_stats->drafts > 0) {
        result["spec_decode_acceptance_rate"] = spec_stats->acceptance_rate;
        result["spec_decode_acceptance_length"] = spec_stats->acceptance_length;
        result["spec_decode_num_drafts"] = spec_stats->drafts;
        result["spec_decode_draft_tokens"] = spec_stats->draft_tokens;
        result["spec_decode_accepted_tokens"] = spec_stats->accepted_tokens;
        result["spec_decode_per_position_acceptance_rate"] = spec_stats->per_position_rate;
      }
      out << result.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
      if (!out) throw Error("cannot write '" + file.string() + "'");
      std::printf("Result saved to %s\n", file.string().c_str());
    }
    const MetricStats& st = plot_metric == "ttft" ? m.ttft : plot_metric == "tpot" ? m.tpot : plot_metric == "itl" ? m.itl : m.e2el;
    ServePlotPoint pp;
    pp.request_rate = rate;
    pp.output_throughput = m.output_throughput;
    pp.median_ms = st.median_ms;
    pp.tail_ms = st.percentiles_ms.empty() ? st.median_ms : st.percentiles_ms.back().second;
    for (const auto& [p, v] : st.percentiles_ms)
      if (p == 99) pp.tail_ms = v;
    plot_points.push_back(pp);
  }
  if (a.has("plot")) {
    ServePlotOptions po;
    po.metric = plot_metric;
    for (char& ch : po.metric) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    const auto& ps = info.metric_percentiles;
    const double tail = std::find(ps.begin(), ps.end(), 99.0) != ps.end() || ps.empty() ? 99.0 : ps.back();
    po.tail = ps.empty() ? "median" : "P" + percentile_word(tail);
    po.title = "kimi bench serve: " + std::filesystem::path(model_id).filename().string();
    write_serve_plot(a.get("plot", ""), plot_points, po);
    std::printf("Plot saved to %s\n", a.get("plot", "").c_str());
  }
  if (any_run_failed_entirely) {
    std::fprintf(stderr, "kimi bench serve: every request of a run failed\n");
    return 1;
  }
  return 0;
}

}  // namespace kimi::cli
