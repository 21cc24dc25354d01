#pragma once
// HTTP/1.1 response framing: the status line and headers, and the pieces of a streamed body
// (chunked for HTTP/1.1 clients, close-delimited for HTTP/1.0 ones, which know no chunks).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kimi::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Response {
  int status = 200;
  Headers headers;  // Content-Length, Transfer-Encoding and Connection are added by the writer
  std::string body;
};

const char* reason_phrase(int status);

enum class Framing { Length, Chunked, Close };

// The head of a response: status line, the given headers, the framing header and Connection.
std::string response_head(int status, const Headers& headers, Framing framing, size_t content_length, bool keep_alive);

// One piece of a chunked body (empty data gives nothing: the last chunk is kLastChunk).
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace kimi::http
