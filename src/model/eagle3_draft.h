#pragma once
// An Eagle3 draft model (LlamaForCausalLMEagle3, the published layout: shared/serving-protocols.md
// §1.4): its config, its weights (mapped from the draft directory's safetensors), its own paged
// KV storage (K and V per head, float32 or bf16 as the target's cache allows; rows addressed by
// the target's block ids and block size) and its forward over a batch of sequences. The draft
// reads the target's hidden states at three aux layers (fc over [low, mid, high]) or, in later
// chain steps, its own pre-norm output.
#include <cstdint>
#include <cstdlib>
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

namespace kimi {

struct Eagle3Config {
  int64_t hidden_size = 0;
  int64_t target_hidden_size = 0;  // config's target_hidden_size, default hidden_size
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;        // rows of embed_tokens: target token ids index it
  int64_t draft_vocab_size = 0;  // rows of lm_head (draft_vocab_size, default vocab_size)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool norm_before_residual = false;
  std::vector<int64_t> aux_layer_ids;  // target capture ids (our convention: input of layer j)

  // Reads <dir>/config.json; `target` gives the default aux ids (2, L/2, L-3). kimi::Error names
  // the file and key for a missing or wrong-typed field.
  static Eagle3Config load(const std::filesystem::path& dir, const ModelConfig& target);
  // Bytes the draft's cache keeps per token (a K and a V row, see draft_kv_element_bytes) beside a
  // target cache of kv_dtype: a KV budget counts them beside the target's.
  int64_t kv_bytes_per_token(KvCacheDtype kv_dtype) const {
    return 2 * num_key_value_heads * head_dim * draft_kv_element_bytes(kv_dtype);
  }
  // The draft keeps K and V in float32 beside a float32 target cache and in bf16 beside a bf16 or
  // fp8 one (per-head rows have no scale to carry fp8; bf16 halves them, which at Kimi-K2.5's draft
  // shapes is 32 KB a token).
  static int64_t draft_kv_element_bytes(KvCacheDtype kv_dtype) { return kv_dtype == KvCacheDtype::Float32 ? 4 : 2; }
};

// One sequence's rows of a draft forward: tokens[i] at position first_position + i.
struct Eagle3Sequence {
  std::span<const int32_t> tokens;  // target token ids
  // Per row either the concatenated target captures [3 * target_hidden] (fc is applied), or,
  // with from_draft_hidden, the draft's own pre-norm output [hidden] of the previous chain step.
  std::span<const float> hidden;
  bool from_draft_hidden = false;
  int64_t first_position = 0;
  std::span<const int32_t> block_ids;  // the sequence's block table in the target's block size
};

struct Eagle3Output {
  std::vector<float> logits;  // [seqs, target vocab]: the last row's, ids no draft id maps to = -inf
  std::vector<float> hidden;  // [seqs, hidden]: the last row's pre-norm output
  std::vector<int32_t> argmax;  // [seqs]: the greedy token of each sequence, in target ids
};

class Eagle3Draft {
 public:
  // Loads <dir> and checks it against the target: target_hidden_size == target hidden,
  // vocab_size covers the target's, lm_head ids (through d2t) inside the target vocab, aux ids in
  // [0, num_hidden_layers]. Without embed_tokens.weight the draft uses target_embedding (the
  // target's model.embed_tokens, which must then be given and outlive the draft). The KV storage
  // holds num_blocks * block_size rows, zero (pages mapped as they are first written), in the
  // element type Eagle3Config::draft_kv_element_bytes gives for the target cache's kv_dtype.
  // bf16_activations: its BF16 linears round their inputs to bf16, as the target's do under
  // `--dtype bfloat16`.
  Eagle3Draft(const std::filesystem::path& dir, const ModelConfig& target, int64_t num_blocks, int64_t block_size,
              const WeightMatrix* target_embedding = nullptr, KvCacheDtype kv_dtype = KvCacheDtype::Float32,
              bool bf16_activations = false);

  const Eagle3Config& config() const { return config_; }
  int64_t target_vocab_size() const { return target_vocab_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }

  // Writes every sequence's rows' K and V at their positions, then runs each sequence's last row
  // through the rest of the layer (causal attention over its rows [0, position]) and the head: the
  // other rows' outputs would feed nothing. kimi::Error for a block table too short, out-of-range
  // tokens or hidden rows of the wrong size.
  Eagle3Output forward(ThreadPool& pool, std::span<const Eagle3Sequence> seqs);

 private:
  std::byte* k_row(int32_t block, int64_t offset) { return &kv_[size_t((block * block_size_ + offset) * 2) * kv_row_bytes_]; }
  std::byte* v_row(int32_t block, int64_t offset) { return k_row(block, offset) + kv_row_bytes_; }
  void write_kv_row(const float* src, std::byte* dst) const;
  // a . (kv_dim values of a K row from `head`), y += a * (those of a V row)
  float dot_kv(const float* a, const std::byte* row, int64_t head) const;
  void axpy_kv(float* y, float a, const std::byte* row, int64_t head) const;
  void rope_rotate_half(float* x, int64_t heads, int64_t position) const;

  Eagle3Config config_;
  int64_t target_vocab_ = 0;
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mapping the matrices point into
  WeightMatrix embed_, fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  std::vector<float> input_norm_, hidden_norm_, post_norm_, final_norm_;
  std::vector<int64_t> d2t_;  // target id = draft id + d2t[draft id]; empty: the identity
  Rope rope_;
  int64_t num_blocks_ = 0, block_size_ = 0, kv_dim_ = 0;
  bool kv_bf16_ = false;
  size_t kv_row_bytes_ = 0;  // kv_dim elements of float32 or bf16
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  // [num_blocks * block_size][K row, V row] of kv_row_bytes each, from calloc: zero pages the
  // system maps only when first written, so a large budget costs memory only as it fills.
  std::unique_ptr<std::byte[], FreeDeleter> kv_;
};

}  // namespace kimi
