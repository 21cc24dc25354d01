#pragma once
// The serving engine, synchronous (vLLM's LLMEngine over its EngineCore): requests in, streaming
// outputs back. Each step() is schedule -> executor.execute_model(plain-data scheduler output)
// -> scheduler.update_from_output(...) -> the output processor (text, stop strings). Not
// thread-safe by itself; AsyncEngine runs it on its own thread for concurrent callers.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/kv_cache_manager.h"
#include "engine/metrics.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "spec/spec_config.h"

namespace kimi {

class Tokenizer;

struct EngineConfig {
  SchedulerConfig scheduler;     // max_model_len <= 0: the model's max_position_embeddings
  int64_t block_size = 16;
  size_t kv_cache_bytes = 0;     // 0: kv_cache_memory_fraction of physical memory
  double kv_cache_memory_fraction = 0.25;
  int64_t num_kv_blocks_override = 0;  // > 0: exactly this many blocks, whatever the bytes say
  bool enable_prefix_caching = true;
  uint64_t seed = 0;             // for requests without their own seed
  // The cache's element type (--kv-cache-dtype; `kimi serve` defaults to auto = bfloat16).
  // float32 here keeps library callers and tests bit-exact with Model::forward's default cache.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Float32;
  spec::SpeculativeConfig speculative;  // --speculative-config; disabled by default
  // Disaggregated prefill (--kv-transfer-config): builds the KV connector once the KV storage
  // exists. Empty: none; requests with kv_transfer_params are refused.
  KvConnectorFactory kv_connector_factory;
  // Data parallelism (engine/dp_executor.h): this engine is one replica's scheduler and block
  // table. Every step() runs a step on its replica, a dummy one when nothing is scheduled, so
  // that the replicas' MoE exchanges meet. executor_factory builds the replica's executor
  // (null: the model in this process).
  bool lockstep = false;
  std::function<std::unique_ptr<Executor>(const KvCacheConfig&)> executor_factory;
};

// The KV cache's bytes: kv_cache_bytes, or kv_cache_memory_fraction of this machine's RAM.
size_t kv_cache_budget_bytes(const EngineConfig& c);


struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t preemptions = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // prompt tokens looked up / found in the cache
  int64_t prompt_tokens = 0, generation_tokens = 0;
  // Speculative decoding: verification steps with drafts, draft tokens verified, accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  double spec_acceptance_length() const {  // 1 + accepted / drafts (0: no drafts yet)
    return spec_drafts ? 1.0 + double(spec_accepted_tokens) / double(spec_drafts) : 0.0;
  }
  // The sum of several engines' (data-parallel replicas).
  EngineStats& operator+=(const EngineStats& o) {
    running += o.running, waiting += o.waiting;
    kv_blocks_total += o.kv_blocks_total, kv_blocks_used += o.kv_blocks_used, kv_blocks_cached += o.kv_blocks_cached;
    preemptions += o.preemptions;
    prefix_queries += o.prefix_queries, prefix_hits += o.prefix_hits;
    prompt_tokens += o.prompt_tokens, generation_tokens += o.generation_tokens;
    spec_drafts += o.spec_drafts, spec_draft_tokens += o.spec_draft_tokens, spec_accepted_tokens += o.spec_accepted_tokens;
    return *this;
  }
};

// A finished completion of the offline API.
struct Completion {
  std::vector<int32_t> token_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::None;
  std::vector<SampleResult> logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;
};

class Engine {
 public:
  Engine(Model& model, const Tokenizer* tokenizer, EngineConfig config);
  ~Engine();

  const EngineConfig& config() const { return config_; }
  int64_t max_model_len() const { return config_.scheduler.max_model_len; }

  // Checks a request without queuing it: throws kimi::Error with a user-facing message (prompt
  // empty or longer than max_model_len, bad sampling parameters). Reads only immutable state,
  // so other threads may call it while a step runs.
  void validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // Validates and queues; params.n > 1 makes n completions of the same prompt.
  void add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params, int priority = 0);
  // Stops a request (all its completions); its final output, finish_reason abort, comes from
  // the next step(). False if no such request is in flight.
  bool abort_request(const std::string& id);
  // Runs one step; returns the outputs of every request that progressed or finished.
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return scheduler_.has_unfinished() || !parked_.empty() || !pending_.empty(); }
  // Whether a step() now would do anything: something to schedule or to report, or a KV
  // connector event (a load finished, held blocks released). Requests only waiting for remote
  // KV do not count, so an idle loop can sleep until the connector wakes it.
  bool has_work() const;
  // A connector holds blocks or runs transfers: call step() now and then even without work, so
  // that its timeouts are acted on.
  bool has_kv_transfers() const { return connector_ && connector_->busy(); }
  // Called from the connector's threads when has_work() may have become true (null: none).
  void set_kv_wakeup(std::function<void()> wake);
  KvConnector* kv_connector() { return connector_.get(); }
  // While idle: whether the executor's processes are still there (Executor::check_alive).
  void check_alive() { executor_->check_alive(); }

  // Offline batch generation (vLLM's LLM.generate): runs every prompt to completion.
  // Result [i][j] is completion j of prompt i.
  std::vector<std::vector<Completion>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                                const SamplingParams& params);

  EngineStats stats() const;
  const KvCacheManager& kv_cache() const { return kv_; }
  const Scheduler& scheduler() const { return scheduler_; }
  Metrics& metrics() { return metrics_; }

 private:
  void release_parked();
  // Acts on the connector's events: released holds go back to the pool, finished loads make
  // their requests schedulable (or recompute, or fail them).
  void poll_kv_connector();

  Model& model_;
  EngineConfig config_;
  int64_t draft_kv_bytes_per_token_;  // a draft model's own KV per token (read once from its config)
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<const structured::TokenVocab> vocab_;  // null without a tokenizer
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<KvConnector> connector_;  // after executor_: it reads and writes its KV storage
  Metrics metrics_;
  OutputProcessor processor_;
  std::map<std::string, std::vector<std::string>> children_;  // caller's id -> unfinished engine ids
  std::vector<std::unique_ptr<Request>> parked_;  // completions 2..n waiting for completion 1's prompt blocks
  std::vector<RequestOutput> pending_;  // outputs produced outside step() (aborts)
  uint64_t next_arrival_ = 0;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
};

}  // namespace kimi
