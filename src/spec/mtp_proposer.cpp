#include "spec/mtp_proposer.h"

#include <string>

#include "common/error.h"
#include "model/ops.h"
#include "spec/draft_chain.h"

namespace kimi::spec {

MtpProposer::MtpProposer(const std::filesystem::path& target_dir, const ModelConfig& target, ThreadPool& pool,
                         const MtpProposerOptions& options)
    : pool_(pool),
      layer_(target_dir, target, options.num_blocks, options.block_size, options.target_embedding, 0, options.kv_dtype,
             options.bf16_activations),
      final_norm_(options.target_final_norm.begin(), options.target_final_norm.end()) {
  if (int64_t(final_norm_.size()) != target.hidden_size)
    throw Error("MTP proposer: the target's final norm has " + std::to_string(final_norm_.size()) + " values, not " +
                std::to_string(target.hidden_size));
}

void MtpProposer::propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(requests.size(), {});
  logits_.assign(keep_logits_ ? requests.size() : 0, {});
  const ModelConfig& c = layer_.config();
  const size_t V = size_t(c.vocab_size), H = size_t(c.hidden_size);
  const float eps = float(c.rms_norm_eps);

  // Step 0: every verified position i with token i+1 and the target's normed state of i.
  std::vector<std::vector<float>> normed;
  std::vector<MtpSequence> seqs;
  std::vector<size_t> seq_request;
  normed.reserve(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const ProposeRequest& q = requests[r];
    if (q.num_positions <= 0) continue;
    const size_t n = size_t(q.num_positions);
    check_propose_request("MTP proposer", q, n * H, std::to_string(n) + " positions x " + std::to_string(H));
    std::vector<float>& h = normed.emplace_back(n * H);
    rms_norm_to(q.hidden_states.data(), h.data(), int64_t(n), int64_t(H), final_norm_.data(), eps);
    seqs.push_back({.tokens = q.tokens.subspan(size_t(q.first_position) + 1, n),
                    .hidden = h,
                    .first_position = q.first_position,
                    .block_ids = q.block_ids});
    seq_request.push_back(r);
  }
  if (seqs.empty()) return;
  const MtpOutput first = layer_.forward(pool_, seqs);
  extend_draft_chains(requests, seq_request, first, H, V, layer_.block_size(), drafts, keep_logits_ ? &logits_ : nullptr,
                      [&](std::span<DraftLink* const> live) {
                        seqs.clear();
                        for (const DraftLink* l : live)
                          seqs.push_back({.tokens = l->token, .hidden = l->hidden, .first_position = l->position,
                                          .block_ids = requests[l->request].block_ids});
                        return layer_.forward(pool_, seqs);
                      });
}

}  // namespace kimi::spec
