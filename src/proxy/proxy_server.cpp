#include "proxy/proxy_server.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "proxy/disagg_request.h"
#include "proxy/upstream.h"
#include "server/api_error.h"
#include "server/json_body.h"

namespace kimi::proxy {

namespace {

using http::Exchange;
using http::Response;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

Response json_response(int status, const ojson& body) {
  Response r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = dump(body);
  return r;
}

Response error_response(int status, const std::string& message) {
  return json_response(status, error_body(status, message));
}

// The answer of an upstream, as it came (status, end-to-end headers, body).
Response passed_through(UpstreamReply&& r) {
  Response out;
  out.status = r.head.status;
  out.headers = passthrough_headers(r.head.headers);
  out.body = std::move(r.body);
  return out;
}

bool starts_with_ci(const std::string& s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string describe_failure(const UpstreamReply& r) {
  return r.error != http::ClientError::None ? http::describe(r.error) : "HTTP " + std::to_string(r.head.status);
}

}  // namespace

ProxyServer::ProxyServer(ProxyConfig config, bool log)
    : config_(std::move(config)),
      log_(log),
      prefill_(Role::Prefill, config_.prefillers),
      decode_(Role::Decode, config_.decoders),
      id_rng_(std::random_device{}()) {
  timeouts_.connect_s = config_.connect_timeout_s;
  timeouts_.io_s = config_.io_timeout_s;
  http::ServerOptions o;
  o.work_threads = std::max(1, config_.work_threads);
  server_ = std::make_unique<http::Server>(
      o,
      [](const http::HttpRequest& r) {
        return r.path == "/healthcheck" || r.path == "/metrics" ? http::Lane::Control : http::Lane::Work;
      },
      [this](Exchange& ex) { handle(ex); },
      [](int status, const std::string& message) {
        return error_response(status, status == 413 ? "the request body is too large" : message);
      });
}

ProxyServer::~ProxyServer() = default;

bool ProxyServer::bind() { return server_->bind(config_.host, config_.port); }

void ProxyServer::run() { server_->run(); }

void ProxyServer::handle(Exchange& ex) {
  const http::HttpRequest& req = ex.request();
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
    if (req.method != "POST") return ex.respond(error_response(405, "use POST for " + req.path));
    return completions(ex);
  }
  if (req.path == "/v1/models") {
    if (!get) return ex.respond(error_response(405, "use GET for /v1/models"));
    return models(ex);
  }
  if (req.path == "/healthcheck") {
    if (!get) return ex.respond(error_response(405, "use GET for /healthcheck"));
    return ex.respond(json_response(200, {{"status", "ok"},
                                          {"prefill_instances", prefill_.size()},
                                          {"decode_instances", decode_.size()}}));
  }
  if (req.path == "/metrics") {
    if (!get) return ex.respond(error_response(405, "use GET for /metrics"));
    Response r;
    r.headers.emplace_back("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    r.body = render_metrics(prefill_, decode_, counters_);
    return ex.respond(std::move(r));
  }
  ex.respond(error_response(404, "no route " + req.method + " " + req.path +
                                     " (kimi proxy serves /v1/completions, /v1/chat/completions, /v1/models, "
                                     "/healthcheck and /metrics)"));
}

std::string ProxyServer::new_request_id() {
  // A version-4 UUID, as vLLM's proxies send in X-Request-Id.
  uint64_t a, b;
  {
    std::lock_guard lock(id_mu_);
    a = id_rng_();
    b = id_rng_();
  }
  a = (a & ~uint64_t(0xf000)) | 0x4000;
  b = (b & ~(uint64_t(0xc) << 60)) | (uint64_t(0x8) << 60);
  char s[40];
  std::snprintf(s, sizeof s, "%08x-%04x-%04x-%04x-%012llx", unsigned(a >> 32), unsigned((a >> 16) & 0xffff),
                unsigned(a & 0xffff), unsigned(b >> 48), (unsigned long long)(b & 0xffffffffffffULL));
  return s;
}

bool ProxyServer::back_off(int retry, const http::CancelToken& cancel) const {
  const double delay = config_.retry_delay_s * std::pow(2.0, std::min(retry - 1, 30));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(delay, 3600.0)));
  while (!cancel.canceled()) {
    const Clock::time_point now = Clock::now();
    if (now >= until) return true;
    // In short naps, so that a client that hangs up is not kept waiting for.
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
  return false;
}

void ProxyServer::log_failure(const char* role, const Endpoint& e, const std::string& what) const {
  if (log_) std::fprintf(stderr, "kimi proxy: %s instance %s: %s\n", role, e.name().c_str(), what.c_str());
}

void ProxyServer::models(Exchange& ex) {
  http::ClientRequest req;
  req.target = "/v1/models";
  if (const std::string* auth = ex.request().header("Authorization")) req.headers.emplace_back("Authorization", *auth);
  auto cancel = std::make_shared<http::CancelToken>();
  ex.on_hangup([cancel] { cancel->cancel(); });
  std::vector<size_t> failed;
  UpstreamReply last;
  for (int attempt = 0; attempt <= config_.max_retries; ++attempt) {
    if (attempt > 0 && !back_off(attempt, *cancel)) return;
    InstancePool::Lease lease = decode_.acquire(1, failed);
    UpstreamReply r = call_upstream(lease.endpoint(), req, timeouts_, cancel.get());
    if (r.error == http::ClientError::Canceled) return;
    if (!r.failed()) {
      lease.end();
      return ex.respond(passed_through(std::move(r)));
    }
    lease.failed();
    log_failure("decode", lease.endpoint(), "/v1/models: " + describe_failure(r));
    failed.push_back(lease.index());
    last = std::move(r);
  }
  if (last.error == http::ClientError::None) return ex.respond(passed_through(std::move(last)));
  ex.respond(error_response(502, std::string("no decode instance answered /v1/models: ") + http::describe(last.error)));
}

void ProxyServer::completions(Exchange& ex) {
  const http::HttpRequest& in = ex.request();
  ++counters_.client_requests;
  // The server's parse: nesting is bounded, as the copies and dumps below recurse.
  ojson request;
  try {
    request = parse_json_body(in.body);
  } catch (const ApiError& e) {
    return ex.respond(error_response(e.status(), e.what()));
  }
  if (!request.is_object()) return ex.respond(error_response(400, "the request body must be a JSON object"));

  // The same id goes to both instances (vLLM's proxies do so; logs and KV hand-off match it).
  const std::string* given_id = in.header("X-Request-Id");
  http::Headers headers = {{"Content-Type", "application/json"},
                           {"X-Request-Id", given_id && !given_id->empty() ? *given_id : new_request_id()}};
  if (const std::string* auth = in.header("Authorization")) headers.emplace_back("Authorization", *auth);

  // A client that hangs up ends the upstream call at once (its socket is shut down), so an
  // instance stops generating for nobody. The token outlives this call: the hook may be running.
  auto cancel = std::make_shared<http::CancelToken>();
  ex.on_hangup([cancel] { cancel->cancel(); });
  auto hung_up = [&] {
    ++counters_.client_disconnects;
    cancel->cancel();
  };

  // Prefill: one token, the prompt's KV kept for a remote decode.
  std::optional<ojson> kv_params;
  {
    http::ClientRequest preq;
    preq.method = "POST";
    preq.target = in.target;
    preq.headers = headers;
    preq.body = dump(make_prefill_request(request));
    const int64_t load = estimate_prompt_tokens(in.body);
    std::vector<size_t> failed;
    bool prefilled = false;
    for (int attempt = 0; attempt <= config_.max_retries && !prefilled; ++attempt) {
      if (attempt > 0) {
        ++counters_.prefill_retries;
        if (!back_off(attempt, *cancel)) break;
      }
      InstancePool::Lease lease = prefill_.acquire(load, failed);
      UpstreamReply r = call_upstream(lease.endpoint(), preq, timeouts_, cancel.get());
      if (r.error == http::ClientError::Canceled) break;
      if (r.failed()) {
        lease.failed();
        log_failure("prefill", lease.endpoint(), describe_failure(r));
        failed.push_back(lease.index());
        continue;
      }
      // A 4xx is the request's fault: the decode would refuse it as well.
      if (r.head.status >= 400) {
        lease.end();
        return ex.respond(passed_through(std::move(r)));
      }
      kv_params = kv_params_of_response(r.body);
      if (!kv_params) ++counters_.no_kv_params;
      prefilled = true;
    }
    if (cancel->canceled() || ex.client_gone()) return hung_up();
    // Every prefill failed: the decode instance computes the prompt itself (slower, not lost).
    if (!prefilled) ++counters_.prefill_gave_up;
  }

  // Decode: the client's request as it came, with the prefill's KV hand-off.
  http::ClientRequest dreq;
  dreq.method = "POST";
  dreq.target = in.target;
  dreq.headers = headers;
  dreq.body = kv_params ? dump(make_decode_request(request, *kv_params)) : in.body;
  std::vector<size_t> failed;
  UpstreamReply last;  // the last failed attempt's
  std::string last_instance;
  for (int attempt = 0; attempt <= config_.max_retries; ++attempt) {
    if (attempt > 0) {
      ++counters_.decode_retries;
      if (!back_off(attempt, *cancel)) return hung_up();
    }
    InstancePool::Lease lease = decode_.acquire(1, failed);
    // An answer framed by Content-Length (or a 5xx) is read whole, so that it can still be
    // retried; any other (an SSE stream) goes to the client as it arrives.
    UpstreamReply r;
    bool streaming = false, sse = false;
    r.error = http::send_request(
        lease.endpoint().host, lease.endpoint().port, dreq, timeouts_,
        [&](const http::ResponseHead& h) {
          r.head = h;
          if (h.status >= 500 || h.header("Content-Length")) return;
          const std::string* type = h.header("Content-Type");
          sse = type && starts_with_ci(*type, "text/event-stream");
          streaming = true;
          ex.start_stream(h.status, passthrough_headers(h.headers));
        },
        [&](std::string_view piece) {
          if (!streaming) {
            r.body.append(piece);
            return true;
          }
          return ex.write(piece);
        },
        cancel.get());
    if (r.error == http::ClientError::Canceled || ex.client_gone()) return hung_up();
    if (streaming) {
      if (r.error != http::ClientError::None) {
        // Bytes reached the client: a retry would repeat them. End the stream with an error event.
        lease.failed();
        ++counters_.stream_broken;
        const std::string what = "the decode instance " + lease.endpoint().name() + " failed mid-stream: " +
                                 http::describe(r.error);
        log_failure("decode", lease.endpoint(), "failed mid-stream: " + std::string(http::describe(r.error)));
        if (sse) ex.write("data: " + dump(error_body(502, what)) + "\n\ndata: [DONE]\n\n");
      }
      return;  // the Exchange ends the stream
    }
    if (!r.failed()) {
      lease.end();
      return ex.respond(passed_through(std::move(r)));
    }
    lease.failed();
    log_failure("decode", lease.endpoint(), describe_failure(r));
    failed.push_back(lease.index());
    last_instance = lease.endpoint().name();
    last = std::move(r);
  }
  ++counters_.decode_failed;
  if (last.error == http::ClientError::None) return ex.respond(passed_through(std::move(last)));
  ex.respond(error_response(502, "no decode instance answered (last: " + last_instance + ", " +
                                     http::describe(last.error) + ")"));
}

}  // namespace kimi::proxy
