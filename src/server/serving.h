#pragma once
// The OpenAI API on top of the engine (vLLM's OpenAIServingCompletion / OpenAIServingChat):
// turns a parsed request into engine requests, and engine outputs into response JSON or SSE
// chunks, passing chat output through the kimi_k2 reasoning and tool-call parsers.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/async_engine.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

struct ServingConfig {
  std::vector<std::string> served_model_names;  // the first is reported in responses
  std::string chat_template;                    // the tokenizer's unless overridden
  bool reasoning_parser = false;                // --reasoning-parser kimi_k2
  bool tool_parser = false;                     // --tool-call-parser kimi_k2
  bool exclude_tools_when_tool_choice_none = false;  // --exclude-tools-when-tool-choice-none
  int64_t max_waiting = 1024;                   // requests beyond this in the queue get 429
};

// Where a streamed response goes; write() returns false once the client has gone.
class EventWriter {
 public:
  virtual ~EventWriter() = default;
  virtual bool write(std::string_view data) = 0;
};

// A request accepted by the engine, answered either all at once or as a stream.
class ResponseJob {
 public:
  virtual ~ResponseJob() = default;
  virtual bool streaming() const = 0;
  virtual ojson collect() = 0;                  // the whole response body
  virtual void stream(EventWriter& out) = 0;    // SSE "data:" events, ending with [DONE]
  // The prompt's length in tokens, known once the job is started (0 where it is not tracked).
  virtual int64_t prompt_tokens() const { return 0; }
  // Aborts the engine requests (the client hung up); any thread, while collect()/stream() runs.
  virtual void cancel() = 0;
};

class OpenAiServing {
 public:
  OpenAiServing(AsyncEngine& engine, const Tokenizer& tokenizer, ServingConfig config);

  const ServingConfig& config() const { return config_; }
  ojson models() const;
  // Validate, tokenize and submit; throw ApiError (with its HTTP status) before anything runs.
  // data_parallel_rank: the X-data-parallel-rank header (the replica to run on; none: the least
  // loaded).
  std::unique_ptr<ResponseJob> start_completion(const ojson& body, std::optional<int> data_parallel_rank = std::nullopt);
  std::unique_ptr<ResponseJob> start_chat(const ojson& body, std::optional<int> data_parallel_rank = std::nullopt);
  ojson tokenize(const ojson& body) const;
  ojson detokenize(const ojson& body) const;
  // The prompt a chat request renders to (for /tokenize with messages, and tests).
  std::string render_chat(const ApiRequest& r) const;

 private:
  void check_model(const std::string& model) const;
  void check_capacity() const;
  std::string next_id(const char* prefix);

  AsyncEngine& engine_;
  const Tokenizer& tokenizer_;
  ServingConfig config_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace kimi
