#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "args.h"
#include "bench/latency.h"
#include "bench/throughput.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

// --prompt-file's text as the model's token ids.
std::vector<int32_t> prompt_file_ids(const Args& a) {
  const std::string path = a.get("prompt-file", "");
  std::ifstream in(path);
  if (!in) throw Error("cannot read --prompt-file '" + path + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  return Tokenizer::load(a.require("model")).encode(text);
}

int run_latency(int argc, char** argv) {
  const Args a(argc, argv, 3, {"model", "input-len", "output-len", "num-iters", "num-iters-warmup", "threads", "seed",
                "quantization", "dtype", "kv-cache-dtype", "batch", "step-tokens", "speculative-config",
                "num-speculative-tokens", "prompt-file", "num-prompts"},
               {"help", "breakdown"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi bench latency --model DIR [--input-len 128] [--output-len 64] [--num-iters 3]\n"
        "                          [--num-iters-warmup 1]\n"
        "                          [--threads N] [--seed S] [--quantization Q[,Q...]] [--dtype D[,D...]]\n"
        "                          [--kv-cache-dtype D[,D...]]   (auto (default: bfloat16, as kimi serve), float32,\n"
        "                                                        bfloat16, fp8)\n"
        "                          [--breakdown [--batch N[,N...]] [--step-tokens N[,N...]]]\n"
        "                          [--speculative-config JSON|[JSON,...]] [--num-speculative-tokens K[,K...]]\n"
        "                          [--prompt-file FILE] [--num-prompts N]\n\n"
        "Times the prefill of one random prompt and greedy decoding after it (best of --num-iters,\n"
        "after --num-iters-warmup untimed ones: a fresh process's first iteration faults in its\n"
        "buffers, as a serving process did long before),\n"
        "and reports each as a fraction of this machine's limits measured in the same run: decode\n"
        "against memory read bandwidth, prefill against the matmul kernel's peak. Several\n"
        "--quantization values (e.g. none,int4,w4a8) load the model once each and print a table\n"
        "of their figures and ratios over the first, timed alternately in the same run; so do\n"
        "several --kv-cache-dtype values (e.g. float32,bfloat16,fp8), with the KV bytes per token,\n"
        "and several --dtype values (float32,bfloat16: the activations of the BF16 and W4A16 linears\n"
        "rounded to bf16; the default, auto, is what kimi serve runs: see README).\n"
        "--breakdown (one variant) then times one more run's decode steps per layer and phase\n"
        "(attention, router, routed experts, shared expert, dense MLP, lm_head) with the bytes each\n"
        "reads, and extrapolates decode to Kimi-K2.5's 61 layers against the measured bandwidth;\n"
        "it also prints the synchronisation share: of the threads' time, how much they waited for\n"
        "each other inside parallel regions, and how much they idled while one thread worked alone\n"
        "(per phase: the 'serial ms' column).\n"
        "--batch 1,8,32 does so for decode steps of that many sequences at once; --step-tokens 4\n"
        "for steps of 4 tokens per sequence, a verification step's shape (3 drafts + 1).\n"
        "--speculative-config (one object or a JSON list of them, as kimi serve takes) adds each as a\n"
        "variant after plain decoding, timed alternately with it; --num-speculative-tokens 1,2,3,4\n"
        "repeats each with those draft counts. Speculative variants print the acceptance length,\n"
        "the times of a plain, a verification and a draft step, and the decode speed they predict.\n"
        "--prompt-file takes the prompt from a text file (its first --input-len tokens, with the\n"
        "model's tokenizer) instead of random ids: drafts are only accepted on real text.\n"
        "--num-prompts N runs N prompts (slices spread over the file, or random) per iteration and\n"
        "reports the mean per prompt.\n");
    return 0;
  }
  LatencyOptions o;
  o.input_len = a.get_int("input-len", o.input_len);
  o.output_len = a.get_int("output-len", o.output_len);
  o.iterations = int(a.get_int("num-iters", o.iterations));
  o.warmup_iterations = int(a.get_int("num-iters-warmup", o.warmup_iterations));
  o.seed = uint64_t(a.get_int("seed", 0));
  const auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream list(s);
    for (std::string item; std::getline(list, item, ',');) out.push_back(item);
    return out;
  };
  const std::vector<std::string> quantizations = split(a.get("quantization", ""));
  std::vector<std::string> dtypes = split(a.get("dtype", ""));
  if (dtypes.empty()) dtypes.push_back("auto");  // as kimi serve
  for (const std::string& d : dtypes) QuantizationRequest::parse_activation_dtype(d);  // refused before any loading
  std::vector<std::string> kv_dtypes = split(a.get("kv-cache-dtype", "auto"));  // as kimi serve
  if (kv_dtypes.empty()) kv_dtypes.push_back("auto");
  if ((a.has("batch") || a.has("step-tokens")) && !a.has("breakdown"))
    throw Error("bench latency: --batch and --step-tokens go with --breakdown");
  if (a.has("prompt-file")) o.prompt = prompt_file_ids(a);
  o.num_prompts = a.get_int("num-prompts", 1);
  std::vector<spec::SpeculativeConfig> speculative;
  if (a.has("speculative-config")) {
    const std::string text = a.get("speculative-config", "");
    nlohmann::json list;
    try {
      list = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("--speculative-config is not valid JSON: ") + e.what());
    }
    if (!list.is_array()) list = nlohmann::json::array({list});
    const std::vector<std::string> ks = split(a.get("num-speculative-tokens", ""));
    for (const nlohmann::json& one : list) {
      if (ks.empty()) speculative.push_back(spec::parse_speculative_config(one.dump()));
      for (const std::string& k : ks) {
        nlohmann::json with_k = one;
        with_k["num_speculative_tokens"] = std::stoll(k);
        speculative.push_back(spec::parse_speculative_config(with_k.dump()));
      }
    }
  } else if (a.has("num-speculative-tokens")) {
    throw Error("bench latency: --num-speculative-tokens goes with --speculative-config");
  }
  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  if (!speculative.empty()) {
    if (a.has("breakdown") || quantizations.size() > 1 || kv_dtypes.size() > 1 || dtypes.size() > 1)
      throw Error(
          "bench latency: --speculative-config takes one --quantization, --dtype and --kv-cache-dtype, no --breakdown");
    mo.quantization = QuantizationRequest::parse(quantizations.empty() ? "" : quantizations[0], dtypes[0]);
    Model model(a.require("model"), mo);
    std::vector<LatencyVariant> variants;
    variants.push_back({"plain", &model, {}, parse_kv_cache_dtype(kv_dtypes[0]), {}});
    // Drafts of the same method are told apart by their directory's name.
    bool several_drafts = false;
    for (const spec::SpeculativeConfig& x : speculative)
      for (const spec::SpeculativeConfig& y : speculative) several_drafts |= x.method == y.method && x.model != y.model;
    for (const spec::SpeculativeConfig& sc : speculative) {
      spec::check_against_target(sc, model.config());
      std::string label = std::string(spec::method_name(sc.method)) + " k=" + std::to_string(sc.num_speculative_tokens);
      if (several_drafts && !sc.model.empty()) {
        const std::filesystem::path dir = sc.model.filename().empty() ? sc.model.parent_path() : sc.model;
        label += " " + dir.filename().string();
      }
      variants.push_back({label, &model, {}, variants[0].kv_cache_dtype, sc});
    }
    run_latency_comparison(variants, o);
    std::fputs(format_latency_comparison(variants, o).c_str(), stdout);
    return 0;
  }
  if (quantizations.size() <= 1 && kv_dtypes.size() == 1 && dtypes.size() == 1) {
    mo.quantization = QuantizationRequest::parse(quantizations.empty() ? "" : quantizations[0], dtypes[0]);
    o.kv_cache_dtype = parse_kv_cache_dtype(kv_dtypes[0]);
    Model model(a.require("model"), mo);
    const LatencyResult r = run_latency_bench(model, o);
    std::fputs(format_latency_report(model, o, r).c_str(), stdout);
    if (a.has("breakdown"))
      for (const std::string& t : split(a.get("step-tokens", "1")))
        for (const std::string& n : split(a.get("batch", "1"))) {
          const int64_t batch = std::stoll(n), step_tokens = std::stoll(t);
          if (batch < 1 || step_tokens < 1) throw Error("bench latency: --batch and --step-tokens values must be positive");
          std::fputs(format_decode_breakdown(model, measure_decode_breakdown(model, o, batch, step_tokens),
                                             r.read_bandwidth).c_str(),
                     stdout);
        }
    return 0;
  }
  if (a.has("breakdown"))
    throw Error("bench latency: --breakdown takes one --quantization, --dtype and --kv-cache-dtype");
  // Every quantization x activation dtype x KV dtype; one loading per quantization and dtype.
  std::vector<std::unique_ptr<Model>> models;
  std::vector<LatencyVariant> variants;
  for (const std::string& q : quantizations.empty() ? std::vector<std::string>{""} : quantizations) {
    for (const std::string& dt : dtypes) {
      mo.quantization = QuantizationRequest::parse(q, dt);
      models.push_back(std::make_unique<Model>(a.require("model"), mo));
      std::string weights = q.empty() || q == "none" ? "float" : q;
      if (dtypes.size() > 1) weights += " " + activation_summary(models.back()->activation_plan(), true);
      for (const std::string& d : kv_dtypes) {
        const KvCacheDtype kv = parse_kv_cache_dtype(d);
        const std::string label = kv_dtypes.size() == 1 ? weights
                                  : quantizations.size() <= 1 && dtypes.size() == 1
                                      ? "kv " + std::string(kv_cache_dtype_name(kv))
                                      : weights + "/" + std::string(kv_cache_dtype_name(kv));
        variants.push_back({label, models.back().get(), {}, kv, {}});
      }
    }
  }
  run_latency_comparison(variants, o);
  std::fputs(format_latency_comparison(variants, o).c_str(), stdout);
  return 0;
}

