// Micro-benchmarks of the matmul kernels against this machine's own limits. The figure that
// matters for decode is GEMV bytes/s as a fraction of BM_ReadBandwidth (same threads, same run).
//   kimi_microbench --benchmark_filter='Gemv|ReadBandwidth'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// Integer-format weights (random nibbles / bytes, BF16 group-32 scales for int4, per-channel F32
// for int8) in `copies` consecutive matrices, like Bf16Weights.
enum class QuantKind { Int4W4A16, Int4W4A8, Int8W8A8 };

struct QuantWeights {
  QuantKind kind;
  int64_t rows, cols, copies;
  size_t data_bytes, scale_bytes;
  std::vector<uint8_t> data, scales;

  QuantWeights(QuantKind k, int64_t r, int64_t c, size_t min_total_bytes) : kind(k), rows(r), cols(c) {
    const bool int4 = k != QuantKind::Int8W8A8;
    data_bytes = size_t(r * c) / (int4 ? 2 : 1);
    scale_bytes = int4 ? size_t(r * (c / 32)) * 2 : size_t(r) * 4;
    copies = int64_t(std::max<size_t>(1, (min_total_bytes + data_bytes - 1) / data_bytes));
    data.resize(data_bytes * size_t(copies));
    scales.resize(scale_bytes * size_t(copies));
    uint32_t s = 777;
    for (auto& v : data) {
      s = s * 1664525u + 1013904223u;
      v = uint8_t(s >> 24);
    }
    for (size_t i = 0; i < scales.size(); i += int4 ? 2 : 4) {
      const float f = 0.01f + float(i % 97) * 1e-4f;
      if (int4) {
        const uint16_t b = f32_to_bf16(f);
        std::memcpy(&scales[i], &b, 2);
      } else {
        std::memcpy(&scales[i], &f, 4);
      }
    }
  }
  WeightMatrix at(int64_t i) const {
    WeightMatrix w;
    const bool int4 = kind != QuantKind::Int8W8A8;
    w.format = int4 ? WeightFormat::Int4Group : WeightFormat::Int8Group;
    w.act_quant = kind == QuantKind::Int4W4A16 ? ActivationQuant::None : ActivationQuant::Int8PerToken;
    w.data = data.data() + size_t(i % copies) * data_bytes;
    w.scales = scales.data() + size_t(i % copies) * scale_bytes;
    w.scale_dtype = int4 ? DType::BF16 : DType::F32;
    w.group_size = int4 ? 32 : cols;
    w.rows = rows;
    w.cols = cols;
    return w;
  }
};

const char* quant_kind_name(QuantKind k) {
  switch (k) {
    case QuantKind::Int4W4A16: return "int4-w4a16";
    case QuantKind::Int4W4A8: return "int4-w4a8";
    case QuantKind::Int8W8A8: return "int8-w8a8";
  }
  return "?";
}

// Args: rows, cols, tokens, cold, kind, isa. Bytes/s counts what the product reads of the
// weights (data + scales); for the decode shapes compare with BM_Gemv of the same shape (BF16).
void BM_QuantMatmul(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const bool cold = state.range(3) != 0;
  const auto kind = QuantKind(state.range(4));
  const auto isa = Isa(state.range(5));
  if (!isa_supported(isa)) return state.SkipWithError("ISA not supported on this CPU");
  ThreadPool pool(0);
  const QuantWeights w(kind, rows, cols, cold ? kColdBytes : 0);
  const std::vector<float> x = activations(n * cols);
  std::vector<float> y(size_t(n * rows));
  int64_t i = 0;
  for (auto _ : state) {
    matmul(pool, w.at(i++), x.data(), n, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * int64_t(w.at(0).bytes()));
  state.counters["FLOPS"] = benchmark::Counter(double(2 * rows * cols * n),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(quant_kind_name(kind)) + " " + std::string(isa_name(isa)) +
                 (cold ? " cold" : " hot"));
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
constexpr int64_t kW4A16 = int64_t(QuantKind::Int4W4A16), kW4A8 = int64_t(QuantKind::Int4W4A8),
                  kW8A8 = int64_t(QuantKind::Int8W8A8);
// Decode GEMV 1 x [2048 x 7168] (an expert's down projection) cold, and the prefill GEMM 64 x
// [2048 x 7168], per format; BF16 is BM_Gemv / BM_Gemm of the same shapes.
BENCHMARK(BM_QuantMatmul)
    ->ArgNames({"rows", "cols", "n", "cold", "kind", "isa"})
    ->Args({2048, 7168, 1, 1, kW4A16, kAvx512})
    ->Args({2048, 7168, 1, 1, kW4A8, kAvx512})
    ->Args({2048, 7168, 1, 1, kW8A8, kAvx512})
    ->Args({2048, 7168, 1, 1, kW4A16, kAvx2})
    ->Args({2048, 7168, 1, 1, kW4A8, kAvx2})
    ->Args({2048, 7168, 1, 0, kW4A16, kAvx512})
    ->Args({2048, 7168, 1, 0, kW4A8, kAvx512})
    ->Args({2048, 7168, 1, 0, kW8A8, kAvx512})
    ->Args({2048, 7168, 64, 0, kW4A16, kAvx512})
    ->Args({2048, 7168, 64, 0, kW4A8, kAvx512})
    ->Args({2048, 7168, 64, 0, kW8A8, kAvx512})
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
