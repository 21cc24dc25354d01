#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"
#include "model/moe.h"
#include "model/ops.h"

namespace kimi {

Model::Model(const std::filesystem::path& dir, ModelOptions options)
    : dir_(dir),
      config_(ModelConfig::load(dir)),
      options_(std::move(options)),
      activations_(options_.quantization.activation_plan(config_)),
      attention_config_(TensorParallel{options_.tensor_parallel.get()}.attention_shard(config_)),
      checkpoint_(std::make_unique<Checkpoint>(dir)),
      weights_(load_weights(*checkpoint_, config_, options_.quantization,
                            TensorParallel{options_.tensor_parallel.get(), options_.expert_parallel,
                                           options_.data_parallel.get(), options_.expert_group.get(),
                                           options_.moe_exchange})),
      rope_(config_),
      pool_(options_.num_threads) {}

namespace {

// What forward() refuses, checked before it starts (and before any collective).
void check_batch(const ModelConfig& c, const ForwardBatch& batch) {
  for (const ForwardSequence& s : batch.seqs) {
    const int64_t len = int64_t(s.tokens.size());
    if (!s.kv.storage) throw Error("forward: sequence without a KV cache");
    if (s.tokens.empty()) throw Error("forward: sequence with no new tokens");
    if (s.kv.length + len > s.kv.capacity())
      throw Error("forward: " + std::to_string(s.kv.length + len) + " tokens exceed the KV cache capacity of " +
                  std::to_string(s.kv.capacity()));
    if (s.num_logits < 0 || s.num_logits > len) throw Error("forward: num_logits outside 0.." + std::to_string(len));
    if (s.embedding_values.size() != s.embedding_offsets.size() * size_t(c.hidden_size))
      throw Error("forward: embedding rows must be [offsets, hidden_size]");
    for (int64_t off : s.embedding_offsets)
      if (off < 0 || off >= len) throw Error("forward: embedding row offset outside the sequence's new tokens");
    for (int32_t tok : s.tokens)
      if (tok < 0 || tok >= c.vocab_size)
        throw Error("token id " + std::to_string(tok) + " is outside the vocabulary (0.." +
                    std::to_string(c.vocab_size - 1) + ")");
  }
  for (int64_t l : batch.capture_hidden_layers)
    if (l < 0 || l > c.num_hidden_layers) throw Error("forward: no layer " + std::to_string(l) + " to capture");
}

}  // namespace

void Model::forward_dummy() {
  ++steps_begun_;
  for (const LayerWeights& L : weights_.layers)
    if (L.moe) moe_dummy_forward(config_, *L.moe, pool_);
}

ForwardResult Model::forward(const ForwardBatch& batch) {
  const auto start = std::chrono::steady_clock::now();
  PhaseTimes* const times = phase_times_;
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  const float eps = float(c.rms_norm_eps);
  const auto& seqs = batch.seqs;

  // A batch refused here still owes the other DP replicas its part of the step's exchanges: run
  // them empty, then report the error.
  try {
    check_batch(c, batch);
  } catch (const Error&) {
    if (data_parallel()) forward_dummy();
    throw;
  }
  ++steps_begun_;
  std::vector<SeqSlice> slices;
  int64_t n = 0;
  for (const ForwardSequence& s : seqs) {
    slices.push_back({s.kv, n, int64_t(s.tokens.size())});
    n += int64_t(s.tokens.size());
  }

  ForwardResult result;
  result.num_tokens = n;
  result.hidden_states.resize(batch.capture_hidden_layers.size() * size_t(n * D));
  auto capture = [&](int64_t layer, const std::vector<float>& x) {
    for (size_t i = 0; i < batch.capture_hidden_layers.size(); ++i)
      if (batch.capture_hidden_layers[i] == layer) std::copy(x.begin(), x.end(), result.hidden_states.begin() + ptrdiff_t(i * x.size()));
  };

  // Residual stream [n, hidden]: token embeddings, or the rows given in their place. Under
  // tensor parallelism each rank may hold a slice of the vocabulary (model/weights.h): it fills
  // the rows of its tokens, zeros the rest, and the sum over ranks completes every row.
  Communicator* const tp = options_.tensor_parallel.get();
  const bool vocab_split = weights_.embed.rows != c.vocab_size;
  const int64_t first_token = vocab_split ? tp->rank() * weights_.embed.rows : 0;
  std::vector<float> x(static_cast<size_t>(n * D));
  {
    const size_t row_bytes = size_t(D) * dtype_size(weights_.embed.dtype);
    int64_t row = 0;
    for (const ForwardSequence& s : seqs)
      for (int32_t tok : s.tokens) {
        const int64_t local = tok - first_token;
        if (local >= 0 && local < weights_.embed.rows) {
          const auto* src = static_cast<const std::byte*>(weights_.embed.data) + size_t(local) * row_bytes;
          convert_to_f32(weights_.embed.dtype, src, &x[size_t(row * D)], D);
        }
        ++row;
      }
    if (vocab_split) tp->all_reduce_sum(x);
    row = 0;
    for (const ForwardSequence& s : seqs) {
      for (size_t i = 0; i < s.embedding_offsets.size(); ++i)
        std::copy_n(s.embedding_values.begin() + ptrdiff_t(i * size_t(D)), D, &x[size_t((row + s.embedding_offsets[i]) * D)]);
      row += int64_t(s.tokens.size());
    }
  }

  std::vector<float> xn(static_cast<size_t>(n * D)), y(static_cast<size_t>(n * D));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    capture(l, x);
    const LayerWeights& L = weights_.layers[size_t(l)];
    rms_norm_to(x.data(), xn.data(), n, D, L.input_norm.data(), eps);
    {
      PhaseScope scope(times, l, Phase::Attention);
      mla_attention(attention_config_, L.attn, rope_, l, slices, xn.data(), n, options_.attention_mode,
                    options_.attention_expansion_rows, pool_, y.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];

    rms_norm_to(x.data(), xn.data(), n, D, L.post_attention_norm.data(), eps);
    if (L.moe) {
      moe_forward(c, *L.moe, xn.data(), n, pool_, y.data(), {times, l});
    } else {
      PhaseScope scope(times, l, Phase::DenseMlp);
      mlp_forward(*L.dense, xn.data(), n, pool_, y.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  capture(c.num_hidden_layers, x);

  // Only the rows whose logits are wanted go through the final norm and the (large) lm_head.
  std::vector<float> h;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t end = slices[i].first_row + slices[i].n_tokens;
    h.insert(h.end(), x.begin() + (end - seqs[i].num_logits) * D, x.begin() + end * D);
  }
  result.logit_rows = int64_t(h.size()) / D;
  {
    PhaseScope scope(times, c.num_hidden_layers, Phase::LmHead);
    rms_norm(h.data(), result.logit_rows, D, D, weights_.final_norm.data(), eps);
    const int64_t rows = result.logit_rows;
    result.logits.resize(static_cast<size_t>(rows * c.vocab_size));
    if (rows > 0 && weights_.lm_head.rows == c.vocab_size) {
      matmul(pool_, weights_.lm_head, h.data(), rows, result.logits.data());
    } else if (rows > 0) {  // this rank's vocabulary slice; the ranks' slices gathered side by side
      const int64_t part = weights_.lm_head.rows;
      std::vector<float> mine(static_cast<size_t>(rows * part)), all(result.logits.size());
      matmul(pool_, weights_.lm_head, h.data(), rows, mine.data());
      tp->all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
      for (int64_t r = 0; r < tp->size(); ++r)
        for (int64_t t = 0; t < rows; ++t)
          std::copy_n(&all[size_t((r * rows + t) * part)], part, &result.logits[size_t(t * c.vocab_size + r * part)]);
    }
  }
  if (times) {
    times->forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++times->steps;
    times->tokens += n;
    times->logit_rows += result.logit_rows;
  }
  return result;
}

std::vector<float> forward_sequence(Model& model, std::span<const int32_t> tokens, KvCache& cache, bool all_logits) {
  ForwardBatch batch;
  batch.seqs.push_back({.tokens = tokens, .kv = cache.view(), .num_logits = all_logits ? int64_t(tokens.size()) : 1});
  ForwardResult r = model.forward(batch);
  cache.set_length(cache.length() + int64_t(tokens.size()));
  return std::move(r.logits);
}

}  // namespace kimi
