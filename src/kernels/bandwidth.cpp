#include "kernels/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/matmul.h"
#include "kernels/vec_ops.h"

namespace kimi {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  constexpr size_t kBlock = size_t(1) << 16;  // floats per parallel work item (256 KiB)
  const size_t count = std::max<size_t>(kBlock, bytes / sizeof(float));
  // Written once before timing: untouched pages would all map the shared zero page and read
  // from cache, and first-touch page faults would be timed.
  auto buf = std::make_unique_for_overwrite<float[]>(count);
  for (size_t i = 0; i < count; ++i) buf[i] = float(i & 1023);

  const int64_t blocks = int64_t((count + kBlock - 1) / kBlock);
  std::vector<float> partial(size_t(blocks), 0.0f);
  double best = 0.0;
  for (int rep = 0; rep < std::max(1, repeats); ++rep) {
    const auto t0 = Clock::now();
    // The same SIMD loads and threads as the matmul kernels, so that the ratio of the two
    // measures the kernel rather than a weaker reference loop.
    pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        const size_t first = size_t(blk) * kBlock;
        partial[size_t(blk)] = sum_f32(buf.get() + first, int64_t(std::min(kBlock, count - first)));
      }
    });
    const double t = seconds_since(t0);
    // Publishing the sums keeps the compiler from dropping the reads.
    float total = 0;
    for (float s : partial) total += s;
    volatile float sink = total;
    static_cast<void>(sink);
    best = std::max(best, double(count * sizeof(float)) / t);
  }
  return best;
}

double measure_matmul_flops(ThreadPool& pool) {
  // Square enough to be compute-bound: each weight is used by 64 tokens.
  constexpr int64_t kRows = 2048, kCols = 2048, kTokens = 64;
  Rng rng(1234);
  std::vector<uint16_t> w(size_t(kRows * kCols));
  for (auto& v : w) v = f32_to_bf16(float(rng.uniform() - 0.5));
  std::vector<float> x(size_t(kTokens * kCols)), y(size_t(kTokens * kRows));
  for (auto& v : x) v = float(rng.uniform() - 0.5);
  const WeightMatrix m{DType::BF16, w.data(), kRows, kCols};

  matmul(pool, m, x.data(), kTokens, y.data());  // warm-up: caches, thread wake-ups
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    matmul(pool, m, x.data(), kTokens, y.data());
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(kRows) * double(kCols) * double(kTokens) / best;
}

}  // namespace kimi
