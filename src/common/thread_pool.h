#pragma once
// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part in
// every parallel_for, so a pool of N threads runs N-1 workers. A parallel_for that finds the pool
// busy (called from inside one of its own chunks, or from another thread while a job runs, e.g.
// the chunks of another pool) runs all of its work on the calling thread instead of waiting:
// that can neither deadlock nor disturb the running job. An exception thrown by fn stops the
// remaining chunks and is rethrown by parallel_for once every thread has left the job.
//
// Between jobs the threads spin briefly before they sleep: a decode step is hundreds of small
// matmuls microseconds apart, and waking a sleeping thread through the kernel costs about as
// much as one of them (as in ggml's thread pool, which spins too). After kSpin without a job
// they block on a condition variable, so an idle server uses no CPU.
//
// A worker joins a job only while it is open; the caller closes it once it finds no chunk left
// and then waits for the workers that joined, not for every worker. A worker that was not
// running (its CPU taken by another process, a server's HTTP threads, a noisy neighbour of a
// VM) thus never holds a job up: the caller does the work alone instead of waiting a scheduler
// time slice for the worker to acknowledge a job that is already done.
//
// Optionally (set_region_timing) the pool accounts its parallel regions: their wall time and the
// time threads spent in them working, whose difference is time spent waiting for each other
// (waking up, an uneven last chunk). `kimi bench latency --breakdown` prints that share.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kimi {

// Parallel regions run with timing on, summed since timing was switched on. A region is a
// parallel_for that was handed to the workers (one that ran inline on the caller is not).
struct RegionTimes {
  int64_t regions = 0;
  double wall_seconds = 0;    // summed wall time of the regions, from hand-off to the last thread done
  double busy_seconds = 0;    // summed over threads: time spent taking and running chunks
  double thread_seconds(int threads) const { return wall_seconds * threads; }
  // Thread time inside regions spent not working: waiting to wake, or for the slowest thread.
  double wait_seconds(int threads) const { return thread_seconds(threads) - busy_seconds; }
};

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Region timing (off by default: it costs two clock reads per thread and region). Switching it
  // on resets the sums. Not to be switched while a parallel_for runs.
  void set_region_timing(bool on);
  RegionTimes region_times() const;

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each of at least `grain` items
  // (except the last), spread over all threads; returns when all chunks are done.
  template <class Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    run(n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); }, &fn);
  }

 private:
  using ChunkFn = void (*)(void*, int64_t, int64_t);
  void run(int64_t n, int64_t grain, ChunkFn fn, void* ctx);
  void worker_loop();
  bool try_join(uint64_t generation);  // joins that job if it is still open
  void work_on_current_job();  // take_chunks, timed when region timing is on
  void take_chunks();

  std::vector<std::jthread> workers_;  // joined first thing in the destructor
  // The sleeping side of the hand-offs. A thread announces that it sleeps (sleepers_ /
  // caller_sleeps_) before it checks the condition under mu_; the other side changes the
  // condition before it reads the announcement (both sequentially consistent), so at least one
  // of them sees the other and no wake-up is lost.
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeps_{false};
  // The job's generation (bits 17 and up), whether it is open to joining workers (bit 16) and
  // how many workers have joined and not yet left it (bits 0-15). Storing a new generation,
  // open, publishes the job; a worker joins with a compare-exchange that keeps it open.
  static constexpr uint64_t kOpen = uint64_t(1) << 16, kJoinedMask = kOpen - 1;
  static constexpr int kGenerationShift = 17;
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};
  // The current job; written before state_ opens it.
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // first exception of the current job, under mu_
  std::atomic<bool> busy_{false};  // a job is being run (by exactly one caller)
  // Region timing: written by the caller; workers add their busy time before they report done.
  bool timing_ = false;
  int64_t regions_ = 0;
  int64_t region_wall_ns_ = 0;
  std::atomic<int64_t> busy_ns_{0};
};

}  // namespace kimi
