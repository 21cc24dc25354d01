#pragma once
// This process's place among all ranks (vLLM's world): it meets the others through the
// rendezvous store (rank 0 serves it), checks that every rank runs the same model with the
// same parallel flags, and builds the Gloo process groups (the whole world, the tensor-parallel
// groups, later the DP / EP groups) over TCP. Joining, and every collective afterwards, is
// bounded by one timeout: a rank that does not come, or dies, is an error on the others.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parallel/process_group.h"
#include "parallel/tcp_store.h"

namespace gloo::transport {
class Device;
}

namespace kimi {

struct WorldOptions {
  int rank = 0;
  int size = 1;
  std::string store_host = "127.0.0.1";  // --data-parallel-address
  int store_port = 29550;                // --data-parallel-rpc-port
  // Serve the store from this process (rank 0 normally; a test may serve it itself).
  bool serve_store = true;
  // The address this rank's Gloo transport listens on (its own interface on a multi-node run).
  std::string device_host = "127.0.0.1";
  std::chrono::milliseconds timeout{60000};
  // What must agree on every rank (model identity, parallel flags): see parallel_fingerprint().
  std::string identity;
};

class World {
 public:
  // Joins (collective over all `size` ranks). Throws kimi::Error naming the ranks that did not
  // join within the timeout, or the first whose identity differs from this rank's.
  explicit World(const WorldOptions& options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  GlooProcessGroup& world() { return *world_; }

  // A group of the given world ranks, named uniquely (e.g. "tp0"); collective over those ranks.
  // Returns nullptr on a rank not in `ranks`, which must not call it.
  std::shared_ptr<GlooProcessGroup> new_group(const std::string& name, const std::vector<int>& ranks);

 private:
  WorldOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<GlooProcessGroup> world_;
};

// A short stable digest (FNV-1a, hex) of what must agree across ranks.
std::string parallel_fingerprint(const std::string& text);

}  // namespace kimi
