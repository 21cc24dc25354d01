#include "spec/eagle3_proposer.h"

#include <string>

#include "common/error.h"

namespace kimi::spec {

Eagle3Proposer::Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, ThreadPool& pool,
                               const Eagle3ProposerOptions& options)
    : pool_(pool),
      target_hidden_(target.hidden_size),
      draft_(draft_dir, target, options.num_blocks, options.block_size, options.target_embedding) {}

Eagle3Proposer::Eagle3Proposer(const std::filesystem::path& draft_dir, const ModelConfig& target, int num_threads,
                               const Eagle3ProposerOptions& options)
    : own_pool_(std::make_unique<ThreadPool>(num_threads)),
      pool_(*own_pool_),
      target_hidden_(target.hidden_size),
      draft_(draft_dir, target, options.num_blocks, options.block_size, options.target_embedding) {}

void Eagle3Proposer::propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(requests.size(), {});
  logits_.assign(keep_logits_ ? requests.size() : 0, {});
  const size_t V = size_t(draft_.target_vocab_size());
  auto keep = [&](size_t request, const Eagle3Output& out, size_t s) {
    if (keep_logits_)
      logits_[request].insert(logits_[request].end(), out.logits.begin() + ptrdiff_t(s * V),
                              out.logits.begin() + ptrdiff_t((s + 1) * V));
  };
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
    if (q.first_position < 0 || int64_t(q.tokens.size()) < q.first_position + q.num_positions + 1)
      throw Error("Eagle3 proposer: request " + q.request_id + " has " + std::to_string(q.tokens.size()) +
                  " tokens; positions [" + std::to_string(q.first_position) + ", " +
                  std::to_string(q.first_position + q.num_positions) + ") need the token after each");
    if (q.hidden_states.size() != layers * n * T)
      throw Error("Eagle3 proposer: request " + q.request_id + " has " + std::to_string(q.hidden_states.size()) +
                  " hidden-state values; expected " + std::to_string(layers) + " layers x " + std::to_string(n) +
                  " positions x " + std::to_string(T));
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
  Eagle3Output out = draft_.forward(pool_, seqs);

  // Greedy chain: draft token k and the draft's own hidden feed position last + k.
  struct Chain {
    size_t request;
    int64_t position;      // where the next token goes
    std::vector<int32_t> token;  // one element: the span the draft reads
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
    for (Chain& c : chains) {
      const ProposeRequest& q = requests[c.request];
      const int64_t block_size = draft_.block_size();
      // A block table that does not reach the next position ends the chain early (fewer drafts).
      if (int64_t(drafts[c.request].size()) >= q.num_drafts || c.position / block_size >= int64_t(q.block_ids.size()))
        continue;
      live.push_back(&c);
      seqs.push_back({.tokens = c.token, .hidden = c.hidden, .from_draft_hidden = true, .first_position = c.position,
                      .block_ids = q.block_ids});
    }
    if (live.empty()) break;
    out = draft_.forward(pool_, seqs);
    for (size_t s = 0; s < live.size(); ++s) {
      Chain& c = *live[s];
      drafts[c.request].push_back(out.argmax[s]);
      keep(c.request, out, s);
      c.token[0] = out.argmax[s];
      c.hidden.assign(out.hidden.begin() + ptrdiff_t(s * H), out.hidden.begin() + ptrdiff_t((s + 1) * H));
      ++c.position;
    }
  }
}

}  // namespace kimi::spec
