// The integer-weight matmul kernels (Int4Group / Int8Group, f32 or dynamic int8 activations):
// the scalar reference against a double-precision dequantise-then-multiply computed here from
// the format definition, and every SIMD variant this CPU has against the scalar reference, on
// random ragged shapes and group sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/quant_kernels.h"
#include "kernels/quantize.h"
#include "test_util.h"

namespace kimi {
namespace {

using kernels::QuantIsa;

struct QuantCase {
  WeightFormat format;
  ActivationQuant act;
  DType scale_dtype;
  bool asymmetric;
  int64_t rows, cols, group;
};

std::string describe(const QuantCase& c, int64_t n) {
  return std::string(c.format == WeightFormat::Int4Group ? "int4" : "int8") +
         (c.asymmetric ? "-asym" : "") + (c.act == ActivationQuant::Int8PerToken ? " a8" : " f32") +
         " scales " + std::string(dtype_name(c.scale_dtype)) + " [" + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + "] g" + std::to_string(c.group) + " n=" + std::to_string(n);
}

// A random integer-format matrix and its values decoded independently of the kernels.
struct QuantWeights {
  QuantCase c;
  std::vector<uint8_t> data, zeros;
  std::vector<uint8_t> scales;   // raw BF16 or F32
  std::vector<double> values;    // [rows, cols]

  WeightMatrix matrix() const {
    WeightMatrix w;
    w.format = c.format;
    w.act_quant = c.act;
    w.data = data.data();
    w.rows = c.rows;
    w.cols = c.cols;
    w.scales = scales.data();
    w.scale_dtype = c.scale_dtype;
    w.group_size = c.group;
    w.zero_points = c.asymmetric ? zeros.data() : nullptr;
    return w;
  }
};

// Decodes q.values from q's packed data, scales and zero points, independently of the kernels.
QuantWeights make_quant_values(QuantWeights q) {
  const QuantCase& c = q.c;
  const bool int4 = c.format == WeightFormat::Int4Group;
  const int64_t groups = c.cols / c.group;
  std::vector<double> scale(size_t(c.rows * groups));
  for (size_t i = 0; i < scale.size(); ++i) {
    if (c.scale_dtype == DType::BF16) {
      uint16_t b;
      std::memcpy(&b, &q.scales[i * 2], 2);
      scale[i] = bf16_to_f32(b);
    } else {
      float f;
      std::memcpy(&f, &q.scales[i * 4], 4);
      scale[i] = f;
    }
  }
  q.values.resize(size_t(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t i = 0; i < c.cols; ++i) {
      const size_t g = size_t(r * groups + i / c.group);
      int v;
      if (int4) {
        // Word i / 8 of the row, bits 4 * (i % 8), little-endian: the compressed-tensors packing.
        uint32_t word;
        std::memcpy(&word, &q.data[size_t(r * c.cols / 2 + (i / 8) * 4)], 4);
        v = int((word >> (4 * (i % 8))) & 0xF) - (c.asymmetric ? q.zeros[g] : 8);
      } else {
        v = int(int8_t(q.data[size_t(r * c.cols + i)]));
      }
      q.values[size_t(r * c.cols + i)] = v * scale[g];
    }
  return q;
}

QuantWeights make_quant(const QuantCase& c, Rng& rng) {
  QuantWeights q{c, {}, {}, {}, {}};
  const bool int4 = c.format == WeightFormat::Int4Group;
  const int64_t groups = c.cols / c.group;
  q.data.resize(size_t(int4 ? c.rows * c.cols / 2 : c.rows * c.cols));
  for (auto& b : q.data) b = uint8_t(rng.next_u64());
  q.zeros.resize(size_t(c.rows * groups));
  for (auto& z : q.zeros) z = uint8_t(rng.next_u64() % 16);
  q.scales.resize(size_t(c.rows * groups) * dtype_size(c.scale_dtype));
  for (size_t i = 0; i < size_t(c.rows * groups); ++i) {
    const float s = float(0.002 + 0.05 * rng.uniform());
    if (c.scale_dtype == DType::BF16) {
      const uint16_t b = f32_to_bf16(s);
      std::memcpy(&q.scales[i * 2], &b, 2);
    } else {
      std::memcpy(&q.scales[i * 4], &s, 4);
    }
  }
  return make_quant_values(std::move(q));
}

std::vector<float> random_x(int64_t count, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x) v = float(rng.normal());
  return x;
}

// Double-precision reference: dequantise, then multiply. With int8 activations, x is first
// quantised here per token from the documented rule (scale = max|x| / 127, round half even).
std::vector<double> reference(const QuantWeights& q, const std::vector<float>& x, int64_t n,
                              std::vector<double>& magnitude, int64_t int16_block = 64) {
  const QuantCase& c = q.c;
  std::vector<double> y(size_t(n * c.rows)), xd(size_t(c.cols));
  magnitude.assign(y.size(), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * c.cols;
    double xs = 1.0;
    if (c.act == ActivationQuant::Int8PerToken) {
      float absmax = 0.0f;
      for (int64_t i = 0; i < c.cols; ++i) absmax = std::max(absmax, std::fabs(xt[i]));
      const float scale = absmax / 127.0f, inv = 1.0f / scale;
      for (int64_t i = 0; i < c.cols; ++i) xd[size_t(i)] = std::nearbyint(xt[i] * inv);
      xs = scale;
    } else if (c.act == ActivationQuant::Bf16) {  // the kernels' int16 (int4_word16_layout)
      xd = test::int16_block_values(xt, c.cols, int16_block);
    } else {
      for (int64_t i = 0; i < c.cols; ++i) xd[size_t(i)] = xt[i];
    }
    for (int64_t r = 0; r < c.rows; ++r) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < c.cols; ++i) {
        const double term = q.values[size_t(r * c.cols + i)] * xd[size_t(i)];
        acc += term;
        mag += std::abs(term);
      }
      y[size_t(t * c.rows + r)] = acc * xs;
      magnitude[size_t(t * c.rows + r)] = mag * xs;
    }
  }
  return y;
}

