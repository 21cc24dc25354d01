#include "server/http/response.h"

#include <cstdio>

namespace kimi::http {

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

std::string response_head(int status, const Headers& headers, Framing framing, size_t content_length, bool keep_alive) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  if (framing == Framing::Length) h += "Content-Length: " + std::to_string(content_length) + "\r\n";
  else if (framing == Framing::Chunked) h += "Transfer-Encoding: chunked\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string chunk(std::string_view data) {
  if (data.empty()) return {};
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out = size;
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace kimi::http
