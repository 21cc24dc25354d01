#pragma once
// The Eagle3 proposer: owns an Eagle3 draft model and its KV storage (rows in the target's
// block ids and block size), keeps that cache in step with the target's verified positions, and
// proposes a greedy chain of draft tokens (vLLM's EagleProposer with method "eagle3", top-1).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/eagle3_draft.h"
#include "spec/proposer.h"

namespace kimi::spec {

struct Eagle3ProposerOptions {
  int64_t num_blocks = 0;  // the target KV cache's blocks and block size: the draft's rows follow them
  int64_t block_size = 0;
  // The target's model.embed_tokens, shared when the draft has no embed_tokens.weight (it must
  // outlive the proposer); may be null for drafts that carry their own.
  const WeightMatrix* target_embedding = nullptr;
  KvCacheDtype kv_dtype = KvCacheDtype::Float32;  // the target cache's (the draft's rows follow it)
  bool bf16_activations = false;                   // the target's `--dtype bfloat16`
};

class Eagle3Proposer : public Proposer {
 public:
  // Runs the draft on `pool` (the target Model's, Model::pool(): the runner calls the proposer
  // between target forwards, so they share threads), which must outlive the proposer.
  Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, ThreadPool& pool,
                 const Eagle3ProposerOptions& options);
  // As above with a pool of its own of num_threads (<= 0: all hardware threads).
  Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, int num_threads,
                 const Eagle3ProposerOptions& options);

  std::vector<int64_t> capture_layers() const override { return draft_.config().aux_layer_ids; }
  // Each request's verified positions i run through the draft with token i+1 and the target's
  // captures of position i (writing the draft's KV at i); then requests with num_drafts > 0 chain
  // greedily from their last position (a request without verified positions this step gets no
  // drafts: the chain starts from this step's hidden state; a block table that ends early cuts
  // the chain short). kimi::Error, before anything is written, for hidden states of the wrong
  // size or a request whose tokens do not reach first_position + num_positions.
  void propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) override;

  Eagle3Draft& draft() { return draft_; }
  // With keep_logits, propose() keeps the target-vocabulary logits behind each draft token:
  // last_logits()[i] is [drafts[i].size(), target vocab] (tests; a sampler's draft distribution).
  void set_keep_logits(bool keep) { keep_logits_ = keep; }
  const std::vector<std::vector<float>>& last_logits() const { return logits_; }

 private:
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool& pool_;
  int64_t target_hidden_;
  Eagle3Draft draft_;
  bool keep_logits_ = false;
  std::vector<std::vector<float>> logits_;
};

}  // namespace kimi::spec
