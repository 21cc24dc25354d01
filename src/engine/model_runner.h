#pragma once
// Runs the model for one scheduler step (vLLM v1's GPUModelRunner, here on the CPU): owns the
// paged KV storage and, per request the executor has been told about, what sampling needs (the
// prompt, the tokens sampled so far, the settings and the seeded stream). It turns a plain-data
// SchedulerOutput into one batched forward pass and samples the next token of every request that
// reached its end, returning plain data. It never sees the scheduler's Request objects.
// With speculative decoding, a request's draft tokens run after its last token in the same
// forward; each is accepted or replaced by the rejection rule (Sampler::verify), a bonus token
// follows when all pass, and the proposer then drafts the next step's tokens from what was
// verified (and fills its own cache with those positions).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler_output.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "spec/proposer.h"
#include "structured/token_mask.h"

namespace kimi {

struct KvCacheConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  KvCacheDtype dtype = KvCacheDtype::Float32;
};

// Where draft tokens come from, and how many per step (none: no speculative decoding).
struct SpeculationSetup {
  std::unique_ptr<spec::Proposer> proposer;
  int64_t num_speculative_tokens = 0;
  int64_t disable_by_batch_size = 0;  // > 0: no drafts while more requests than this are scheduled
};

class ModelRunner {
 public:
  // vocab: the tokens' bytes, for structured-output masks (null: requests with a structured
  // spec are refused).
  ModelRunner(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab = nullptr,
              SpeculationSetup speculation = {});

  // Runs the step. Under data parallelism a step that fails before its forward pass began still
  // runs the model's dummy step (Model::forward_dummy) before the error goes up, so that the
  // other replicas' exchanges are met; an empty step runs none (the engine's lockstep does).
  ModelRunnerOutput execute(const SchedulerOutput& so);
  // A step with nothing scheduled under data parallelism: the model's dummy step.
  void execute_dummy() { model_.forward_dummy(); }
  KvStorage& kv_storage() { return storage_; }
  int64_t num_requests() const { return int64_t(states_.size()); }

 private:
  struct RequestState {
    std::vector<int32_t> tokens;  // the prompt, then every output token verified so far
    size_t prompt_len = 0;
    std::span<const int32_t> prompt() const { return {tokens.data(), prompt_len}; }
    std::span<const int32_t> output() const { return std::span<const int32_t>(tokens).subspan(prompt_len); }
    SamplingParams params;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<structured::GrammarMatcher> matcher;  // with a structured spec
    bool constrained = false;  // the spec applies from now on (a reasoning model: after </think>)
    int64_t prompt_logprobs_done = 1;  // prompt positions whose logprobs went out (a resumed
                                       // preemption recomputes them: not sent twice)
  };
  ModelRunnerOutput execute_step(const SchedulerOutput& so);
  void add_prompt_logprobs(RequestState& st, const ScheduledRequest& s, const float* logits,
                           RequestRunnerOutput& out) const;
  // Samples (or verifies drafts and samples) from the request's logit rows; returns the number of
  // drafts accepted.
  int64_t sample(RequestState& st, const ScheduledRequest& s, const float* rows, RequestRunnerOutput& out);
  void propose(const SchedulerOutput& so, const ForwardResult& fr, const std::vector<int64_t>& verified,
               ModelRunnerOutput& out);

  Model& model_;
  KvStorage storage_;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<const structured::TokenVocab> vocab_;
  std::map<std::string, RequestState> states_;
  SpeculationSetup spec_;
  std::vector<int64_t> proposer_layers_;  // captured for the proposer, after the scheduler's own
};

}  // namespace kimi
