#include "model/model.h"

#include <cstring>
#include <string>

#include "common/error.h"
#include "model/moe.h"
#include "model/ops.h"

namespace kimi {

Model::Model(const std::filesystem::path& dir, ModelOptions options)
    : config_(ModelConfig::load(dir)),
      options_(options),
      checkpoint_(std::make_unique<Checkpoint>(dir)),
      weights_(load_weights(*checkpoint_, config_, options.quantization)),
      rope_(config_),
      pool_(options.num_threads) {}

std::vector<float> Model::forward(std::span<const SequenceInput> seqs) {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  const float eps = float(c.rms_norm_eps);

  std::vector<SeqSlice> slices;
  int64_t n = 0;
  for (const SequenceInput& s : seqs) {
    if (!s.kv.storage) throw Error("forward: sequence without a KV cache");
    if (s.tokens.empty()) throw Error("forward: sequence with no new tokens");
    if (s.kv.length + int64_t(s.tokens.size()) > s.kv.capacity())
      throw Error("forward: " + std::to_string(s.kv.length + int64_t(s.tokens.size())) +
                  " tokens exceed the KV cache capacity of " + std::to_string(s.kv.capacity()));
    slices.push_back({s.kv, n, int64_t(s.tokens.size())});
    n += int64_t(s.tokens.size());
  }

  // Residual stream [n, hidden].
  std::vector<float> x(static_cast<size_t>(n * D));
  {
    const size_t row_bytes = size_t(D) * dtype_size(weights_.embed.dtype);
    int64_t row = 0;
    for (const SequenceInput& s : seqs)
      for (int32_t tok : s.tokens) {
        if (tok < 0 || tok >= c.vocab_size)
          throw Error("token id " + std::to_string(tok) + " is outside the vocabulary (0.." +
                      std::to_string(c.vocab_size - 1) + ")");
        const auto* src = static_cast<const std::byte*>(weights_.embed.data) + size_t(tok) * row_bytes;
        convert_to_f32(weights_.embed.dtype, src, &x[size_t(row++ * D)], D);
      }
  }

  std::vector<float> xn(static_cast<size_t>(n * D)), y(static_cast<size_t>(n * D));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[size_t(l)];
    rms_norm_to(x.data(), xn.data(), n, D, L.input_norm.data(), eps);
    mla_attention(c, L.attn, rope_, l, slices, xn.data(), n, options_.attention_mode, pool_, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];

    rms_norm_to(x.data(), xn.data(), n, D, L.post_attention_norm.data(), eps);
    if (L.moe) moe_forward(c, *L.moe, xn.data(), n, pool_, y.data());
    else mlp_forward(*L.dense, xn.data(), n, pool_, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  // Only the rows whose logits are wanted go through the final norm and the (large) lm_head.
  std::vector<float> h;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t first = seqs[i].all_logits ? slices[i].first_row : slices[i].first_row + slices[i].n_tokens - 1;
    const int64_t end = slices[i].first_row + slices[i].n_tokens;
    h.insert(h.end(), x.begin() + first * D, x.begin() + end * D);
  }
  const int64_t rows = int64_t(h.size()) / D;
  rms_norm(h.data(), rows, D, D, weights_.final_norm.data(), eps);
  std::vector<float> logits(static_cast<size_t>(rows * c.vocab_size));
  matmul(pool_, weights_.lm_head, h.data(), rows, logits.data());
  return logits;
}

std::vector<float> Model::forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) {
  const SequenceInput in{tokens, cache.view(), all_logits};
  std::vector<float> logits = forward({&in, 1});
  cache.set_length(cache.length() + int64_t(tokens.size()));
  return logits;
}

}  // namespace kimi
