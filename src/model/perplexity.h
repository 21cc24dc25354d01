#pragma once
// Perplexity of a model over a token sequence, computed as llama.cpp's llama-perplexity does:
// the tokens are cut into consecutive chunks of ctx_size (the remainder after the last whole
// chunk is dropped); each chunk runs through the model on its own, with a fresh KV cache, and
// only the second half of its tokens is scored: the logits at positions ctx/2 .. ctx-2 predict
// the tokens at ctx/2+1 .. ctx-1, so every scored token sees at least ctx/2 tokens of context
// (ctx - 1 - ctx/2 tokens scored per chunk). Perplexity is exp(mean negative log-likelihood),
// with log-softmax in double; its error is the standard error of the mean NLL carried through
// exp (llama.cpp's "PPL = x +/- y").
// This piece depends on the model only; `kimi perplexity` (cli/cmd_perplexity.cpp) tokenizes.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace kimi {

struct PerplexityOptions {
  int64_t ctx_size = 512;  // tokens per chunk (llama.cpp's -c)
  int64_t max_chunks = 0;  // <= 0: every whole chunk (llama.cpp's --chunks)
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Float32;
  // Called after each chunk with its index and the running perplexity (progress output).
  std::function<void(int64_t chunk, double running_ppl)> on_chunk = {};
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_stderr = 0;  // 0 with fewer than two scored tokens
  double mean_nll = 0;    // natural log
  int64_t chunks = 0;
  int64_t tokens_scored = 0;
  int64_t tokens_evaluated = 0;  // chunks * ctx_size: what went through the model
  double seconds = 0;            // forward passes and scoring
  std::vector<double> token_nll;  // per scored token, in text order (paired comparisons)
};

// Tokens scored per chunk of ctx_size.
int64_t perplexity_scored_per_chunk(int64_t ctx_size);

// Throws kimi::Error when ctx_size is below 4 or beyond max_position_embeddings, or when the
// text has fewer than ctx_size tokens (one whole chunk; llama.cpp asks for 2 x ctx_size):
// "you need at least N tokens ...", with the numbers. The CLI calls it before loading weights.
void check_perplexity_input(const ModelConfig& config, int64_t num_tokens, int64_t ctx_size);

// Throws as check_perplexity_input does.
PerplexityResult evaluate_perplexity(Model& model, std::span<const int32_t> tokens, const PerplexityOptions& options);

// -log softmax(logits)[target], in double.
double token_nll(std::span<const float> logits, int32_t target);

// Another run over the same tokens against a base run: the ratio of the perplexities and its
// standard error from the per-token NLL differences (paired, so noise common to both cancels).
struct PerplexityRatio {
  double ratio = 0;
  double ratio_stderr = 0;
};
// Throws kimi::Error when the two runs scored different numbers of tokens.
PerplexityRatio perplexity_ratio(const PerplexityResult& base, const PerplexityResult& other);

}  // namespace kimi
