#pragma once
// Decides what runs in each engine step (vLLM v1's scheduler): running requests first (a decode
// token each, or the next chunk of a long prefill), then waiting ones in priority/arrival order,
// within --max-num-seqs sequences and --max-num-batched-tokens tokens. When the KV cache runs
// out, the lowest-priority (else newest) running request is preempted: its blocks are freed and
// it goes back to the front of the queue, to be recomputed later.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace kimi {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  bool priority_policy = false;  // false: FCFS (vLLM's default); true: by `priority`, then arrival
};

struct ScheduledChunk {
  Request* request;
  int64_t num_new_tokens;  // tokens [num_computed_tokens, + num_new_tokens) run this step
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Request*> preempted;
  int64_t num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  void add(Request* r);          // enters the waiting queue
  void remove(Request* r);       // from whichever queue holds it; frees its blocks
  SchedulerOutput schedule();
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix-cache accounting for admitted requests (prompt tokens looked up / found).
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

 private:
  bool runs_before(const Request* a, const Request* b) const;
  Request* pick_victim() const;
  void preempt(Request* r);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  int64_t num_preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace kimi
