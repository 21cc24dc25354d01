#pragma once
// A minimal blocking HTTP/1.1 client (one request per connection) for `kimi bench serve`: plain
// http, a connect timeout and a read/write timeout per wait, and the response body handed over
// as it arrives, de-chunked (SSE streams are read while they are produced).
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "server/http/response.h"

namespace kimi::http {

enum class ClientError { None, Resolve, Connection, ConnectionTimeout, Write, Read, Canceled };
// A sentence a user can act on.
const char* describe(ClientError e);

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  Headers headers;  // Host, Content-Length and Connection are added
  std::string body;
};

struct ClientTimeouts {
  double connect_s = 10;
  double io_s = 600;  // the longest wait for the server to take or send bytes
};

// Sends `req` to host:port and reads the response: on_status(status) once the head is in, then
// on_body(piece) for the decoded body; on_body returning false cancels (ClientError::Canceled).
ClientError send_request(const std::string& host, int port, const ClientRequest& req, const ClientTimeouts& timeouts,
                         const std::function<void(int status)>& on_status,
                         const std::function<bool(std::string_view)>& on_body);

// Lets another thread end a request in flight (`kimi proxy`: the client hung up, so the upstream
// request must stop): cancel() shuts the socket down, which wakes a wait at once (a connect in
// progress still runs to its time limit). A canceled token stays so: later requests end at once.
class CancelToken {
 public:
  void cancel();
  bool canceled() const;

 private:
  friend class CancelAttachment;
  mutable std::mutex mu_;
  int fd_ = -1;  // the socket of the request in flight, -1 between requests
  bool canceled_ = false;
};

// The status line and headers of a response (names as sent).
struct ResponseHead {
  int status = 0;
  Headers headers;
  const std::string* header(std::string_view name) const;  // the first of that name, any case
};

// As above, with the response's headers, and `cancel` (may be null) to end it from another thread.
ClientError send_request(const std::string& host, int port, const ClientRequest& req, const ClientTimeouts& timeouts,
                         const std::function<void(const ResponseHead&)>& on_head,
                         const std::function<bool(std::string_view)>& on_body, CancelToken* cancel);

// "http://host:port" (or "http://[v6]:port", port 80 if absent) split into host and port; false
// if it does not look like that.
bool split_host_port(const std::string& scheme_host_port, std::string& host, int& port);

}  // namespace kimi::http
