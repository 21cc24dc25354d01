#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "common/error.h"
#include "engine/sampler.h"
#include "model/model.h"

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
  const Args a(argc, argv, 2,
               {"model", "prompt", "prompt-ids", "max-tokens", "temperature", "top-k", "top-p", "seed", "threads",
                "attention"},
               {"help", "ignore-eos"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--temperature T]\n"
        "                     [--top-k K] [--top-p P] [--seed S] [--threads N] [--ignore-eos]\n"
        "                     [--attention auto|naive|absorbed]\n\n"
        "Prints the generated token ids (greedy at temperature 0, the default). Text prompts\n"
        "(--prompt) need the tokenizer, which this build does not have yet.\n");
    return 0;
  }
  if (a.has("prompt") && !a.has("prompt-ids"))
    throw Error("--prompt needs the tokenizer, which is not implemented yet; pass token ids with --prompt-ids");
  const std::vector<int32_t> prompt = parse_ids(a.require("prompt-ids"));
  const int64_t max_tokens = a.get_int("max-tokens", 16);
  if (max_tokens < 0) throw Error("--max-tokens must not be negative");

  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  mo.attention_mode = parse_attention(a.get("attention", "auto"));
  Model model(a.require("model"), mo);
  const ModelConfig& c = model.config();
  if (int64_t(prompt.size()) + max_tokens > c.max_position_embeddings)
    throw Error("prompt + max tokens exceed the model's max_position_embeddings (" +
                std::to_string(c.max_position_embeddings) + ")");

  SamplingParams sp;
  sp.temperature = float(a.get_double("temperature", 0.0));
  sp.top_k = int(a.get_int("top-k", 0));
  sp.top_p = float(a.get_double("top-p", 1.0));
  sp.seed = uint64_t(a.get_int("seed", 0));
  sp.ignore_eos = a.has("ignore-eos");
  if (max_tokens > 0) sp.max_tokens = max_tokens;  // 0 stays allowed here: print nothing
  sp.validate(c.vocab_size);
  Sampler sampler(sp, *sp.seed, int32_t(c.eos_token_id));

  KvCache cache = model.new_cache(int64_t(prompt.size()) + max_tokens);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<float> logits = model.forward(prompt, cache);
  const auto t1 = Clock::now();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t next = sampler.sample(logits, prompt, out).token;
    out.push_back(next);
    std::printf("%s%d", i ? " " : "", next);
    std::fflush(stdout);
    if (next == c.eos_token_id && !a.has("ignore-eos")) break;
    if (i + 1 == max_tokens) break;
    logits = model.forward({&out.back(), 1}, cache);
  }
  std::printf("\n");
  std::fflush(stdout);
  const auto t2 = Clock::now();
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tokens/s); generated: %zu tokens in %.3f s (%.1f tokens/s)\n",
               prompt.size(), pre, double(prompt.size()) / pre, out.size(), dec,
               out.size() > 1 ? double(out.size() - 1) / dec : 0.0);
  return 0;
}

}  // namespace kimi::cli
