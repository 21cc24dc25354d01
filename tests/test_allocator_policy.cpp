// The heap policy of the `kimi` binary (common/allocator_policy.h): a freed step-sized buffer is
// reused without faulting its pages in again.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <memory>
#include <thread>

#include "common/allocator_policy.h"

namespace kimi {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Page faults of allocating, writing and freeing a block of `bytes`, the second time (the first
// time maps the heap in either way).
long faults_of_a_second_step(size_t bytes) {
  long faults = 0;
  for (int i = 0; i < 2; ++i) {
    const long before = minor_faults();
    auto buf = std::make_unique_for_overwrite<char[]>(bytes);
    std::memset(buf.get(), i, bytes);
    const volatile char sink = buf[bytes / 2];
    static_cast<void>(sink);
    buf.reset();
    faults = minor_faults() - before;
  }
  return faults;
}

#if defined(__SANITIZE_ADDRESS__)
TEST(AllocatorPolicy, FreedStepBuffersStayMapped) { GTEST_SKIP() << "the sanitizer's allocator has its own policy"; }
#else
TEST(AllocatorPolicy, FreedStepBuffersStayMapped) {
  constexpr size_t kLogits = size_t(64) * 163840 * sizeof(float);  // 64 rows of Kimi-K2.5's logits
  const long pages = long(kLogits / 4096);
  EXPECT_GT(faults_of_a_second_step(kLogits), pages / 2) << "the default policy maps such a block afresh";
  keep_step_buffers_mapped();
  faults_of_a_second_step(kLogits);  // grows the heap once
  EXPECT_LT(faults_of_a_second_step(kLogits), pages / 20);
  // A server's engine thread, 256 rows: over a thread arena's 64 MiB.
  constexpr size_t kServerLogits = 4 * kLogits;
  long on_thread = 0;
  std::thread([&] {
    faults_of_a_second_step(kServerLogits);
    on_thread = faults_of_a_second_step(kServerLogits);
  }).join();
  EXPECT_LT(on_thread, 4 * pages / 20);
}
#endif

}  // namespace
}  // namespace kimi
