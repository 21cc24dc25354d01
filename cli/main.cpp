// `kimi`: one binary, one subcommand per job (as `vllm serve|bench`, `llama-cli|llama-bench`).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "args.h"
#include "common/allocator_policy.h"
#include "common/error.h"

namespace {

void usage() {
  std::printf(
      "kimi " KIMI_VERSION " - inference engine for Kimi-K2.5 / DeepSeek-V3 models\n\n"
      "usage: kimi <command> [options]\n\n"
      "commands:\n"
      "  serve MODEL_DIR      OpenAI-compatible HTTP server (flags as in vllm serve)\n"
      "  proxy                prefill/decode disaggregation load balancer (vLLM's proxy flags)\n"
      "  make-model OUT_DIR   write a checkpoint of the Kimi-K2.5 layout with random weights\n"
      "  export-gguf DIR OUT  write the checkpoint as a llama.cpp GGUF file (deepseek2)\n"
      "  generate             run a prompt through a model and print the continuation\n"
      "  chat                 interactive chat in the terminal, with the model's chat template\n"
      "  bench latency        time prefill and decode, as fractions of this machine's limits\n"
      "  perplexity           perplexity over a text file (as llama-perplexity), per quantization\n"
      "  tokenize             print the token ids of a text\n"
      "  detokenize           print the text of token ids\n"
      "  train-tokenizer DIR  train a small BPE vocabulary and write the tokenizer files\n"
      "  render-template      render a chat template over conversations (as HF transformers)\n\n"
      "Run 'kimi <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  kimi::keep_step_buffers_mapped();
  try {
    if (cmd == "serve") return kimi::cli::run_serve(argc, argv);
    if (cmd == "proxy") return kimi::cli::run_proxy(argc, argv);
    if (cmd == "chat") return kimi::cli::run_chat(argc, argv);
    if (cmd == "make-model") return kimi::cli::run_make_model(argc, argv);
    if (cmd == "generate") return kimi::cli::run_generate(argc, argv);
    if (cmd == "bench") return kimi::cli::run_bench(argc, argv);
    if (cmd == "tokenize") return kimi::cli::run_tokenize(argc, argv);
    if (cmd == "detokenize") return kimi::cli::run_detokenize(argc, argv);
    if (cmd == "train-tokenizer") return kimi::cli::run_train_tokenizer(argc, argv);
    if (cmd == "render-template") return kimi::cli::run_render_template(argc, argv);
    if (cmd == "export-gguf") return kimi::cli::run_export_gguf(argc, argv);
    if (cmd == "perplexity") return kimi::cli::run_perplexity(argc, argv);
    if (cmd == "--version" || cmd == "version") {
      std::printf("kimi %s\n", KIMI_VERSION);
      return 0;
    }
    std::fprintf(stderr, "kimi: unknown command '%s'\n\n", cmd.c_str());
    usage();
    return 1;
  } catch (const kimi::Error& e) {
    std::fprintf(stderr, "kimi %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kimi %s: internal error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
