#pragma once
// The plain data that crosses between the scheduler and the executor each step (vLLM v1's
// SchedulerOutput and ModelRunnerOutput). Only values: ids, token ids, block ids, counts,
// sampling settings. Nothing here points into the scheduler's memory, so an executor in another
// process or on another machine receives exactly what an in-process one does.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace kimi {

// A request the executor has not seen before: what it keeps for sampling until the request
// finishes (the prompt for penalties and prompt logprobs, the settings, the seed of its stream).
struct NewRequestData {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  uint64_t seed = 0;
};

// Rows that replace the token embeddings at some positions of this step's tokens (the vision
// encoder's output for image placeholder tokens). values: [offsets.size(), hidden_size].
struct InputEmbeddings {
  std::vector<int64_t> offsets;  // indices into ScheduledRequest::token_ids
  std::vector<float> values;
};

// One request's part of a step.
struct ScheduledRequest {
  std::string request_id;
  int64_t num_computed_tokens = 0;   // KV rows already in the cache; token_ids start there
  std::vector<int32_t> token_ids;    // tokens to run this step
  std::vector<int32_t> draft_token_ids;  // speculative tokens run after token_ids and verified
  InputEmbeddings embeddings;
  std::vector<int32_t> block_ids;    // the request's whole block table, in position order
  bool sample = false;  // token_ids end at the request's last known token: sample the next one
};

struct SchedulerOutput {
  std::vector<NewRequestData> new_requests;  // scheduled for the first time this step
  std::vector<ScheduledRequest> scheduled;
  // Requests that ended (finished, aborted) since the last step: the executor drops their state.
  std::vector<std::string> finished_request_ids;
  // Hidden states to return: those entering these layers (num_hidden_layers: after the last),
  // for every scheduled token. Empty: none.
  std::vector<int64_t> capture_hidden_layers;
  int64_t num_scheduled_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

// What the executor returns for one scheduled request, in the order of SchedulerOutput::scheduled.
struct RequestRunnerOutput {
  std::string request_id;
  std::vector<int32_t> sampled_token_ids;  // empty for a prefill chunk that stops short of the end
  std::vector<SampleResult> logprobs;      // per sampled token, when the request asks for them
  // Per prompt position covered by this step (after the first prompt token), when asked for:
  // the actual next prompt token's logprob first, then the top-k.
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;
  // [capture_hidden_layers.size()][token_ids.size()][hidden_size], when asked for.
  std::vector<float> hidden_states;
  // With speculative decoding: sampled_token_ids are the accepted drafts, then the token that
  // replaced the first rejected one or the bonus token; draft_token_ids are the proposer's guesses
  // for the next step (verified then, after the last sampled token).
  int64_t num_accepted_drafts = 0;
  std::vector<int32_t> draft_token_ids;
};

struct ModelRunnerOutput {
  std::vector<RequestRunnerOutput> requests;
};

}  // namespace kimi
