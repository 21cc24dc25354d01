#pragma once
// One call from `kimi proxy` to an upstream instance with the whole answer read (prefill,
// /v1/models, and decode answers framed by Content-Length), what counts as a failure worth a
// retry elsewhere, and which of an upstream's headers go back to the client.
#include <string>

#include "proxy/proxy_config.h"
#include "server/http/client.h"

namespace kimi::proxy {

struct UpstreamReply {
  http::ClientError error = http::ClientError::None;
  http::ResponseHead head;
  std::string body;
  // A connection error or a 5xx: another instance may do better. A 4xx is the request's fault.
  bool failed() const { return error != http::ClientError::None || head.status >= 500; }
};

UpstreamReply call_upstream(const Endpoint& to, const http::ClientRequest& req, const http::ClientTimeouts& timeouts,
                            http::CancelToken* cancel);

// The end-to-end headers of an answer (hop-by-hop ones and the framing are the proxy's own).
http::Headers passthrough_headers(const http::Headers& upstream);

}  // namespace kimi::proxy
