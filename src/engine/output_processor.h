#pragma once
// The front end's half of a request (vLLM v1's OutputProcessor): turns the engine core's token
// outputs into what a caller streams: incremental text, stop strings matched across token
// boundaries (which end the request in the core: the caller aborts it there), usage counts and
// latency metrics. The engine core knows nothing of text.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/stop_strings.h"

namespace kimi {

class IncrementalDecoder;
class Tokenizer;

using Clock = std::chrono::steady_clock;

// What a request has produced since its last report (a streaming delta), or in all (at finish).
struct RequestOutput {
  std::string request_id;  // the id given to add_request
  int index = 0;           // which of the n completions
  std::vector<int32_t> token_ids;  // new tokens
  std::string text;                // new text (empty without a tokenizer)
  std::vector<SampleResult> logprobs;                      // per new token, when asked for
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;  // once, with the first output
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  std::string stop_reason;  // the stop string that ended it
  int32_t stop_token = -1;  // or the stop_token_ids entry that did
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // usage so far
  std::string error;        // set when the request failed (e.g. rejected at admission)
  int error_status = 500;   // with error: the HTTP status a server answers it with
  // A prefill for a remote decode that ended holding its KV: where the decoder finds it.
  std::optional<KvTransferParams> kv_transfer_params;
};

class OutputProcessor {
 public:
  OutputProcessor(const Tokenizer* tokenizer, Metrics& metrics);
  ~OutputProcessor();

  // engine_id: the core's id of completion `index` of the caller's request `parent_id`.
  void add_request(const std::string& engine_id, const std::string& parent_id, int index, int64_t prompt_tokens,
                   const SamplingParams& params);
  // One core output in; the caller's delta out. Sets *stopped_by_string when a stop string
  // ended the request here (the core does not know yet: the caller finishes it there).
  RequestOutput process(const EngineCoreOutput& o, bool* stopped_by_string);
  // The final output of a request ended from outside (abort), and its state dropped.
  RequestOutput abort(const std::string& engine_id);
  bool has(const std::string& engine_id) const { return states_.count(engine_id) > 0; }
  const std::string& parent_of(const std::string& engine_id) const { return states_.at(engine_id).parent_id; }

 private:
  struct State {
    std::string parent_id;
    int index = 0;
    int64_t prompt_tokens = 0, completion_tokens = 0;
    SamplingParams params;
    std::unique_ptr<IncrementalDecoder> detokenizer;  // null without a tokenizer
    std::unique_ptr<StopStringMatcher> stop_matcher;  // null without stop strings
    std::vector<std::vector<TokenLogprob>> prompt_logprobs;  // gathered until the first token
    Clock::time_point arrival = Clock::now();
    std::optional<Clock::time_point> last_token_time;
  };
  RequestOutput finish(const std::string& engine_id, State& st, RequestOutput o);

  const Tokenizer* tokenizer_;
  Metrics& metrics_;
  std::map<std::string, State> states_;
};

}  // namespace kimi
