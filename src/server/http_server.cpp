#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <optional>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/messages_api.h"
#include "server/responses_api.h"
#include "server/http/event_server.h"

namespace kimi {

namespace {

using http::Exchange;
using http::Headers;
using http::Response;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

Response json_response(int status, const ojson& body, const Headers& extra = {}) {
  Response r;
  r.status = status;
  r.headers = extra;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = dump(body);
  return r;
}

Response error_response(int status, const std::string& message, const Headers& extra = {}, const std::string& param = {}) {
  return json_response(status, error_body(status, message, param), extra);
}

ojson parse_body(const http::HttpRequest& req) { return parse_json_body(req.body); }

// vLLM's X-data-parallel-rank header: run the request on that replica (the engine checks the range).
std::optional<int> data_parallel_rank(const http::HttpRequest& req) {
  const std::string* h = req.header("X-data-parallel-rank");
  if (!h) return std::nullopt;
  int rank = 0;
  const char* end = h->data() + h->size();
  const auto [p, ec] = std::from_chars(h->data(), end, rank);
  if (ec != std::errc() || p != end || h->empty())
    throw ApiError(400, "X-data-parallel-rank must be an integer, not '" + *h + "'");
  return rank;
}

class ExchangeWriter : public EventWriter {
 public:
  explicit ExchangeWriter(Exchange& ex) : ex_(ex) {}
  bool write(std::string_view data) override { return ex_.write(data); }

 private:
  Exchange& ex_;
};

// The error body of a surface: OpenAI's, or Anthropic's on /v1/messages.
using ErrorShape = ojson (*)(int status, const std::string& message, const std::string& param);

ojson openai_error(int status, const std::string& message, const std::string& param) {
  return error_body(status, message, param);
}
ojson anthropic_error(int status, const std::string& message, const std::string&) {
  return anthropic_error_body(status, message);
}

// Runs a request handler, turning every failure into an error response of the given shape.
template <class F>
void guarded(Exchange& ex, const Headers& extra, F&& f, ErrorShape shape = openai_error) {
  auto fail = [&](int status, const std::string& message, const std::string& param = {}) {
    ex.respond(json_response(status, shape(status, message, param), extra));
  };
  try {
    f();
  } catch (const EngineShuttingDown& e) {
    // 503 is what clients and SDKs retry (elsewhere, or after a restart); a 400 they do not.
    fail(503, e.what());
  } catch (const ApiError& e) {
    fail(e.status(), e.what(), e.param());
  } catch (const Error& e) {
    fail(400, e.what());  // engine-side validation: the client's to fix
  } catch (const std::exception& e) {
    fail(500, std::string("internal error: ") + e.what());
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& s : list) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= v.size()) {
    size_t e = v.find(',', b);
    if (e == std::string::npos) e = v.size();
    std::string item = v.substr(b, e - b);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    b = e + 1;
  }
  return out;
}

bool cheap_route(const http::HttpRequest& r) {
  if (r.method == "OPTIONS") return true;
  if (r.method != "GET" && r.method != "HEAD") return false;
  return r.path == "/health" || r.path == "/version" || r.path == "/v1/models" || r.path == "/metrics";
}

}  // namespace

HttpServer::HttpServer(OpenAiServing& serving, AsyncEngine& engine, HttpConfig config)
    : serving_(serving),
      engine_(engine),
      config_(std::move(config)),
      responses_(std::make_unique<ResponsesApi>(serving)),
      messages_(std::make_unique<MessagesApi>(serving)) {
  http::ServerOptions o;
  o.limits.max_body_bytes = config_.max_body_bytes;
  o.work_threads = std::max(1, config_.threads);
  o.header_timeout = config_.header_timeout;
  o.body_timeout = config_.body_timeout;
  o.idle_timeout = config_.idle_timeout;
  server_ = std::make_unique<http::Server>(
      o, [](const http::HttpRequest& r) { return cheap_route(r) ? http::Lane::Control : http::Lane::Work; },
      [this](Exchange& ex) { handle(ex); },
      [](int status, const std::string& message) {
        return error_response(status, status == 413 ? "the request body is too large" : message);
      });
}

HttpServer::~HttpServer() = default;

