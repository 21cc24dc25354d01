#pragma once
// `kimi serve`'s HTTP front on our own HTTP/1.1 server (server/http/): routes, Bearer auth,
// body limits, JSON errors, CORS, SSE streaming, aborting the engine request of a client that
// hangs up (streaming or not), and the shutdown sequence: drain with a time limit, 503 for new
// work and on /health meanwhile, then abort what is left, answer it and stop.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/serving.h"

namespace kimi {

namespace http {
class Server;
class Exchange;
}  // namespace http
class ResponsesApi;
class MessagesApi;

struct CorsConfig {
  // As vLLM's --allowed-origins / --allowed-methods / --allowed-headers / --allow-credentials.
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

struct HttpConfig {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string api_key;                   // empty: no auth
  size_t max_body_bytes = size_t(32) << 20;
  int threads = 256;                     // requests answered at once (a stream holds a worker)
  CorsConfig cors;
  // How long a graceful stop waits for in-flight requests before aborting them (vLLM's
  // --shutdown-timeout); a negative value waits without limit.
  std::chrono::milliseconds shutdown_timeout{30000};
  // Read timeouts against slow clients (see http::ServerOptions).
  std::chrono::milliseconds header_timeout{10000}, body_timeout{30000}, idle_timeout{30000};
};

class HttpServer {
 public:
  HttpServer(OpenAiServing& serving, AsyncEngine& engine, HttpConfig config);
  ~HttpServer();
  // Binds and serves until the shutdown ends; returns false if the address could not be bound.
  bool listen();
  int bound_port() const { return bound_port_; }

  // The graceful stop: new generation requests get 503 and /health 503 while the in-flight ones
  // finish, for at most `drain_timeout` (negative: no limit); then what is left is aborted and
  // answered with an error, and listen() returns.
  void shutdown(std::chrono::milliseconds drain_timeout);
  void stop() { shutdown(config_.shutdown_timeout); }
  // Ends the drain now (a second SIGTERM/SIGINT): aborts every in-flight request; a running
  // shutdown() then answers them and returns at once.
  void abort_in_flight();
  bool draining() const;

 private:
  void handle(http::Exchange& ex);
  void route(http::Exchange& ex, std::vector<std::pair<std::string, std::string>>& cors_headers);

  OpenAiServing& serving_;
  AsyncEngine& engine_;
  HttpConfig config_;
  std::unique_ptr<ResponsesApi> responses_;  // POST /v1/responses
  std::unique_ptr<MessagesApi> messages_;    // POST /v1/messages, /v1/messages/count_tokens
  std::unique_ptr<http::Server> server_;
  std::atomic<int> bound_port_{0};
};

}  // namespace kimi
