#pragma once
// An incremental HTTP/1.x request parser with no I/O: bytes go in as they arrive, complete
// requests come out in order (pipelining keeps the leftover bytes for the next one). It enforces
// the header and body limits as soon as the headers show them, so a bad Content-Length is answered
// at once. Free of other dependencies so that the fuzz target links it alone.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kimi::http {

// ASCII case-insensitive equality (header names, tokens such as "chunked").
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  int version_minor = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  std::string body;
  bool keep_alive = true;  // 1.1 unless "Connection: close"; 1.0 only with "Connection: keep-alive"

  // The first header of that name (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

struct ParseLimits {
  size_t max_header_bytes = 64 << 10;  // request line and headers together
  size_t max_headers = 128;
  size_t max_body_bytes = size_t(32) << 20;
};

class RequestParser {
 public:
  enum class Status { NeedMore, Ready, Error };

  explicit RequestParser(ParseLimits limits = {}) : limits_(limits) {}
  // Appends bytes received from the client.
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // Parses what is buffered. Ready: take() returns the next request. Error: error_status() and
  // error_message() say what to answer; the connection cannot be reused afterwards.
  Status parse();
  HttpRequest take();
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // The headers of the request being read asked for "Expect: 100-continue" and the client waits
  // for it before the body; true once per request (the caller sends the interim response).
  bool take_continue_wanted();
  // Bytes of a request not yet complete are buffered (for the read timeout).
  bool mid_request() const { return state_ != State::HeaderLines || parsed_ != 0 || !buf_.empty(); }
  size_t buffered() const { return buf_.size(); }
  // The headers are in and the body is being read (the body's own timeout applies).
  bool in_body() const { return state_ != State::HeaderLines && state_ != State::Done && state_ != State::Failed; }

 private:
  enum class State { HeaderLines, Body, ChunkSize, ChunkData, ChunkDataEnd, Trailers, Done, Failed };
  Status fail(int status, std::string message);
  Status parse_headers(std::string_view head);

  ParseLimits limits_;
  std::string buf_;     // bytes not consumed yet
  size_t parsed_ = 0;   // how far buf_ has been scanned for the end of the headers
  State state_ = State::HeaderLines;
  HttpRequest req_;
  size_t body_left_ = 0;
  bool continue_wanted_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace kimi::http
