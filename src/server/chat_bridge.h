#pragma once
// Runs a request of another API surface (OpenAI Responses, Anthropic Messages) as a chat
// request. Each surface translates its request into a /v1/chat/completions body, which
// OpenAiServing::start_chat validates, renders with the chat template, submits to the engine and
// parses with the reasoning and tool-call parsers exactly as for the chat endpoint; the surface
// then reshapes the chat output: the whole chat.completion object, or the stream of
// chat.completion.chunk events, which a ChatStreamTranslator turns into the surface's own events
// as they arrive. So every surface shares one path to the engine, one set of parsers and one set
// of request checks, and the translations are plain functions of JSON, tested without a model.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "server/serving.h"

namespace kimi {

// Turns the chat stream of one request (n = 1) into another surface's events. Each call returns
// the text to send (SSE events, possibly none).
class ChatStreamTranslator {
 public:
  virtual ~ChatStreamTranslator() = default;
  virtual std::string begin(int64_t prompt_tokens) = 0;  // before any output
  virtual std::string chunk(const ojson& chunk) = 0;     // one chat.completion.chunk
  virtual std::string error(const ojson& error) = 0;     // {"error": {...}} sent mid-stream
  virtual std::string end() = 0;                         // the chat stream ended ([DONE])
};

// "event: TYPE\ndata: JSON\n\n" (invalid UTF-8 from the model becomes U+FFFD).
std::string sse_event(std::string_view type, const ojson& data);
// JSON text with invalid UTF-8 replaced, as every response body is written.
std::string dump_json(const ojson& j);
// PREFIX + 24 hex digits from the clock and a per-surface counter (ids unique per server run).
std::string make_response_id(std::string_view prefix, std::atomic<uint64_t>& counter);

// A chat job whose answer is reshaped for another surface.
class BridgedJob : public ResponseJob {
 public:
  using Reshape = std::function<ojson(const ojson& chat_completion)>;
  BridgedJob(std::unique_ptr<ResponseJob> chat, Reshape reshape, std::unique_ptr<ChatStreamTranslator> translator);

  bool streaming() const override { return chat_->streaming(); }
  ojson collect() override { return reshape_(chat_->collect()); }
  void stream(EventWriter& out) override;
  void cancel() override { chat_->cancel(); }
  int64_t prompt_tokens() const override { return chat_->prompt_tokens(); }

 private:
  std::unique_ptr<ResponseJob> chat_;
  Reshape reshape_;
  std::unique_ptr<ChatStreamTranslator> translator_;
};

}  // namespace kimi
