// INT4 weights times activations rounded to BF16 (Int4Group with ActivationQuant::Bf16, what
// `--dtype bfloat16` gives W4A16 linears): every ISA's matmul against a double-precision
// reference over the dequantised weights and the rounded activations (the AVX512_BF16 kernel
// where the CPU has it, the f32-activation INT4 kernels elsewhere and for layouts it does not
// take), the kernel itself on a thread's share of rows, and what validation refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "common/thread_pool.h"
#include "kernels/bf16_dot.h"
#include "kernels/bf16_dot_rate.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/quant_kernels.h"
#include "kernels/quantize.h"
#include "isa_test.h"
#include "test_util.h"

namespace kimi {
namespace {

struct Int4Weights {
  int64_t rows = 0, cols = 0, group = 0;
  std::vector<uint8_t> packed, zeros;
  std::vector<uint16_t> scales_bf16;
  std::vector<float> scales_f32;
  WeightMatrix matrix() const {
    WeightMatrix w;
    w.format = WeightFormat::Int4Group;
    w.act_quant = ActivationQuant::Bf16;
    w.data = packed.data();
    w.rows = rows;
    w.cols = cols;
    w.group_size = group;
    w.scales = scales_f32.empty() ? static_cast<const void*>(scales_bf16.data()) : scales_f32.data();
    w.scale_dtype = scales_f32.empty() ? DType::BF16 : DType::F32;
    w.zero_points = zeros.empty() ? nullptr : zeros.data();
    return w;
  }
};

// f32_scales: the scales widened to F32 (msModelSlim stores them so); asymmetric: with zero points.
Int4Weights make_int4(int64_t rows, int64_t cols, int64_t group, bool f32_scales, bool asymmetric, Rng& rng) {
  Int4Weights w{rows, cols, group, std::vector<uint8_t>(size_t(rows * cols / 2)), {},
                std::vector<uint16_t>(size_t(rows * cols / group)), {}};
  const std::vector<float> f = test::random_floats(size_t(rows * cols), rng);
  if (asymmetric) {
    w.zeros.resize(w.scales_bf16.size());
    quantize_int4_asymmetric(f.data(), rows, cols, group, w.packed.data(), w.scales_bf16.data(), w.zeros.data());
  } else {
    quantize_int4_symmetric(f.data(), rows, cols, group, w.packed.data(), w.scales_bf16.data());
  }
  if (f32_scales)
    for (const uint16_t s : w.scales_bf16) w.scales_f32.push_back(bf16_to_f32(s));
  return w;
}

// y[t, r] against sum_k bf16(x[t, k]) * dequantised w[r, k] in double, within f32 summation rounding;
// int16_block > 0: x quantized to int16 per block of that many inputs instead (kernels::int4_word16_layout).
void expect_rounded_reference(const Int4Weights& iw, const std::vector<float>& x, int64_t n, const float* y,
                              int64_t r0, int64_t r1, const std::string& where, int64_t int16_block = 0) {
  const WeightMatrix w = iw.matrix();
  std::vector<float> row(size_t(w.cols));
  std::vector<double> xr(size_t(n * w.cols));
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<double> q = test::int16_block_values(x.data() + t * w.cols, w.cols, std::max<int64_t>(int16_block, 1));
    for (int64_t k = 0; k < w.cols; ++k) {
      const float v = x[size_t(t * w.cols + k)];
      xr[size_t(t * w.cols + k)] = int16_block > 0 ? q[size_t(k)] : double(bf16_to_f32(f32_to_bf16(v)));
    }
  }
  for (int64_t r = r0; r < r1; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double term = xr[size_t(t * w.cols + k)] * double(row[size_t(k)]);
        want += term;
        mag += std::abs(term);
      }
      ASSERT_LE(std::abs(double(y[t * w.rows + r]) - want), 1e-5 * mag + 1e-6)
          << where << " t=" << t << " r=" << r << ": got " << y[t * w.rows + r] << ", want " << want;
    }
  }
}

class Int4Bf16ActivationsIsa : public test::IsaTest {
 protected:
  // The block of inputs over which this ISA's matmul quantizes w's 16-bit activations to int16
  // (the 8-lane kernels always; the 16-lane ones where VDPBF16PS is slow), or 0 where it rounds
  // them to bf16.
  int64_t int16_block(const WeightMatrix& w) const {
    if (GetParam() == Isa::Avx2 && kernels::int4_word16_layout(w, 8)) return kernels::word16_block(8);
    if (GetParam() == Isa::Avx512 && !kernels::bf16_dot_is_fast() && kernels::int4_word16_layout(w, 16))
      return kernels::word16_block(16);
    return 0;
  }
};

