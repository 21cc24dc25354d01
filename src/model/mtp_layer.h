#pragma once
// DeepSeek-V3's multi-token-prediction (MTP) layer, model.layers.<num_hidden_layers + index> of
// the target's own checkpoint (shared/serving-protocols.md §1.5): its weights, its own paged MLA
// KV cache (float32 rows addressed by the target's block ids and block size, like the Eagle3
// draft's) and its forward over a batch of sequences:
//   x      = eh_proj([enorm(embed(token)) ; hnorm(h_prev)])   (embedding first; zero at position 0)
//   h      = decoder block(x)                                  (MLA attention + MoE or dense MLP)
//   logits = shared_head.head(shared_head.norm(h))
// h (before shared_head.norm) is what a later chain step reads as its h_prev.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "format/checkpoint.h"
#include "format/model_config.h"
#include "kernels/matmul.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace kimi {

// One sequence's rows of an MTP forward: row i sits at position first_position + i, reads
// tokens[i] (the token AFTER that position) and hidden[i] (h_prev of that position).
struct MtpSequence {
  std::span<const int32_t> tokens;
  std::span<const float> hidden;  // [tokens.size(), hidden_size]
  int64_t first_position = 0;
  std::span<const int32_t> block_ids;  // the sequence's block table in the target's block size
};

struct MtpOutput {
  std::vector<float> logits;    // [seqs, vocab]: the last row's of each sequence
  std::vector<float> hidden;    // [seqs, hidden]: the last row's output before shared_head.norm
  std::vector<int32_t> argmax;  // [seqs]: the greedy token of each sequence
};

class MtpLayer {
 public:
  // Binds MTP layer `index` of the checkpoint in `dir` (whose config is `target`). Without its
  // own model.layers.<N>.embed_tokens.weight the layer uses target_embedding (the target's
  // model.embed_tokens, which must then be given and outlive the layer). kimi::Error when the
  // config has no such MTP layer or a tensor is missing. The KV storage holds num_blocks *
  // block_size rows of kv_dtype (the target cache's: the layer's rows are MLA rows like its own).
  // bf16_activations: its BF16 linears round their inputs to bf16 (the target's `--dtype bfloat16`).
  MtpLayer(const std::filesystem::path& dir, const ModelConfig& target, int64_t num_blocks, int64_t block_size,
           const WeightMatrix* target_embedding = nullptr, int64_t index = 0,
           KvCacheDtype kv_dtype = KvCacheDtype::Float32, bool bf16_activations = false);

  // Bytes the layer's cache keeps per token (one MLA row of kv_dtype), for a KV budget.
  static int64_t kv_bytes_per_token(const ModelConfig& target, KvCacheDtype kv_dtype);

  const ModelConfig& config() const { return config_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }

  // Runs every sequence's rows, writing their KV rows at their positions and attending causally
  // over each sequence's rows [0, position]. kimi::Error for a block table too short,
  // out-of-range tokens or hidden rows of the wrong size.
  MtpOutput forward(ThreadPool& pool, std::span<const MtpSequence> seqs);

 private:
  ModelConfig config_;        // the target's
  ModelConfig cache_config_;  // the same with one layer: the shape of this layer's KV storage
  int64_t layer_ = 0;         // num_hidden_layers + index
  int64_t num_blocks_ = 0, block_size_ = 0;
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mapping the matrices point into
  OwnedWeightBuffers buffers_;              // converted weights the matrices point into
  WeightMatrix embed_, eh_proj_, head_;
  std::vector<float> enorm_, hnorm_, head_norm_;
  LayerWeights block_;
  Rope rope_;
  KvStorage kv_;
};

}  // namespace kimi
