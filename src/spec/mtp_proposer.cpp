#include "spec/mtp_proposer.h"

#include <string>

#include "common/error.h"
#include "model/ops.h"

namespace kimi::spec {

MtpProposer::MtpProposer(const std::filesystem::path& target_dir, const ModelConfig& target, ThreadPool& pool,
                         const MtpProposerOptions& options)
    : pool_(pool),
      layer_(target_dir, target, options.num_blocks, options.block_size, options.target_embedding),
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
  auto keep = [&](size_t request, const MtpOutput& out, size_t s) {
    if (keep_logits_)
      logits_[request].insert(logits_[request].end(), out.logits.begin() + ptrdiff_t(s * V),
                              out.logits.begin() + ptrdiff_t((s + 1) * V));
  };

  // Step 0: every verified position i with token i+1 and the target's normed state of i.
  std::vector<std::vector<float>> normed;
  std::vector<MtpSequence> seqs;
  std::vector<size_t> seq_request;
  normed.reserve(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const ProposeRequest& q = requests[r];
    if (q.num_positions <= 0) continue;
    const size_t n = size_t(q.num_positions);
    if (q.first_position < 0 || int64_t(q.tokens.size()) < q.first_position + q.num_positions + 1)
      throw Error("MTP proposer: request " + q.request_id + " has " + std::to_string(q.tokens.size()) +
                  " tokens; positions [" + std::to_string(q.first_position) + ", " +
                  std::to_string(q.first_position + q.num_positions) + ") need the token after each");
    if (q.hidden_states.size() != n * H)
      throw Error("MTP proposer: request " + q.request_id + " has " + std::to_string(q.hidden_states.size()) +
                  " hidden-state values; expected " + std::to_string(n) + " positions x " + std::to_string(H));
    std::vector<float>& h = normed.emplace_back(n * H);
    rms_norm_to(q.hidden_states.data(), h.data(), int64_t(n), int64_t(H), final_norm_.data(), eps);
    seqs.push_back({.tokens = q.tokens.subspan(size_t(q.first_position) + 1, n),
                    .hidden = h,
                    .first_position = q.first_position,
                    .block_ids = q.block_ids});
    seq_request.push_back(r);
  }
  if (seqs.empty()) return;
  MtpOutput out = layer_.forward(pool_, seqs);

  // Greedy chain: draft token k and the layer's own output feed position last + k.
  struct Chain {
    size_t request;
    int64_t position;            // where the next token goes
    std::vector<int32_t> token;  // one element: the span the layer reads
    std::vector<float> hidden;
  };
  std::vector<Chain> chains;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const ProposeRequest& q = requests[seq_request[s]];
    if (q.num_drafts <= 0) continue;
    drafts[seq_request[s]].push_back(out.argmax[s]);
    keep(seq_request[s], out, s);
    chains.push_back({seq_request[s], q.first_position + q.num_positions, {out.argmax[s]},
                      std::vector<float>(out.hidden.begin() + ptrdiff_t(s * H), out.hidden.begin() + ptrdiff_t((s + 1) * H))});
  }
  while (true) {
    std::vector<Chain*> live;
    seqs.clear();
    for (Chain& ch : chains) {
      const ProposeRequest& q = requests[ch.request];
      // A block table that does not reach the next position ends the chain early (fewer drafts).
      if (int64_t(drafts[ch.request].size()) >= q.num_drafts || ch.position / layer_.block_size() >= int64_t(q.block_ids.size()))
        continue;
      live.push_back(&ch);
      seqs.push_back({.tokens = ch.token, .hidden = ch.hidden, .first_position = ch.position, .block_ids = q.block_ids});
    }
    if (live.empty()) break;
    out = layer_.forward(pool_, seqs);
    for (size_t s = 0; s < live.size(); ++s) {
      Chain& ch = *live[s];
      drafts[ch.request].push_back(out.argmax[s]);
      keep(ch.request, out, s);
      ch.token[0] = out.argmax[s];
      ch.hidden.assign(out.hidden.begin() + ptrdiff_t(s * H), out.hidden.begin() + ptrdiff_t((s + 1) * H));
      ++ch.position;
    }
  }
}

}  // namespace kimi::spec
