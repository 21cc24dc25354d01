#pragma once
// Decides what runs in each engine step (vLLM v1's scheduler) and books its results.
// schedule(): running requests first (a decode token each, or the next chunk of a long prefill),
// then waiting ones in priority/arrival order, within --max-num-seqs sequences and
// --max-num-batched-tokens tokens; when the KV cache runs out, the lowest-priority (else newest)
// running request is preempted: its blocks are freed and it goes back to the queue, to be
// recomputed later. A decoding request with draft tokens from the last step verifies them in the
// same step (its last token and the drafts, counted against the token budget). The result is plain data (scheduler_output.h) for the executor.
// update_from_output(): advances each request by what the executor computed and sampled, checks
// the token-level stops (EOS, stop_token_ids, max_tokens, max_model_len), registers the blocks
// whose tokens are final in the prefix cache (accepted drafts included, rejected ones never),
// and frees finished requests.
// Stop strings are the front end's (output_processor.h): it calls finish_requests().
// Disaggregated prefill (kv_connector.h): a do_remote_prefill request is first given blocks for
// its prompt's full blocks past any prefix-cache hit, as external tokens, and waits
// (WaitingForRemoteKvs, never scheduled) while a connector fills them; on_kv_load_done() queues
// it again to compute the rest (at least its last prompt token), or after a failed load to
// recompute all. A do_remote_decode request that ends at max_tokens keeps its blocks held: they
// leave the manager for the producer's registry (take_holds()), to be released by the engine.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/kv_connector.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace kimi {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  bool priority_policy = false;  // false: FCFS (vLLM's default); true: by `priority`, then arrival
  // Speculative decoding: room kept ahead of each request for the draft tokens a proposer may
  // write (its num_speculative_tokens); 0: none.
  int64_t num_lookahead_tokens = 0;
};

// What a step did to one request, for the front end (vLLM's EngineCoreOutput).
struct EngineCoreOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<SampleResult> logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;
  FinishReason finish_reason = FinishReason::None;
  int32_t stop_token = -1;
  int64_t num_cached_tokens = 0;
  bool finished() const { return finish_reason != FinishReason::None; }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  // Queues a request (its id must be new).
  void add_request(std::unique_ptr<Request> r);
  // Ends requests from outside (aborts, stop strings): frees their blocks at once. Unknown ids
  // are ignored. Returns the ids that were found.
  std::vector<std::string> finish_requests(const std::vector<std::string>& ids, FinishReason reason);

  SchedulerOutput schedule();
  // Loads that schedule() started (each request's blocks are allocated), for the connector.
  std::vector<KvLoadJob> take_kv_loads() { return std::exchange(kv_loads_, {}); }
  // Blocks of finished do_remote_decode requests, detached from the manager, still held.
  std::vector<KvHoldRequest> take_holds() { return std::exchange(holds_, {}); }
  // A load's end. ok: the request becomes schedulable, its external tokens computed; failed and
  // recompute: its blocks are freed and it starts over; failed and !recompute: returns true, the
  // caller finishes it with an error. A request that ended while loading gets its blocks back to
  // the pool only now (the transfer may have been writing them).
  bool on_kv_load_done(const std::string& id, bool ok, bool recompute);
  int64_t num_loading() const { return num_loading_; }
  bool has_schedulable() const { return !running_.empty() || !waiting_.empty(); }
  std::vector<EngineCoreOutput> update_from_output(const SchedulerOutput& so, const ModelRunnerOutput& out);

  const Request* request(const std::string& id) const;
  bool has_unfinished() const { return !requests_.empty(); }
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prefix-cache accounting for admitted requests (prompt tokens looked up / found).
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }
  const KvCacheManager& kv_cache() const { return kv_; }

 private:
  bool runs_before(const Request* a, const Request* b) const;
  void enqueue(Request* r);
  Request* pick_victim() const;
  void preempt(Request* r);
  void finish(Request& r, FinishReason reason);
  // Starts r's remote KV load if it needs one; false: not enough free blocks yet.
  bool start_remote_load(Request& r);
  ScheduledRequest make_scheduled(Request& r, int64_t n, int64_t num_drafts, SchedulerOutput& so);
  // The drafts r can verify this step: those proposed, within max_tokens, max_model_len and budget.
  int64_t drafts_to_verify(const Request& r, int64_t budget) const;
  int64_t lookahead(const Request& r, int64_t n) const;
  // Whether r's newest token ends it (EOS, stop_token_ids, max_tokens, max_model_len).
  FinishReason check_stop(Request& r) const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::map<std::string, std::unique_ptr<Request>> requests_;  // unfinished, by id
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  std::vector<std::string> finished_since_last_step_;  // told to the executor in the next output
  std::vector<KvLoadJob> kv_loads_;
  std::vector<KvHoldRequest> holds_;
  std::map<std::string, std::vector<int32_t>> orphaned_loads_;  // ended while loading: blocks, tail first
  int64_t num_loading_ = 0;
  int64_t num_preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace kimi