// Runs one variant through kernels::quant_matmul, with guard values around y.
std::vector<float> run_variant(ThreadPool& pool, QuantIsa isa, const QuantWeights& q,
                               const std::vector<float>& x, int64_t n) {
  constexpr size_t kGuard = 16;
  constexpr float kGuardValue = 12345.0f;
  std::vector<float> y(size_t(n * q.c.rows) + 2 * kGuard, kGuardValue);
  kernels::quant_matmul(kernels::quant_kernels_for(isa), pool, q.matrix(), x.data(), n,
                        y.data() + kGuard);
  for (size_t i = 0; i < kGuard; ++i) {
    EXPECT_EQ(y[i], kGuardValue) << "write before y";
    EXPECT_EQ(y[y.size() - 1 - i], kGuardValue) << "write past y";
  }
  return std::vector<float>(y.begin() + kGuard, y.end() - kGuard);
}

// One variant on n random tokens against the double reference, within float rounding.
void expect_matches_reference(ThreadPool& pool, QuantIsa isa, const QuantWeights& q, int64_t n, Rng& rng) {
  const std::vector<float> x = random_x(n * q.c.cols, rng);
  std::vector<double> mag;
  const std::vector<double> want = reference(q, x, n, mag, kernels::word16_block(kernels::quant_kernels_for(isa).lanes));
  const std::vector<float> got = run_variant(pool, isa, q, x, n);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << describe(q.c, n) << " at " << i;
}

