#pragma once
// The MTP proposer (vLLM's EagleProposer with method "mtp" / "deepseek_mtp", top-1): owns the
// target checkpoint's MTP layer and its KV storage (rows in the target's block ids and block
// size), keeps that cache in step with the target's verified positions, and proposes a greedy
// chain of draft tokens. Step 0 reads the target's last hidden state AFTER its final norm (what
// vLLM's DeepseekV2Model returns and its MTP layer consumes); later steps reuse the MTP layer's
// own output (before shared_head.norm), and the one layer serves every step when k exceeds
// num_nextn_predict_layers (vLLM's spec_step_idx % num_mtp_layers, with one layer).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/mtp_layer.h"
#include "spec/proposer.h"

namespace kimi::spec {

struct MtpProposerOptions {
  int64_t num_blocks = 0;  // the target KV cache's blocks and block size: the layer's rows follow them
  int64_t block_size = 0;
  // The target's model.embed_tokens, shared when the MTP layer has no embed_tokens of its own
  // (it must outlive the proposer); may be null when the layer carries one.
  const WeightMatrix* target_embedding = nullptr;
  // The target's final norm (model.norm.weight, hidden_size values), applied to the captured
  // last-layer output before it reaches the MTP layer; copied.
  std::span<const float> target_final_norm;
  KvCacheDtype kv_dtype = KvCacheDtype::Float32;  // the target cache's
  bool bf16_activations = false;                   // the target's `--dtype bfloat16`
};

class MtpProposer : public Proposer {
 public:
  // Loads MTP layer 0 of the target checkpoint in target_dir. Runs on `pool` (the target
  // Model's: they share threads), which must outlive the proposer.
  MtpProposer(const std::filesystem::path& target_dir, const ModelConfig& target, ThreadPool& pool,
              const MtpProposerOptions& options);

  // The last layer's output, before the final norm (this proposer applies the norm itself).
  std::vector<int64_t> capture_layers() const override { return {layer_.config().num_hidden_layers}; }
  // Each request's verified positions i run through the layer with token i+1 and the target's
  // normed hidden state of position i (writing the layer's KV at i); requests with num_drafts > 0
  // then chain greedily from their last position (a block table that ends early cuts the chain
  // short). kimi::Error, before anything is written, for hidden states of the wrong size or a
  // request whose tokens do not reach first_position + num_positions.
  void propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) override;

  MtpLayer& layer() { return layer_; }
  // With keep_logits, propose() keeps the logits behind each draft token: last_logits()[i] is
  // [drafts[i].size(), vocab] (tests).
  void set_keep_logits(bool keep) { keep_logits_ = keep; }
  const std::vector<std::vector<float>>& last_logits() const { return logits_; }

 private:
  ThreadPool& pool_;
  MtpLayer layer_;
  std::vector<float> final_norm_;
  bool keep_logits_ = false;
  std::vector<std::vector<float>> logits_;
};

}  // namespace kimi::spec
