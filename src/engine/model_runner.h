#pragma once
// Runs the model for one scheduler step (vLLM v1's GPUModelRunner, here on the CPU): owns the
// paged KV storage and, per request the executor has been told about, what sampling needs (the
// prompt, the tokens sampled so far, the settings and the seeded stream). It turns a plain-data
// SchedulerOutput into one batched forward pass and samples the next token of every request that
// reached its end, returning plain data. It never sees the scheduler's Request objects.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler_output.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "structured/token_mask.h"

namespace kimi {

struct KvCacheConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  KvCacheDtype dtype = KvCacheDtype::Float32;
};

class ModelRunner {
 public:
  // vocab: the tokens' bytes, for structured-output masks (null: requests with a structured
  // spec are refused).
  ModelRunner(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab = nullptr);

  ModelRunnerOutput execute(const SchedulerOutput& so);
  KvStorage& kv_storage() { return storage_; }
  int64_t num_requests() const { return int64_t(states_.size()); }

 private:
  struct RequestState {
    std::vector<int32_t> prompt, output;
    SamplingParams params;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<structured::GrammarMatcher> matcher;  // with a structured spec
    bool constrained = false;  // the spec applies from now on (a reasoning model: after </think>)
    int64_t prompt_logprobs_done = 1;  // prompt positions whose logprobs went out (a resumed
                                       // preemption recomputes them: not sent twice)
  };
  void add_prompt_logprobs(RequestState& st, const ScheduledRequest& s, const float* logits,
                           RequestRunnerOutput& out) const;

  Model& model_;
  KvStorage storage_;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<const structured::TokenVocab> vocab_;
  std::map<std::string, RequestState> states_;
};

}  // namespace kimi