// Random cases: every format x activation x scale dtype, group sizes 32..128, 96 (a size the
// integer SIMD blocks cannot follow: scalar fallback) and per-channel, ragged row / column tails.
std::vector<QuantCase> random_cases(Rng& rng, int per_combo) {
  std::vector<QuantCase> cases;
  for (WeightFormat f : {WeightFormat::Int4Group, WeightFormat::Int8Group})
    for (bool asym : {false, true}) {
      if (asym && f == WeightFormat::Int8Group) continue;
      for (ActivationQuant a : {ActivationQuant::None, ActivationQuant::Int8PerToken})
        for (DType sd : {DType::BF16, DType::F32})
          for (int i = 0; i < per_combo; ++i) {
            const int64_t rows = 1 + int64_t(rng.next_u64() % 37);
            int64_t group, cols;
            const int kind = int(rng.next_u64() % 5);
            if (kind < 4) {
              const int64_t groups[] = {32, 64, 128, 96};
              group = groups[kind];
              cols = group * (1 + int64_t(rng.next_u64() % 5));
            } else {  // per channel: any multiple of 8 (int4) or any size (int8)
              cols = f == WeightFormat::Int4Group ? 8 * (1 + int64_t(rng.next_u64() % 40))
                                                  : 1 + int64_t(rng.next_u64() % 300);
              group = cols;
            }
            cases.push_back({f, a, sd, asym, rows, cols, group});
          }
    }
  return cases;
}

constexpr int64_t kTokenCounts[] = {1, 2, 3, 4, 5, 7, 13};

TEST(QuantKernels, ScalarMatchesDoubleReference) {
  ThreadPool pool(3);
  Rng rng(7);
  for (const QuantCase& c : random_cases(rng, 6)) {
    const QuantWeights q = make_quant(c, rng);
    const int64_t n = kTokenCounts[rng.next_u64() % 7];
    const std::vector<float> x = random_x(n * c.cols, rng);
    std::vector<double> mag;
    const std::vector<double> want = reference(q, x, n, mag);
    const std::vector<float> got = run_variant(pool, QuantIsa::Scalar, q, x, n);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * mag[i] + 1e-6) << describe(c, n) << " at " << i;
  }
}

