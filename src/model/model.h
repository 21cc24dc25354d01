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
#include "model/phase_times.h"
#include "model/rope.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace kimi {

struct ModelOptions {
  int num_threads = 0;  // <= 0: all hardware threads
  AttentionMode attention_mode = AttentionMode::Auto;
  // Naive attention: context rows expanded through kv_b at once (<= 0: as many as fit 64 MiB).
  int64_t attention_expansion_rows = 0;
  QuantizationRequest quantization{};  // --quantization: as stored, or quantize float weights on load
  // The tensor-parallel group this process is one rank of (--tensor-parallel-size): it loads and
  // runs its shard of the weights (model/parallel_linear.h), and every rank of the group must
  // run the same forward steps. nullptr: the whole model here.
  std::shared_ptr<Communicator> tensor_parallel = nullptr;
  // --enable-expert-parallel: within that group, deal the routed experts out whole (a contiguous
  // range per rank) instead of slicing each one; nothing without a group of 2 or more.
  bool expert_parallel = false;
  // Data parallelism (--data-parallel-size > 1; both null without it): the ranks with this TP
  // index in every DP replica, in DP-rank order, and all tp x dp ranks. Each replica runs its own
  // batches; the routed experts are spread over all ranks and every MoE block exchanges tokens
  // across replicas (model/parallel_linear.h), so every replica must run each step, a replica
  // without work calling forward_dummy().
  std::shared_ptr<Communicator> data_parallel = nullptr;
  std::shared_ptr<Communicator> expert_group = nullptr;
  MoeExchange moe_exchange = MoeExchange::AllGatherReduceScatter;  // --all2all-backend
};

// One sequence's part of a forward step. The contract with the cache: forward writes exactly the
// rows [kv.length, kv.length + tokens.size()) of every layer through kv (the new tokens' latents
// and rope keys), reads rows [0, kv.length + tokens.size()), and writes nothing else; advancing the
// sequence's length is the caller's.
struct ForwardSequence {
  std::span<const int32_t> tokens = {};  // new tokens, at positions kv.length ...
  KvView kv = {};
  // Rows that replace the token embeddings of tokens[embedding_offsets[i]] (vision encoder
  // output): embedding_values is [embedding_offsets.size(), hidden_size].
  std::span<const int64_t> embedding_offsets = {};
  std::span<const float> embedding_values = {};
  int64_t num_logits = 1;  // logits for the last num_logits tokens (0 .. tokens.size())
};

struct ForwardBatch {
  std::vector<ForwardSequence> seqs;
  // Return the hidden states entering these layers for every token (num_hidden_layers: the
  // output of the last layer, before the final norm). Eagle3 drafts read three layers, MTP the last.
  std::vector<int64_t> capture_hidden_layers;
};

struct ForwardResult {
  std::vector<float> logits;         // [logit_rows, vocab_size]: per sequence in order, its last num_logits tokens
  int64_t logit_rows = 0;
  std::vector<float> hidden_states;  // [capture_hidden_layers.size(), num_tokens, hidden_size]
  int64_t num_tokens = 0;            // tokens of all sequences, in order
};

class Model {
 public:
  // Loads config.json and the safetensors weights of a Hugging Face model directory.
  explicit Model(const std::filesystem::path& dir, ModelOptions options = {});

  const ModelConfig& config() const { return config_; }
  // The checkpoint directory it was loaded from (an MTP proposer loads its layer from it too).
  const std::filesystem::path& dir() const { return dir_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() { return pool_; }
  int num_threads() const { return pool_.size(); }
  // The tensor-parallel group this model is a shard of (null: the whole model).
  const std::shared_ptr<Communicator>& tensor_parallel() const { return options_.tensor_parallel; }
  void set_attention_mode(AttentionMode m) { options_.attention_mode = m; }
  // Attaches (or, with nullptr, detaches) the accumulators forward() adds its phases' times to;
  // not owned, reset to this model's layer count here, with this model's pool attached (its
  // serial split needs the pool's region timing on). For benchmarks (bench latency --breakdown).
  void set_phase_times(PhaseTimes* times) {
    phase_times_ = times;
    if (!times) return;
    times->reset(config_.num_hidden_layers);
    times->pool = &pool_;
  }

  KvCache new_cache(int64_t capacity_tokens) const { return KvCache(config_, capacity_tokens); }

  // Runs one step over every sequence of the batch (see ForwardSequence for what it writes).
  // Throws kimi::Error for out-of-range token ids, bad embedding rows or a block table too short
  // for the new tokens.
  ForwardResult forward(const ForwardBatch& batch);
  // Under data parallelism: this replica's part of a step in which it runs no tokens (the MoE
  // blocks' exchanges with the other replicas). Nothing without it.
  void forward_dummy();
  // Steps begun: forward() calls past their checks, and forward_dummy() calls. A caller that
  // failed before its step began (count unchanged) owes the replicas a forward_dummy().
  uint64_t steps_begun() const { return steps_begun_; }
  bool data_parallel() const { return options_.data_parallel && options_.data_parallel->size() > 1; }
  // What `--dtype` came to here (auto decided for this checkpoint and CPU).
  const ActivationPlan& activation_plan() const { return activations_; }
  // The BF16 linears take bf16 activations (a draft model follows suit).
  bool bf16_activations() const { return activations_.bf16_linears; }

 private:
  std::filesystem::path dir_;
  ModelConfig config_;
  ModelOptions options_;
  ActivationPlan activations_;
  ModelConfig attention_config_;  // config_ with this rank's share of the attention heads
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mappings the weights point into
  ModelWeights weights_;
  Rope rope_;
  ThreadPool pool_;
  uint64_t steps_begun_ = 0;
  PhaseTimes* phase_times_ = nullptr;
};

// Runs tokens through one sequence with its own contiguous cache and appends them to it (offline
// use and tests); logits for every token (all_logits) or the last one.
std::vector<float> forward_sequence(Model& model, std::span<const int32_t> tokens, KvCache& cache,
                                    bool all_logits = false);

}  // namespace kimi
