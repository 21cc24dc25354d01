#pragma once
// OpenAI's Responses API (POST /v1/responses) on the chat machinery (chat_bridge.h), mapped as
// vLLM maps it: instructions -> a system message first; input as a string (one user message) or
// items: message items (input_text / output_text parts; role user, assistant, system or
// developer), function_call items (-> the assistant's tool_calls, call_id as the call's id),
// function_call_output items (-> tool messages) and reasoning items (-> the next assistant
// message's reasoning_content); flat function tools {type, name, description, parameters,
// strict} -> chat tools; tool_choice, parallel_tool_calls, max_output_tokens, temperature,
// top_p carried over; text.format json_schema -> chat's response_format json_schema (and
// json_object likewise), so the chat path applies whatever it applies to response_format;
// reasoning.effort -> the Kimi template's thinking switch: "none" and "minimal" turn thinking
// off, any other effort (or none given) leaves it on, the template's default. Image and file
// inputs get the 400 chat's image parts get. Nothing is stored: previous_response_id and
// background are refused, store is accepted and reported false.
//
// The answer: a response object {id "resp_...", object "response", created_at, status completed
// | incomplete (max_output_tokens), output [reasoning {content [reasoning_text]}, message
// {content [output_text]}, function_call {call_id, name, arguments}], usage {input_tokens
// (+ cached_tokens), output_tokens, total_tokens}} with the request's settings echoed. Usage has
// no output_tokens_details.reasoning_tokens: the parsers split reasoning from content by text,
// not by token. Streamed as the named events response.created, response.in_progress, response.output_item.added, response.content_part.added,
// response.reasoning_text.delta / .done, response.output_text.delta / .done,
// response.function_call_arguments.delta / .done, response.content_part.done,
// response.output_item.done, then response.completed (or response.incomplete), each with its
// sequence_number; no [DONE].
#include <memory>
#include <optional>
#include <string>

#include "server/chat_bridge.h"
#include "server/serving.h"

namespace kimi {

struct ResponsesRequest {
  ojson chat;  // the /v1/chat/completions body it runs as
  ojson echo;  // the settings a response object reports (instructions, tools, tool_choice...)
};

// Throws ApiError(400) naming the Responses field.
ResponsesRequest responses_to_chat_request(const ojson& body);

// What the response object needs beside the chat output.
struct ResponseContext {
  std::string id;        // resp_...
  std::string model;
  int64_t created_at = 0;
  ojson echo;            // ResponsesRequest::echo
};

// A chat.completion (n = 1) as a response object.
ojson chat_to_response(const ojson& chat, const ResponseContext& ctx);

// The chat stream of one request as Responses events.
std::unique_ptr<ChatStreamTranslator> make_responses_stream_translator(ResponseContext ctx);

class ResponsesApi {
 public:
  explicit ResponsesApi(OpenAiServing& serving) : serving_(serving) {}
  // Validates, translates and starts the request; throws ApiError before anything runs.
  std::unique_ptr<ResponseJob> start(const ojson& body, std::optional<int> data_parallel_rank = std::nullopt);

 private:
  OpenAiServing& serving_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace kimi