// Rows around the 4-row tile, tokens around the 2-token tile, inputs in whole and partial blocks
// of 128, every group layout the kernel takes (32, 64, 128, 256, one per row) and one it does not
// (96), BF16 and F32 scales, and asymmetric weights (always the f32-activation kernels).
TEST_P(Int4Bf16ActivationsIsa, MatmulMatchesRoundedReference) {
  ThreadPool pool(3);
  Rng rng(17);
  struct Shape {
    int64_t cols, group;
  };
  const Shape shapes[] = {{8, 8},     {64, 32},   {128, 32},  {192, 32},  {192, 64},   {192, 192}, {256, 128},
                          {384, 96},  {512, 256}, {640, 64},  {1024, 32}, {2048, 128}, {320, 320}, {96, 32}};
  const int64_t n_list[] = {1, 2, 3, 4, 5, 7};
  int i = 0;
  for (const Shape sh : shapes)
    for (const bool f32_scales : {false, true})
      for (const bool asymmetric : {false, true}) {
        const int64_t rows = 1 + int64_t(rng.next_u64() % 37), n = n_list[size_t(i++) % 6];
        const Int4Weights w = make_int4(rows, sh.cols, sh.group, f32_scales, asymmetric, rng);
        const std::vector<float> x = test::random_floats(size_t(n * sh.cols), rng);
        std::vector<float> y(size_t(n * rows), -1.0f);
        matmul(pool, w.matrix(), x.data(), n, y.data(), GetParam());
        expect_rounded_reference(w, x, n, y.data(), 0, rows,
                                 "[" + std::to_string(rows) + "x" + std::to_string(sh.cols) + "] G=" +
                                     std::to_string(sh.group) + (f32_scales ? " f32 scales" : "") +
                                     (asymmetric ? " asymmetric" : "") + " n=" + std::to_string(n),
                                 int16_block(w.matrix()));
      }
}

// The activations really are rounded: 1 + 2^-10 is no bf16 (it rounds to 1), and 1 + 2^-8 lies
// halfway between 1 and 1 + 2^-7 (it rounds to the even 1); f32 activations keep both. The int16
// kernels keep both (each is its block's largest input), and lose an input below half a step
// (1/65534) of its block's largest, which bf16 would keep. Inputs 0-127 and 256-319 (a partial
// block of 128) hold the two; 192-255 (in a block of 64 or 128 of its own) the one kept.
TEST_P(Int4Bf16ActivationsIsa, RoundsTheActivations) {
  ThreadPool pool(1);
  Int4Weights iw{1, 320, 32, std::vector<uint8_t>(160, 0x99), {}, std::vector<uint16_t>(10, f32_to_bf16(1.0f)), {}};
  WeightMatrix w = iw.matrix();  // every weight (9 - 8) * 1 = 1
  std::vector<float> x(320, 0.0f);
  x[3] = 1.0f + std::ldexp(1.0f, -10);
  x[300] = 1.0f + std::ldexp(1.0f, -8);  // in the partial last block of 128
  float y = 0;
  w.act_quant = ActivationQuant::None;
  matmul(pool, w, x.data(), 1, &y, GetParam());
  EXPECT_EQ(y, 2.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -8)) << "f32 activations";
  w.act_quant = ActivationQuant::Bf16;
  matmul(pool, w, x.data(), 1, &y, GetParam());
  if (int16_block(w) == 0) {
    EXPECT_EQ(y, 2.0f) << "bf16 activations";
    return;
  }
  EXPECT_NEAR(y, 2.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -8), 1e-6) << "int16 activations";
  x[4] = std::ldexp(1.0f, -17);  // 2^-17 < (1 + 2^-10) / 65534: rounds to 0 in its block
  x[200] = std::ldexp(1.0f, -17);  // alone in its block: kept
  matmul(pool, w, x.data(), 1, &y, GetParam());
  EXPECT_NEAR(y, 2.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -17), 1e-6);
  EXPECT_GT(y, 2.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -18)) << "x[200] lost";
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Int4Bf16ActivationsIsa, test::all_isas(), test::isa_param_name);

