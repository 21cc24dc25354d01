// ThreadPool::parallel_for: exact coverage, chunk sizes, reuse, nesting and exceptions.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "common/thread_pool.h"

namespace kimi {
namespace {

// Runs one parallel_for and checks that every index in [0, n) was visited exactly once, in
// chunks of at least `grain` items except the one that ends at n.
void check_coverage(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(size_t(std::max<int64_t>(n, 0)));
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mu);
    chunks.emplace_back(b, e);
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " n=" << n << " grain=" << grain
                                          << " threads=" << pool.size();
  for (const auto& [b, e] : chunks) {
    ASSERT_LT(b, e) << "empty chunk";
    if (e != n) {
      ASSERT_GE(e - b, grain) << "chunk [" << b << ", " << e << ") below grain";
    }
  }
  if (n <= 0) {
    ASSERT_TRUE(chunks.empty());
  }
}

TEST(ThreadPool, Sizes) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  EXPECT_GE(ThreadPool(0).size(), 1);
  EXPECT_GE(ThreadPool(-2).size(), 1);
}

TEST(ThreadPool, EveryIndexExactlyOnce) {
  for (int threads = 1; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 16, 31, 100, 1000, 12345})
      for (int64_t grain : {0, 1, 2, 3, 7, 64, 1000, 100000}) {
        check_coverage(pool, n, grain);
        if (HasFatalFailure()) return;
      }
  }
}

TEST(ThreadPool, RepeatedRunsOnOnePool) {
  ThreadPool pool(4);
  std::vector<int64_t> data(1000);
  for (int rep = 0; rep < 2000; ++rep) {
    pool.parallel_for(int64_t(data.size()), 1 + rep % 50, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[size_t(i)] += i;
    });
  }
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], int64_t(i) * 2000);
}

TEST(ThreadPool, JobsAfterSpinningAndAfterSleeping) {
  // Back-to-back jobs find the workers spinning; after a pause longer than the spin they sleep
  // and must be woken; a slow chunk makes the caller give up spinning and sleep for the rest.
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  int64_t want = 0;
  for (int rep = 0; rep < 60; ++rep) {
    if (rep % 10 == 5) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const bool slow = rep % 20 == 7;
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
      if (slow && b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      for (int64_t i = b; i < e; ++i) total.fetch_add(i + 1);
    });
    want += 64 * 65 / 2;
    ASSERT_EQ(total.load(), want) << "job " << rep;
  }
}

TEST(ThreadPool, ActuallyUsesSeveralThreads) {
  // Chunks that wait for each other can only finish if they run concurrently.
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(ThreadPool, NestedUseOfAnotherPool) {
  // Several threads of `outer` use `inner` at the same time.
  for (int inner_threads = 1; inner_threads <= 3; ++inner_threads) {
    ThreadPool outer(3), inner(inner_threads);
    constexpr int64_t kOuter = 12, kInner = 257;
    std::vector<std::atomic<int>> hits(kOuter * kInner);
    for (int rep = 0; rep < 20; ++rep) {
      outer.parallel_for(kOuter, 1, [&](int64_t ob, int64_t oe) {
        for (int64_t o = ob; o < oe; ++o)
          inner.parallel_for(kInner, 4, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(o * kInner + i)].fetch_add(1);
          });
      });
    }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 20) << i;
  }
}

TEST(ThreadPool, NestedUseOfTheSamePoolRunsInline) {
  ThreadPool pool(3);
  constexpr int64_t kOuter = 9, kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.parallel_for(kOuter, 1, [&](int64_t ob, int64_t oe) {
    for (int64_t o = ob; o < oe; ++o)
      pool.parallel_for(kInner, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[size_t(o * kInner + i)].fetch_add(1);
      });
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(ThreadPool, ConcurrentCallersFromOutsideThreads) {
  ThreadPool pool(3);
  constexpr int kCallers = 4;
  constexpr int64_t kN = 5000;
  std::vector<std::vector<int>> hits(kCallers, std::vector<int>(kN, 0));
  {
    std::vector<std::jthread> callers;
    for (int c = 0; c < kCallers; ++c)
      callers.emplace_back([&, c] {
        for (int rep = 0; rep < 50; ++rep)
          pool.parallel_for(kN, 16, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++hits[size_t(c)][size_t(i)];
          });
      });
  }
  for (int c = 0; c < kCallers; ++c)
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[size_t(c)][size_t(i)], 50);
}

