#pragma once
// A generation request as the engine tracks it, from arrival to finish, and what it reports back.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/stop_strings.h"

namespace kimi {

class IncrementalDecoder;

enum class RequestStatus { Waiting, Running, Preempted, Finished };
enum class FinishReason { None, Stop, Length, Abort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort" (OpenAI's names)

using Clock = std::chrono::steady_clock;

// What a request has produced since its last report (a streaming delta), or in all (at finish).
struct RequestOutput {
  std::string request_id;  // the id given to add_request
  int index = 0;           // which of the n completions
  std::vector<int32_t> token_ids;  // new tokens
  std::string text;                // new text (empty without a tokenizer)
  std::vector<SampleResult> logprobs;                  // per new token, when asked for
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;  // once, with the first output
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string stop_reason;  // the stop string that ended it
  int32_t stop_token = -1;  // or the stop_token_ids entry that did
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // usage so far
  std::string error;        // set when the request failed (e.g. rejected at admission)
};

struct Request {
  std::string id;        // unique inside the engine (parent id plus completion index)
  std::string parent_id; // the id the caller used
  int index = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  SamplingParams params;
  int priority = 0;  // lower runs first (vLLM's convention)
  uint64_t arrival = 0;  // admission order, for FCFS ties
  Clock::time_point arrival_time = Clock::now();
  std::optional<Clock::time_point> first_token_time, last_token_time;

  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  std::string stop_reason;
  int32_t stop_token = -1;
  int64_t num_computed_tokens = 0;  // tokens whose KV rows are in the cache
  int64_t num_cached_tokens = 0;    // of the prompt, found in the prefix cache at admission
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;  // chain hashes of the full blocks of prompt + output
  int64_t blocks_registered = 0;       // leading blocks of block_table offered to the prefix cache
  int64_t num_preemptions = 0;

  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<IncrementalDecoder> detokenizer;  // null without a tokenizer
  std::unique_ptr<StopStringMatcher> stop_matcher;  // null without stop strings
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;
  bool prompt_logprobs_sent = false;

  Request();
  ~Request();
  int64_t num_tokens() const { return int64_t(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i - int64_t(prompt.size()))];
  }
  bool finished() const { return status == RequestStatus::Finished; }
};

}  // namespace kimi
