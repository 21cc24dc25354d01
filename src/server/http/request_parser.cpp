#include "server/http/request_parser.h"

#include <cctype>

namespace kimi::http {

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

// RFC 9110 token characters (method and header names).
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A decimal Content-Length: digits only (no sign, no spaces inside), without overflow.
bool parse_length(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  out = v;
  return true;
}

// The comma-separated items of a header value, trimmed.
template <class F>
void for_each_item(std::string_view v, F&& f) {
  while (!v.empty()) {
    const size_t comma = v.find(',');
    f(trim(v.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return &v;
  return nullptr;
}

RequestParser::Status RequestParser::fail(int status, std::string message) {
  state_ = State::Failed;
  error_status_ = status;
  error_message_ = std::move(message);
  return Status::Error;
}

bool RequestParser::take_continue_wanted() {
  const bool w = continue_wanted_;
  continue_wanted_ = false;
  return w;
}

HttpRequest RequestParser::take() {
  HttpRequest r = std::move(req_);
  req_ = HttpRequest{};
  state_ = State::HeaderLines;
  parsed_ = 0;
  return r;
}

RequestParser::Status RequestParser::parse_headers(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    head.remove_prefix(nl + 1);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return fail(400, "empty request");

  // Request line: METHOD SP target SP HTTP/1.x
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line");
  const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = rl.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "malformed request method");
  if (target.empty()) return fail(400, "empty request target");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail(400, "malformed request target");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || !std::isdigit(uint8_t(version[5])) ||
      !std::isdigit(uint8_t(version[7])))
    return fail(400, "malformed HTTP version");
  if (version[5] != '1') return fail(505, "HTTP version not supported");
  req_.method = std::string(method);
  req_.target = std::string(target);
  req_.path = req_.target.substr(0, req_.target.find('?'));
  req_.version_minor = version[7] - '0';
  req_.keep_alive = req_.version_minor >= 1;

  if (lines.size() - 1 > limits_.max_headers) return fail(431, "too many header fields");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(400, "malformed header line");
    const std::string_view name = line.substr(0, colon);  // no space allowed before the colon
    if (!is_token(name)) return fail(400, "malformed header name");
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return fail(400, "malformed header value");
    req_.headers.emplace_back(std::string(name), std::string(value));
  }

  bool has_length = false, chunked = false;
  uint64_t length = 0;
  for (const auto& [name, value] : req_.headers) {
    if (iequals(name, "Content-Length")) {
      uint64_t v = 0;
      if (!parse_length(value, v)) {
        // Negative or non-numeric, or more digits than any body we take.
        bool digits = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        if (digits) return fail(413, "the request body is too large");
        return fail(400, "invalid Content-Length '" + value + "'");
      }
      if (has_length && v != length) return fail(400, "conflicting Content-Length headers");
      has_length = true;
      length = v;
    } else if (iequals(name, "Transfer-Encoding")) {
      std::string_view last;
      for_each_item(value, [&](std::string_view item) { last = item; });
      if (!iequals(last, "chunked")) return fail(501, "unsupported Transfer-Encoding '" + value + "'");
      chunked = true;
    } else if (iequals(name, "Connection")) {
      for_each_item(value, [&](std::string_view item) {
        if (iequals(item, "close")) req_.keep_alive = false;
        else if (iequals(item, "keep-alive") && req_.version_minor == 0) req_.keep_alive = true;
      });
    }
  }
  // Both framings at once is how requests are smuggled past proxies: refuse (RFC 9112 6.3).
  if (chunked && has_length) return fail(400, "both Content-Length and Transfer-Encoding");
  if (chunked && req_.version_minor == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
  if (has_length && length > limits_.max_body_bytes) return fail(413, "the request body is too large");
  const std::string* expect = req_.header("Expect");
  const bool has_body = chunked || length > 0;
  if (expect && iequals(*expect, "100-continue") && req_.version_minor >= 1 && has_body) continue_wanted_ = true;
  if (chunked) {
    state_ = State::ChunkSize;
  } else {
    body_left_ = size_t(length);
    state_ = State::Body;
  }
  return Status::NeedMore;
}

RequestParser::Status RequestParser::parse() {
  for (;;) {
    switch (state_) {
      case State::Failed:
        return Status::Error;
      case State::Done:
        return Status::Ready;
      case State::HeaderLines: {
        // Scan for the empty line that ends the headers, resuming where the last call stopped.
        size_t end = std::string::npos;
        size_t line_begin = parsed_;
        for (size_t i = parsed_; i < buf_.size(); ++i) {
          if (buf_[i] != '\n') continue;
          const size_t len = i - line_begin;
          const bool empty = len == 0 || (len == 1 && buf_[line_begin] == '\r');
          if (empty && line_begin == 0) {
            // Empty lines before a request line are ignored (RFC 9112 2.2).
            buf_.erase(0, i + 1);
            i = size_t(-1);
            line_begin = 0;
            continue;
          }
          if (empty) {
            end = i + 1;
            break;
          }
          line_begin = i + 1;
        }
        if (end == std::string::npos) {
          parsed_ = line_begin;
          if (buf_.size() > limits_.max_header_bytes) return fail(431, "the request headers are too large");
          return Status::NeedMore;
        }
        if (end > limits_.max_header_bytes) return fail(431, "the request headers are too large");
        const std::string head = buf_.substr(0, end);
        buf_.erase(0, end);
        parsed_ = 0;
        if (parse_headers(head) == Status::Error) return Status::Error;
        break;
      }
      case State::Body:
        if (buf_.size() < body_left_) return Status::NeedMore;
        req_.body = buf_.substr(0, body_left_);
        buf_.erase(0, body_left_);
        body_left_ = 0;
        state_ = State::Done;
        break;
      case State::ChunkSize: {
        const size_t nl = buf_.find('\n');
        if (nl == std::string::npos) {
          if (buf_.size() > 1024) return fail(400, "malformed chunk size line");
          return Status::NeedMore;
        }
        std::string_view line(buf_.data(), nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        line = line.substr(0, line.find(';'));  // chunk extensions are ignored
        line = trim(line);
        if (line.empty() || line.size() > 16) return fail(400, "malformed chunk size");
        uint64_t size = 0;
        for (char c : line) {
          const int h = hex_value(c);
          if (h < 0) return fail(400, "malformed chunk size");
          size = size * 16 + uint64_t(h);
        }
        buf_.erase(0, nl + 1);
        if (size > limits_.max_body_bytes || req_.body.size() + size > limits_.max_body_bytes)
          return fail(413, "the request body is too large");
        body_left_ = size_t(size);
        state_ = size == 0 ? State::Trailers : State::ChunkData;
        break;
      }
      case State::ChunkData: {
        const size_t n = std::min(body_left_, buf_.size());
        req_.body.append(buf_, 0, n);
        buf_.erase(0, n);
        body_left_ -= n;
        if (body_left_ > 0) return Status::NeedMore;
        state_ = State::ChunkDataEnd;
        break;
      }
      case State::ChunkDataEnd:
        if (buf_.size() < 1) return Status::NeedMore;
        if (buf_[0] == '\n') {
          buf_.erase(0, 1);
        } else if (buf_[0] == '\r') {
          if (buf_.size() < 2) return Status::NeedMore;
          if (buf_[1] != '\n') return fail(400, "malformed chunk end");
          buf_.erase(0, 2);
        } else {
          return fail(400, "malformed chunk end");
        }
        state_ = State::ChunkSize;
        break;
      case State::Trailers: {
        // Trailer fields are read and dropped, up to the empty line.
        const size_t nl = buf_.find('\n');
        if (nl == std::string::npos) {
          if (buf_.size() > limits_.max_header_bytes) return fail(431, "the request trailers are too large");
          return Status::NeedMore;
        }
        const bool empty = nl == 0 || (nl == 1 && buf_[0] == '\r');
        buf_.erase(0, nl + 1);
        if (empty) state_ = State::Done;
        break;
      }
    }
  }
}

}  // namespace kimi::http