// The AVX512_BF16 kernel on a share of the rows (a thread's [r0, r1)): those rows right, the
// others untouched. The last four shapes are large enough (over 1 MiB) to stream: one
// token reads them one row at a time, prefetching across row ends and the scales rows ahead;
// every group layout (per block, whole blocks, one per row) and F32 scales. Three tokens and more
// take the 2-row x 4-token tile, with partial row and token tiles.
TEST(Int4Bf16DotKernel, Avx512Bf16RowRanges) {
  const kernels::Int4Bf16DotRows rows_kernel = kernels::int4_bf16_dot_rows();
  if (!rows_kernel) GTEST_SKIP() << "this CPU lacks avx512_bf16";
  Rng rng(19);
  struct Shape {
    int64_t rows, cols, group, r0, r1;
    bool f32_scales = false;
  };
  for (const Shape sh : {Shape{23, 64, 32, 5, 18}, Shape{23, 192, 64, 5, 18}, Shape{23, 512, 512, 5, 18},
                         Shape{23, 2048, 32, 5, 18}, Shape{1100, 2048, 32, 3, 1090}, Shape{300, 7168, 64, 1, 299},
                         Shape{520, 4096, 256, 0, 517, true}, Shape{130, 16384, 16384, 2, 130}}) {
    for (const int64_t n : {1, 2, 3, 6, 9}) {
      if (sh.rows > 100 && n > 1) continue;
      const Int4Weights w = make_int4(sh.rows, sh.cols, sh.group, sh.f32_scales, false, rng);
      const std::vector<float> x = test::random_floats(size_t(n * sh.cols), rng);
      std::vector<uint16_t> xp(size_t(n * kernels::int4_bf16_packed_cols(sh.cols)));
      kernels::pack_int4_bf16_activations(x.data(), n, sh.cols, xp.data());
      std::vector<float> y(size_t(n * sh.rows), 777.0f);
      ASSERT_TRUE(kernels::int4_bf16_layout(w.matrix()));
      rows_kernel(w.matrix(), xp.data(), n, y.data(), sh.r0, sh.r1);
      expect_rounded_reference(w, x, n, y.data(), sh.r0, sh.r1,
                               "cols " + std::to_string(sh.cols) + " n=" + std::to_string(n));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < sh.rows; ++r)
          if (r < sh.r0 || r >= sh.r1) {
            ASSERT_EQ(y[size_t(t * sh.rows + r)], 777.0f) << "row " << r << " written";
          }
    }
  }
}

// The packed activations word by word against the documented order (per block of 128 inputs
// and j < 4, pair l = x[128b + 8l + j], x[128b + 8l + 4 + j], rounded to nearest even; zero past
// cols), over lengths with partial blocks and tokens: the AVX512_BF16 packing where the CPU has
// it, the portable loop elsewhere.
TEST(Int4Bf16DotKernel, PackedActivationsFollowThePairOrder) {
  Rng rng(41);
  for (const int64_t cols : {1, 7, 100, 128, 129, 192, 300, 7168}) {
    const int64_t n = 3, ld = kernels::int4_bf16_packed_cols(cols);
    const std::vector<float> x = test::random_floats(size_t(n * cols), rng);
    std::vector<uint16_t> got(size_t(n * ld) + 1, 0xBEEF);
    kernels::pack_int4_bf16_activations(x.data(), n, cols, got.data());
    ASSERT_EQ(got.back(), 0xBEEF) << "wrote past the packed rows, cols=" << cols;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t b = 0; b < ld / 128; ++b)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t l = 0; l < 16; ++l)
            for (int64_t half = 0; half < 2; ++half) {
              const int64_t i = 128 * b + 8 * l + 4 * half + j;
              const uint16_t want = i < cols ? f32_to_bf16(x[size_t(t * cols + i)]) : uint16_t(0);
              ASSERT_EQ(got[size_t(t * ld + 128 * b + 32 * j + 2 * l + half)], want)
                  << "cols=" << cols << " t=" << t << " b=" << b << " j=" << j << " l=" << l << " half=" << half;
            }
  }
}

// The kernel's layouts: symmetric, groups tiling blocks of 128 inputs or one per row.
TEST(Int4Bf16DotKernel, LayoutRule) {
  WeightMatrix w;
  w.format = WeightFormat::Int4Group;
  w.rows = 4;
  for (const auto& [cols, group, want] : {std::tuple{256, 32, true}, {256, 64, true}, {256, 128, true},
                                          {512, 256, true}, {192, 192, true}, {384, 96, false}, {320, 160, false}}) {
    w.cols = cols;
    w.group_size = group;
    EXPECT_EQ(kernels::int4_bf16_layout(w), want) << cols << " / " << group;
  }
  const uint8_t zero = 8;
  w.cols = 256;
  w.group_size = 32;
  w.zero_points = &zero;
  EXPECT_FALSE(kernels::int4_bf16_layout(w)) << "asymmetric";
}

TEST(Int4Bf16DotKernel, Int8WeightsRefuseBf16Activations) {
  ThreadPool pool(1);
  const std::vector<int8_t> q(64, 1);
  const std::vector<float> scales(2, 1.0f), x(32, 1.0f);
  WeightMatrix w;
  w.format = WeightFormat::Int8Group;
  w.data = q.data();
  w.rows = 2;
  w.cols = 32;
  w.group_size = 32;
  w.scales = scales.data();
  w.scale_dtype = DType::F32;
  float y[2];
  EXPECT_NO_THROW(matmul(pool, w, x.data(), 1, y));
  w.act_quant = ActivationQuant::Bf16;
  EXPECT_THROW(matmul(pool, w, x.data(), 1, y), Error);
}

}  // namespace
}  // namespace kimi