class QuantKernelsIsa : public ::testing::TestWithParam<QuantIsa> {
 protected:
  void SetUp() override {
    if (!kernels::quant_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << kernels::quant_isa_name(GetParam());
  }
};

TEST_P(QuantKernelsIsa, MatchesScalarOnRaggedShapes) {
  ThreadPool pool(3);
  Rng rng(11);
  for (const QuantCase& c : random_cases(rng, 8)) {
    const QuantWeights q = make_quant(c, rng);
    for (int64_t n : {int64_t(1), kTokenCounts[1 + rng.next_u64() % 6]}) {
      const std::vector<float> x = random_x(n * c.cols, rng);
      std::vector<double> mag;
      const std::vector<double> want = reference(q, x, n, mag);
      const std::vector<float> scalar = run_variant(pool, QuantIsa::Scalar, q, x, n);
      const std::vector<float> got = run_variant(pool, GetParam(), q, x, n);
      for (size_t i = 0; i < want.size(); ++i) {
        // Within float rounding of the scalar path (and so of the exact result).
        ASSERT_NEAR(got[i], scalar[i], 1e-5 * mag[i] + 1e-6) << describe(c, n) << " at " << i;
        ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << describe(c, n) << " at " << i;
      }
    }
  }
}

// The Kimi expert shapes (group 32, BF16 scales) at full width, decode and a prefill batch.
TEST_P(QuantKernelsIsa, KimiExpertShape) {
  ThreadPool pool(2);
  Rng rng(3);
  for (ActivationQuant a : {ActivationQuant::None, ActivationQuant::Int8PerToken}) {
    const QuantCase c{WeightFormat::Int4Group, a, DType::BF16, false, 70, 7168, 32};
    const QuantWeights q = make_quant(c, rng);
    for (int64_t n : {1, 20}) {
      expect_matches_reference(pool, GetParam(), q, n, rng);
      if (HasFatalFailure()) return;
    }
  }
}

// One token over matrices of 1 MiB or more (streamed: one row at a time, each tile prefetching
// into the rows after it): every kernel form (int4 x f32 on words and per nibble, int4 x int8
// in super-blocks and per block, int8 x f32 and x int8), ragged row counts, both scale dtypes,
// on a pool whose threads take shares of the rows.
TEST_P(QuantKernelsIsa, StreamedDecodeMatrices) {
  ThreadPool pool(2);
  Rng rng(29);
  const QuantCase cases[] = {
      {WeightFormat::Int4Group, ActivationQuant::None, DType::BF16, false, 301, 7168, 32},
      {WeightFormat::Int4Group, ActivationQuant::None, DType::F32, true, 599, 4096, 64},
      {WeightFormat::Int4Group, ActivationQuant::Int8PerToken, DType::BF16, false, 301, 7168, 32},
      {WeightFormat::Int4Group, ActivationQuant::Int8PerToken, DType::F32, true, 1030, 2048, 128},
      {WeightFormat::Int8Group, ActivationQuant::None, DType::F32, false, 1101, 1000, 1000},
      {WeightFormat::Int8Group, ActivationQuant::Int8PerToken, DType::BF16, false, 515, 2048, 128},
  };
  for (const QuantCase& c : cases) {
    const QuantWeights q = make_quant(c, rng);
    ASSERT_GE(q.matrix().bytes(), size_t(1) << 20) << describe(c, 1);
    expect_matches_reference(pool, GetParam(), q, 1, rng);
    if (HasFatalFailure()) return;
  }
}

// int4 x f32 on whole packed words (AVX2: int4_word8_layout, blocks of 64 inputs): every group
// mode (pairs of groups of 32 per block, groups of whole blocks, one group per row) with half and
// partial last blocks, both scale dtypes, a ragged row tile and token counts around the GEMM tile;
// all-15 and all-0 nibbles with large activations check the in-place nibble scaling (16^-j).
TEST_P(QuantKernelsIsa, Int4WordLayoutEdges) {
  ThreadPool pool(2);
  Rng rng(21);
  const std::pair<int64_t, int64_t> shapes[] = {{8, 8},     {40, 40},   {32, 32},   {96, 32},  {160, 32},
                                                {64, 64},   {128, 64},  {192, 64},  {256, 128}, {384, 192},
                                                {72, 72},   {2048, 32}, {640, 640}};
  for (const auto& [cols, group] : shapes)
    for (DType sd : {DType::BF16, DType::F32}) {
      const QuantCase c{WeightFormat::Int4Group, ActivationQuant::None, sd, false, 7, cols, group};
      QuantWeights q = make_quant(c, rng);
      for (int64_t n : {1, 4, 7}) {
        expect_matches_reference(pool, GetParam(), q, n, rng);
        if (HasFatalFailure()) return;
      }
    }
  for (uint8_t fill : {uint8_t(0xFF), uint8_t(0x00), uint8_t(0x8F)}) {
    const QuantCase c{WeightFormat::Int4Group, ActivationQuant::None, DType::F32, false, 3, 256, 32};
    QuantWeights q = make_quant(c, rng);
    std::fill(q.data.begin(), q.data.end(), fill);
    q = make_quant_values(std::move(q));
    std::vector<float> x = random_x(c.cols, rng);
    for (auto& v : x) v *= 1e4f;
    std::vector<double> mag;
    const std::vector<double> want = reference(q, x, 1, mag);
    const std::vector<float> got = run_variant(pool, GetParam(), q, x, 1);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << "fill " << int(fill) << " at " << i;
  }
}

// int4 x 16-bit activations as int16 (int4_word16_layout: per block of 64 inputs on 8 lanes, 128
// on 16): every group mode with half and partial last blocks, both scale dtypes, token counts
// around the GEMM tile, matrices large enough to stream (one row at a time), all-15 / all-0
// nibbles with large activations (the int32 sums' extremes), and a block whose inputs span 2^20.
// The 16-lane variants take the groups that tile blocks of 128 (the others are not asked).
TEST_P(QuantKernelsIsa, Int4Int16Activations) {
  const int lanes = kernels::quant_kernels_for(GetParam()).lanes;
  if (lanes == 0) GTEST_SKIP() << "the scalar reference: no int16 layout";
  const int64_t block = kernels::word16_block(lanes);
  ThreadPool pool(2);
  Rng rng(31);
  const std::pair<int64_t, int64_t> shapes[] = {{8, 8},     {40, 40},  {32, 32},   {96, 32},   {160, 32},
                                                {64, 64},   {128, 64}, {192, 64},  {256, 128}, {384, 192},
                                                {2048, 32}, {640, 640}, {512, 256}, {1152, 384}};
  for (const auto& [cols, group] : shapes)
    for (DType sd : {DType::BF16, DType::F32}) {
      const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Bf16, sd, false, 7, cols, group};
      const QuantWeights q = make_quant(c, rng);
      if (lanes == 16 && (group % 128 != 0 && 128 % group != 0 && group != cols)) {
        ASSERT_FALSE(kernels::int4_word16_layout(q.matrix(), lanes)) << describe(c, 1);
        continue;
      }
      ASSERT_TRUE(kernels::int4_word16_layout(q.matrix(), lanes)) << describe(c, 1);
      for (int64_t n : {1, 3, 4, 7}) {
        expect_matches_reference(pool, GetParam(), q, n, rng);
        if (HasFatalFailure()) return;
      }
    }
  for (const QuantCase& c : {QuantCase{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::BF16, false, 301, 7168, 32},
                             QuantCase{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::F32, false, 599, 4096, 64},
                             // 17 blocks: not whole scale windows (int4_i16_words16_runs takes those only).
                             QuantCase{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::BF16, false, 977, 2176, 32}}) {
    const QuantWeights q = make_quant(c, rng);
    ASSERT_GE(q.matrix().bytes(), size_t(1) << 20) << describe(c, 1);
    expect_matches_reference(pool, GetParam(), q, 1, rng);
    if (HasFatalFailure()) return;
  }
  for (uint8_t fill : {uint8_t(0xFF), uint8_t(0x00), uint8_t(0x8F)}) {
    const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::F32, false, 3, 256, 32};
    QuantWeights q = make_quant(c, rng);
    std::fill(q.data.begin(), q.data.end(), fill);
    q = make_quant_values(std::move(q));
    std::vector<float> x(size_t(c.cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? -3e4f : 3e4f) * std::ldexp(1.0f, -int(i % 21));
    std::vector<double> mag;
    const std::vector<double> want = reference(q, x, 1, mag, block);
    const std::vector<float> got = run_variant(pool, GetParam(), q, x, 1);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << "fill " << int(fill) << " at " << i;
  }
  // A NaN input is not quantized away: every row's output is NaN, as with f32 activations.
  const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::BF16, false, 5, 256, 32};
  const QuantWeights q = make_quant(c, rng);
  std::vector<float> x = random_x(c.cols, rng);
  x[77] = std::numeric_limits<float>::quiet_NaN();
  for (const float v : run_variant(pool, GetParam(), q, x, 1)) EXPECT_TRUE(std::isnan(v)) << v;
}

