// `kimi proxy`: the load-balancing proxy in front of prefill and decode instances (vLLM's
// disaggregated prefill), until SIGINT or SIGTERM.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "common/error.h"
#include "proxy/proxy_config.h"
#include "proxy/proxy_server.h"

namespace kimi::cli {

namespace {

std::string names(const std::vector<proxy::Endpoint>& list) {
  std::string out;
  for (const auto& e : list) out += (out.empty() ? "" : ", ") + e.name();
  return out;
}

}  // namespace

int run_proxy(int argc, char** argv) {
  bool help = false;
  const proxy::ProxyConfig config = proxy::parse_proxy_args(std::vector<std::string>(argv + 2, argv + argc), &help);
  if (help) {
    std::fputs(proxy::proxy_usage(), stdout);
    return 0;
  }
  // Signals go to a thread of their own (blocked in every thread started after this), so the stop
  // runs as ordinary code.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client or upstream that hangs up must not kill the proxy

  proxy::ProxyServer server(config);
  if (!server.bind())
    throw Error("cannot listen on " + config.host + ":" + std::to_string(config.port));
  std::fprintf(stderr, "kimi proxy: on http://%s:%d (prefill: %s; decode: %s)\n", config.host.c_str(), server.port(),
               names(config.prefillers).c_str(), names(config.decoders).c_str());
  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    while (!finished) {
      const timespec poll_interval{0, 100'000'000};
      const int sig = sigtimedwait(&signals, nullptr, &poll_interval);
      if (sig < 0) continue;
      std::fprintf(stderr, "kimi proxy: signal %d, stopping\n", sig);
      server.stop();
      return;
    }
  });
  server.run();
  finished = true;
  signal_thread.join();
  std::fprintf(stderr, "kimi proxy: stopped\n");
  return 0;
}

}  // namespace kimi::cli