TEST(ThreadPool, ExceptionsPropagateAndPoolStaysUsable) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 20; ++rep) {
    EXPECT_THROW(pool.parallel_for(1000, 1,
                                   [&](int64_t b, int64_t e) {
                                     if (b <= 500 && 500 < e) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    check_coverage(pool, 777, 3);
    if (HasFatalFailure()) return;
  }
}

// Guided chunks: large first (at most half a thread's share), small last (at most 1/128 of a
// thread's share, or the grain), so that threads finish a region close together.
TEST(ThreadPool, ChunksShrinkTowardsTheEnd) {
  ThreadPool pool(2);
  constexpr int64_t kN = 1600;
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.parallel_for(kN, 1, [&](int64_t b, int64_t e) {
    std::lock_guard lock(mu);
    chunks.emplace_back(b, e);
  });
  int64_t covered = 0;
  for (const auto& [b, e] : chunks) {
    covered += e - b;
    EXPECT_LE(e - b, kN / 4) << "[" << b << ", " << e << ")";
    if (e == kN) {
      EXPECT_LE(e - b, (kN + 255) / 256) << "last chunk [" << b << ", " << e << ")";
    }
  }
  EXPECT_EQ(covered, kN);
  EXPECT_GE(chunks.size(), 8u);
  check_coverage(pool, kN, 70);  // the grain still bounds every chunk but the last
}

// A worker stopped in a signal handler until the test releases it: a thread whose CPU was taken.
std::atomic<bool> g_stalled{false}, g_release{false};
void stall_handler(int) {
  g_stalled.store(true);
  while (!g_release.load()) {
    const timespec ts{0, 100000};
    nanosleep(&ts, nullptr);
  }
}

// A worker that is not running (descheduled by the OS) holds no job up: the caller does the
// work alone instead of waiting for the worker to acknowledge every job. (The pool waited for
// all workers before; on a shared or oversubscribed machine each job then waited for a time
// slice.) Fails by timing out while the worker stays stopped.
TEST(ThreadPool, AStoppedWorkerHoldsNoJobUp) {
  ThreadPool pool(2);
  // The worker's thread: two chunks that wait for each other run on both threads.
  const pthread_t caller = pthread_self();
  std::mutex mu;
  pthread_t worker{};
  std::atomic<int> arrived{0};
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    if (!pthread_equal(pthread_self(), caller)) {
      std::lock_guard lock(mu);
      worker = pthread_self();
    }
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  struct sigaction stall {}, old{};
  stall.sa_handler = stall_handler;
  sigemptyset(&stall.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &stall, &old), 0);
  g_stalled = false;
  g_release = false;
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(pthread_kill(worker, SIGUSR1), 0);
  }
  while (!g_stalled.load()) std::this_thread::yield();

  std::atomic<bool> finished{false};
  std::atomic<int64_t> items{0};
  std::thread jobs([&] {
    for (int i = 0; i < 200; ++i)
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { items.fetch_add(e - b); });
    finished = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!finished.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool done_while_stopped = finished.load();
  g_release = true;
  jobs.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_TRUE(done_while_stopped) << "the jobs waited for the stopped worker";
  EXPECT_EQ(items.load(), 200 * 64);
  check_coverage(pool, 1000, 3);  // and the released worker takes part again
}

// Region timing: one region whose chunks are uneven (one sleeps, one returns at once) spends
// about the sleeping chunk's time waiting in the other thread; an inline run is not a region.
TEST(ThreadPool, RegionTimingCountsTheWaitForTheSlowestThread) {
  ThreadPool pool(2);
  pool.set_region_timing(true);
  pool.parallel_for(1, 1, [](int64_t, int64_t) {});  // n <= grain: runs inline
  EXPECT_EQ(pool.region_times().regions, 0);
  constexpr double kSleep = 0.03;
  pool.parallel_for(2, 1, [&](int64_t b, int64_t) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
  });
  const RegionTimes t = pool.region_times();
  EXPECT_EQ(t.regions, 1);
  EXPECT_GE(t.wall_seconds, kSleep);
  EXPECT_GE(t.busy_seconds, kSleep);  // the sleeping chunk counts as work
  EXPECT_LE(t.busy_seconds, t.thread_seconds(2) + 1e-6);
  // Whichever thread did not sleep waited: for the other chunk's sleep, or, if it woke too late
  // to take a chunk, for the whole region.
  EXPECT_GT(t.wait_seconds(2), 0.5 * kSleep) << "wall " << t.wall_seconds << " busy " << t.busy_seconds;

  pool.set_region_timing(true);  // switching on again resets the sums
  EXPECT_EQ(pool.region_times().regions, 0);
  EXPECT_EQ(pool.region_times().busy_seconds, 0);
  pool.set_region_timing(false);
  pool.parallel_for(2, 1, [](int64_t, int64_t) {});
  EXPECT_EQ(pool.region_times().regions, 0);  // off: nothing counted
}

}  // namespace
}  // namespace kimi