bool HttpServer::draining() const { return engine_.draining(); }

void HttpServer::handle(Exchange& ex) {
  const http::HttpRequest& req = ex.request();
  const CorsConfig& cors = config_.cors;
  Headers cors_headers;
  const std::string* origin = cors.allowed_origins.empty() ? nullptr : req.header("Origin");
  const bool any_origin = contains(cors.allowed_origins, "*");
  const bool origin_ok = origin && (any_origin || contains(cors.allowed_origins, *origin));
  auto allow_origin = [&](Headers& h) {
    if (any_origin && !cors.allow_credentials) {
      h.emplace_back("Access-Control-Allow-Origin", "*");
    } else {
      h.emplace_back("Access-Control-Allow-Origin", *origin);
      h.emplace_back("Vary", "Origin");
    }
    if (cors.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  };

  // CORS preflight (the browser asks before a cross-origin POST with JSON or Authorization);
  // answered before auth, as browsers send no credentials with it.
  const std::string* preflight_method = req.header("Access-Control-Request-Method");
  if (req.method == "OPTIONS" && origin && preflight_method) {
    std::vector<std::string> refused;
    if (!origin_ok) refused.push_back("origin");
    if (!contains(cors.allowed_methods, "*") && !contains(cors.allowed_methods, *preflight_method))
      refused.push_back("method");
    const std::string* asked = req.header("Access-Control-Request-Headers");
    const std::vector<std::string> asked_list = asked ? split_list(lower(*asked)) : std::vector<std::string>{};
    if (!contains(cors.allowed_headers, "*")) {
      std::vector<std::string> allowed = {"accept", "accept-language", "content-language", "content-type"};
      for (const auto& h : cors.allowed_headers) allowed.push_back(lower(h));
      for (const auto& h : asked_list)
        if (!contains(allowed, h)) {
          refused.push_back("headers");
          break;
        }
    }
    Response r;
    r.headers.emplace_back("Content-Type", "text/plain; charset=utf-8");
    if (!refused.empty()) {
      r.status = 400;
      r.body = "Disallowed CORS " + join(refused);
    } else {
      allow_origin(r.headers);
      r.headers.emplace_back("Access-Control-Allow-Methods", contains(cors.allowed_methods, "*")
                                                                 ? "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
                                                                 : join(cors.allowed_methods));
      r.headers.emplace_back("Access-Control-Max-Age", "600");
      if (contains(cors.allowed_headers, "*")) {
        if (asked) r.headers.emplace_back("Access-Control-Allow-Headers", *asked);
      } else {
        r.headers.emplace_back("Access-Control-Allow-Headers",
                               join({"Accept", "Accept-Language", "Content-Language", "Content-Type"}) +
                                   (cors.allowed_headers.empty() ? "" : ", " + join(cors.allowed_headers)));
      }
      r.body = "OK";
    }
    ex.respond(std::move(r));
    return;
  }
  if (origin_ok) allow_origin(cors_headers);
  route(ex, cors_headers);
}

void HttpServer::route(Exchange& ex, Headers& extra) {
  const http::HttpRequest& req = ex.request();
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";

  const bool anthropic = path == "/v1/messages" || path == "/v1/messages/count_tokens";
  if (!config_.api_key.empty() && path.starts_with("/v1/")) {
    // Anthropic's SDKs send the key as x-api-key.
    const std::string* auth = req.header("Authorization");
    const std::string* key = req.header("x-api-key");
    if (!(auth && *auth == "Bearer " + config_.api_key) && !(key && *key == config_.api_key)) {
      const std::string message = "Unauthorized: a valid 'Authorization: Bearer <key>' (or 'x-api-key') header is required";
      ex.respond(json_response(401, anthropic ? anthropic_error_body(401, message) : error_body(401, message), extra));
      return;
    }
  }

  auto method_not_allowed = [&](const char* allow) {
    Headers h = extra;
    h.emplace_back("Allow", allow);
    const std::string message = "method " + req.method + " is not allowed on " + path;
    ex.respond(json_response(405, anthropic ? anthropic_error_body(405, message) : error_body(405, message), h));
  };

  if (path == "/health") {
    if (!get) return method_not_allowed("GET, HEAD");
    if (draining()) {
      // Load balancers take a draining server out of rotation on this.
      ex.respond(error_response(503, "the server is shutting down", extra));
      return;
    }
    Response r;
    r.headers = extra;
    ex.respond(std::move(r));
    return;
  }
  if (path == "/version") {
    if (!get) return method_not_allowed("GET, HEAD");
    ex.respond(json_response(200, {{"version", KIMI_VERSION}}, extra));
    return;
  }
  if (path == "/v1/models") {
    if (!get) return method_not_allowed("GET, HEAD");
    ex.respond(json_response(200, serving_.models(), extra));
    return;
  }
  if (path == "/metrics") {
    if (!get) return method_not_allowed("GET, HEAD");
    Response r;
    r.headers = extra;
    r.headers.emplace_back("Content-Type", "text/plain; version=0.0.4");
    r.body = engine_.render_metrics(serving_.config().served_model_names[0]);
    ex.respond(std::move(r));
    return;
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!post) return method_not_allowed("POST");
    guarded(ex, extra, [&] {
      const ojson body = parse_body(req);
      ex.respond(json_response(200, path == "/tokenize" ? serving_.tokenize(body) : serving_.detokenize(body), extra));
    });
    return;
  }
  if (path == "/v1/messages/count_tokens") {
    if (!post) return method_not_allowed("POST");
    guarded(ex, extra, [&] { ex.respond(json_response(200, messages_->count_tokens(parse_body(req)), extra)); },
            anthropic_error);
    return;
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses" ||
      path == "/v1/messages") {
    if (!post) return method_not_allowed("POST");
    const ErrorShape shape = anthropic ? anthropic_error : openai_error;
    guarded(ex, extra, [&] {
      const ojson body = parse_body(req);
      if (draining()) throw EngineShuttingDown();
      const std::optional<int> rank = data_parallel_rank(req);
      std::shared_ptr<ResponseJob> job = path == "/v1/chat/completions" ? serving_.start_chat(body, rank)
                                         : path == "/v1/completions"    ? serving_.start_completion(body, rank)
                                         : path == "/v1/responses"      ? responses_->start(body, rank)
                                                                        : messages_->start(body, rank);
      // A client that hangs up, streaming or not, must not leave its request running.
      ex.on_hangup([job] { job->cancel(); });
      if (!job->streaming()) {
        ojson out = job->collect();
        if (!ex.client_gone()) ex.respond(json_response(200, out, extra));
        return;
      }
      Headers h = extra;
      h.emplace_back("Content-Type", "text/event-stream");
      h.emplace_back("Cache-Control", "no-cache");
      if (!ex.start_stream(200, h)) return;
      ExchangeWriter w(ex);
      try {
        job->stream(w);
      } catch (const std::exception& e) {
        // The surfaces with named events (Responses, Messages) send an `error` event.
        const ojson err = shape(500, e.what(), {});
        w.write(path.starts_with("/v1/c") ? "data: " + dump(err) + "\n\n" : "event: error\ndata: " + dump(err) + "\n\n");
      }
      ex.end_stream();
    }, shape);
    return;
  }
  ex.respond(error_response(404, "no route for " + req.method + " " + path, extra));
}

bool HttpServer::listen() {
  if (!server_->bind(config_.host, config_.port)) return false;
  bound_port_ = server_->port();
  server_->run();
  return true;
}

void HttpServer::shutdown(std::chrono::milliseconds drain_timeout) {
  engine_.begin_drain();   // new generation requests now get 503, /health 503
  server_->set_closing();  // answers from now on close their connection; the rest close at stop()
  const bool drained = drain_timeout.count() < 0 ? engine_.wait_drained(std::nullopt) : engine_.wait_drained(drain_timeout);
  if (!drained) {
    engine_.abort_all("the server is shutting down: the request was aborted at the drain time limit", 503);
    engine_.wait_drained(std::chrono::seconds(5));
  }
  server_->wait_idle(std::chrono::seconds(5));  // the aborted requests' answers are written
  server_->stop();
}

void HttpServer::abort_in_flight() {
  engine_.begin_drain();
  engine_.abort_all("the server is shutting down: the request was aborted", 503);
}

}  // namespace kimi