// A streamed one-token product of the int16 kernel reads a thread's rows as one run or as two side
// by side (QuantInput::stream_runs; prepare_input picks by CPU vendor): both give every row the
// same bits, for ranges split as threads split them (odd lengths end in a lone row), and match the
// reference.
TEST_P(QuantKernelsIsa, Int16StreamRunsAgree) {
  const kernels::QuantKernelTable& k = kernels::quant_kernels_for(GetParam());
  if (k.lanes == 0) GTEST_SKIP() << "the scalar reference: no int16 layout";
  ThreadPool pool(1);
  Rng rng(71);
  for (const QuantCase& c : {QuantCase{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::BF16, false, 301, 7168, 32},
                             QuantCase{WeightFormat::Int4Group, ActivationQuant::Bf16, DType::F32, false, 599, 4096, 64}}) {
    const QuantWeights q = make_quant(c, rng);
    ASSERT_GE(q.matrix().bytes(), size_t(1) << 20) << describe(c, 1);
    const std::vector<float> x = random_x(c.cols, rng);
    kernels::PreparedInput p;
    kernels::prepare_input(pool, k, q.matrix(), x.data(), 1, p);
    std::vector<float> y[2];
    for (const int runs : {1, 2}) {
      p.in.stream_runs = runs;
      y[runs - 1].assign(size_t(c.rows), std::numeric_limits<float>::quiet_NaN());
      const int64_t cuts[] = {0, 150, 151, 300, c.rows};
      for (size_t i = 0; i + 1 < std::size(cuts); ++i)
        k.matmul_rows(q.matrix(), p.in, y[runs - 1].data(), cuts[i], cuts[i + 1]);
    }
    std::vector<double> mag;
    const std::vector<double> want = reference(q, x, 1, mag, kernels::word16_block(k.lanes));
    for (int64_t r = 0; r < c.rows; ++r) {
      ASSERT_EQ(std::memcmp(&y[0][size_t(r)], &y[1][size_t(r)], sizeof(float)), 0)
          << describe(c, 1) << " row " << r << ": " << y[0][size_t(r)] << " in one run, " << y[1][size_t(r)] << " in two";
      ASSERT_NEAR(y[0][size_t(r)], want[size_t(r)], 1e-5 * mag[size_t(r)] + 1e-6) << describe(c, 1) << " row " << r;
    }
  }
}

