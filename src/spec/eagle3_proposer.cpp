#include "spec/eagle3_proposer.h"

#include <string>

#include "common/error.h"
#include "spec/draft_chain.h"

namespace kimi::spec {

Eagle3Proposer::Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, ThreadPool& pool,
                               const Eagle3ProposerOptions& options)
    : pool_(pool),
      target_hidden_(target.hidden_size),
      draft_(draft_dir, target, options.num_blocks, options.block_size, options.target_embedding, options.kv_dtype,
             options.bf16_activations) {}

Eagle3Proposer::Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, int num_threads,
                               const Eagle3ProposerOptions& options)
    : own_pool_(std::make_unique<ThreadPool>(num_threads)),
      pool_(*own_pool_),
      target_hidden_(target.hidden_size),
      draft_(draft_dir, target, options.num_blocks, options.block_size, options.target_embedding, options.kv_dtype,
             options.bf16_activations) {}

void Eagle3Proposer::propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(requests.size(), {});
  logits_.assign(keep_logits_ ? requests.size() : 0, {});
  const size_t V = size_t(draft_.target_vocab_size());
  const size_t layers = draft_.config().aux_layer_ids.size();
  const size_t T = size_t(target_hidden_), H = size_t(draft_.config().hidden_size);

  // Step 0: every verified position i with token i+1 and fc([low, mid, high] of position i).
  std::vector<std::vector<float>> features;
  std::vector<Eagle3Sequence> seqs;
  std::vector<size_t> seq_request;
  features.reserve(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const ProposeRequest& q = requests[r];
    if (q.num_positions <= 0) continue;
    const size_t n = size_t(q.num_positions);
    check_propose_request("Eagle3 proposer", q, layers * n * T,
                          std::to_string(layers) + " layers x " + std::to_string(n) + " positions x " + std::to_string(T));
    // [layers][n][T] -> [n][layers * T]: the concatenation fc reads.
    std::vector<float>& f = features.emplace_back(n * layers * T);
    for (size_t l = 0; l < layers; ++l)
      for (size_t i = 0; i < n; ++i)
        std::copy_n(&q.hidden_states[(l * n + i) * T], T, &f[(i * layers + l) * T]);
    seqs.push_back({.tokens = q.tokens.subspan(size_t(q.first_position) + 1, n),
                    .hidden = f,
                    .from_draft_hidden = false,
                    .first_position = q.first_position,
                    .block_ids = q.block_ids});
    seq_request.push_back(r);
  }
  if (seqs.empty()) return;
  const Eagle3Output first = draft_.forward(pool_, seqs);
  extend_draft_chains(requests, seq_request, first, H, V, draft_.block_size(), drafts, keep_logits_ ? &logits_ : nullptr,
                      [&](std::span<DraftLink* const> live) {
                        seqs.clear();
                        for (const DraftLink* l : live)
                          seqs.push_back({.tokens = l->token, .hidden = l->hidden, .from_draft_hidden = true,
                                          .first_position = l->position, .block_ids = requests[l->request].block_ids});
                        return draft_.forward(pool_, seqs);
                      });
}

}  // namespace kimi::spec
