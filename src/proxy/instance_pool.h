#pragma once
// The instances of one role (prefill or decode) behind `kimi proxy`, with the load each carries
// now and the counts /metrics reports: the least-loaded choice (ties round robin), and a lease
// that holds a request's load on its instance for as long as it runs.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "proxy/proxy_config.h"

namespace kimi::proxy {

enum class Role { Prefill, Decode };
const char* role_name(Role r);  // "prefill", "decode"

struct InstanceStats {
  Endpoint endpoint;
  int64_t in_flight = 0;  // requests sent there and not finished
  int64_t load = 0;       // the sum of their load estimates
  uint64_t requests = 0;  // every request sent there, retries included
  uint64_t failures = 0;  // connection errors and 5xx answers
};

class InstancePool {
 public:
  InstancePool(Role role, std::vector<Endpoint> endpoints);
  InstancePool(const InstancePool&) = delete;
  InstancePool& operator=(const InstancePool&) = delete;

  // One request's hold on an instance: its load counts until the lease ends.
  class Lease {
   public:
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    size_t index() const { return index_; }
    const Endpoint& endpoint() const;
    void failed();  // counts a failure of this instance
    // Ends the hold now. Called before an answer is written, so that a client that reads the
    // answer and then /metrics sees the instance free again.
    void end();

   private:
    friend class InstancePool;
    Lease(InstancePool* pool, size_t index, int64_t load) : pool_(pool), index_(index), load_(load) {}
    InstancePool* pool_;
    size_t index_;
    int64_t load_;
    bool held_ = true;
  };

  // The instance with the least load (ties: the next in round-robin order) among those not in
  // `avoid` (instances that failed this request); when every instance is in `avoid`, among all.
  // `load` is what this request adds: 1 for a decode, an estimate of the prompt for a prefill.
  Lease acquire(int64_t load, const std::vector<size_t>& avoid = {});

  Role role() const { return role_; }
  size_t size() const { return instances_.size(); }
  const Endpoint& endpoint(size_t i) const { return instances_[i].endpoint; }
  std::vector<InstanceStats> stats() const;

 private:
  void release(size_t index, int64_t load);

  const Role role_;
  mutable std::mutex mu_;
  std::vector<InstanceStats> instances_;
  size_t next_ = 0;  // where the round robin among equals starts
};

}  // namespace kimi::proxy
