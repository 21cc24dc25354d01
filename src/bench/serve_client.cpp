#include "bench/serve_client.h"

#include <algorithm>

#include "bench/serve_sse.h"
#include "common/error.h"
#include "server/http/client.h"

namespace kimi {

namespace {

using json = nlohmann::json;

bool nonempty(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (it->is_string()) return !it->get_ref<const std::string&>().empty();
  if (it->is_array()) return !it->empty();
  return true;
}

std::string excerpt(std::string_view s, size_t n = 300) {
  std::string out(s.substr(0, n));
  if (s.size() > n) out += "...";
  return out;
}

// The message of an OpenAI error object, or the body itself.
std::string error_text(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return excerpt(body);
}

http::Headers headers_for(const ServeClientConfig& c) {
  http::Headers h = {{"Accept", "text/event-stream, application/json"}};
  if (!c.api_key.empty()) h.emplace_back("Authorization", "Bearer " + c.api_key);
  return h;
}

http::ClientTimeouts timeouts_for(const ServeClientConfig& c) {
  return {std::max(c.connect_timeout_s, 0.001), std::max(c.request_timeout_s, 0.001)};
}

// One request to the server at `u`: the status and the body (at most `limit` bytes kept).
http::ClientError fetch(const ServeClientConfig& c, const BaseUrl& u, http::ClientRequest req, int& status,
                        std::string& body, size_t limit = size_t(64) << 20) {
  std::string host;
  int port = 0;
  if (!http::split_host_port(u.scheme_host_port, host, port)) return http::ClientError::Resolve;
  return http::send_request(host, port, req, timeouts_for(c), [&](int s) { status = s; },
                            [&](std::string_view piece) {
                              body.append(piece.substr(0, limit - std::min(limit, body.size())));
                              return true;
                            });
}

}  // namespace

BaseUrl parse_base_url(const std::string& base_url) {
  const std::string scheme = "http://";
  if (base_url.rfind("https://", 0) == 0)
    throw Error("--base-url '" + base_url + "': https is not supported (put a TLS proxy in front)");
  if (base_url.rfind(scheme, 0) != 0 || base_url.size() == scheme.size())
    throw Error("--base-url '" + base_url + "' must look like http://HOST:PORT[/PREFIX]");
  const size_t slash = base_url.find('/', scheme.size());
  BaseUrl u;
  u.scheme_host_port = base_url.substr(0, slash);
  std::string host;
  int port = 0;
  if (!http::split_host_port(u.scheme_host_port, host, port))
    throw Error("--base-url '" + base_url + "' must look like http://HOST:PORT[/PREFIX]");
  if (slash != std::string::npos) u.path_prefix = base_url.substr(slash);
  while (!u.path_prefix.empty() && u.path_prefix.back() == '/') u.path_prefix.pop_back();
  return u;
}

void StreamRecorder::on_event(const std::string& data, double now) {
  if (done_) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json j = json::parse(data, nullptr, false);
  if (!j.is_object()) {
    error_ = "malformed SSE event (not a JSON object): " + excerpt(data);
    done_ = true;
    return;
  }
  if (j.contains("error")) {  // servers report failures that happen mid-stream as an event
    error_ = "server error in stream: " + error_text(data);
    done_ = true;
    return;
  }
  const auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    const json& c = (*choices)[0];
    bool token = true;  // completions: every choice chunk is a token (its text may be empty)
    std::string text;
    if (chat_) {
      // The role-only first chunk that chat servers send carries no token.
      const json delta = c.contains("delta") && c["delta"].is_object() ? c["delta"] : json::object();
      token = nonempty(delta, "content") || nonempty(delta, "reasoning_content") || nonempty(delta, "reasoning") ||
              nonempty(delta, "tool_calls");
      if (nonempty(delta, "content") && delta["content"].is_string()) text = delta["content"].get<std::string>();
    } else if (c.contains("text") && c["text"].is_string()) {
      text = c["text"].get<std::string>();
    }
    if (token) {
      if (!first_) {
        first_ = true;
        out_.ttft = now - start_;
      } else {
        out_.itl.push_back(now - last_);
      }
      last_ = now;
      ++out_.token_chunks;
    }
    out_.generated_text += text;
  }
  const auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    if ((*usage).contains("completion_tokens") && (*usage)["completion_tokens"].is_number_integer()) {
      out_.output_tokens = (*usage)["completion_tokens"].get<int64_t>();
      out_.usage_seen = true;
    }
    if ((*usage).contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_integer())
      out_.prompt_len = (*usage)["prompt_tokens"].get<int64_t>();
  }
}

ServeOutcome StreamRecorder::finish(int64_t prompt_len, const std::string& transport_error) {
  ServeOutcome o = out_;
  o.start_time = start_;
  if (!o.usage_seen) o.output_tokens = o.token_chunks;
  if (prompt_len > 0) o.prompt_len = prompt_len;  // as vLLM: the dataset's count (a chat template adds more)
  if (!transport_error.empty()) o.error = transport_error;
  else if (!error_.empty()) o.error = error_;
  else if (!first_) o.error = "never received a token chunk to time (is the endpoint streaming?)";
  o.success = o.error.empty();
  o.latency = first_ ? last_ - start_ : 0;
  return o;
}

