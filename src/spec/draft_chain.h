#pragma once
// What the one-layer draft models (Eagle3, MTP) share in proposing: the checks on a request's
// verified positions, and the greedy chain after the first draft step, in which each request's
// last draft token and the draft's own hidden state feed the next position until it has its
// drafts or its block table ends. The model-specific parts (the first step's inputs, the
// sequence type the draft reads) stay with each proposer.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "spec/proposer.h"

namespace kimi::spec {

// Throws unless q's tokens hold the token after each of its verified positions and its hidden
// states have `expected_hidden` values (`shape` says what they should be, for the message).
inline void check_propose_request(const char* who, const ProposeRequest& q, size_t expected_hidden,
                                  const std::string& shape) {
  if (q.first_position < 0 || int64_t(q.tokens.size()) < q.first_position + q.num_positions + 1)
    throw Error(std::string(who) + ": request " + q.request_id + " has " + std::to_string(q.tokens.size()) +
                " tokens; positions [" + std::to_string(q.first_position) + ", " +
                std::to_string(q.first_position + q.num_positions) + ") need the token after each");
  if (q.hidden_states.size() != expected_hidden)
    throw Error(std::string(who) + ": request " + q.request_id + " has " + std::to_string(q.hidden_states.size()) +
                " hidden-state values; expected " + shape);
}

// One request's chain: where its next draft token goes, the token the draft reads there, and the
// draft's hidden state that comes with it.
struct DraftLink {
  size_t request;
  int64_t position;
  std::vector<int32_t> token;  // one element: the span the draft reads
  std::vector<float> hidden;
};

// `first` is the draft's output for step 0, one row per entry of `seq_request` (the request each
// row belongs to). Appends each request's first draft, then calls `forward(live links)` (which
// returns the same output type, one row per link) one position at a time. With `kept_logits`
// (null: none; one entry per request), the logit row [V] of every token that became a draft is
// appended to its request's entry. Out has argmax [rows], hidden [rows, H] and logits [rows, V].
template <class Out, class Forward>
void extend_draft_chains(std::span<const ProposeRequest> requests, const std::vector<size_t>& seq_request,
                         const Out& first, size_t H, size_t V, int64_t block_size,
                         std::vector<std::vector<int32_t>>& drafts, std::vector<std::vector<float>>* kept_logits,
                         Forward&& forward) {
  const auto row = [H](const Out& out, size_t s) {
    return std::vector<float>(out.hidden.begin() + ptrdiff_t(s * H), out.hidden.begin() + ptrdiff_t((s + 1) * H));
  };
  const auto keep = [&](size_t request, const Out& out, size_t s) {
    if (kept_logits)
      (*kept_logits)[request].insert((*kept_logits)[request].end(), out.logits.begin() + ptrdiff_t(s * V),
                                     out.logits.begin() + ptrdiff_t((s + 1) * V));
  };
  std::vector<DraftLink> links;
  for (size_t s = 0; s < seq_request.size(); ++s) {
    const ProposeRequest& q = requests[seq_request[s]];
    if (q.num_drafts <= 0) continue;
    drafts[seq_request[s]].push_back(first.argmax[s]);
    keep(seq_request[s], first, s);
    links.push_back({seq_request[s], q.first_position + q.num_positions, {first.argmax[s]}, row(first, s)});
  }
  while (true) {
    std::vector<DraftLink*> live;
    for (DraftLink& l : links) {
      const ProposeRequest& q = requests[l.request];
      // A block table that does not reach the next position ends the chain early (fewer drafts).
      if (int64_t(drafts[l.request].size()) < q.num_drafts && l.position / block_size < int64_t(q.block_ids.size()))
        live.push_back(&l);
    }
    if (live.empty()) return;
    const Out out = forward(std::span<DraftLink* const>(live));
    for (size_t s = 0; s < live.size(); ++s) {
      DraftLink& l = *live[s];
      drafts[l.request].push_back(out.argmax[s]);
      keep(l.request, out, s);
      l.token[0] = out.argmax[s];
      l.hidden = row(out, s);
      ++l.position;
    }
  }
}

}  // namespace kimi::spec
