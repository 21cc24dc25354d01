#pragma once
// Prompt-lookup drafts (vLLM's method "ngram"): no model. The sequence's last n tokens, for n
// from prompt_lookup_max down to prompt_lookup_min, are looked for earlier in the sequence (prompt
// and output); at the latest earlier occurrence of the longest n that has one (preferring one
// followed by enough tokens), the tokens that followed it are the drafts. Pays off on text that repeats its context (code edits, quoting,
// summaries); proposes nothing otherwise.
#include <cstdint>
#include <span>
#include <vector>

#include "spec/proposer.h"

namespace kimi::spec {

// Up to num_drafts tokens following the latest earlier occurrence (the latest followed by
// num_drafts tokens, if any) of tokens' longest suffix of length in [min_n, max_n]; empty when
// none occurs.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int64_t min_n, int64_t max_n, int64_t num_drafts);

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {}
  void propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) override;

 private:
  int64_t min_n_, max_n_;
};

}  // namespace kimi::spec
