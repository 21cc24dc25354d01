#pragma once
// The DeepSeek-V3 / Kimi-K2 text decoder: embeddings, num_hidden_layers blocks of
// (RMSNorm -> MLA attention -> residual, RMSNorm -> dense MLP or MoE -> residual), final norm,
// lm_head. One forward step takes new tokens of any number of sequences at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "format/checkpoint.h"
#include "format/model_config.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace kimi {

struct ModelOptions {
  int num_threads = 0;  // <= 0: all hardware threads
  AttentionMode attention_mode = AttentionMode::Auto;
  QuantizationRequest quantization{};  // --quantization: as stored, or quantize float weights on load
};

// One sequence's part of a forward step: its new tokens (written to its cache at positions
// kv.length ...) and whether logits are wanted for all of them or only the last one.
struct SequenceInput {
  std::span<const int32_t> tokens;
  KvView kv;
  bool all_logits = false;
};

class Model {
 public:
  // Loads config.json and the safetensors weights of a Hugging Face model directory.
  explicit Model(const std::filesystem::path& dir, ModelOptions options = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() { return pool_; }
  int num_threads() const { return pool_.size(); }
  void set_attention_mode(AttentionMode m) { options_.attention_mode = m; }

  KvCache new_cache(int64_t capacity_tokens) const { return KvCache(config_, capacity_tokens); }

  // Runs one step and returns the logits, [rows, vocab_size] row-major, where the rows are, per
  // sequence in order, every new token (all_logits) or just its last one. Writes the new
  // tokens' cache rows; advancing each sequence's length is the caller's. Throws kimi::Error
  // for out-of-range token ids or a block table too short for the new tokens.
  std::vector<float> forward(std::span<const SequenceInput> seqs);
  // One sequence with its own contiguous cache, which grows by the tokens.
  std::vector<float> forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits = false);

 private:
  ModelConfig config_;
  ModelOptions options_;
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mappings the weights point into
  ModelWeights weights_;
  Rope rope_;
  ThreadPool pool_;
};

}  // namespace kimi
