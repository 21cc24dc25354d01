#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "args.h"
#include "common/error.h"
#include "engine/generation.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

int run_chat(int argc, char** argv) {
  const Args a(argc, argv, 2,
               {"model", "system", "max-tokens", "temperature", "top-p", "seed", "threads", "max-model-len", "quantization", "dtype",
                "kv-cache-dtype", "speculative-config"},
               {"help", "no-thinking"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi chat --model DIR [--system TEXT] [--max-tokens 512] [--temperature 0.6] [--top-p 0.95]\n"
        "                 [--seed S] [--threads N] [--max-model-len 8192] [--no-thinking]\n"
        "                 [--quantization int4|w4a16|w4a8|w8a8] [--dtype auto|float32|bfloat16]\n"
        "                 [--kv-cache-dtype auto|bfloat16|fp8|float32]\n"
        "                 [--speculative-config JSON]  (as kimi serve's)\n\n"
        "An interactive chat in the terminal with the model's own chat template; replies stream as\n"
        "they are generated. Type /reset to start over, /exit (or end of input) to quit.\n");
    return 0;
  }
  const std::string dir = a.require("model");
  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  mo.quantization = QuantizationRequest::parse(a.get("quantization", ""), a.get("dtype", ""));
  Model model(dir, mo);
  const Tokenizer tok = Tokenizer::load(dir);
  if (tok.chat_template().empty()) throw Error(dir + " has no chat template");
  const ModelConfig& c = model.config();

  SamplingParams sp;
  sp.temperature = float(a.get_double("temperature", 0.6));
  sp.top_p = float(a.get_double("top-p", 0.95));
  sp.seed = uint64_t(a.get_int("seed", 0));
  sp.max_tokens = a.get_int("max-tokens", 512);
  sp.validate(c.vocab_size);
  const nlohmann::json kwargs = {{"thinking", !a.has("no-thinking")}};

  const int64_t max_len = std::min<int64_t>(a.get_int("max-model-len", 8192), c.max_position_embeddings);
  // Prefix caching keeps the earlier turns' KV: each turn computes only what it adds.
  EngineConfig ec = single_sequence_config(max_len, true);
  ec.kv_cache_dtype = parse_kv_cache_dtype(a.get("kv-cache-dtype", "auto"));  // as kimi serve
  ec.speculative = spec::parse_speculative_config(a.get("speculative-config", ""));
  Engine engine(model, nullptr, ec);
  nlohmann::json messages = nlohmann::json::array();
  auto reset = [&] {
    messages = nlohmann::json::array();
    if (a.has("system")) messages.push_back({{"role", "system"}, {"content", a.get("system", "")}});
  };
  reset();
  const bool tty = isatty(0);
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::puts("(conversation reset)");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::string prompt_text =
        render_chat_template(tok.chat_template(), messages, nullptr, true, kwargs, "[BOS]", "[EOS]");
    const std::vector<int32_t> prompt = tok.encode(prompt_text);
    if (int64_t(prompt.size()) + 1 >= max_len) {
      std::puts("(the conversation no longer fits the context; /reset to start over)");
      messages.erase(messages.end() - 1);
      continue;
    }
    IncrementalDecoder text(tok, true);
    std::string reply;
    generate_stream(engine, prompt, sp, [&](int32_t t) {
      const std::string piece = text.push(t);
      reply += piece;
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
      return true;
    });
    const std::string tail = text.flush();
    reply += tail;
    std::printf("%s\n", tail.c_str());
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return 0;
}

}  // namespace kimi::cli