// int4 x int8 at the extremes of the emulated dot products (nibbles 15 and 0, |x| quantised to
// 127 everywhere, one sign or alternating), where pair sums added in int16 are largest.
TEST_P(QuantKernelsIsa, Int4Int8ExtremeProducts) {
  ThreadPool pool(2);
  Rng rng(23);
  for (uint8_t fill : {uint8_t(0xFF), uint8_t(0x00), uint8_t(0xF0)})
    for (int pattern = 0; pattern < 6; ++pattern) {
      // BF16 and F32 scales: 16 groups of 32, so the kernels' whole scale windows are used.
      const DType sd = pattern < 3 ? DType::F32 : DType::BF16;
      const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Int8PerToken, sd, false, 5, 512, 32};
      QuantWeights q = make_quant(c, rng);
      std::fill(q.data.begin(), q.data.end(), fill);
      q = make_quant_values(std::move(q));
      std::vector<float> x(size_t(c.cols));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = pattern % 3 == 0 ? 3.0f : pattern % 3 == 1 ? -3.0f : (i % 2 ? 3.0f : -3.0f);
      std::vector<double> mag;
      const std::vector<double> want = reference(q, x, 1, mag);
      const std::vector<float> got = run_variant(pool, GetParam(), q, x, 1);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << "fill " << int(fill) << " x " << pattern;
    }
}