json make_request_body(const ServeClientConfig& config, const ServeRequest& request) {
  json body = {{"model", config.model}};
  if (config.chat()) {
    body["messages"] = json::array({{{"role", "user"}, {"content", request.prompt}}});
    body["max_completion_tokens"] = request.output_len;
  } else {
    body["prompt"] = request.prompt;
    body["max_tokens"] = request.output_len;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (config.ignore_eos) body["ignore_eos"] = true;
  for (const auto& [k, v] : config.extra_body.items()) body[k] = v;
  return body;
}

ServeOutcome send_streaming_request(const ServeClientConfig& config, const ServeRequest& request,
                                    std::chrono::steady_clock::time_point bench_start) {
  using clock = std::chrono::steady_clock;
  const auto seconds_since_start = [&](clock::time_point t) { return std::chrono::duration<double>(t - bench_start).count(); };
  BaseUrl url;
  try {
    url = parse_base_url(config.base_url);
  } catch (const Error& e) {
    StreamRecorder r(config.chat(), seconds_since_start(clock::now()));
    return r.finish(request.prompt_len, e.what());
  }
  const std::string body = make_request_body(config, request).dump(-1, ' ', false, json::error_handler_t::replace);
  http::ClientRequest req;
  req.method = "POST";
  req.target = url.path_prefix + config.endpoint;
  req.headers = headers_for(config);
  req.headers.emplace_back("Content-Type", "application/json");
  req.body = body;

  const clock::time_point start = clock::now();
  const clock::time_point deadline = start + std::chrono::microseconds(int64_t(config.request_timeout_s * 1e6));
  StreamRecorder recorder(config.chat(), seconds_since_start(start));
  SseParser parser([&](const std::string& data) { recorder.on_event(data, seconds_since_start(clock::now())); });
  int status = 0;
  bool timed_out = false;
  std::string error_body;
  http::ClientError err = http::ClientError::Resolve;
  std::string host;
  int port = 0;
  if (http::split_host_port(url.scheme_host_port, host, port)) {
    err = http::send_request(host, port, req, timeouts_for(config), [&](int s) { status = s; },
                             [&](std::string_view data) {
                               if (status != 200) {
                                 error_body.append(data.substr(0, size_t(4096) - std::min(error_body.size(), size_t(4096))));
                                 return true;
                               }
                               parser.feed(data);
                               if (clock::now() > deadline) {
                                 timed_out = true;
                                 return false;
                               }
                               return true;  // read on after [DONE] or an error event: the server closes the stream
                             });
  }
  const bool ok = err == http::ClientError::None;
  std::string transport_error;
  if (timed_out) {
    transport_error = "request timed out after " + std::to_string(config.request_timeout_s) + " s";
  } else if (!ok && !recorder.done()) {
    transport_error = "HTTP request to " + url.scheme_host_port + req.target + " failed: " + http::describe(err);
  } else if (ok && status != 200) {
    transport_error = "HTTP " + std::to_string(status) + ": " + error_text(error_body);
  }
  if (transport_error.empty()) parser.finish();
  return recorder.finish(request.prompt_len, transport_error);
}

std::string http_get_text(const ServeClientConfig& config, const std::string& path) {
  const BaseUrl url = parse_base_url(config.base_url);
  http::ClientRequest req;
  req.target = url.path_prefix + path;
  req.headers = headers_for(config);
  int status = 0;
  std::string body;
  const http::ClientError err = fetch(config, url, req, status, body);
  if (err != http::ClientError::None) throw Error("GET " + config.base_url + path + " failed: " + http::describe(err));
  if (status != 200) throw Error("GET " + config.base_url + path + ": HTTP " + std::to_string(status) + ": " + error_text(body));
  return body;
}

json http_get_json(const ServeClientConfig& config, const std::string& path) {
  json j = json::parse(http_get_text(config, path), nullptr, false);
  if (j.is_discarded()) throw Error("GET " + config.base_url + path + ": the response is not JSON");
  return j;
}

json http_post_json(const ServeClientConfig& config, const std::string& path, const json& body) {
  const BaseUrl url = parse_base_url(config.base_url);
  http::ClientRequest req;
  req.method = "POST";
  req.target = url.path_prefix + path;
  req.headers = headers_for(config);
  req.headers.emplace_back("Content-Type", "application/json");
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  int status = 0;
  std::string text;
  const http::ClientError err = fetch(config, url, req, status, text);
  if (err != http::ClientError::None) throw Error("POST " + config.base_url + path + " failed: " + http::describe(err));
  if (status != 200) throw Error("POST " + config.base_url + path + ": HTTP " + std::to_string(status) + ": " + error_text(text));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error("POST " + config.base_url + path + ": the response is not JSON");
  return j;
}

}  // namespace kimi
