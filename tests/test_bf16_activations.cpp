// BF16 weights times activations rounded to BF16 (ActivationQuant::Bf16, `--dtype bfloat16`):
// every ISA's matmul against a double-precision reference over the rounded activations, the
// AVX512_BF16 kernel itself (skipped by name where the CPU lacks it), the rounding, and the
// combinations the kernels refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "common/thread_pool.h"
#include "kernels/bf16_dot.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "isa_test.h"
#include "test_util.h"

namespace kimi {
namespace {

struct Bf16Weights {
  int64_t rows, cols;
  std::vector<uint16_t> bits;
  WeightMatrix matrix() const {
    WeightMatrix w{DType::BF16, bits.data(), rows, cols};
    w.act_quant = ActivationQuant::Bf16;
    return w;
  }
};

Bf16Weights make_bf16(int64_t rows, int64_t cols, Rng& rng) {
  Bf16Weights w{rows, cols, std::vector<uint16_t>(size_t(rows * cols))};
  for (auto& b : w.bits) b = f32_to_bf16(float(rng.normal()));
  return w;
}

// y[t, r] against sum_k bf16(x[t, k]) * w[r, k] in double, within f32 summation rounding.
void expect_rounded_reference(const Bf16Weights& w, const std::vector<float>& x, int64_t n, const float* y,
                              int64_t r0, int64_t r1, const std::string& where) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = r0; r < r1; ++r) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double term = double(bf16_to_f32(f32_to_bf16(x[size_t(t * w.cols + k)]))) *
                            double(bf16_to_f32(w.bits[size_t(r * w.cols + k)]));
        want += term;
        mag += std::abs(term);
      }
      ASSERT_LE(std::abs(double(y[t * w.rows + r]) - want), 1e-5 * mag + 1e-6)
          << where << " t=" << t << " r=" << r << ": got " << y[t * w.rows + r] << ", want " << want;
    }
}

class Bf16ActivationsIsa : public test::IsaTest {};

// Ragged shapes: rows around the 4-row tile, columns around the 32-wide step (and below it),
// tokens around the 6-token tile (7 and 13 in blocks of 4 + 3 and 5 + 4 + 4); Avx512 runs the
// AVX512_BF16 kernel where the CPU has it.
TEST_P(Bf16ActivationsIsa, MatmulMatchesRoundedReference) {
  ThreadPool pool(3);
  Rng rng(7);
  const int64_t cols_list[] = {1, 5, 31, 32, 33, 64, 100, 192, 257, 1030};
  const int64_t n_list[] = {1, 2, 3, 4, 5, 6, 7, 13};
  for (int i = 0; i < 40; ++i) {
    const int64_t rows = 1 + int64_t(rng.next_u64() % 70), cols = cols_list[i % 10], n = n_list[(i / 3) % 8];
    const Bf16Weights w = make_bf16(rows, cols, rng);
    const std::vector<float> x = test::random_floats(size_t(n * cols), rng);
    std::vector<float> y(size_t(n * rows), -1.0f);
    matmul(pool, w.matrix(), x.data(), n, y.data(), GetParam());
    expect_rounded_reference(w, x, n, y.data(), 0, rows,
                             "[" + std::to_string(rows) + "x" + std::to_string(cols) + "] n=" + std::to_string(n));
  }
}

// The activations really are rounded: 1 + 2^-10 is no bf16 (it rounds to 1), and 1 + 2^-8 lies
// halfway between 1 and 1 + 2^-7 (it rounds to the even 1); f32 activations keep both.
TEST_P(Bf16ActivationsIsa, RoundsTheActivationsToNearestEven) {
  ThreadPool pool(1);
  const uint16_t one = f32_to_bf16(1.0f);
  const std::vector<uint16_t> bits(40, one);  // one row of forty ones
  WeightMatrix w{DType::BF16, bits.data(), 1, 40};
  std::vector<float> x(40, 0.0f);
  x[0] = 1.0f + std::ldexp(1.0f, -10);
  x[39] = 1.0f + std::ldexp(1.0f, -8);  // in the 32-wide step's tail
  float y = 0;
  matmul(pool, w, x.data(), 1, &y, GetParam());
  EXPECT_EQ(y, 2.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -8)) << "f32 activations";
  w.act_quant = ActivationQuant::Bf16;
  matmul(pool, w, x.data(), 1, &y, GetParam());
  EXPECT_EQ(y, 2.0f) << "bf16 activations";
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Bf16ActivationsIsa, test::all_isas(), test::isa_param_name);