// int4 x int8 with groups of 32 on rows long and short enough for every scale window: whole
// windows of 8 groups, and a row's last windows that run past its end (zero-filled).
TEST_P(QuantKernelsIsa, Int4Int8ScaleWindows) {
  ThreadPool pool(2);
  Rng rng(29);
  for (int64_t cols : {64, 256, 288, 480, 512, 2048})
    for (DType sd : {DType::BF16, DType::F32}) {
      const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Int8PerToken, sd, false, 9, cols, 32};
      const QuantWeights q = make_quant(c, rng);
      for (int64_t n : {1, 3}) {
        expect_matches_reference(pool, GetParam(), q, n, rng);
        if (HasFatalFailure()) return;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, QuantKernelsIsa,
                         ::testing::Values(QuantIsa::Avx2, QuantIsa::Avx2Vnni, QuantIsa::Avx512,
                                           QuantIsa::Avx512Vnni, QuantIsa::Avx512VnniVbmi),
                         [](const ::testing::TestParamInfo<QuantIsa>& p) {
                           std::string s(kernels::quant_isa_name(p.param));
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// The public entry point: every float ISA (each picks its VNNI variant where present), split
// over threads, equals the reference; a row slice computes exactly those rows.
// The int16 activations prepare_input hands the kernels (int4_word16_layout), word for word
// against QuantInput's documented layout: per block of 8L inputs s = amax / 32767 (NaN if an input
// is), q = round-half-even(x * 32767 / amax) clamped to +-32767 at (q[8l + j], q[8l + 4 + j]) of
// vector j, and -8 x each lane's sum; zero past cols. The 16-lane variants do this with AVX-512
// (quantize_word16_avx512), the 8-lane ones with AVX2 (quantize_word8_avx2).
TEST(QuantKernels, Word16ActivationsFollowTheDocumentedLayout) {
  ThreadPool pool(2);
  Rng rng(53);
  int checked = 0;
  for (const QuantIsa isa : {QuantIsa::Avx2, QuantIsa::Avx2Vnni, QuantIsa::Avx512Vnni, QuantIsa::Avx512VnniVbmi,
                             QuantIsa::Avx512}) {
    if (!kernels::quant_isa_supported(isa)) continue;
    const int64_t L = kernels::quant_kernels_for(isa).lanes, B = kernels::word16_block(L);
    for (const int64_t cols : {8, 40, 128, 200, 384, 7168}) {
      const int64_t n = 3;
      std::vector<float> x = random_x(n * cols, rng);
      x[size_t(cols + cols / 2)] = std::numeric_limits<float>::quiet_NaN();  // token 1
      for (int64_t i = 0; i < cols; i += 3) x[size_t(2 * cols + i)] *= 1e-30f;  // token 2: tiny inputs
      const std::vector<uint8_t> data(size_t(4 * cols / 2));
      const std::vector<float> scales(size_t(4), 1.0f);
      WeightMatrix w;
      w.format = WeightFormat::Int4Group;
      w.act_quant = ActivationQuant::Bf16;
      w.data = data.data();
      w.rows = 4;
      w.cols = cols;
      w.group_size = cols;
      w.scales = scales.data();
      w.scale_dtype = DType::F32;
      ASSERT_TRUE(kernels::int4_word16_layout(w, int(L)));
      kernels::PreparedInput p;
      kernels::prepare_input(pool, kernels::quant_kernels_for(isa), w, x.data(), n, p);
      const kernels::QuantInput& in = p.in;
      const int64_t nblocks = (cols + B - 1) / B;
      ASSERT_EQ(in.ldxw, nblocks * B);
      ASSERT_EQ(in.ldsum, nblocks * L);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < nblocks; ++b) {
          const float* src = x.data() + t * cols + b * B;
          const int64_t len = std::min(B, cols - b * B);
          float amax = 0.0f;
          bool nan = false;
          for (int64_t i = 0; i < len; ++i) {
            nan |= std::isnan(src[i]);
            if (!std::isnan(src[i])) amax = std::max(amax, std::fabs(src[i]));
          }
          const float scale = amax / 32767.0f, inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
          const std::string where = std::string(kernels::quant_isa_name(isa)) + " cols " + std::to_string(cols) +
                                    " t " + std::to_string(t) + " block " + std::to_string(b);
          const float got_scale = in.xwscale[t * in.ldxws + b];
          if (nan) {
            EXPECT_TRUE(std::isnan(got_scale)) << where;
          } else {
            EXPECT_EQ(got_scale, scale) << where;
          }
          for (int64_t l = 0; l < L; ++l) {
            int32_t sum = 0;
            for (int64_t e = 0; e < 8; ++e) {
              const int64_t i = 8 * l + e;
              int32_t q = 0;
              if (i < len) {
                const float v = src[i] * inv;
                q = std::isnan(v) ? -32767 : int32_t(std::clamp(std::nearbyint(v), -32767.0f, 32767.0f));
              }
              sum += q;
              ASSERT_EQ(in.xw[t * in.ldxw + b * B + (e % 4) * 2 * L + 2 * l + e / 4], q) << where << " input " << i;
            }
            ASSERT_EQ(in.negsum[t * in.ldsum + b * L + l], -8 * sum) << where << " lane " << l;
          }
          ++checked;
        }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD variant with the int16 layout on this CPU";
}

TEST(QuantKernels, PublicMatmulAndRowSlice) {
  ThreadPool pool(4);
  Rng rng(5);
  const QuantCase c{WeightFormat::Int4Group, ActivationQuant::Int8PerToken, DType::BF16, true, 203, 256, 32};
  const QuantWeights q = make_quant(c, rng);
  const int64_t n = 3;
  const std::vector<float> x = random_x(n * c.cols, rng);
  std::vector<double> mag;
  const std::vector<double> want = reference(q, x, n, mag);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    std::vector<float> y(size_t(n * c.rows));
    matmul(pool, q.matrix(), x.data(), n, y.data(), isa);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5 * mag[i] + 1e-6) << isa_name(isa);
  }
  const WeightMatrix slice = q.matrix().row_slice(101, 50);
  std::vector<float> ys(size_t(n * 50));
  matmul(pool, slice, x.data(), n, ys.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < 50; ++r) {
      const size_t i = size_t(t * c.rows + 101 + r);
      ASSERT_NEAR(ys[size_t(t * 50 + r)], want[i], 1e-5 * mag[i] + 1e-6);
    }
  EXPECT_EQ(q.matrix().bytes(), size_t(203 * 256 / 2 + 203 * 8 * 2 + 203 * 8));
  EXPECT_EQ(slice.bytes(), size_t(50 * 256 / 2 + 50 * 8 * 2 + 50 * 8));
}

TEST(QuantKernels, ZeroAndNonFiniteActivations) {
  ThreadPool pool(2);
  Rng rng(9);
  for (QuantIsa isa : {QuantIsa::Scalar, kernels::quant_isa_for(best_isa())}) {
    const QuantCase c{WeightFormat::Int8Group, ActivationQuant::Int8PerToken, DType::F32, false, 9, 64, 64};
    const QuantWeights q = make_quant(c, rng);
    std::vector<float> x(size_t(2 * c.cols), 0.0f);
    x[size_t(c.cols + 5)] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> y = run_variant(pool, isa, q, x, 2);
    for (int64_t r = 0; r < c.rows; ++r) {
      EXPECT_EQ(y[size_t(r)], 0.0f) << "an all-zero token gives 0";
      EXPECT_TRUE(std::isnan(y[size_t(c.rows + r)])) << "a NaN in x gives NaN";
    }
  }
}

TEST(QuantKernels, RejectsInvalidMatrices) {
  ThreadPool pool(1);
  std::vector<uint8_t> data(64 * 64);
  std::vector<uint16_t> scales(64 * 2);
  std::vector<float> x(64), y(64);
  WeightMatrix w;
  w.format = WeightFormat::Int4Group;
  w.data = data.data();
  w.rows = 4;
  w.cols = 64;
  w.scales = scales.data();
  w.group_size = 32;
  matmul(pool, w, x.data(), 1, y.data());  // valid
  WeightMatrix bad = w;
  bad.group_size = 48;  // does not divide 64
  EXPECT_THROW(matmul(pool, bad, x.data(), 1, y.data()), Error);
  bad = w;
  bad.scales = nullptr;
  EXPECT_THROW(matmul(pool, bad, x.data(), 1, y.data()), Error);
  bad = w;
  bad.cols = 36;
  bad.group_size = 36;  // per-channel, but not a multiple of 8 for int4
  EXPECT_THROW(matmul(pool, bad, x.data(), 1, y.data()), Error);
  bad = w;
  bad.scale_dtype = DType::F16;
  EXPECT_THROW(matmul(pool, bad, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul_untransposed(w, x.data(), 1, y.data()), Error);
  EXPECT_THROW((void)w.row_slice(2, 3), Error);
}

}  // namespace
}  // namespace kimi
