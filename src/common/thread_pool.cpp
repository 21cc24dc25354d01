#include "common/thread_pool.h"

#include <algorithm>
#include <utility>

namespace kimi {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  // jthread joins on destruction.
}

void ThreadPool::work_on_current_job() {
  for (;;) {
    const int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (b >= n_) break;
    try {
      fn_(ctx_, b, std::min(n_, b + chunk_));
    } catch (...) {
      // An exception must not escape a worker (std::terminate) nor leave the caller's frame
      // while workers still use ctx_: keep the first one, skip what is left, rethrow in run().
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work_on_current_job();
    {
      std::lock_guard lock(mu_);
      if (--active_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = size();
  // Busy: this is a nested call or a second concurrent caller. Before this check both of them
  // overwrote the running job's state (a pool used inside another pool's chunks hit it).
  if (threads == 1 || n <= grain || busy_.exchange(true, std::memory_order_acquire)) {
    fn(ctx, 0, n);
    return;
  }
  struct BusyGuard {
    std::atomic<bool>& busy;
    ~BusyGuard() { busy.store(false, std::memory_order_release); }
  } guard{busy_};
  // About four chunks per thread balances uneven chunks without much scheduling overhead.
  const int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  {
    std::lock_guard lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_ = int(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  work_on_current_job();
  std::unique_lock lock(mu_);
  cv_done_.wait(lock, [&] { return active_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace kimi
