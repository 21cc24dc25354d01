#pragma once
// A minimal blocking HTTP/1.1 client (one request per connection) for `kimi bench serve`: plain
// http, a connect timeout and a read/write timeout per wait, and the response body handed over
// as it arrives, de-chunked (SSE streams are read while they are produced).
#include <functional>
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

// "http://host:port" (or "http://[v6]:port", port 80 if absent) split into host and port; false
// if it does not look like that.
bool split_host_port(const std::string& scheme_host_port, std::string& host, int& port);

}  // namespace kimi::http
