#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include "server/api_error.h"
#include "server/json_body.h"

namespace kimi {

namespace {

void send_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {}) {
  send_json(res, status, error_body(status, message, param));
}

ojson parse_body(const httplib::Request& req) { return parse_json_body(req.body); }

class SinkWriter : public EventWriter {
 public:
  explicit SinkWriter(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view data) override { return sink_.is_writable() && sink_.write(data.data(), data.size()); }

 private:
  httplib::DataSink& sink_;
};

// Runs a request handler, turning every failure into an OpenAI-style error response.
template <class F>
void guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e.status(), e.what(), e.param());
  } catch (const Error& e) {
    // Engine-side validation (bad parameters, shutting down) is the client's to fix or retry.
    const std::string msg = e.what();
    send_error(res, msg.find("shutting down") != std::string::npos ? 503 : 400, msg);
  } catch (const std::exception& e) {
    send_error(res, 500, std::string("internal error: ") + e.what());
  }
}

}  // namespace

HttpServer::HttpServer(OpenAiServing& serving, AsyncEngine& engine, HttpConfig config)
    : serving_(serving), engine_(engine), config_(std::move(config)), server_(std::make_unique<httplib::Server>()) {
  // httplib owns the queue it gets; a streaming response holds a worker thread for its whole
  // life, so the pool must be as large as the number of concurrent streams we want to serve.
  const int threads = config_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  server_->set_payload_max_length(config_.max_body_bytes);
  server_->set_keep_alive_max_count(1000);
  routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || !req.path.starts_with("/v1/")) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + config_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "Unauthorized: a valid 'Authorization: Bearer <key>' header is required");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg += std::string(": ") + e.what();
    } catch (...) {
    }
    send_error(res, 500, msg);
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) send_error(res, 413, "the request body is too large");
    else if (res.status == 404) send_error(res, 404, "no route for " + req.method + " " + req.path);
    else send_error(res, res.status, "HTTP error " + std::to_string(res.status));
  });

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"version", KIMI_VERSION}});
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, serving_.models()); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(engine_.render_metrics(serving_.config().served_model_names[0]), "text/plain; version=0.0.4");
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serving_.tokenize(parse_body(req))); });
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serving_.detokenize(parse_body(req))); });
  });
  auto generation = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        const ojson body = parse_body(req);
        std::shared_ptr<ResponseJob> job = chat ? serving_.start_chat(body) : serving_.start_completion(body);
        if (!job->streaming()) {
          send_json(res, 200, job->collect());
          return;
        }
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [job](size_t, httplib::DataSink& sink) {
          SinkWriter w(sink);
          try {
            job->stream(w);
          } catch (const std::exception& e) {
            w.write("data: " + error_body(500, e.what()).dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n");
          }
          sink.done();
          return true;
        });
      });
    };
  };
  s.Post("/v1/completions", generation(false));
  s.Post("/v1/chat/completions", generation(true));
}

bool HttpServer::listen() {
  // httplib (the Debian library, compiled) listens with a backlog of 5: a burst of connections,
  // such as a benchmark at --request-rate inf, overflows the accept queue and the kernel drops
  // them, so clients wait for TCP retransmits (0.2 s, 1 s) or fail. The listening socket is
  // caught as httplib creates it and listen() is called again with uvicorn's (vLLM's) backlog;
  // the kernel caps it at net.core.somaxconn.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = int(sock);
  });
  if (config_.port == 0) {
    bound_port_ = server_->bind_to_any_port(config_.host);
    if (bound_port_ <= 0) return false;
  } else {
    if (!server_->bind_to_port(config_.host, config_.port)) return false;
    bound_port_ = config_.port;
  }
  server_->set_socket_options(httplib::default_socket_options);  // the lambda holds a local
  if (listen_fd >= 0) ::listen(listen_fd, 2048);
  return server_->listen_after_bind();
}

void HttpServer::stop() {
  engine_.drain();  // new generation requests now get 503; in-flight ones run to the end
  server_->stop();
}

}  // namespace kimi
