#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kimi {

namespace {

// The smallest chunk of a region is 1/kTailDivisor of a thread's share (or the caller's grain, if
// larger): the last chunks decide how long one thread waits for the other at the region's end. At
// 1/16 the real shapes' large decode products ended on chunks of MBs (o_proj's last: 3.7 MB, some
// 100 us of one thread): k25-int4, one sequence, the threads' time waiting inside regions 2.0-2.8 %
// of a step at 1/16, 0.9-1.5 % at 1/128 (five alternated pairs); small's products, bounded by their
// grain, unchanged (4.1-4.3 %). The extra hand-outs are atomic increments of one counter.
constexpr int64_t kTailDivisor = 128;

// How long a thread spins for the next job (or for the workers to finish) before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  num_threads = std::min(num_threads, int(kJoinedMask) + 1);  // the joined count's 16 bits
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();  // spinning workers see stop_ themselves
  // Join here, while mu_ and the condition variables still exist: a worker finishing its last job
  // may still notify cv_done_ after the caller saw the job done.
  workers_.clear();
}

void ThreadPool::take_chunks() {
  // Guided scheduling: each chunk is a share of what is left (half a thread's share), down to
  // chunk_, so the first chunks are large and the last small: the threads finish close together
  // (equal fixed chunks left up to a chunk's time of one thread waiting at the end of every
  // region: 2-5% of a decode step's thread time on the real shapes).
  const int64_t divisor = 2 * int64_t(size());
  for (;;) {
    int64_t b = next_.load(std::memory_order_relaxed), e = 0;
    do {
      if (b >= n_) return;
      e = std::min(n_, b + std::max(chunk_, (n_ - b) / divisor));
    } while (!next_.compare_exchange_weak(b, e, std::memory_order_relaxed));
    try {
      fn_(ctx_, b, e);
    } catch (...) {
      // An exception must not escape a worker (std::terminate) nor leave the caller's frame
      // while workers still use ctx_: keep the first one, skip what is left, rethrow in run().
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_, std::memory_order_relaxed);
    }
  }
}

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void ThreadPool::work_on_current_job() {
  if (!timing_) return take_chunks();
  const int64_t t0 = now_ns();
  take_chunks();
  busy_ns_.fetch_add(now_ns() - t0, std::memory_order_relaxed);
}

void ThreadPool::set_region_timing(bool on) {
  timing_ = on;
  regions_ = 0;
  region_wall_ns_ = 0;
  busy_ns_.store(0);
}

RegionTimes ThreadPool::region_times() const {
  return RegionTimes{regions_, double(region_wall_ns_) * 1e-9, double(busy_ns_.load()) * 1e-9};
}

bool ThreadPool::try_join(uint64_t generation) {
  uint64_t s = state_.load();
  while ((s >> kGenerationShift) == generation && (s & kOpen))
    if (state_.compare_exchange_weak(s, s + 1)) return true;
  return false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;  // the last generation this worker tried to join
  const auto ready = [&] { return stop_.load() || (state_.load() >> kGenerationShift) != seen; };
  for (;;) {
    if (!spin_until(ready)) {
      std::unique_lock lock(mu_);
      sleepers_.fetch_add(1);
      cv_start_.wait(lock, ready);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = state_.load() >> kGenerationShift;
    // A job closed before this worker came (the caller did it alone) is skipped.
    if (!try_join(seen)) continue;
    // timing_ and the job's fields were written before the job was opened.
    work_on_current_job();
    const uint64_t left = state_.fetch_sub(1) - 1;
    if ((left & kJoinedMask) == 0 && caller_sleeps_.load()) {
      std::lock_guard lock(mu_);
      cv_done_.notify_one();
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
  // The smallest chunk: 1/kTailDivisor of a thread's share, or the grain (see take_chunks).
  const int64_t chunk = std::max(grain, (n + kTailDivisor * threads - 1) / (kTailDivisor * threads));
  // No worker reads the job's fields now: the last job was closed and every worker that joined
  // it has left, and none joins before the new generation is stored, open.
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  const int64_t start = timing_ ? now_ns() : 0;
  const uint64_t generation = (state_.load() >> kGenerationShift) + 1;
  state_.store((generation << kGenerationShift) | kOpen);
  if (sleepers_.load() > 0) {
    std::lock_guard lock(mu_);
    cv_start_.notify_all();
  }
  work_on_current_job();
  // Every chunk is taken: close the job, then wait for the workers running the last ones.
  state_.fetch_and(~kOpen);
  const auto done = [&] { return (state_.load() & kJoinedMask) == 0; };
  if (!spin_until(done)) {
    std::unique_lock lock(mu_);
    caller_sleeps_.store(true);
    cv_done_.wait(lock, done);
    caller_sleeps_.store(false);
  }
  if (timing_) {
    region_wall_ns_ += now_ns() - start;
    ++regions_;
  }
  std::lock_guard lock(mu_);  // error_ is written under mu_
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace kimi
