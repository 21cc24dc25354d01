#pragma once
// Where draft tokens come from (vLLM v1's proposers: NgramProposer, EagleProposer). The model
// runner calls a Proposer once per step, after the target's forward and the verification, with
// each scheduled request's verified positions of this step; it returns, for the requests asked
// to, the draft tokens the next step verifies. A proposer that runs a draft model keeps that
// model's KV in rows addressed by the target's block table (the same block ids, the same
// positions), so the KV cache manager's allocation, lookahead, rollback and prefix cache cover
// both caches at once.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kimi::spec {

// One request's part of a step, as the proposer sees it.
struct ProposeRequest {
  std::string request_id;
  // Every token of the sequence known now: prompt, verified outputs and this step's newly
  // sampled token(s) (so tokens.size() > first_position + num_positions when it sampled).
  std::span<const int32_t> tokens;
  // Positions [first_position, first_position + num_positions) had their KV computed and
  // verified by the target this step (a prefill chunk, or the last token plus the accepted drafts).
  int64_t first_position = 0;
  int64_t num_positions = 0;
  // Target hidden states of those positions, [capture_layers().size()][num_positions][hidden]:
  // the rows of this step's capture, rejected drafts' rows already removed. Empty when the
  // proposer captures none.
  std::span<const float> hidden_states;
  std::span<const int32_t> block_ids;  // the request's block table (covers the lookahead)
  int64_t num_drafts = 0;  // tokens to propose after tokens.back(); 0: fill caches only
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Target layers whose input hidden states the proposer reads (our capture convention:
  // num_hidden_layers = the last layer's output, before the final norm). Empty: none.
  virtual std::vector<int64_t> capture_layers() const { return {}; }
  // drafts[i] receives up to requests[i].num_drafts tokens (fewer, or none, when the proposer
  // has no good guess). Called for every scheduled request, also those proposing nothing, so a
  // draft model's cache follows the target's.
  virtual void propose(std::span<const ProposeRequest> requests, std::vector<std::vector<int32_t>>& drafts) = 0;
};

}  // namespace kimi::spec
