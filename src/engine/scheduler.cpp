#include "engine/scheduler.h"

#include <algorithm>

namespace kimi {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {}

bool Scheduler::runs_before(const Request* a, const Request* b) const {
  if (config_.priority_policy && a->priority != b->priority) return a->priority < b->priority;
  return a->arrival < b->arrival;
}

void Scheduler::add(Request* r) {
  r->status = RequestStatus::Waiting;
  // Keep the queue ordered; a preempted request goes back to where its priority/arrival puts it.
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](Request* w) { return runs_before(r, w); });
  waiting_.insert(it, r);
}

void Scheduler::remove(Request* r) {
  std::erase(waiting_, r);
  std::erase(running_, r);
  kv_.free(*r);
}

Request* Scheduler::pick_victim() const {
  // The request that would run last: lowest priority, then newest.
  return *std::max_element(running_.begin(), running_.end(),
                           [&](const Request* a, const Request* b) { return runs_before(a, b); });
}

void Scheduler::preempt(Request* r) {
  std::erase(running_, r);
  kv_.free(*r);
  r->status = RequestStatus::Preempted;
  ++r->num_preemptions;
  ++num_preemptions_;
  add(r);
  r->status = RequestStatus::Preempted;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests, in priority order so that preemption takes from the back.
  std::sort(running_.begin(), running_.end(), [&](const Request* a, const Request* b) { return runs_before(a, b); });
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int64_t n = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!kv_.allocate(*r, n)) {
      // running_ is sorted, so the victim is the last one: never a request already scheduled.
      Request* victim = pick_victim();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;  // r left running_: index i now names the next request
    out.chunks.push_back({r, n});
    out.num_tokens += n;
    budget -= n;
    ++i;
  }

  // Waiting requests, only when nothing had to be preempted (the cache is under pressure).
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && int64_t(running_.size()) < config_.max_num_seqs) {
      Request* r = waiting_.front();
      KvCacheManager::PrefixHit hit;
      if (r->num_computed_tokens == 0) hit = kv_.find_cached_prefix(*r);
      const int64_t remaining = r->num_tokens() - r->num_computed_tokens - hit.tokens;
      const int64_t n = std::min(remaining, budget);
      if (!kv_.allocate(*r, n, &hit)) break;  // wait for blocks to come free
      if (r->status == RequestStatus::Waiting) {  // first admission, not a resumed preemption
        r->num_cached_tokens = hit.tokens;
        prefix_queries_ += int64_t(r->prompt.size());
        prefix_hits_ += hit.tokens;
      }
      waiting_.pop_front();
      r->status = RequestStatus::Running;
      running_.push_back(r);
      out.chunks.push_back({r, n});
      out.num_tokens += n;
      budget -= n;
    }
  }
  return out;
}

}  // namespace kimi
