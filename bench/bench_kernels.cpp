// Micro-benchmarks of the matmul kernels against this machine's own limits. The figure that
// matters for decode is GEMV bytes/s as a fraction of BM_ReadBandwidth (same threads, same run).
//   kimi_microbench --benchmark_filter='Gemv|ReadBandwidth'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/vec_ops.h"

namespace kimi {
namespace {

// More than the last-level cache (260 MiB on the reference machine), so that "cold" weights
// come from DRAM as they do when decoding a model of many GiB.
constexpr size_t kColdBytes = size_t(768) << 20;

// `copies` consecutive bf16 [rows, cols] matrices filled with small, varied values.
struct Bf16Weights {
  int64_t rows, cols, copies;
  std::vector<uint16_t> data;

  Bf16Weights(int64_t r, int64_t c, size_t min_total_bytes) : rows(r), cols(c) {
    const size_t one = size_t(r * c) * 2;
    copies = int64_t(std::max<size_t>(1, (min_total_bytes + one - 1) / one));
    data.resize(size_t(r * c * copies));
    uint32_t s = 12345;
    for (auto& v : data) {
      s = s * 1664525u + 1013904223u;
      v = f32_to_bf16(float(int32_t(s >> 8) - (1 << 23)) * 0x1p-26f);
    }
  }
  WeightMatrix at(int64_t i) const {
    return {DType::BF16, data.data() + size_t(i % copies) * size_t(rows * cols), rows, cols};
  }
};

std::vector<float> activations(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float((i * 37) % 101 - 50) * 0.01f;
  return x;
}

// Args: rows, cols, cold (rotate over > LLC of weights), isa.
void BM_Gemv(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const bool cold = state.range(2) != 0;
  const auto isa = Isa(state.range(3));
  if (!isa_supported(isa)) return state.SkipWithError("ISA not supported on this CPU");
  ThreadPool pool(0);
  const Bf16Weights w(rows, cols, cold ? kColdBytes : 0);
  const std::vector<float> x = activations(cols);
  std::vector<float> y(static_cast<size_t>(rows));
  int64_t i = 0;
  for (auto _ : state) {
    matmul(pool, w.at(i++), x.data(), 1, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 2);
  state.SetLabel(std::string(isa_name(isa)) + (cold ? " cold" : " hot"));
}

// Args: rows, cols, tokens, isa.
void BM_Gemm(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const auto isa = Isa(state.range(3));
  if (!isa_supported(isa)) return state.SkipWithError("ISA not supported on this CPU");
  ThreadPool pool(0);
  const Bf16Weights w(rows, cols, 0);
  const std::vector<float> x = activations(n * cols);
  std::vector<float> y(size_t(n * rows));
  for (auto _ : state) {
    matmul(pool, w.at(0), x.data(), n, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] = benchmark::Counter(double(2 * rows * cols * n),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(isa_name(isa)));
}

// The roofline for cold GEMV: all threads summing a buffer larger than the LLC with the same
// SIMD loads as the kernels (kimi::measure_read_bandwidth does the same, best of a few passes).
void BM_ReadBandwidth(benchmark::State& state) {
  ThreadPool pool(0);
  constexpr size_t kBlock = size_t(1) << 16;  // floats per work item (256 KiB)
  const size_t count = kColdBytes / sizeof(float);
  auto buf = std::make_unique_for_overwrite<float[]>(count);
  for (size_t i = 0; i < count; ++i) buf[i] = float(i & 1023);
  const int64_t blocks = int64_t(count / kBlock);
  std::vector<float> partial(static_cast<size_t>(blocks));
  for (auto _ : state) {
    pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk)
        partial[size_t(blk)] = sum_f32(buf.get() + size_t(blk) * kBlock, int64_t(kBlock));
    });
    benchmark::DoNotOptimize(partial.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * int64_t(count * sizeof(float)));
}

constexpr int64_t kScalar = int64_t(Isa::Scalar), kAvx2 = int64_t(Isa::Avx2),
                  kAvx512 = int64_t(Isa::Avx512);

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Gemv)
    ->ArgNames({"rows", "cols", "cold", "isa"})
    ->Args({7168, 2048, 1, kAvx512})
    ->Args({2048, 7168, 1, kAvx512})
    ->Args({4096, 4096, 1, kAvx512})
    ->Args({7168, 2048, 1, kAvx2})
    ->Args({7168, 2048, 1, kScalar})
    ->Args({7168, 2048, 0, kAvx512})
    ->Args({2048, 7168, 0, kAvx512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Gemm)
    ->ArgNames({"rows", "cols", "n", "isa"})
    ->Args({2048, 2048, 64, kAvx512})
    ->Args({2048, 7168, 64, kAvx512})
    ->Args({2048, 2048, 64, kAvx2})
    ->Args({2048, 2048, 8, kAvx512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kimi

BENCHMARK_MAIN();
