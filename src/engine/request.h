#pragma once
// A generation request as the engine core schedules it (vLLM v1's Request): its tokens, how many
// of them have KV rows in the cache, and why it finished. Detokenisation, stop strings and
// streaming are the front end's (output_processor.h); block ids are the KV cache manager's.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace kimi {

// WaitingForRemoteKvs: blocks allocated, their KV arriving from a prefill instance; not scheduled.
enum class RequestStatus { Waiting, WaitingForRemoteKvs, Running, Preempted, Finished };
// A do_remote_prefill request's pull: not started, in flight, or over (loaded, or given up and
// recomputed locally).
enum class RemoteKvState { None, Loading, Done };
enum class FinishReason { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort" (OpenAI's names)

struct Request {
  std::string id;  // unique inside the engine
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  SamplingParams params;
  uint64_t seed = 0;     // of the request's sampling stream (the executor draws from it)
  int priority = 0;      // lower runs first (vLLM's convention)
  uint64_t arrival = 0;  // admission order, for FCFS ties
  std::vector<int32_t> eos_token_ids;  // the model's; finish the request unless ignore_eos

  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  int32_t stop_token = -1;          // the stop_token_ids entry that finished it
  int64_t num_computed_tokens = 0;  // tokens whose KV rows are in the cache
  int64_t num_cached_tokens = 0;    // of the prompt, found in the prefix cache at admission
  int64_t num_preemptions = 0;
  bool sent_to_executor = false;    // the executor holds its NewRequestData
  std::vector<int32_t> draft_token_ids;  // proposed last step, to verify in the next
  RemoteKvState remote_kv = RemoteKvState::None;
  bool shares_kv = true;  // its blocks may enter the prefix cache (false: KV from an unlisted producer)

  int64_t num_tokens() const { return int64_t(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i - int64_t(prompt.size()))];
  }
  bool finished() const { return status == RequestStatus::Finished; }
};

}  // namespace kimi
