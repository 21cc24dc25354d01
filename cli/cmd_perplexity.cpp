// `kimi perplexity`: perplexity of a model over a text file, as llama.cpp's llama-perplexity
// (chunks of --ctx-size tokens, the second half of each scored), for several --quantization and
// --kv-cache-dtype values in one run over the same tokens.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "common/error.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace kimi::cli {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open --file " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream list(s);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Row {
  std::string weights;  // the --quantization value ("none": as stored)
  KvCacheDtype kv = KvCacheDtype::Float32;
  PerplexityResult result;
};

}  // namespace

int run_perplexity(int argc, char** argv) {
  // llama.cpp spells the context size -c; the parser knows only --long flags.
  std::vector<std::string> words(argv, argv + argc);
  for (std::string& w : words)
    if (w == "-c") w = "--ctx-size";
  std::vector<char*> ptrs;
  for (std::string& w : words) ptrs.push_back(w.data());
  const Args a(int(ptrs.size()), ptrs.data(), 2,
               {"model", "file", "ctx-size", "chunks", "threads", "quantization", "dtype", "kv-cache-dtype"}, {"help"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi perplexity --model DIR --file TEXT [--ctx-size|-c 512] [--chunks N] [--threads N]\n"
        "                       [--quantization Q[,Q...]]    (none (default), int4, w4a16, w4a8, w8a8,\n"
        "                                                      compressed-tensors, ascend)\n"
        "                       [--dtype D[,D...]]           (float32 (default), bfloat16: the BF16 and W4A16\n"
        "                                                      linears' activations rounded to bf16; auto:\n"
        "                                                      as kimi serve, see README)\n"
        "                       [--kv-cache-dtype D[,D...]]  (float32 (default), auto, bfloat16, fp8)\n\n"
        "Perplexity of the model over the text, as llama.cpp's llama-perplexity computes it: the\n"
        "file is tokenized as plain text (no BOS added, special-token text not parsed) and cut into\n"
        "consecutive chunks of --ctx-size tokens (the tokens after the last whole chunk are dropped).\n"
        "Each chunk runs through the model on its own, with a fresh KV cache; the first half of the\n"
        "chunk is context only, and only the second half's tokens are scored (ctx-1-ctx/2 tokens\n"
        "per chunk), so each scored token sees at least ctx/2 tokens before it. The text must hold\n"
        "at least one chunk (llama.cpp asks for two). --chunks N stops after N chunks.\n\n"
        "Prints PPL = exp(mean negative log-likelihood) +/- its standard error, the tokens scored\n"
        "and the time. Several --quantization, --dtype and/or --kv-cache-dtype values run every\n"
        "combination over the same tokens (the model is loaded once per quantization and dtype),\n"
        "one table row each, with the ratio of its perplexity to the first row's and that ratio's\n"
        "standard error from the per-token differences. tokens/s counts every token run through the\n"
        "model (both halves).\n");
    return 0;
  }
  const std::string dir = a.require("model");
  const std::string path = a.require("file");
  const int64_t ctx = a.get_int("ctx-size", 512);
  const int64_t max_chunks = a.get_int("chunks", 0);
  if (max_chunks < 0) throw Error("--chunks must be positive (or 0: all)");
  std::vector<std::string> quants = split_list(a.get("quantization", "none"));
  if (quants.empty()) quants.push_back("none");
  std::vector<std::string> kv_names = split_list(a.get("kv-cache-dtype", "float32"));
  if (kv_names.empty()) kv_names.push_back("float32");
  // Every value is checked before the (slow) model loads.
  std::vector<KvCacheDtype> kvs;
  for (const std::string& k : kv_names) kvs.push_back(parse_kv_cache_dtype(k));
  for (const std::string& q : quants) QuantizationRequest::parse(q);
  std::vector<std::string> dtypes = split_list(a.get("dtype", "float32"));
  if (dtypes.empty()) dtypes.push_back("float32");
  for (const std::string& d : dtypes) QuantizationRequest::parse_activation_dtype(d);

  const std::string text = read_file(path);
  if (text.empty()) throw Error("--file " + path + " is empty");
  const Tokenizer tokenizer = Tokenizer::load(dir);
  // As llama-perplexity tokenizes it: special-token text stays text, and no BOS (our GGUF export
  // sets add_bos_token false, so llama.cpp adds none to this model's chunks either).
  const std::vector<int32_t> tokens = tokenizer.encode(text, false);
  check_perplexity_input(ModelConfig::load(dir), int64_t(tokens.size()), ctx);

  PerplexityOptions po;
  po.ctx_size = ctx;
  po.max_chunks = max_chunks;
  po.on_chunk = [](int64_t k, double ppl) {
    std::fprintf(stderr, "[%lld]%.4f,", (long long)k + 1, ppl);
    std::fflush(stderr);
  };
  const int64_t chunks = max_chunks > 0 ? std::min(int64_t(tokens.size()) / ctx, max_chunks) : int64_t(tokens.size()) / ctx;
  std::printf("%s: %zu bytes, %zu tokens; %lld chunks of %lld tokens, the last %lld of each scored\n", path.c_str(),
              text.size(), tokens.size(), (long long)chunks, (long long)ctx,
              (long long)perplexity_scored_per_chunk(ctx));
  std::fflush(stdout);  // before the progress on stderr

  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  std::vector<Row> rows;
  std::vector<std::string> storage;
  for (const std::string& q : quants) {
    for (const std::string& d : dtypes) {
      mo.quantization = QuantizationRequest::parse(q, d);
      Model model(dir, mo);  // one loading at a time: the previous one is released first
      const std::string weights = dtypes.size() > 1 ? q + " " + activation_summary(model.activation_plan(), true) : q;
      storage.push_back(weights + ": " + model.weights().storage);
      for (const KvCacheDtype kv : kvs) {
        po.kv_cache_dtype = kv;
        std::fprintf(stderr, "weights %s, kv %s: ", weights.c_str(), std::string(kv_cache_dtype_name(kv)).c_str());
        Row row{weights, kv, evaluate_perplexity(model, tokens, po)};
        std::fprintf(stderr, "\n");
        rows.push_back(std::move(row));
      }
      if (rows.size() == kvs.size()) std::printf("threads: %d\n", model.num_threads());
    }
  }

  std::printf("\n%-20s %-10s %12s %10s %8s %9s %8s %9s %10s\n", "weights", "kv cache", "PPL", "+/-", "ratio", "+/-",
              "tokens", "seconds", "tokens/s");
  for (const Row& r : rows) {
    const PerplexityRatio q = perplexity_ratio(rows.front().result, r.result);
    std::printf("%-20s %-10s %12.4f %10.5f %8.4f %9.5f %8lld %9.2f %10.1f\n", r.weights.c_str(),
                std::string(kv_cache_dtype_name(r.kv)).c_str(), r.result.ppl, r.result.ppl_stderr, q.ratio,
                q.ratio_stderr, (long long)r.result.tokens_scored, r.result.seconds,
                double(r.result.tokens_evaluated) / r.result.seconds);
  }
  std::printf("\nweights as loaded:\n");
  for (const std::string& s : storage) std::printf("  %s\n", s.c_str());
  if (rows.size() == 1)
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", rows[0].result.ppl, rows[0].result.ppl_stderr);
  return 0;
}

}  // namespace kimi::cli
