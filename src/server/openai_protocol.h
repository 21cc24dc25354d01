#pragma once
// The OpenAI request shapes the server accepts (/v1/completions, /v1/chat/completions), parsed
// and type-checked into what the engine needs. Field names and defaults follow the OpenAI API
// and vLLM's extensions (top_k, min_p, repetition_penalty, ignore_eos, chat_template_kwargs...).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace kimi {

using ojson = nlohmann::ordered_json;

struct CompletionPrompt {  // one prompt of /v1/completions: text or token ids
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct ApiRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool continuous_usage = false;
  SamplingParams params;
  bool max_tokens_given = false;
  int priority = 0;
  std::optional<int> data_parallel_rank;  // the X-data-parallel-rank header: the replica to run on
  std::string request_id;  // optional client-supplied id (vLLM's request_id)

  // /v1/completions
  std::vector<CompletionPrompt> prompts;
  bool echo = false;

  // /v1/chat/completions
  ojson messages;              // validated list of messages
  ojson tools;                 // null or list
  std::string tool_choice = "auto";  // auto | none | required | named
  std::string tool_choice_name;      // for a named choice
  bool parallel_tool_calls = true;   // false: at most one call (enforced with required / named)
  ojson chat_template_kwargs = ojson::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // render the last message open and let the model go on
  bool json_object = false;    // response_format {"type": "json_object"} (also in params.structured)
  bool logprobs_flag = false;  // chat: logprobs is a bool, top_logprobs the count
};

// Both throw ApiError(400, ...) naming the field for malformed or out-of-range input (integers
// are range-checked, never narrowed). The body should come from parse_json_body (json_body.h),
// which bounds its depth.
ApiRequest parse_completion_request(const ojson& body);
ApiRequest parse_chat_request(const ojson& body);

}  // namespace kimi
