#include "parallel/world.h"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <cstdio>

#include "common/error.h"

namespace kimi {

std::string parallel_fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

World::World(const WorldOptions& options) : options_(options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    throw Error("parallel: rank " + std::to_string(options.rank) + " outside a world of " +
                std::to_string(options.size));
  // Gloo's TCP transport writes with writev, which raises SIGPIPE on a connection a dead peer has
  // closed; the default action would kill this rank before the write's error could say which
  // peer died. (Python, PyTorch's usual host, ignores SIGPIPE from start-up.)
  std::signal(SIGPIPE, SIG_IGN);
  if (options.serve_store) {
    server_ = std::make_unique<TcpStoreServer>(options.store_host, options.store_port);
    options_.store_port = server_->port();  // port 0 asked for any free one
  }
  store_ = std::make_unique<TcpStore>(options.store_host, options_.store_port, options.timeout);

  // Every rank publishes what it runs, then compares everyone's with its own, so each rank
  // reports a mismatch itself instead of waiting for a group that will never form.
  TcpStore ids = store_->prefixed("identity/");
  ids.set(std::to_string(options.rank), std::vector<char>(options.identity.begin(), options.identity.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < options.size; ++r) keys.push_back(std::to_string(r));
  const auto deadline = net::Clock::now() + options.timeout;
  while (!ids.check(keys)) {
    if (net::Clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < options.size; ++r)
        if (!ids.check({std::to_string(r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error("parallel: rank(s) " + missing + " of " + std::to_string(options.size) + " did not join within " +
                  std::to_string(options.timeout.count()) + " ms (store " + options.store_host + ":" +
                  std::to_string(options_.store_port) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < options.size; ++r) {
    const std::vector<char> theirs = ids.get(std::to_string(r));
    if (std::string(theirs.begin(), theirs.end()) != options.identity)
      throw Error("parallel: rank " + std::to_string(r) + " runs a different model or parallel flags than rank " +
                  std::to_string(options.rank) + " ('" + std::string(theirs.begin(), theirs.end()) + "' vs '" +
                  options.identity + "'): start every rank with the same model and flags");
  }

  gloo::transport::tcp::attr attr;
  attr.hostname = options.device_host;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error("parallel: cannot open a Gloo TCP device on " + options.device_host + ": " + e.what());
  }
  std::vector<int> all(size_t(options.size));
  for (int r = 0; r < options.size; ++r) all[size_t(r)] = r;
  world_ = new_group("world", all);
  // Nobody leaves the rendezvous (rank 0 would take the store with it) before all have joined.
  world_->barrier();
}

World::~World() = default;

std::shared_ptr<GlooProcessGroup> World::new_group(const std::string& name, const std::vector<int>& ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == options_.rank) index = int(i);
  if (index < 0) return nullptr;
  auto context = std::make_shared<gloo::rendezvous::Context>(index, int(ranks.size()));
  context->setTimeout(options_.timeout);
  TcpStore store = store_->prefixed("group/" + name + "/");
  try {
    context->connectFullMesh(store, device_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet
    throw Error("parallel: cannot connect process group '" + name + "': " + e.what());
  }
  return std::make_shared<GlooProcessGroup>(name, std::move(context), options_.timeout);
}

}  // namespace kimi
