#include "model/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "common/error.h"

namespace kimi {

namespace {

// exp(mean) and its standard error through exp: sqrt(var / (n - 1)) * exp(mean), var the
// population variance of the per-token values (as llama.cpp computes it).
void summarize(std::span<const double> nll, double& mean, double& value, double& err) {
  const double n = double(nll.size());
  double sum = 0, sum2 = 0;
  for (const double x : nll) {
    sum += x;
    sum2 += x * x;
  }
  mean = nll.empty() ? 0 : sum / n;
  value = std::exp(mean);
  const double var = nll.empty() ? 0 : sum2 / n - mean * mean;
  err = nll.size() > 1 && var > 0 ? std::sqrt(var / (n - 1)) * value : 0;
}

}  // namespace

int64_t perplexity_scored_per_chunk(int64_t ctx_size) { return ctx_size - 1 - ctx_size / 2; }

double token_nll(std::span<const float> logits, int32_t target) {
  double max = -INFINITY;
  for (const float l : logits) max = std::max(max, double(l));
  double sum = 0;
  for (const float l : logits) sum += std::exp(double(l) - max);
  return std::log(sum) + max - double(logits[size_t(target)]);
}

void check_perplexity_input(const ModelConfig& c, int64_t n, int64_t ctx) {
  if (ctx < 4) throw Error("the context size must be at least 4 tokens (got " + std::to_string(ctx) + ")");
  if (ctx > c.max_position_embeddings)
    throw Error("the context size " + std::to_string(ctx) + " exceeds the model's max_position_embeddings (" +
                std::to_string(c.max_position_embeddings) + ")");
  if (n < ctx)
    throw Error("you need at least " + std::to_string(ctx) + " tokens to evaluate perplexity with a context of " +
                std::to_string(ctx) + "; the text tokenizes to only " + std::to_string(n) + " tokens");
}

PerplexityResult evaluate_perplexity(Model& model, std::span<const int32_t> tokens, const PerplexityOptions& options) {
  const ModelConfig& c = model.config();
  const int64_t ctx = options.ctx_size;
  const int64_t n = int64_t(tokens.size());
  check_perplexity_input(c, n, ctx);
  int64_t chunks = n / ctx;
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);

  const int64_t first = ctx / 2;
  const int64_t scored = perplexity_scored_per_chunk(ctx);
  const int64_t vocab = c.vocab_size;
  PerplexityResult r;
  r.chunks = chunks;
  r.tokens_evaluated = chunks * ctx;
  r.token_nll.reserve(size_t(chunks * scored));
  const auto t0 = std::chrono::steady_clock::now();
  KvCache cache(c, ctx, options.kv_cache_dtype);
  for (int64_t k = 0; k < chunks; ++k) {
    const std::span<const int32_t> chunk = tokens.subspan(size_t(k * ctx), size_t(ctx));
    cache.set_length(0);  // a fresh cache: no chunk sees another's tokens
    // Logits of the last ctx - first positions only: first .. ctx-1 (the last predicts past the chunk).
    ForwardBatch batch;
    batch.seqs.push_back({.tokens = chunk, .kv = cache.view(), .num_logits = ctx - first});
    const ForwardResult out = model.forward(batch);
    const size_t base = r.token_nll.size();
    r.token_nll.resize(base + size_t(scored));
    double* dst = r.token_nll.data() + base;
    // Row i of out.logits is position first + i and predicts chunk[first + i + 1].
    model.pool().parallel_for(scored, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        dst[i] = token_nll(std::span<const float>(out.logits).subspan(size_t(i * vocab), size_t(vocab)),
                           chunk[size_t(first + i + 1)]);
    });
    if (options.on_chunk) {
      double mean = 0, value = 0, err = 0;
      summarize(r.token_nll, mean, value, err);
      options.on_chunk(k, value);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_scored = int64_t(r.token_nll.size());
  summarize(r.token_nll, r.mean_nll, r.ppl, r.ppl_stderr);
  return r;
}

PerplexityRatio perplexity_ratio(const PerplexityResult& base, const PerplexityResult& other) {
  if (base.token_nll.size() != other.token_nll.size())
    throw Error("perplexity runs over different numbers of tokens (" + std::to_string(base.token_nll.size()) +
                " and " + std::to_string(other.token_nll.size()) + ") cannot be compared");
  std::vector<double> diff(base.token_nll.size());
  for (size_t i = 0; i < diff.size(); ++i) diff[i] = other.token_nll[i] - base.token_nll[i];
  PerplexityRatio q;
  double mean = 0;
  summarize(diff, mean, q.ratio, q.ratio_stderr);
  return q;
}

}  // namespace kimi
