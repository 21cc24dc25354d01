// Micro-benchmarks of the matmul kernels against this machine's own limits. The figure that
// matters for decode is GEMV bytes/s as a fraction of the read bandwidth measured at start-up
// (kimi::measure_read_bandwidth, printed and in the context; counter "of_read_bw").
//   kimi_microbench --benchmark_filter='Gemv|QuantMatmul'
// Every benchmark is registered for each kernel ISA; those this CPU lacks skip with an error that
// names the ISA ("this CPU lacks avx512").
#include <benchmark/benchmark.h>

#include <algorithm>
#include <initializer_list>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "kernels/bandwidth.h"
#include "kernels/cpu_features.h"
#include "kernels/bf16_dot.h"
#include "kernels/bf16_dot_rate.h"
#include "kernels/matmul.h"
#include "kernels/mla_kernels.h"
#include "kernels/quant_kernels.h"
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

// Pool threads of every benchmark: KIMI_BENCH_THREADS (0 or unset: all cores). One thread makes
// CPU time the kernel's own work on a machine shared with other loads.
int bench_threads() {
  static const int threads = [] {
    const char* v = std::getenv("KIMI_BENCH_THREADS");
    return v ? std::max(0, std::atoi(v)) : 0;
  }();
  return threads;
}

// This machine's read bandwidth with the benchmarks' pool threads, measured once (first use, before any
// timed benchmark: main() asks for it) and constant afterwards.
double read_bandwidth() {
  static const double bw = [] {
    ThreadPool pool(bench_threads());
    return measure_read_bandwidth(pool, size_t(512) << 20, 3);
  }();
  return bw;
}

// Skips `state` unless this CPU runs `isa`, naming the ISA.
bool skip_unsupported(benchmark::State& state, Isa isa) {
  if (isa_supported(isa)) return false;
  state.SkipWithError(("this CPU lacks " + std::string(isa_name(isa))).c_str());
  return true;
}

// Bytes/s of the weights read, and that rate as a fraction of read_bandwidth().
void report_bytes(benchmark::State& state, int64_t bytes_per_iteration) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iteration);
  state.counters["of_read_bw"] = benchmark::Counter(
      double(state.iterations()) * double(bytes_per_iteration) / read_bandwidth(), benchmark::Counter::kIsRate);
}

