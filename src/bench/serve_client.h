#pragma once
// One benchmark request against an OpenAI-compatible server (`kimi serve`, vLLM, llama.cpp),
// streamed so that each token's arrival can be timed, as `vllm bench serve` times them:
//   TTFT  the first chunk carrying a choice, from the moment the request was sent;
//   ITL   the gap between successive such chunks (one per token on these servers);
//   E2EL  the last such chunk, from the moment the request was sent.
// The output token count is usage.completion_tokens from the final usage chunk (requested with
// stream_options.include_usage) when the server sends one, else the number of token chunks.
// The prompt length is the dataset's count, as in vLLM (usage.prompt_tokens would include the
// chat template), and usage.prompt_tokens only when the dataset could not count (custom
// prompts without a tokenizer).
// Any failure (connection refused, HTTP error, malformed stream) is returned as an outcome
// with its error text, never thrown: one bad request must not end a benchmark.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kimi {

struct ServeClientConfig {
  std::string base_url = "http://127.0.0.1:8000";  // http://host:port[/prefix]
  std::string endpoint = "/v1/completions";        // or /v1/chat/completions
  std::string model;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when set
  bool ignore_eos = false;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every request (temperature...)
  double request_timeout_s = 600;                        // whole-request bound
  double connect_timeout_s = 10;
  bool chat() const { return endpoint.find("chat/completions") != std::string::npos; }
};

struct ServeRequest {
  std::string prompt;
  int64_t prompt_len = 0;  // tokens, as the dataset counted them
  int64_t output_len = 0;  // max_tokens
};

struct ServeOutcome {
  bool success = false;
  std::string error;
  std::string generated_text;
  int64_t prompt_len = 0;      // the dataset's count; the server's usage.prompt_tokens when that is 0
  int64_t output_tokens = 0;   // usage.completion_tokens, else the number of token chunks
  bool usage_seen = false;
  int64_t token_chunks = 0;
  double start_time = 0;  // seconds since the benchmark started
  double ttft = 0, latency = 0;
  std::vector<double> itl;  // seconds
};

// Turns the events of one streamed response into timings (no I/O, so tests can drive it).
class StreamRecorder {
 public:
  StreamRecorder(bool chat, double start_time) : chat_(chat), start_(start_time) {}
  // `now`: seconds since the benchmark started, when the event was read.
  void on_event(const std::string& data, double now);
  // Fills success/error/timings; `transport_error` (empty when none) wins over everything.
  ServeOutcome finish(int64_t prompt_len, const std::string& transport_error);
  bool done() const { return done_; }

 private:
  bool chat_;
  double start_;
  double last_ = 0;
  bool first_ = false, done_ = false;
  std::string error_;
  ServeOutcome out_;
};

// The JSON body of a streamed request, in vLLM's shape for the endpoint.
nlohmann::json make_request_body(const ServeClientConfig& config, const ServeRequest& request);

ServeOutcome send_streaming_request(const ServeClientConfig& config, const ServeRequest& request,
                                    std::chrono::steady_clock::time_point bench_start);

// Non-streamed helpers for setup (model list, /tokenize): throw kimi::Error on any failure.
nlohmann::json http_get_json(const ServeClientConfig& config, const std::string& path);
std::string http_get_text(const ServeClientConfig& config, const std::string& path);  // e.g. /metrics
nlohmann::json http_post_json(const ServeClientConfig& config, const std::string& path, const nlohmann::json& body);

// base_url split into what the client connects to ("http://host:port") and a path prefix ("/api").
struct BaseUrl {
  std::string scheme_host_port;
  std::string path_prefix;
};
BaseUrl parse_base_url(const std::string& base_url);

}  // namespace kimi
