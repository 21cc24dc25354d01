#pragma once
// Picks a sequence's next token from a row of logits, as vLLM's V1 sampler does: logit_bias,
// min_tokens (stop tokens masked), repetition / frequency / presence penalties, then greedy at
// temperature 0, or temperature, min_p, top_k, top_p and a draw from the sequence's own seeded
// stream. Logprobs are those of the raw model distribution (before any of that processing).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/rng.h"
#include "engine/sampling_params.h"

namespace kimi {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token;
  float logprob;                  // of `token` (raw distribution); NaN unless params.logprobs is set
  std::vector<TokenLogprob> top;  // the params.logprobs most likely tokens, most likely first
};

namespace sampler_detail {
struct Candidate {  // a token while top-k / top-p rank them
  float w;
  int32_t id;
};
}  // namespace sampler_detail

class Sampler {  // one per generated sequence; owns its random stream
 public:
  Sampler(const SamplingParams& p, uint64_t seed, int32_t eos_token_id /* -1: none */);
  Sampler(const SamplingParams& p, uint64_t seed, std::vector<int32_t> eos_token_ids);

  // logits: the sequence's row, used as scratch (overwritten; when greedy, it is left holding
  // the processed logits). prompt / output: the sequence's tokens so far, for the penalties and
  // min_tokens. allowed: a structured-output mask (bit id set: token id may be sampled), applied
  // after the penalties and before temperature / top-k / top-p, so that sampling among the
  // allowed tokens stays exact; empty: no mask. Allocates nothing once warm, except the logprobs
  // it returns.
  SampleResult sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::span<const uint64_t> allowed = {});
  // Speculative decoding: the token at a position where a proposer guessed `draft` (greedily).
  // The same processing as sample(); at temperature 0 the target's argmax, accepted when it
  // equals the draft; otherwise the draft is accepted with probability p(draft) and, when
  // rejected, a token is drawn from p without it (Leviathan et al.'s rule for a one-hot draft
  // distribution), so that the result is distributed exactly as sample()'s.
  SampleResult verify(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::span<const uint64_t> allowed, int32_t draft, bool& accepted);

 private:
  void process(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
               std::span<const uint64_t> allowed);
  SampleResult result(int32_t token);  // with the logprobs asked for, from raw_
  bool weigh(std::span<float> logits);  // logits -> kept weights (temperature, min_p, top-k/p); false: all masked
  int32_t pick(std::span<const float> weights, double u);
  double sum_blocks(std::span<const float> weights);  // fills block_sums_; returns the total
  int32_t pick_summed(std::span<const float> weights, double total, double u);  // with block_sums_ filled
  void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);
  int32_t draw(std::span<float> logits);
  void truncate(std::span<float> weights);  // top-k and top-p: zeroes the weights cut off

  SamplingParams params_;
  Rng rng_;
  std::vector<int32_t> min_tokens_masked_;  // stop_token_ids plus eos (unless ignore_eos)
  // Scratch kept across calls so that a step allocates nothing once warm.
  std::vector<float> raw_;       // the unprocessed row, when logprobs are asked for
  std::vector<int32_t> counts_;  // per-token output counts (vocab-sized, all zero between calls)
  std::vector<uint8_t> seen_;    // per-token "in prompt or output" (vocab-sized, zero between calls)
  std::vector<double> block_sums_;
  std::vector<uint32_t> bin_count_;  // top-k / top-p histograms
  std::vector<double> bin_mass_;
  std::vector<sampler_detail::Candidate> cands_;
};

// log_softmax of a row (float exp, double accumulation) and its k most likely tokens, most
// likely first, ties to the lower id. With logprob_of, also the logprob of token_of.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k, float* logprob_of = nullptr,
                                       int32_t token_of = -1);

int32_t argmax(std::span<const float> logits);  // lowest index among equal maxima

}  // namespace kimi
