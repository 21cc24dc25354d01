#include "spec/ngram_proposer.h"

#include <algorithm>

namespace kimi::spec {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int64_t min_n, int64_t max_n, int64_t num_drafts) {
  const int64_t len = int64_t(tokens.size());
  if (num_drafts <= 0 || min_n < 1) return {};
  max_n = std::min(max_n, len - 1);  // the suffix itself must leave room for an earlier occurrence
  // One backward scan: for each earlier end position e (the match is tokens[e - n + 1 .. e] and
  // the drafts start at e + 1), the length of the common suffix with the sequence's end decides
  // which n it serves. The longest n wins; among its occurrences, the latest one followed by
  // num_drafts tokens (in text that repeats with a short period, the very latest is followed by
  // fewer), else the latest.
  int64_t best_n = 0, best_end = -1;
  bool best_full = false;
  for (int64_t e = len - 2; e >= 0 && !(best_n == max_n && best_full); --e) {
    int64_t n = 0;
    while (n < max_n && e - n >= 0 && tokens[size_t(e - n)] == tokens[size_t(len - 1 - n)]) ++n;
    const bool full = len - 1 - e >= num_drafts;
    if (n >= min_n && (n > best_n || (n == best_n && full && !best_full))) {
      best_n = n;
      best_end = e;
      best_full = full;
    }
  }
  if (best_end < 0) return {};
  const int64_t first = best_end + 1, count = std::min(num_drafts, len - first);
  return {tokens.begin() + first, tokens.begin() + first + count};
}

void NgramProposer::propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(requests.size(), {});
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].num_drafts > 0) drafts[i] = ngram_lookup(requests[i].tokens, min_n_, max_n_, requests[i].num_drafts);
}

}  // namespace kimi::spec
