#pragma once
// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) on the chat machinery
// (chat_bridge.h), mapped as vLLM maps it: system (string or text blocks) -> a system message;
// text / tool_use / tool_result / thinking blocks -> chat text, tool_calls, tool messages and
// reasoning_content; tools {name, description, input_schema} -> function tools; tool_choice
// auto / any / tool / none -> auto / required / named / none (enforcing them is the chat
// path's business); max_tokens (required), stop_sequences, temperature, top_p, top_k carried
// over; thinking {type: enabled | adaptive} -> the template's thinking on, disabled or absent ->
// off (Anthropic's default is no thinking blocks); a final assistant message is a prefill the
// answer continues (chat's continue_final_message). Image and document blocks get the 400 that
// chat's image parts get: this server runs text-only models.
//
// The answer: {id "msg_...", type "message", role, content [thinking | text | tool_use], model,
// stop_reason end_turn | max_tokens | stop_sequence | tool_use, stop_sequence, usage}; streamed
// as Anthropic's named SSE events (message_start, ping, content_block_start / _delta / _stop,
// message_delta, message_stop). Errors use Anthropic's shape {"type": "error", "error": {type,
// message}}. Thinking blocks carry an empty signature: there is none to give.
#include <memory>
#include <optional>
#include <string>

#include "server/chat_bridge.h"
#include "server/serving.h"

namespace kimi {

// The chat body a Messages request runs as. Throws ApiError(400) naming the Messages field.
// `count_only` (count_tokens): max_tokens is optional.
ojson messages_to_chat_body(const ojson& body, bool count_only = false);

// A chat.completion (n = 1) as an Anthropic message with the given id. A call's arguments that
// are not a JSON object (the model wrote them; nothing enforces them under tool_choice auto) give
// `input: {}`, as Anthropic's `input` must be an object; the stream sends them as written.
ojson chat_to_message(const ojson& chat, const std::string& id);

// The chat stream of one request as Anthropic's events.
std::unique_ptr<ChatStreamTranslator> make_messages_stream_translator(std::string id, std::string model);

// {"type": "error", "error": {"type": ..., "message": ...}} for an HTTP status.
ojson anthropic_error_body(int status, const std::string& message);

class MessagesApi {
 public:
  explicit MessagesApi(OpenAiServing& serving) : serving_(serving) {}
  // Validates, translates and starts the request; throws ApiError before anything runs.
  std::unique_ptr<ResponseJob> start(const ojson& body, std::optional<int> data_parallel_rank = std::nullopt);
  // {"input_tokens": N}: the prompt the request renders to, counted.
  ojson count_tokens(const ojson& body) const;

 private:
  OpenAiServing& serving_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace kimi
