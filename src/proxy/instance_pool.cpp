#include "proxy/instance_pool.h"

#include <algorithm>

#include "common/error.h"

namespace kimi::proxy {

const char* role_name(Role r) { return r == Role::Prefill ? "prefill" : "decode"; }

InstancePool::InstancePool(Role role, std::vector<Endpoint> endpoints) : role_(role) {
  if (endpoints.empty()) throw Error(std::string("no ") + role_name(role) + " instance");
  for (auto& e : endpoints) instances_.push_back(InstanceStats{std::move(e)});
}

InstancePool::Lease InstancePool::acquire(int64_t load, const std::vector<size_t>& avoid) {
  std::lock_guard lock(mu_);
  const size_t n = instances_.size();
  const bool all_avoided =
      std::all_of(instances_.begin(), instances_.end(), [&](const InstanceStats& s) {
        return std::find(avoid.begin(), avoid.end(), size_t(&s - instances_.data())) != avoid.end();
      });
  size_t best = n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_ + k) % n;
    if (!all_avoided && std::find(avoid.begin(), avoid.end(), i) != avoid.end()) continue;
    if (best == n || instances_[i].load < instances_[best].load) best = i;
  }
  next_ = (best + 1) % n;
  InstanceStats& s = instances_[best];
  ++s.in_flight;
  s.load += load;
  ++s.requests;
  return Lease(this, best, load);
}

void InstancePool::release(size_t index, int64_t load) {
  std::lock_guard lock(mu_);
  --instances_[index].in_flight;
  instances_[index].load -= load;
}

std::vector<InstanceStats> InstancePool::stats() const {
  std::lock_guard lock(mu_);
  return instances_;
}

InstancePool::Lease::Lease(Lease&& o) noexcept : pool_(o.pool_), index_(o.index_), load_(o.load_), held_(o.held_) {
  o.held_ = false;
}

InstancePool::Lease::~Lease() { end(); }

void InstancePool::Lease::end() {
  if (held_) pool_->release(index_, load_);
  held_ = false;
}

const Endpoint& InstancePool::Lease::endpoint() const { return pool_->instances_[index_].endpoint; }

void InstancePool::Lease::failed() {
  std::lock_guard lock(pool_->mu_);
  ++pool_->instances_[index_].failures;
}

}  // namespace kimi::proxy