// Args: rows, cols, cold (rotate over > LLC of weights), isa.
void BM_Gemv(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const bool cold = state.range(2) != 0;
  const auto isa = Isa(state.range(3));
  if (skip_unsupported(state, isa)) return;
  ThreadPool pool(bench_threads());
  const Bf16Weights w(rows, cols, cold ? kColdBytes : 0);
  const std::vector<float> x = activations(cols);
  std::vector<float> y(static_cast<size_t>(rows));
  int64_t i = 0;
  for (auto _ : state) {
    matmul(pool, w.at(i++), x.data(), 1, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, rows * cols * 2);
  state.SetLabel(std::string(isa_name(isa)) + (cold ? " cold" : " hot"));
}

// Args: rows, cols, tokens, isa.
void BM_Gemm(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const auto isa = Isa(state.range(3));
  if (skip_unsupported(state, isa)) return;
  ThreadPool pool(bench_threads());
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

// The timed loop of the BF16-weight products below: [n, cols] x [rows, cols]^T, the weights
// rotating over > LLC of copies when cold (like BM_Gemv).
void time_bf16_products(benchmark::State& state, int64_t rows, int64_t cols, int64_t n, bool cold, Isa isa,
                        ActivationQuant act) {
  ThreadPool pool(bench_threads());
  const Bf16Weights w(rows, cols, cold ? kColdBytes : 0);
  const std::vector<float> x = activations(n * cols);
  std::vector<float> y(size_t(n * rows));
  int64_t i = 0;
  for (auto _ : state) {
    WeightMatrix m = w.at(i++);
    m.act_quant = act;
    matmul(pool, m, x.data(), n, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

// Args: rows, cols, tokens, cold, act (0: f32 activations, 1: rounded to bf16, `--dtype
// bfloat16`), on the best ISA; bf16 runs the AVX512_BF16 kernel (kernels/bf16_dot.h) and is
// skipped by name on CPUs without it. Prefill GEMMs and decode GEMVs of the real expert shapes.
void BM_Bf16Activations(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const bool cold = state.range(3) != 0, bf16 = state.range(4) != 0;
  if (bf16 && !kernels::bf16_dot_rows()) {
    state.SkipWithError("this CPU lacks avx512_bf16");
    return;
  }
  time_bf16_products(state, rows, cols, n, cold, best_isa(), bf16 ? ActivationQuant::Bf16 : ActivationQuant::None);
  state.counters["FLOPS"] = benchmark::Counter(double(2 * rows * cols * n), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(bf16 ? "bf16 act " : "f32 act ") + std::string(isa_name(best_isa())) + (cold ? " cold" : ""));
}

// Args: rows, cols, tokens, cold, isa. A few tokens against one matrix (speculative verification
// of k+1 tokens, batched decode of a few sequences): compare the time per call with n = 1, since
// the weights are read once either way. Cold rotates over > LLC of weights, like BM_Gemv.
void BM_SmallBatch(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const bool cold = state.range(3) != 0;
  const auto isa = Isa(state.range(4));
  if (skip_unsupported(state, isa)) return;
  time_bf16_products(state, rows, cols, n, cold, isa, ActivationQuant::None);
  report_bytes(state, rows * cols * 2);
  state.SetLabel(std::string(isa_name(isa)) + (cold ? " cold" : " hot"));
}

// Integer-format weights (random nibbles / bytes, BF16 group-32 scales for int4, per-channel F32
// for int8) in `copies` consecutive matrices, like Bf16Weights.
// Int4W4A16Zp8: the same int4 weights with explicit zero points, all 8 (the same products); on
// AVX2 it runs the per-nibble unpacking kernel that symmetric int4 used before the whole-word
// one, so the two can be compared in one run (it reads 1 more byte per 32 weights).
// Int4W4A16Bf16: the int4 weights with 16-bit activations (`--dtype bfloat16`) as matmul picks
// their kernel: the AVX512_BF16 one where VDPBF16PS is fast (kernels/bf16_dot_rate.h), else the
// int16 one (the label says which). Int4W4A16Int16: the same through the ISA's integer variant
// (kernels::quant_matmul), int16 on AVX-512 whatever VDPBF16PS costs, so both run in one run.
enum class QuantKind { Int4W4A16, Int4W4A8, Int8W8A8, Int4W4A16Zp8, Int4W4A16Bf16, Int4W4A16Int16 };

struct QuantWeights {
  QuantKind kind;
  int64_t rows, cols, copies;
  size_t data_bytes, scale_bytes;
  std::vector<uint8_t> data, scales, zeros;

  QuantWeights(QuantKind k, int64_t r, int64_t c, size_t min_total_bytes) : kind(k), rows(r), cols(c) {
    const bool int4 = k != QuantKind::Int8W8A8;
    data_bytes = size_t(r * c) / (int4 ? 2 : 1);
    scale_bytes = int4 ? size_t(r * (c / 32)) * 2 : size_t(r) * 4;
    copies = int64_t(std::max<size_t>(1, (min_total_bytes + data_bytes - 1) / data_bytes));
    if (k == QuantKind::Int4W4A16Zp8) zeros.assign(size_t(r * (c / 32)) * size_t(copies), 8);
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
    w.act_quant = kind == QuantKind::Int4W4A16Bf16 || kind == QuantKind::Int4W4A16Int16 ? ActivationQuant::Bf16
                  : kind == QuantKind::Int4W4A16 || kind == QuantKind::Int4W4A16Zp8 ? ActivationQuant::None
                                                                                      : ActivationQuant::Int8PerToken;
    w.data = data.data() + size_t(i % copies) * data_bytes;
    w.scales = scales.data() + size_t(i % copies) * scale_bytes;
    w.scale_dtype = int4 ? DType::BF16 : DType::F32;
    if (!zeros.empty()) w.zero_points = zeros.data() + size_t(i % copies) * size_t(rows * (cols / 32));
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
    case QuantKind::Int4W4A16Zp8: return "int4-w4a16-zp8";
    case QuantKind::Int4W4A16Bf16: return "int4-w4a16-bf16act";
    case QuantKind::Int4W4A16Int16: return "int4-w4a16-int16act";
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
  if (skip_unsupported(state, isa)) return;
  ThreadPool pool(bench_threads());
  const QuantWeights w(kind, rows, cols, cold ? kColdBytes : 0);
  const std::vector<float> x = activations(n * cols);
  std::vector<float> y(size_t(n * rows));
  const kernels::QuantKernelTable& table = kernels::quant_kernels_for(kernels::quant_isa_for(isa));
  int64_t i = 0;
  for (auto _ : state) {
    if (kind == QuantKind::Int4W4A16Int16)
      kernels::quant_matmul(table, pool, w.at(i++), x.data(), n, y.data());
    else
      matmul(pool, w.at(i++), x.data(), n, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, int64_t(w.at(0).bytes()));
  state.counters["FLOPS"] = benchmark::Counter(double(2 * rows * cols * n),
                                               benchmark::Counter::kIsIterationInvariantRate);
  const char* kernel = kind != QuantKind::Int4W4A16Bf16                      ? ""
                       : isa == Isa::Avx512 && kernels::bf16_dot_is_fast() ? " (vdpbf16ps)"
                       : isa == Isa::Scalar                                ? ""
                                                                           : " (int16)";
  state.SetLabel(std::string(quant_kind_name(kind)) + kernel + " " + std::string(isa_name(isa)) +
                 (cold ? " cold" : " hot"));
}

// Args: cols, lanes (8: the AVX2 variants, 16: AVX-512). One token's int16 activations for an
// INT4 linear with 16-bit activations (prepare_input on int4_word16_layout), on one thread: what
// every INT4 product of a decode step spends before its kernel, while the other threads wait.
void BM_Int16Activations(benchmark::State& state) {
  const int64_t cols = state.range(0);
  const bool avx512 = state.range(1) == 16;
  if (skip_unsupported(state, avx512 ? Isa::Avx512 : Isa::Avx2)) return;
  const kernels::QuantKernelTable& table =
      kernels::quant_kernels_for(avx512 ? kernels::QuantIsa::Avx512 : kernels::QuantIsa::Avx2);
  ThreadPool pool(1);
  const std::vector<uint8_t> data(size_t(cols / 2));
  const std::vector<uint16_t> scales(size_t(cols / 32), f32_to_bf16(1.0f));
  WeightMatrix w;
  w.format = WeightFormat::Int4Group;
  w.act_quant = ActivationQuant::Bf16;
  w.data = data.data();
  w.rows = 1;
  w.cols = cols;
  w.group_size = 32;
  w.scales = scales.data();
  w.scale_dtype = DType::BF16;
  const std::vector<float> x = activations(cols);
  kernels::PreparedInput prepared;
  for (auto _ : state) {
    kernels::prepare_input(pool, table, w, x.data(), 1, prepared);
    benchmark::DoNotOptimize(prepared.in.xw);
    benchmark::ClobberMemory();
  }
  state.SetLabel(avx512 ? "avx512" : "avx2");
}

// The roofline for cold GEMV: all threads summing a buffer larger than the LLC with the same
// SIMD loads as the kernels (kimi::measure_read_bandwidth does the same, best of a few passes).
void BM_ReadBandwidth(benchmark::State& state) {
  ThreadPool pool(bench_threads());
  constexpr size_t kBlock = size_t(1) << 16;  // floats per work item (256 KiB)
  const size_t count = kColdBytes / sizeof(float);
  const LineAlignedFloats storage(count);  // as measure_read_bandwidth's
  float* const buf = storage.data();
  for (size_t i = 0; i < count; ++i) buf[i] = float(i & 1023);
  const int64_t blocks = int64_t(count / kBlock);
  std::vector<float> partial(static_cast<size_t>(blocks));
  for (auto _ : state) {
    pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk)
        partial[size_t(blk)] = sum_f32(buf + size_t(blk) * kBlock, int64_t(kBlock));
    });
    benchmark::DoNotOptimize(partial.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * int64_t(count * sizeof(float)));
}

constexpr int64_t kScalar = int64_t(Isa::Scalar), kAvx2 = int64_t(Isa::Avx2),
                  kAvx512 = int64_t(Isa::Avx512);
constexpr int64_t kW4A16 = int64_t(QuantKind::Int4W4A16), kW4A8 = int64_t(QuantKind::Int4W4A8),
                  kW8A8 = int64_t(QuantKind::Int8W8A8), kW4A16Zp8 = int64_t(QuantKind::Int4W4A16Zp8),
                  kW4A16Bf16 = int64_t(QuantKind::Int4W4A16Bf16), kW4A16I16 = int64_t(QuantKind::Int4W4A16Int16);

// Args: jobs, rows, cols, act (0: f32, 1: bf16). A decode step's expert batch: `jobs` small
// matrices of different experts (not adjacent in memory) in one matmul_batch, one token, cold
// (each call takes the next of many copies, as each step picks other experts); mini's gate / up
// products of 2 experts (4 x [128 x 192]) and their down products (2 x [192 x 128]), a batch of
// 16, and `small`'s 4 experts (8 x [512 x 1024] gate / up, 4 x [1024 x 512] down; 1 MiB each).
// Bytes/s of the weights read, as a fraction of the read bandwidth.
void BM_ExpertBatch(benchmark::State& state) {
  const int64_t jobs = state.range(0), rows = state.range(1), cols = state.range(2);
  const bool bf16 = state.range(3) != 0;
  if (bf16 && !kernels::bf16_dot_rows()) {
    state.SkipWithError("this CPU lacks avx512_bf16");
    return;
  }
  ThreadPool pool(bench_threads());
  const Bf16Weights w(rows, cols, kColdBytes);
  const std::vector<float> x = activations(cols);
  std::vector<float> y(size_t(jobs * rows));
  std::vector<MatmulJob> batch(static_cast<size_t>(jobs));
  int64_t i = 0;
  for (auto _ : state) {
    for (int64_t j = 0; j < jobs; ++j) {
      WeightMatrix m = w.at(i++ * 7);  // 7 copies apart: no two jobs adjacent, as experts are not
      m.act_quant = bf16 ? ActivationQuant::Bf16 : ActivationQuant::None;
      batch[size_t(j)] = {m, x.data(), 1, &y[size_t(j * rows)]};
    }
    matmul_batch(pool, batch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, jobs * rows * cols * 2);
  state.SetLabel(bf16 ? "bf16 act" : "f32 act");
}

// Args: cache dtype (0 float32, 1 bfloat16), isa, bf16q (1: the scores and values from queries and
// probabilities rounded to bf16, kernels::mla_scores_bf16 / mla_values_bf16, as a step over a bf16
// cache with bf16 linears runs them on a CPU with AVX512_BF16). The absorbed attention's inner loop for one
// decode query of the real model (64 heads, lora 512, rope 64) over 1024 cached rows, as
// model/attention_absorbed.cpp runs it: per tile of 16 rows, the scores of the 8 groups of 8
// heads, then their probability-weighted sums of the latents. The rows (2.3 MiB in f32) stay in
// the last-level cache: the figure is the kernels' multiply-add rate (counter MACs, per second),
// the bound of a long context's decode once the cache is read once per step.
void BM_MlaTiles(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  const auto isa = Isa(state.range(1));
  const bool bf16_queries = state.range(2) != 0;
  if (skip_unsupported(state, isa)) return;
  const kernels::MlaScoresBf16 scores_bf16 = kernels::mla_scores_bf16();
  const kernels::MlaValuesBf16 values_bf16 = kernels::mla_values_bf16();
  if (bf16_queries && (!bf16 || isa != Isa::Avx512 || !scores_bf16)) {
    state.SkipWithError("bf16 queries: a bf16 cache, on AVX-512 with avx512_bf16");
    return;
  }
  constexpr int64_t kRows = 1024, kHeads = 64, kLora = 512, kRope = 64, kTile = 16;
  const int64_t width = kLora + kRope, elem = bf16 ? 2 : 4;
  const std::vector<float> values = activations(kRows * width);
  std::vector<std::byte> rows(size_t(kRows * width * elem));
  for (size_t i = 0; i < values.size(); ++i) {
    if (bf16) {
      const uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(&rows[i * 2], &b, 2);
    } else {
      std::memcpy(&rows[i * 4], &values[i], 4);
    }
  }
  const std::vector<float> q_lat = activations(kHeads * kLora), q_rope = activations(kHeads * kRope);
  std::vector<float> p(size_t(kHeads * kTile)), out(size_t(kHeads * kLora));
  // The queries rounded to bf16 once, each head's lora then rope values (as a step does per query).
  std::vector<float> q_all(size_t(kHeads * width));
  for (int64_t h = 0; h < kHeads; ++h) {
    std::copy_n(&q_lat[size_t(h * kLora)], kLora, &q_all[size_t(h * width)]);
    std::copy_n(&q_rope[size_t(h * kRope)], kRope, &q_all[size_t(h * width + kLora)]);
  }
  std::vector<uint16_t> qb(q_all.size());
  kernels::round_to_bf16(q_all.data(), int64_t(q_all.size()), qb.data());
  for (auto _ : state) {
    for (int64_t j = 0; j < kRows; j += kTile) {
      MlaRows m{bf16 ? KvRowElem::BF16 : KvRowElem::F32, &rows[size_t(j * width * elem)], width * elem, kTile,
                kLora, kRope, 0};
      for (int64_t g = 0; g < kHeads; g += kMlaMaxHeads) {
        if (bf16_queries)
          scores_bf16(m, kMlaMaxHeads, &qb[size_t(g * width)], width, 0.01f, &p[size_t(g * kTile)], kTile);
        else
          mla_scores(m, kMlaMaxHeads, &q_lat[size_t(g * kLora)], kLora, &q_rope[size_t(g * kRope)], kRope, 0.01f,
                     &p[size_t(g * kTile)], kTile, isa);
      }
      for (int64_t g = 0; g < kHeads; g += kMlaMaxHeads) {
        if (bf16_queries)
          values_bf16(m, kMlaMaxHeads, &p[size_t(g * kTile)], kTile, &out[size_t(g * kLora)], kLora);
        else
          mla_values(m, kMlaMaxHeads, &p[size_t(g * kTile)], kTile, &out[size_t(g * kLora)], kLora, isa);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["MACs"] = benchmark::Counter(double(state.iterations()) * double(kRows * kHeads * (width + kLora)),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(isa_name(isa)) + (bf16 ? " bf16 cache" : " f32 cache") +
                 (bf16_queries ? ", bf16 queries and probabilities" : ""));
}

// Args: n, isa. Softmax over n attention scores (one head at n positions of context) and SwiGLU
// over n intermediates, in place; scalar is the C library's exp, the baseline of the SIMD ones.
// Each call works on the last one's output (restoring the input would cost more than a short
// softmax); the SIMD paths do the same work whatever the values.
void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto isa = Isa(state.range(1));
  if (skip_unsupported(state, isa)) return;
  std::vector<float> x = activations(n);
  for (auto _ : state) {
    softmax_f32(x.data(), n, isa);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(std::string(isa_name(isa)));
}
void BM_SiluMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto isa = Isa(state.range(1));
  if (skip_unsupported(state, isa)) return;
  const std::vector<float> up = activations(n);
  std::vector<float> g = activations(n);
  for (auto _ : state) {
    silu_mul_f32(g.data(), up.data(), n, isa);
    benchmark::DoNotOptimize(g.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(std::string(isa_name(isa)));
}

// Each argument list once per SIMD ISA (appended as the last argument); unsupported ISAs skip
// by name when run.
void add_per_isa(benchmark::internal::Benchmark* b, std::initializer_list<std::vector<int64_t>> args) {
  for (int64_t isa : {kAvx2, kAvx512})
    for (std::vector<int64_t> a : args) {
      a.push_back(isa);
      b->Args(a);
    }
}
// The real Kimi-K2.5 expert shapes: gate/up [2048 x 7168] and down [7168 x 2048]; and short rows
// of `small` (its lm_head has rows of 1024 inputs, its experts' down projections 512).
void gemv_args(benchmark::internal::Benchmark* b) {
  add_per_isa(b, {{2048, 7168, 1}, {7168, 2048, 1}, {4096, 4096, 1}, {2048, 7168, 0}, {7168, 2048, 0},
                  {8192, 1024, 1}, {16384, 512, 1}, {512, 1024, 1}, {1024, 512, 1}});
  b->Args({7168, 2048, 1, kScalar});
}
void quant_args(benchmark::internal::Benchmark* b) {
  add_per_isa(b, {{256, 2048, 1, 0, kW4A16}, {256, 2048, 1, 0, kW4A8}, {256, 2048, 1, 0, kW8A8},{2048, 7168, 1, 1, kW4A16},
                  {7168, 2048, 1, 1, kW4A16},
                  {2048, 7168, 1, 1, kW4A16Zp8},
                  {7168, 2048, 1, 1, kW4A16Zp8},
                  {2048, 7168, 1, 1, kW4A8},
                  {7168, 2048, 1, 1, kW4A8},
                  {2048, 7168, 1, 1, kW4A16Bf16},
                  {7168, 2048, 1, 1, kW4A16Bf16},
                  {2048, 7168, 1, 1, kW8A8},
                  {2048, 7168, 1, 0, kW4A16},
                  {2048, 7168, 1, 0, kW4A8},
                  {2048, 7168, 1, 0, kW8A8},
                  {2048, 7168, 1, 0, kW4A16Bf16},
                  {2048, 7168, 64, 0, kW4A16},
                  {2048, 7168, 64, 0, kW4A16Zp8},
                  {2048, 7168, 64, 0, kW4A8},
                  {2048, 7168, 64, 0, kW4A16Bf16},
                  {2048, 7168, 64, 0, kW8A8},
                  // An expert's share of a 512-token prompt (512 x 8 / 384 ~ 11 tokens), cold.
                  {2048, 7168, 12, 1, kW4A16Bf16}});
  // The int16 INT4 kernel on AVX-512 beside the one matmul picks (on AVX2 kind 4 is it already).
  // [1024 x 2048] (1 MiB: streamed one row at a time) stays in L2: the kernels' own speed.
  for (const auto& a : std::vector<std::vector<int64_t>>{{2048, 7168, 1, 1},
                                                         {7168, 2048, 1, 1},
                                                         {2048, 7168, 1, 0},
                                                         {2048, 7168, 64, 0},
                                                         {2048, 7168, 12, 1},
                                                         {1024, 2048, 1, 0}})
    b->Args({a[0], a[1], a[2], a[3], kW4A16I16, kAvx512});
  b->Args({1024, 2048, 1, 0, kW4A16Bf16, kAvx512});
}
void gemm_args(benchmark::internal::Benchmark* b) {
  add_per_isa(b, {{2048, 2048, 64}, {2048, 7168, 64}, {2048, 2048, 8}});
}

// Expert gate/up [2048 x 7168] cold, mini's lm_head [4352 x 192] hot and cold (in a decode step the
// rest of the model evicts it from an 8 MiB L3) and a [512 x 192] hot, for
// n = 1, 2, 4, 8 tokens.
void small_batch_args(benchmark::internal::Benchmark* b) {
  for (const int64_t n : {1, 2, 4, 8})
    add_per_isa(b, {{2048, 7168, n, 1}, {8192, 1024, n, 1}, {4352, 192, n, 0}, {4352, 192, n, 1}, {512, 192, n, 0}});
}

BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();
// The real Kimi-K2.5 expert shapes: gate/up [2048 x 7168] and down [7168 x 2048], cold.
BENCHMARK(BM_Gemv)
    ->ArgNames({"rows", "cols", "cold", "isa"})
    ->Apply(gemv_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// Decode GEMV 1 x [2048 x 7168] and 1 x [7168 x 2048] cold (INT4 group 32: compare with BM_Gemv
// of the same shape, BF16), hot, and the prefill GEMM 64 x [2048 x 7168], per format.
BENCHMARK(BM_QuantMatmul)
    ->ArgNames({"rows", "cols", "n", "cold", "kind", "isa"})
    ->Apply(quant_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Int16Activations)->ArgNames({"cols", "lanes"})->ArgsProduct({{2048, 7168}, {8, 16}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemm)
    ->ArgNames({"rows", "cols", "n", "isa"})
    ->Apply(gemm_args)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_Bf16Activations)
    ->ArgNames({"rows", "cols", "n", "cold", "act"})
    ->ArgsProduct({{2048}, {7168}, {1, 4, 8, 12, 64}, {0, 1}, {0, 1}})
    ->Args({7168, 2048, 1, 1, 0})
    ->Args({7168, 2048, 1, 1, 1})
    ->Args({8192, 1024, 1, 1, 0})
    ->Args({8192, 1024, 1, 1, 1})
    ->Args({16384, 512, 1, 1, 0})
    ->Args({16384, 512, 1, 1, 1})
    ->Args({4352, 192, 1, 0, 0})
    ->Args({4352, 192, 1, 0, 1})
    ->Args({512, 192, 1, 0, 0})
    ->Args({512, 192, 1, 0, 1})
    ->Args({4352, 192, 4, 0, 0})
    ->Args({4352, 192, 4, 0, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_ExpertBatch)
    ->ArgNames({"jobs", "rows", "cols", "act"})
    ->ArgsProduct({{4}, {128}, {192}, {0, 1}})
    ->ArgsProduct({{2}, {192}, {128}, {0, 1}})
    ->ArgsProduct({{16}, {128}, {192}, {0, 1}})
    ->ArgsProduct({{8}, {512}, {1024}, {0, 1}})
    ->ArgsProduct({{4}, {1024}, {512}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_MlaTiles)
    ->ArgNames({"bf16", "isa", "bf16q"})
    ->ArgsProduct({{0, 1}, {kScalar, kAvx2, kAvx512}, {0}})
    ->Args({1, kAvx512, 1})
    ->Unit(benchmark::kMicrosecond);
// Scores of mini's decode (64), a long context (8192); SwiGLU of one Kimi-K2.5 token's 8
// routed experts (8 x 2048) and of mini's dense layer (512).
BENCHMARK(BM_Softmax)->ArgNames({"n", "isa"})->ArgsProduct({{64, 8192}, {kScalar, kAvx2, kAvx512}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SiluMul)->ArgNames({"n", "isa"})->ArgsProduct({{512, 16384}, {kScalar, kAvx2, kAvx512}})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_SmallBatch)
    ->ArgNames({"rows", "cols", "n", "cold", "isa"})
    ->Apply(small_batch_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace kimi

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Measured before the timed runs, in the same process: the roofline of the GEMV figures.
  const double bw = kimi::read_bandwidth();
  std::printf("measured read bandwidth: %.2f GB/s (%d pool threads, 0 = all cores; kimi::measure_read_bandwidth)\n",
              bw * 1e-9, kimi::bench_threads());
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB/s", bw * 1e-9);
  benchmark::AddCustomContext("read_bandwidth", text);
  benchmark::AddCustomContext("best_isa", std::string(kimi::isa_name(kimi::best_isa())));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
