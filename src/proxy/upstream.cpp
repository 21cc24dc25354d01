#include "proxy/upstream.h"

#include <algorithm>
#include <cctype>

namespace kimi::proxy {

UpstreamReply call_upstream(const Endpoint& to, const http::ClientRequest& req, const http::ClientTimeouts& timeouts,
                            http::CancelToken* cancel) {
  UpstreamReply r;
  r.error = http::send_request(
      to.host, to.port, req, timeouts, [&](const http::ResponseHead& h) { r.head = h; },
      [&](std::string_view piece) {
        r.body.append(piece);
        return true;
      },
      cancel);
  return r;
}

http::Headers passthrough_headers(const http::Headers& upstream) {
  static constexpr const char* kHopByHop[] = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                                              "te",         "trailer",    "upgrade",          "content-length"};
  http::Headers out;
  for (const auto& [k, v] : upstream) {
    std::string lower = k;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (std::none_of(std::begin(kHopByHop), std::end(kHopByHop), [&](const char* h) { return lower == h; }))
      out.emplace_back(k, v);
  }
  return out;
}

}  // namespace kimi::proxy
