#pragma once
// `kimi serve`'s HTTP front: routes, Bearer auth, body limits, JSON errors, SSE streaming with
// client-disconnect detection, and a graceful stop (finish in-flight requests, then exit).
#include <cstdint>
#include <memory>
#include <string>

#include "server/serving.h"

namespace httplib {
class Server;
}

namespace kimi {

struct HttpConfig {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string api_key;                   // empty: no auth
  size_t max_body_bytes = size_t(32) << 20;
  int threads = 256;                     // connections served at once (streams hold a thread)
};

class HttpServer {
 public:
  HttpServer(OpenAiServing& serving, AsyncEngine& engine, HttpConfig config);
  ~HttpServer();
  // Binds and serves until stop(); returns false if the address could not be bound.
  bool listen();
  int bound_port() const { return bound_port_; }
  // Stops accepting, lets in-flight requests finish, and makes listen() return.
  void stop();

 private:
  void routes();

  OpenAiServing& serving_;
  AsyncEngine& engine_;
  HttpConfig config_;
  std::unique_ptr<httplib::Server> server_;
  int bound_port_ = 0;
};

}  // namespace kimi
