#pragma once
// The HTTP/1.1 server under `kimi serve`: one epoll thread accepts connections, reads and parses
// requests (no thread held per connection, header/body/idle read timeouts against slow clients,
// bad framing answered at once), and hands each complete request to one of two worker pools:
// a small control lane for cheap endpoints (health checks never wait behind generation) and the
// work lane. Keep-alive and pipelining answer requests in order; while a request is answered the
// epoll thread keeps watching the socket and reports a client that hangs up.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/http/request_parser.h"
#include "server/http/response.h"

namespace kimi::http {

struct ServerOptions {
  ParseLimits limits;
  int work_threads = 256;    // requests answered at once (a stream holds a worker for its life)
  int control_threads = 2;   // the lane of cheap endpoints
  size_t max_queued = 4096;  // complete requests waiting for a worker; beyond: 503
  size_t max_connections = 16384;
  int backlog = 2048;  // uvicorn's (vLLM's); the kernel caps it at net.core.somaxconn
  std::chrono::milliseconds header_timeout{10000};  // from a request's first byte to its last header
  std::chrono::milliseconds body_timeout{30000};    // longest pause while a body is read
  std::chrono::milliseconds idle_timeout{30000};    // keep-alive: between requests
  std::chrono::milliseconds write_timeout{60000};   // longest stall of a client that does not read
  std::chrono::milliseconds linger{2000};           // reading after a close, so the answer is not reset
};

class Connection;
struct ServerState;

// One request being answered, on a worker thread.
class Exchange {
 public:
  Exchange(std::shared_ptr<Connection> conn, HttpRequest request, const ServerState& server);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // A whole response (Content-Length framed; HEAD gets the head only).
  void respond(Response r);
  // A streamed response: chunked for HTTP/1.1, close-delimited for HTTP/1.0.
  bool start_stream(int status, const Headers& headers);
  bool write(std::string_view data);  // false once the client is gone
  void end_stream();
  bool responded() const { return responded_; }
  bool client_gone() const;
  // f runs (once, on the epoll thread or here) when the client hangs up before the answer ends.
  void on_hangup(std::function<void()> f);
  // Whether the connection can take the next request after this one.
  bool keep_alive() const;

 private:
  bool send_all(std::string_view data);
  std::string head(int status, const Headers& headers, size_t content_length);

  std::shared_ptr<Connection> conn_;
  HttpRequest request_;
  const ServerState& server_;
  bool keep_alive_;  // as the request asked, then as the head promised
  // A head that promised keep-alive is kept to when the shutdown begins after it: the client may
  // already have pooled the connection and sent its next request, which then gets the drain's
  // answer (with Connection: close) rather than a closed socket.
  bool head_sent_ = false;
  bool responded_ = false, streaming_ = false, failed_ = false;
  Framing framing_ = Framing::Length;
};

enum class Lane { Control, Work };

class Server {
 public:
  using Classify = std::function<Lane(const HttpRequest&)>;
  using Handle = std::function<void(Exchange&)>;
  // An error the server answers itself (bad framing, time out, overload) as a response.
  using ErrorResponse = std::function<Response(int status, const std::string& message)>;

  Server(ServerOptions options, Classify classify, Handle handle, ErrorResponse error_response);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (port 0: any free port) and listens; false if the address cannot be bound.
  bool bind(const std::string& host, int port);
  int port() const;
  // Serves until stop(); requests still being answered are told their client is gone.
  void run();
  void stop();
  // From now on every response closes its connection (shutting down).
  void set_closing();
  // Waits until no request is being answered; false on time out.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  std::unique_ptr<ServerState> s_;
};

}  // namespace kimi::http
