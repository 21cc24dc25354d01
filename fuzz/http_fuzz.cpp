// libFuzzer target: the HTTP/1.1 request parser (server/http/request_parser). The input is fed
// whole and again split at a byte the input chooses, and both runs must agree: the same requests,
// the same outcome. Small limits make the limit paths reachable.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/request_parser.h"

namespace {

using kimi::http::HttpRequest;
using kimi::http::ParseLimits;
using kimi::http::RequestParser;

struct Outcome {
  std::vector<HttpRequest> requests;
  RequestParser::Status last = RequestParser::Status::NeedMore;
  int error_status = 0;
};

Outcome run(std::string_view data, const std::vector<size_t>& cuts) {
  ParseLimits limits;
  limits.max_header_bytes = 512;
  limits.max_headers = 16;
  limits.max_body_bytes = 1024;
  RequestParser p(limits);
  Outcome o;
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(data.size());
  for (size_t end : ends) {
    if (end < from || end > data.size()) continue;
    p.feed(data.substr(from, end - from));
    from = end;
    while ((o.last = p.parse()) == RequestParser::Status::Ready) {
      o.requests.push_back(p.take());
      (void)p.take_continue_wanted();
    }
    if (o.last == RequestParser::Status::Error) break;
  }
  if (o.last == RequestParser::Status::Error) {
    o.error_status = p.error_status();
    if (o.error_status < 400 || o.error_status > 599) std::abort();
  }
  return o;
}

bool same(const HttpRequest& a, const HttpRequest& b) {
  return a.method == b.method && a.target == b.target && a.path == b.path && a.version_minor == b.version_minor &&
         a.headers == b.headers && a.body == b.body && a.keep_alive == b.keep_alive;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t cut = data[0] % size;  // the first byte picks the split point
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome whole = run(text, {});
  const Outcome split = run(text, {std::min(cut, text.size())});
  std::vector<size_t> bytewise;
  if (text.size() <= 256)
    for (size_t i = 1; i < text.size(); ++i) bytewise.push_back(i);
  const Outcome drip = run(text, bytewise);
  for (const Outcome* o : {&split, &drip}) {
    if (o->last != whole.last || o->error_status != whole.error_status || o->requests.size() != whole.requests.size())
      std::abort();
    for (size_t i = 0; i < whole.requests.size(); ++i)
      if (!same(o->requests[i], whole.requests[i])) std::abort();
  }
  return 0;
}
