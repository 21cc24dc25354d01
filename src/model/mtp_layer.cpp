#include "model/mtp_layer.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "model/attention.h"
#include "model/moe.h"
#include "model/ops.h"
#include "model/tensor_layout.h"
#include "model/weight_binder.h"

namespace kimi {

namespace {

ModelConfig one_layer(ModelConfig c) {
  c.num_hidden_layers = 1;
  return c;
}

}  // namespace

int64_t MtpLayer::kv_bytes_per_token(const ModelConfig& target, KvCacheDtype kv_dtype) {
  return int64_t(KvStorage::bytes_per_token(one_layer(target), kv_dtype));
}

MtpLayer::MtpLayer(const std::filesystem::path& dir, const ModelConfig& target, int64_t num_blocks, int64_t block_size,
                   const WeightMatrix* target_embedding, int64_t index, KvCacheDtype kv_dtype, bool bf16_activations)
    : config_(target),
      cache_config_(one_layer(target)),
      layer_(target.num_hidden_layers + index),
      num_blocks_(num_blocks),
      block_size_(block_size),
      rope_(target),
      kv_(cache_config_, std::max<int64_t>(num_blocks, 1), std::max<int64_t>(block_size, 1), kv_dtype) {
  if (index < 0 || index >= target.num_nextn_predict_layers)
    throw Error(dir.string() + ": the checkpoint has no MTP layer " + std::to_string(index) + " (num_nextn_predict_layers " +
                std::to_string(target.num_nextn_predict_layers) + ")");
  if (num_blocks <= 0 || block_size <= 0) throw Error("MTP layer: num_blocks and block_size must be positive");
  checkpoint_ = std::make_unique<Checkpoint>(dir);
  const Checkpoint& ck = *checkpoint_;
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const std::string enorm_name = layer_tensor(c, layer_, "enorm.weight");
  if (!ck.contains(enorm_name))
    throw Error(dir.string() + ": config says num_nextn_predict_layers " + std::to_string(c.num_nextn_predict_layers) +
                " but the checkpoint has no '" + enorm_name + "' (no MTP layer weights)");
  QuantizationRequest request;  // stored as is (float); only the activations follow the target
  request.activations = bf16_activations ? ActivationDtype::BFloat16 : ActivationDtype::Float32;
  WeightBinder bind(ck, c, request);
  enorm_ = bind.vector(enorm_name, H);
  hnorm_ = bind.vector(layer_tensor(c, layer_, "hnorm.weight"), H);
  eh_proj_ = bind.linear(layer_tensor(c, layer_, "eh_proj"), H, 2 * H);
  block_ = load_layer_weights(bind, c, layer_);
  head_norm_ = bind.vector(layer_tensor(c, layer_, "shared_head.norm.weight"), H);
  head_ = bind.linear(layer_tensor(c, layer_, "shared_head.head"), c.vocab_size, H);
  // DeepSeek-V3's release carries the layer's own copy of the embedding; vLLM shares the
  // target's when it is absent.
  if (const std::string name = layer_tensor(c, layer_, "embed_tokens.weight"); ck.contains(name)) {
    embed_ = bind.dense(name, c.vocab_size, H);
  } else {
    if (!target_embedding || target_embedding->format != WeightFormat::Dense || target_embedding->cols != H ||
        target_embedding->rows < c.vocab_size)
      throw Error(dir.string() + ": the MTP layer has no '" + name + "' and no usable target embedding was given to share");
    embed_ = *target_embedding;
  }
  buffers_ = bind.take_buffers();
}

MtpOutput MtpLayer::forward(ThreadPool& pool, std::span<const MtpSequence> seqs) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const float eps = float(c.rms_norm_eps);
  std::vector<SeqSlice> slices;
  int64_t N = 0;
  for (const MtpSequence& q : seqs) {
    const int64_t n = int64_t(q.tokens.size());
    if (n == 0) throw Error("MTP forward: a sequence without tokens");
    if (int64_t(q.hidden.size()) != n * H)
      throw Error("MTP forward: " + std::to_string(q.hidden.size()) + " hidden values for " + std::to_string(n) +
                  " rows of " + std::to_string(H));
    for (int32_t t : q.tokens)
      if (t < 0 || t >= c.vocab_size) throw Error("MTP forward: token id " + std::to_string(t) + " out of range");
    if (q.first_position < 0 || (q.first_position + n - 1) / block_size_ >= int64_t(q.block_ids.size()))
      throw Error("MTP forward: positions up to " + std::to_string(q.first_position + n - 1) +
                  " outside the block table (" + std::to_string(q.block_ids.size()) + " blocks of " +
                  std::to_string(block_size_) + ")");
    for (int32_t b : q.block_ids)
      if (b < 0 || b >= num_blocks_) throw Error("MTP forward: block id " + std::to_string(b) + " out of range");
    slices.push_back({kv_.view(q.block_ids, q.first_position), N, n});
    N += n;
  }

  // [enorm(embed(token)) ; hnorm(h_prev)] (embedding first), the embedding zero at position 0
  // (vLLM masks it there: nothing precedes the first token).
  std::vector<float> cat(size_t(N * 2 * H), 0.0f);
  const size_t row_bytes = size_t(H) * dtype_size(embed_.dtype);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const MtpSequence& q = seqs[s];
    for (int64_t i = 0; i < int64_t(q.tokens.size()); ++i) {
      float* dst = &cat[size_t((slices[s].first_row + i) * 2 * H)];
      if (q.first_position + i > 0)
        convert_to_f32(embed_.dtype, static_cast<const std::byte*>(embed_.data) + size_t(q.tokens[size_t(i)]) * row_bytes,
                       dst, H);
      std::copy_n(&q.hidden[size_t(i * H)], H, dst + H);
    }
  }
  rms_norm(cat.data(), N, H, 2 * H, enorm_.data(), eps);
  rms_norm(cat.data() + H, N, H, 2 * H, hnorm_.data(), eps);
  std::vector<float> x(size_t(N * H)), xn(x.size()), y(x.size());
  matmul(pool, eh_proj_, cat.data(), N, x.data());

  // The decoder block, as the target's layers run it.
  rms_norm_to(x.data(), xn.data(), N, H, block_.input_norm.data(), eps);
  mla_attention(c, block_.attn, rope_, 0, slices, xn.data(), N, AttentionMode::Auto, 0, pool, y.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  rms_norm_to(x.data(), xn.data(), N, H, block_.post_attention_norm.data(), eps);
  if (block_.moe) moe_forward(c, *block_.moe, xn.data(), N, pool, y.data());
  else mlp_forward(*block_.dense, xn.data(), N, pool, y.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];

  // The last row of each sequence: its output and its logits through the shared head.
  const int64_t S = int64_t(seqs.size());
  MtpOutput out;
  out.hidden.resize(size_t(S * H));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t last = slices[size_t(s)].first_row + slices[size_t(s)].n_tokens - 1;
    std::copy_n(&x[size_t(last * H)], H, &out.hidden[size_t(s * H)]);
  }
  std::vector<float> normed(out.hidden.size());
  rms_norm_to(out.hidden.data(), normed.data(), S, H, head_norm_.data(), eps);
  out.logits.resize(size_t(S * c.vocab_size));
  matmul(pool, head_, normed.data(), S, out.logits.data());
  out.argmax.resize(size_t(S));
  for (int64_t s = 0; s < S; ++s) {
    const float* row = &out.logits[size_t(s * c.vocab_size)];
    out.argmax[size_t(s)] = int32_t(std::max_element(row, row + c.vocab_size) - row);
  }
  return out;
}

}  // namespace kimi
