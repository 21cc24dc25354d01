#include "kernels/bandwidth.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
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
  const LineAlignedFloats storage(count);
  float* const buf = storage.data();
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
        partial[size_t(blk)] = sum_f32(buf + first, int64_t(std::min(kBlock, count - first)));
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

namespace {

// The bytes' xor in 64-bit words (four chains, so the loads are not serialised; a tail byte-wise).
uint64_t xor_of(std::span<const std::byte> s) {
  uint64_t a[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= s.size(); i += 32)
    for (size_t k = 0; k < 4; ++k) {
      uint64_t v;
      std::memcpy(&v, s.data() + i + 8 * k, 8);
      a[k] ^= v;
    }
  for (; i < s.size(); ++i) a[0] ^= uint64_t(s[i]);
  return a[0] ^ a[1] ^ a[2] ^ a[3];
}

// Maps the region's pages into this process before it is timed (a fresh process meets each
// checkpoint page with a fault on first use: a load-only read of experts no step had used yet ran
// at a quarter of the rate of mapped ones). MADV_POPULATE_READ (Linux 5.14) maps them without
// reading them into the caches; elsewhere one byte a page is read.
void map_in(std::span<const std::byte> r) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(r.data()) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(r.data() + r.size());
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_READ) == 0) return;
#endif
  for (uintptr_t a = reinterpret_cast<uintptr_t>(r.data()); a < end; a = (a & ~(page - 1)) + page)
    static_cast<void>(*reinterpret_cast<const volatile unsigned char*>(a));
}

}  // namespace

double measure_read_rate(ThreadPool& pool, const std::vector<ReadPass>& passes) {
  constexpr size_t kBlock = size_t(1) << 16;  // bytes per parallel work item
  double seconds = 0, bytes = 0;
  uint64_t all = 0;
  for (const ReadPass& pass : passes) {
    std::vector<std::span<const std::byte>> blocks;  // the pass's regions cut into work items
    for (const std::span<const std::byte> r : pass)
      for (size_t at = 0; at < r.size(); at += kBlock) blocks.push_back(r.subspan(at, std::min(kBlock, r.size() - at)));
    if (blocks.empty()) continue;
    for (const std::span<const std::byte> r : pass) map_in(r);
    std::vector<uint64_t> partial(blocks.size(), 0);
    const auto t0 = Clock::now();
    pool.parallel_for(int64_t(blocks.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) partial[size_t(i)] = xor_of(blocks[size_t(i)]);
    });
    seconds += seconds_since(t0);
    for (size_t i = 0; i < blocks.size(); ++i) {
      all ^= partial[i];
      bytes += double(blocks[i].size());
    }
  }
  volatile uint64_t sink = all;  // the loads must happen
  static_cast<void>(sink);
  return seconds > 0 ? bytes / seconds : 0.0;
}

double measure_matmul_flops(ThreadPool& pool, bool bf16_activations) {
  // Square enough to be compute-bound: each weight is used by 64 tokens.
  constexpr int64_t kRows = 2048, kCols = 2048, kTokens = 64;
  Rng rng(1234);
  std::vector<uint16_t> w(size_t(kRows * kCols));
  for (auto& v : w) v = f32_to_bf16(float(rng.uniform() - 0.5));
  std::vector<float> x(size_t(kTokens * kCols)), y(size_t(kTokens * kRows));
  for (auto& v : x) v = float(rng.uniform() - 0.5);
  WeightMatrix m{DType::BF16, w.data(), kRows, kCols};
  if (bf16_activations) m.act_quant = ActivationQuant::Bf16;

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