// The AVX512_BF16 kernel on a share of the rows (a thread's [r0, r1)): those rows exact, the
// others untouched.
TEST(Bf16DotKernel, Avx512Bf16RowRanges) {
  const kernels::Bf16DotRows rows_kernel = kernels::bf16_dot_rows();
  if (!rows_kernel) GTEST_SKIP() << "this CPU lacks avx512_bf16";
  Rng rng(11);
  struct Shape {
    int64_t rows, cols, r0, r1;
  };
  // Small matrices take the register tiles (rows longer than the GEMM's column block, 2048, cut
  // into blocks when there are more tokens than one tile); the last, short rows of a 1.1 MB
  // matrix, the decode path that reads them one at a time.
  for (const Shape sh : {Shape{23, 7, 5, 18}, Shape{23, 96, 5, 18}, Shape{23, 200, 5, 18}, Shape{23, 2048, 5, 18},
                         Shape{23, 4133, 5, 18}, Shape{1100, 520, 3, 1090}}) {
    for (const int64_t n : {1, 2, 6, 8, 9, 14}) {
      if (sh.rows > 100 && n > 1) continue;
      const int64_t rows = sh.rows, cols = sh.cols, r0 = sh.r0, r1 = sh.r1;
      const Bf16Weights w = make_bf16(rows, cols, rng);
      const std::vector<float> x = test::random_floats(size_t(n * cols), rng);
      std::vector<uint16_t> xb(x.size());
      kernels::round_to_bf16(x.data(), int64_t(x.size()), xb.data());
      std::vector<float> y(size_t(n * rows), 777.0f);
      rows_kernel(w.matrix(), xb.data(), n, y.data(), r0, r1);
      expect_rounded_reference(w, x, n, y.data(), r0, r1, "cols " + std::to_string(cols) + " n=" + std::to_string(n));
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r)
          if (r < r0 || r >= r1) {
            ASSERT_EQ(y[size_t(t * rows + r)], 777.0f) << "row " << r << " written";
          }
    }
  }
}

// Decode over a streamed matrix (>= 1 MiB) whose rows start mid-line, as the mapped tensors of a
// checkpoint do: the kernel loads whole lines and shifts the activations instead. The bytes just
// before the first row and after the last are NaNs, so a line's bytes outside the rows that reach
// a product show; every even offset in a line class, 1 to 6 tokens, short and long rows, a share.
TEST(Bf16DotKernel, StreamedRowsAtAnyLineOffset) {
  const kernels::Bf16DotRows rows_kernel = kernels::bf16_dot_rows();
  if (!rows_kernel) GTEST_SKIP() << "this CPU lacks avx512_bf16";
  Rng rng(19);
  constexpr uint16_t kNan = 0x7fc0;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{520, 1024}, {76, 7168}}) {
    const Bf16Weights dense = make_bf16(rows, cols, rng);
    for (const int64_t offset : {0, 2, 16, 34, 62}) {  // bytes past a 64-byte line
      // An aligned buffer with a line of NaNs before the rows and one after them.
      std::vector<uint16_t> storage(size_t(rows * cols + 128), kNan);
      const auto misaligned = reinterpret_cast<uintptr_t>(storage.data()) % 64;
      uint16_t* at = storage.data() + (64 - misaligned) % 64 / 2 + 32 + offset / 2;
      std::copy(dense.bits.begin(), dense.bits.end(), at);
      WeightMatrix w = dense.matrix();
      w.data = at;
      for (const int64_t n : {1, 2, 6}) {
        const std::vector<float> x = test::random_floats(size_t(n * cols), rng);
        std::vector<uint16_t> xb(x.size());
        kernels::round_to_bf16(x.data(), int64_t(x.size()), xb.data());
        std::vector<float> y(size_t(n * rows), 777.0f);
        const int64_t r0 = n == 2 ? 3 : 0, r1 = n == 2 ? rows - 2 : rows;
        rows_kernel(w, xb.data(), n, y.data(), r0, r1);
        expect_rounded_reference(dense, x, n, y.data(), r0, r1,
                                 std::to_string(rows) + "x" + std::to_string(cols) + " at line offset " +
                                     std::to_string(offset) + " n=" + std::to_string(n));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r)
            if (r < r0 || r >= r1) {
              ASSERT_EQ(y[size_t(t * rows + r)], 777.0f) << "row " << r << " written";
            }
      }
    }
  }
}

// The vectorised rounding agrees with the scalar one on every kind of value, at ragged counts.
TEST(Bf16DotKernel, RoundingMatchesScalar) {
  Rng rng(3);
  std::vector<float> x = test::random_floats(1000, rng);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), 1.0f + std::ldexp(1.0f, -8),
                            1.0f + 3 * std::ldexp(1.0f, -8), -65504.5f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 37] = specials[i];
  for (const int64_t count : {int64_t(0), int64_t(1), int64_t(15), int64_t(31), int64_t(33), int64_t(1000)}) {
    std::vector<uint16_t> got(size_t(count) + 1, 0xABCD);
    kernels::round_to_bf16(x.data(), count, got.data());
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t want = f32_to_bf16(x[size_t(i)]);
      if (std::isnan(x[size_t(i)]))
        EXPECT_TRUE(std::isnan(bf16_to_f32(got[size_t(i)]))) << i;
      else
        ASSERT_EQ(got[size_t(i)], want) << "value " << x[size_t(i)] << " at " << i << " of " << count;
    }
    EXPECT_EQ(got[size_t(count)], 0xABCD) << "wrote past " << count;
  }
}

TEST(Bf16DotKernel, RefusesWhatItCannotRun) {
  ThreadPool pool(1);
  const std::vector<float> f32(8, 1.0f);
  float y[2];
  WeightMatrix w{DType::F32, f32.data(), 2, 4};
  w.act_quant = ActivationQuant::Bf16;
  EXPECT_THROW(matmul(pool, w, f32.data(), 1, y), Error);  // bf16 activations need BF16 weights
  const std::vector<uint16_t> bf16(8, f32_to_bf16(1.0f));
  WeightMatrix b{DType::BF16, bf16.data(), 2, 4};
  b.act_quant = ActivationQuant::Int8PerToken;
  EXPECT_THROW(matmul(pool, b, f32.data(), 1, y), Error);  // float weights take no int8 activations
}

}  // namespace
}  // namespace kimi
