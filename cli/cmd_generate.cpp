#include <chrono>
#include <optional>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "parallel_launch.h"
#include "common/error.h"
#include "engine/generation.h"
#include "engine/tp_executor.h"
#include "model/model.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size()) throw Error("");
      ids.push_back(int32_t(v));
    } catch (const std::exception&) {
      throw Error("--prompt-ids expects comma-separated integers, got '" + item + "'");
    }
  }
  if (ids.empty()) throw Error("--prompt-ids is empty");
  return ids;
}

AttentionMode parse_attention(const std::string& s) {
  if (s == "auto") return AttentionMode::Auto;
  if (s == "naive") return AttentionMode::Naive;
  if (s == "absorbed") return AttentionMode::Absorbed;
  throw Error("--attention must be auto, naive or absorbed");
}

}  // namespace

int run_generate(int argc, char** argv) {
  std::set<std::string> value_flags{"model", "prompt", "prompt-ids", "max-tokens", "temperature", "top-k", "top-p",
                                    "seed", "threads", "attention", "quantization", "dtype", "kv-cache-dtype", "speculative-config"};
  std::set<std::string> bool_flags{"help", "ignore-eos", "json", "warmup"};
  value_flags.insert(parallel_value_flags().begin(), parallel_value_flags().end());
  bool_flags.insert(parallel_bool_flags().begin(), parallel_bool_flags().end());
  const Args a(argc, argv, 2, value_flags, bool_flags);
  if (a.has("help")) {
    std::printf(
        "usage: kimi generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]\n"
        "                     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--threads N]\n"
        "                     [--ignore-eos] [--attention auto|naive|absorbed]\n"
        "                     [--quantization compressed-tensors|ascend|int4|w4a16|w4a8|w8a8] [--dtype auto|float32|bfloat16]\n"
        "                     [--kv-cache-dtype float32|auto|bfloat16|fp8] [--warmup] [--json]\n"
        "                     [--speculative-config JSON]  (as kimi serve's)\n"
        "                     [--tensor-parallel-size|-tp N] [--enable-expert-parallel]\n"
        "                     [--data-parallel-rpc-port P]\n\n"
        "Continues the prompt (greedy at temperature 0, the default) and streams the text; with\n"
        "--prompt-ids it prints the generated token ids instead. --warmup runs the prompt once,\n"
        "untimed, before the timed generation (so the mapped weights are resident); --json prints\n"
        "one JSON object at the end instead: prompt_tokens, tokens (the generated ids), threads,\n"
        "prefill_seconds (the prompt's forward pass) and decode_seconds (sampling and the forward\n"
        "passes of the generated tokens after the first); with -tp N > 1 it adds tensor_parallel\n"
        "(size, expert_parallel, rank 0's all_reduce / all_gather / broadcast calls, bytes, seconds).\n"
        "-tp N splits the model over N local processes; --enable-expert-parallel deals the routed\n"
        "experts out whole over them instead of slicing each (as kimi serve's).\n");
    return 0;
  }
  if (a.has("prompt") == a.has("prompt-ids")) throw Error("give exactly one of --prompt and --prompt-ids");
  const int64_t max_tokens = a.get_int("max-tokens", 16);
  if (max_tokens < 1) throw Error("--max-tokens must be at least 1");

  // Flags are checked before the (slow) model load.
  std::vector<int32_t> prompt;
  if (a.has("prompt-ids")) prompt = parse_ids(a.require("prompt-ids"));
  ModelOptions mo;
  mo.quantization = QuantizationRequest::parse(a.get("quantization", ""), a.get("dtype", ""));
  mo.attention_mode = parse_attention(a.get("attention", "auto"));
  const std::string dir = a.require("model");
  const ParallelArgs pa = parse_parallel_args(a);
  if (pa.data_parallel_size > 1)
    throw Error("generate runs one sequence: --data-parallel-size > 1 is for serve (replicas serve separate requests)");
  ParallelLaunch launch(pa, argc, argv, parallel_identity(dir, pa, a.get("quantization", "")));
  mo.num_threads = launch.threads_per_rank(int(a.get_int("threads", 0)));
  launch.configure(mo);
  Model model(dir, mo);
  if (launch.is_worker()) {  // rank 0 drives the engine; this rank runs the steps it is sent
    launch.run_worker(model);
    return 0;
  }
  const ModelConfig& c = model.config();
  std::optional<Tokenizer> tokenizer;
  if (a.has("prompt")) {
    tokenizer = Tokenizer::load(dir);
    prompt = tokenizer->encode(a.get("prompt", ""));
    if (prompt.empty()) throw Error("--prompt is empty");
  }
  if (int64_t(prompt.size()) + max_tokens > c.max_position_embeddings)
    throw Error("prompt + max tokens exceed the model's max_position_embeddings (" +
                std::to_string(c.max_position_embeddings) + ")");

  SamplingParams sp;
  sp.temperature = float(a.get_double("temperature", 0.0));
  sp.top_k = int(a.get_int("top-k", 0));
  sp.top_p = float(a.get_double("top-p", 1.0));
  sp.seed = uint64_t(a.get_int("seed", 0));
  sp.ignore_eos = a.has("ignore-eos");
  sp.max_tokens = max_tokens;
  sp.validate(c.vocab_size);
  const bool json = a.has("json");
  // No prefix caching: the warm-up must not make the timed prefill a cache hit.
  EngineConfig ec = single_sequence_config(int64_t(prompt.size()) + max_tokens, false);
  // float32 by default: the exact cache, which the llama.cpp parity check compares token for token.
  ec.kv_cache_dtype = parse_kv_cache_dtype(a.get("kv-cache-dtype", "float32"));
  ec.speculative = spec::parse_speculative_config(a.get("speculative-config", ""));
  Engine engine(model, nullptr, ec);
  if (a.has("warmup")) {
    SamplingParams once = sp;
    once.max_tokens = 1;
    generate_stream(engine, prompt, once, [](int32_t) { return true; });
  }
  std::optional<IncrementalDecoder> text;
  if (tokenizer && !json) text.emplace(*tokenizer, true);
  bool first = true;
  std::vector<int32_t> generated;
  const GenerationStats st = generate_stream(engine, prompt, sp, [&](int32_t t) {
    generated.push_back(t);
    if (json) return true;
    if (text) std::fputs(text->push(t).c_str(), stdout);
    else std::printf("%s%d", first ? "" : " ", t);
    first = false;
    std::fflush(stdout);
    return true;
  });
  if (json) {
    nlohmann::json j = {{"prompt_tokens", st.prompt_tokens},     {"tokens", generated},
                        {"threads", model.num_threads()},        {"prefill_seconds", st.prefill_seconds},
                        {"decode_seconds", st.decode_seconds}};
    if (const CollectiveStats* cs = launch.tensor_parallel_stats()) {
      const auto counter = [](const CollectiveCounter& k) {
        return nlohmann::json{{"calls", k.calls}, {"bytes", k.bytes}, {"seconds", k.seconds}};
      };
      // Rank 0's collectives over the whole run (warm-up included), for the TP cost per step.
      j["tensor_parallel"] = {{"size", pa.tensor_parallel_size},
                              {"expert_parallel", pa.enable_expert_parallel},
                              {"all_reduce", counter(cs->all_reduce)},
                              {"all_gather", counter(cs->all_gather)},
                              {"broadcast", counter(cs->broadcast)}};
    }
    if (ec.speculative.enabled())
      j["speculative"] = {{"drafts", st.spec_drafts},
                          {"draft_tokens", st.spec_draft_tokens},
                          {"accepted_tokens", st.spec_accepted_tokens},
                          {"acceptance_length", st.acceptance_length()}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (text) std::fputs(text->flush().c_str(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tokens/s); generated: %lld tokens in %.3f s (%.1f tokens/s)\n",
               (long long)st.prompt_tokens, st.prefill_seconds, double(st.prompt_tokens) / st.prefill_seconds, (long long)st.generated,
               st.decode_seconds, st.generated > 1 ? double(st.generated - 1) / st.decode_seconds : 0.0);
  if (ec.speculative.enabled())
    std::fprintf(stderr, "speculative (%s): %lld of %lld draft tokens accepted, acceptance length %.2f\n",
                 spec::method_name(ec.speculative.method), (long long)st.spec_accepted_tokens,
                 (long long)st.spec_draft_tokens, st.acceptance_length());
  return 0;
}

}  // namespace kimi::cli
