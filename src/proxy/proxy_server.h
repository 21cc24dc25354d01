#pragma once
// `kimi proxy`'s HTTP front: the routes (completions through prefill then decode, /v1/models,
// /healthcheck, /metrics) and, per completion, vLLM's disaggregation flow with its retries: the
// prefill on the least-loaded prefill instance (retried elsewhere on a connection error or a 5xx),
// then the decode with the prefill's kv_transfer_params on the least-loaded decode instance
// (retried only before a byte reached the client), its answer passed through unchanged.
#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "proxy/instance_pool.h"
#include "proxy/proxy_config.h"
#include "proxy/proxy_metrics.h"
// (event_server.h first: its parser's enum would shadow http::Headers the other way round)
#include "server/http/event_server.h"
#include "server/http/client.h"

namespace kimi::proxy {

class ProxyServer {
 public:
  // `log`: one line on stderr per failed upstream attempt.
  explicit ProxyServer(ProxyConfig config, bool log = true);
  ~ProxyServer();
  ProxyServer(const ProxyServer&) = delete;
  ProxyServer& operator=(const ProxyServer&) = delete;

  // Binds config.host:config.port; false if it cannot.
  bool bind();
  int port() const { return server_->port(); }
  // Serves until stop(); requests in flight lose their client (their upstream calls end).
  void run();
  void stop() { server_->stop(); }

  const ProxyConfig& config() const { return config_; }

 private:
  void handle(http::Exchange& ex);
  void completions(http::Exchange& ex);
  void models(http::Exchange& ex);
  std::string new_request_id();
  // Waits before retry number `retry` (1, 2, ...); false if the request was canceled meanwhile.
  bool back_off(int retry, const http::CancelToken& cancel) const;
  void log_failure(const char* role, const Endpoint& e, const std::string& what) const;

  const ProxyConfig config_;
  const bool log_;
  http::ClientTimeouts timeouts_;
  InstancePool prefill_, decode_;
  ProxyCounters counters_;
  std::mutex id_mu_;
  std::mt19937_64 id_rng_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace kimi::proxy