int run_throughput(int argc, char** argv) {
  const Args a(argc, argv, 3,
               {"model", "input-len", "output-len", "concurrency", "num-prompts", "max-num-batched-tokens", "threads",
                "seed", "quantization", "dtype", "kv-cache-dtype", "speculative-config", "prompt-file"},
               {"help"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi bench throughput --model DIR [--concurrency 1,8,32] [--input-len 64] [--output-len 32]\n"
        "                             [--num-prompts N] [--max-num-batched-tokens 2048] [--threads N]\n"
        "                             [--quantization int4|w4a16|w4a8|w8a8] [--dtype auto|float32|bfloat16]\n"
        "                             [--kv-cache-dtype auto|bfloat16|fp8|float32] [--speculative-config JSON]\n"
        "                             [--prompt-file FILE]\n\n"
        "Runs random prompts through the serving engine (no HTTP) at each concurrency level\n"
        "(--max-num-seqs) and prints output tokens/s, the speed-up over the first level, and the\n"
        "compute per second against the matmul peak measured in the same run. With\n"
        "--speculative-config each level runs again with speculation: its tok/s over plain and its\n"
        "acceptance length show where speculation stops paying as concurrency grows (its\n"
        "disable_by_batch_size applies: give 0 to draft at every level). --prompt-file: prompts\n"
        "are slices of that text (with the model's tokenizer) instead of random ids.\n");
    return 0;
  }
  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  mo.quantization = QuantizationRequest::parse(a.get("quantization", ""), a.get("dtype", ""));
  Model model(a.require("model"), mo);
  ThroughputOptions o;
  o.input_len = a.get_int("input-len", o.input_len);
  o.output_len = a.get_int("output-len", o.output_len);
  o.prompts_per_level = a.get_int("num-prompts", 0);
  o.max_num_batched_tokens = a.get_int("max-num-batched-tokens", o.max_num_batched_tokens);
  o.seed = uint64_t(a.get_int("seed", 0));
  o.kv_cache_dtype = parse_kv_cache_dtype(a.get("kv-cache-dtype", "auto"));  // as kimi serve
  if (a.has("prompt-file")) o.prompt = prompt_file_ids(a);
  o.speculative = spec::parse_speculative_config(a.get("speculative-config", ""));
  if (o.speculative.enabled()) spec::check_against_target(o.speculative, model.config());
  if (a.has("concurrency")) {
    o.concurrency.clear();
    std::stringstream ss(a.get("concurrency", ""));
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        o.concurrency.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw Error("--concurrency expects comma-separated integers, got '" + item + "'");
      }
    }
  }
  std::printf("KV cache: %s\n", std::string(kv_cache_dtype_name(o.kv_cache_dtype)).c_str());
  std::fputs(format_throughput_report(run_throughput_bench(model, o)).c_str(), stdout);
  return 0;
}

}  // namespace

int run_bench_serve(int argc, char** argv);       // cmd_bench_serve.cpp
int run_bench_structured(int argc, char** argv);  // cmd_bench_structured.cpp

int run_bench(int argc, char** argv) {
  const std::string sub = argc >= 3 ? argv[2] : "";
  if (sub == "latency") return run_latency(argc, argv);
  if (sub == "throughput") return run_throughput(argc, argv);
  if (sub == "serve") return run_bench_serve(argc, argv);
  if (sub == "structured") return run_bench_structured(argc, argv);
  std::fprintf(stderr, "usage: kimi bench latency|throughput|serve|structured [options]   (see --help)\n");
  return 1;
}

}  // namespace kimi::cli
