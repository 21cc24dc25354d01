// The CPU kernels against a double-precision reference, for every instruction set this CPU has
// (the others are skipped), all weight dtypes, and ragged shapes that exercise every tail path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "common/thread_pool.h"
#include "kernels/bandwidth.h"
#include "kernels/bf16_dot.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "kernels/vec_ops.h"
#include "isa_test.h"
#include "test_util.h"

namespace kimi {
namespace {

constexpr DType kWeightDTypes[] = {DType::BF16, DType::F16, DType::F32};

// A weight matrix in a given storage dtype together with the exact values it decodes to.
struct TestWeights {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> storage;  // the raw checkpoint-format bytes
  std::vector<double> values;    // [rows, cols], the decoded stored values

  WeightMatrix matrix() const { return {dtype, storage.data(), rows, cols}; }
};

TestWeights make_weights(DType dtype, int64_t rows, int64_t cols, Rng& rng) {
  TestWeights w{dtype, rows, cols, {}, {}};
  const size_t n = size_t(rows * cols);
  w.storage.resize(n * dtype_size(dtype));
  w.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = float(rng.normal());
    if (dtype == DType::BF16) {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(&w.storage[i * 2], &b, 2);
      w.values[i] = bf16_to_f32(b);
    } else if (dtype == DType::F16) {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(&w.storage[i * 2], &h, 2);
      w.values[i] = f16_to_f32(h);
    } else {
      std::memcpy(&w.storage[i * 4], &v, 4);
      w.values[i] = v;
    }
  }
  return w;
}

using test::random_floats;

// |got - want| within float rounding of a sum whose terms have absolute values summing to `mag`.
void expect_close(double got, double want, double mag, const std::string& where) {
  const double tol = 1e-5 * mag + 1e-6;
  ASSERT_LE(std::abs(got - want), tol) << where << ": got " << got << ", want " << want;
}

class KernelsIsa : public test::IsaTest {};

// y[n, rows] = x[n, cols] . W^T via the kernel, checked against the double reference; y gets
// guard values around it that must survive.
void check_matmul(ThreadPool& pool, Isa isa, const TestWeights& w, int64_t n, Rng& rng) {
  const std::vector<float> x = random_floats(size_t(n * w.cols), rng);
  constexpr size_t kGuard = 16;
  constexpr float kGuardValue = 12345.0f;
  std::vector<float> y(size_t(n * w.rows) + 2 * kGuard, kGuardValue);
  matmul(pool, w.matrix(), x.data(), n, y.data() + kGuard, isa);
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(y[i], kGuardValue) << "write before y";
    ASSERT_EQ(y[y.size() - 1 - i], kGuardValue) << "write past y";
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double term = double(x[size_t(t * w.cols + k)]) * w.values[size_t(r * w.cols + k)];
        want += term;
        mag += std::abs(term);
      }
      expect_close(y[kGuard + size_t(t * w.rows + r)], want, mag,
                   std::string(dtype_name(w.dtype)) + " [" + std::to_string(w.rows) + "x" +
                       std::to_string(w.cols) + "] n=" + std::to_string(n) + " t=" +
                       std::to_string(t) + " r=" + std::to_string(r));
    }
  }
}

TEST_P(KernelsIsa, MatmulRaggedShapes) {
  ThreadPool pool(3);
  Rng rng(42);
  for (DType dt : kWeightDTypes) {
    for (int i = 0; i < 40; ++i) {
      const int64_t rows = 1 + int64_t(rng.next_u64() % 67);
      const int64_t cols = 1 + int64_t(rng.next_u64() % 300);
      const int64_t n = 1 + int64_t(rng.next_u64() % 13);
      check_matmul(pool, isa(), make_weights(dt, rows, cols, rng), n, rng);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(KernelsIsa, MatmulEdgeShapes) {
  ThreadPool pool(2);
  Rng rng(7);
  const int64_t shapes[][3] = {{1, 1, 1},  {1, 1, 7},   {4, 16, 1},  {4, 16, 6},  {5, 17, 7},
                               {3, 33, 2}, {8, 32, 12}, {67, 15, 1}, {2, 300, 13}};
  for (DType dt : kWeightDTypes)
    for (const auto& s : shapes) {
      check_matmul(pool, isa(), make_weights(dt, s[0], s[1], rng), s[2], rng);
      if (HasFatalFailure()) return;
    }
}

TEST_P(KernelsIsa, MatmulSmallBatchShapes) {
  // The few-token path (GEMV-like, n = 2 here) and the GEMM beside it, every token count to
  // 9, with odd rows (ragged row tiles), odd columns (vector tails after the unrolled loop) and
  // rows long enough to be prefetched, for each weight dtype.
  ThreadPool pool(2);
  Rng rng(13);
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {7, 61}, {13, 1029}, {5, 2071}};
  for (DType dt : kWeightDTypes)
    for (const auto& s : shapes) {
      const TestWeights w = make_weights(dt, s[0], s[1], rng);
      for (int64_t n = 2; n <= 9; ++n) {
        check_matmul(pool, isa(), w, n, rng);
        if (HasFatalFailure()) return;
      }
    }
  // 3..4 tokens take that path only from a matrix of at least 8 MiB (odd rows and columns).
  for (DType dt : kWeightDTypes) {
    const TestWeights w = make_weights(dt, 1029, 4099, rng);
    for (int64_t n = 2; n <= 5; ++n) {
      check_matmul(pool, isa(), w, n, rng);
      if (HasFatalFailure()) return;
    }
  }
  // Short rows (<= 2 KiB) of a matrix of >= 1 MiB: one token and two run row by row (odd rows,
  // a ragged row length after the unrolled loop).
  for (const auto& [dt, cols] : {std::pair{DType::BF16, int64_t(1021)}, std::pair{DType::F32, int64_t(509)}}) {
    const TestWeights w = make_weights(dt, 1031, cols, rng);
    for (int64_t n = 1; n <= 2; ++n) {
      check_matmul(pool, isa(), w, n, rng);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(KernelsIsa, MatmulBigShapes) {
  // Several column blocks, several row chunks per thread, and both token-tile tails.
  ThreadPool pool(2);
  Rng rng(9);
  const int64_t shapes[][3] = {{301, 2100, 1}, {130, 2300, 13}, {260, 517, 8}, {1000, 100, 2}};
  for (DType dt : kWeightDTypes)
    for (const auto& s : shapes) {
      check_matmul(pool, isa(), make_weights(dt, s[0], s[1], rng), s[2], rng);
      if (HasFatalFailure()) return;
    }
}

TEST_P(KernelsIsa, MatmulZeroColumnsGivesZeros) {
  ThreadPool pool(2);
  const WeightMatrix w{DType::BF16, nullptr, 5, 0};
  std::vector<float> y(10, 1.0f);
  matmul(pool, w, nullptr, 2, y.data(), isa());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST_P(KernelsIsa, MatmulSameResultForAnyThreadCount) {
  // A row's result does not depend on how rows were split over threads: bitwise equal.
  Rng rng(11);
  const TestWeights w = make_weights(DType::BF16, 203, 777, rng);
  for (int64_t n : {1, 5}) {
    const std::vector<float> x = random_floats(size_t(n * w.cols), rng);
    std::vector<float> y1(size_t(n * w.rows)), y4(size_t(n * w.rows));
    ThreadPool p1(1), p4(4);
    matmul(p1, w.matrix(), x.data(), n, y1.data(), isa());
    matmul(p4, w.matrix(), x.data(), n, y4.data(), isa());
    EXPECT_EQ(0, std::memcmp(y1.data(), y4.data(), y1.size() * sizeof(float)));
  }
}

TEST_P(KernelsIsa, MatmulUnalignedRowSlice) {
  // Checkpoint tensors may start anywhere; a row slice starts mid-buffer.
  ThreadPool pool(2);
  Rng rng(5);
  for (DType dt : kWeightDTypes) {
    const TestWeights w = make_weights(dt, 40, 37, rng);
    const WeightMatrix slice = w.matrix().row_slice(3, 29);
    const std::vector<float> x = random_floats(3 * 37, rng);
    std::vector<float> y(3 * 29);
    matmul(pool, slice, x.data(), 3, y.data(), isa());
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t r = 0; r < 29; ++r) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < 37; ++k) {
          const double term = double(x[size_t(t * 37 + k)]) * w.values[size_t((r + 3) * 37 + k)];
          want += term;
          mag += std::abs(term);
        }
        expect_close(y[size_t(t * 29 + r)], want, mag, "row slice");
      }
  }
}

TEST_P(KernelsIsa, IgnoresNaNsAroundTheOperands) {
  // Vector tails must not pick up elements outside W or x: a NaN there (times a zero padding
  // lane) would poison the sums. W is a row slice between NaN rows, x is followed by NaNs.
  ThreadPool pool(2);
  Rng rng(77);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t shapes[][3] = {{1, 1, 1}, {5, 33, 1}, {7, 61, 3}, {9, 95, 7}, {3, 1030, 2}};
  for (DType dt : kWeightDTypes)
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1], n = s[2];
      TestWeights w = make_weights(dt, rows + 2, cols, rng);
      const size_t row_bytes = size_t(cols) * dtype_size(dt);
      for (size_t i = 0; i < size_t(cols); ++i) {
        const uint16_t nan16 = 0x7fc0;  // a NaN in BF16 and in F16
        for (size_t row : {size_t(0), size_t(rows + 1)}) {
          if (dt == DType::F32)
            std::memcpy(&w.storage[row * row_bytes + i * 4], &nan, 4);
          else
            std::memcpy(&w.storage[row * row_bytes + i * 2], &nan16, 2);
        }
      }
      const WeightMatrix slice = w.matrix().row_slice(1, rows);
      std::vector<float> x = random_floats(size_t(n * cols), rng);
      x.resize(x.size() + 64, nan);
      std::vector<float> y(size_t(n * rows));
      matmul(pool, slice, x.data(), n, y.data(), isa());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double term =
                double(x[size_t(t * cols + k)]) * w.values[size_t((r + 1) * cols + k)];
            want += term;
            mag += std::abs(term);
          }
          expect_close(y[size_t(t * rows + r)], want, mag,
                       std::string("NaN guard ") + std::string(dtype_name(dt)));
          if (HasFatalFailure()) return;
        }

      // The untransposed product reads x[n, rows] and all of W's columns.
      std::vector<float> xu = random_floats(size_t(n * rows), rng);
      xu.resize(xu.size() + 64, nan);
      std::vector<float> yu(size_t(n * cols));
      matmul_untransposed(slice, xu.data(), n, yu.data(), isa());
      for (float v : yu) ASSERT_FALSE(std::isnan(v)) << "untransposed NaN guard";
    }
}

void check_untransposed(Isa isa, const TestWeights& w, int64_t n, Rng& rng) {
  const std::vector<float> x = random_floats(size_t(n * w.rows), rng);
  constexpr size_t kGuard = 16;
  constexpr float kGuardValue = -777.0f;
  std::vector<float> y(size_t(n * w.cols) + 2 * kGuard, kGuardValue);
  matmul_untransposed(w.matrix(), x.data(), n, y.data() + kGuard, isa);
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(y[i], kGuardValue) << "write before y";
    ASSERT_EQ(y[y.size() - 1 - i], kGuardValue) << "write past y";
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < w.cols; ++c) {
      double want = 0, mag = 0;
      for (int64_t r = 0; r < w.rows; ++r) {
        const double term = double(x[size_t(t * w.rows + r)]) * w.values[size_t(r * w.cols + c)];
        want += term;
        mag += std::abs(term);
      }
      expect_close(y[kGuard + size_t(t * w.cols + c)], want, mag,
                   std::string("untransposed ") + std::string(dtype_name(w.dtype)) + " [" +
                       std::to_string(w.rows) + "x" + std::to_string(w.cols) + "] n=" +
                       std::to_string(n) + " t=" + std::to_string(t) + " c=" + std::to_string(c));
    }
}

TEST_P(KernelsIsa, MatmulUntransposed) {
  Rng rng(17);
  for (DType dt : kWeightDTypes) {
    for (int i = 0; i < 30; ++i) {
      const int64_t rows = 1 + int64_t(rng.next_u64() % 67);
      const int64_t cols = 1 + int64_t(rng.next_u64() % 300);
      const int64_t n = 1 + int64_t(rng.next_u64() % 13);
      check_untransposed(isa(), make_weights(dt, rows, cols, rng), n, rng);
      if (HasFatalFailure()) return;
    }
    // The MLA absorption shape (qk_nope_head_dim x kv_lora_rank) and a zero-row matrix.
    check_untransposed(isa(), make_weights(dt, 128, 512, rng), 3, rng);
    check_untransposed(isa(), make_weights(dt, 0, 21, rng), 2, rng);
    if (HasFatalFailure()) return;
  }
}

TEST_P(KernelsIsa, ConvertAllHalfAndBf16Values) {
  // Every 16-bit pattern: the SIMD conversions must match the scalar ones bit for bit
  // (subnormals and infinities included), NaN staying NaN.
  std::vector<uint16_t> src(65536);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(i);
  std::vector<float> dst(src.size());
  for (DType dt : {DType::BF16, DType::F16}) {
    convert_to_f32(dt, src.data(), dst.data(), int64_t(src.size()), isa());
    for (size_t i = 0; i < src.size(); ++i) {
      const float want = dt == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(dst[i])) << dtype_name(dt) << " " << i;
      } else {
        uint32_t a, b;
        std::memcpy(&a, &dst[i], 4);
        std::memcpy(&b, &want, 4);
        ASSERT_EQ(a, b) << dtype_name(dt) << " 0x" << std::hex << i;
      }
    }
  }
}

TEST_P(KernelsIsa, ConvertRaggedLengths) {
  Rng rng(3);
  for (DType dt : kWeightDTypes) {
    for (int64_t n = 0; n <= 70; ++n) {
      const TestWeights w = make_weights(dt, 1, n, rng);
      std::vector<float> dst(size_t(n) + 1, -1.0f);
      convert_to_f32(dt, w.storage.data(), dst.data(), n, isa());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dst[size_t(i)], float(w.values[size_t(i)]));
      ASSERT_EQ(dst[size_t(n)], -1.0f) << "write past the end";
    }
  }
}

TEST_P(KernelsIsa, DotAxpySum) {
  Rng rng(23);
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 300; n += 1 + n / 16) lengths.push_back(n);
  lengths.push_back(4099);
  for (int64_t n : lengths) {
    const std::vector<float> a = random_floats(size_t(n), rng), b = random_floats(size_t(n), rng);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += double(a[size_t(i)]) * b[size_t(i)];
      mag += std::abs(double(a[size_t(i)]) * b[size_t(i)]);
    }
    expect_close(dot_f32(a.data(), b.data(), n, isa()), want, mag, "dot n=" + std::to_string(n));
    double sum = 0, sum_mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += a[size_t(i)];
      sum_mag += std::abs(a[size_t(i)]);
    }
    expect_close(sum_f32(a.data(), n, isa()), sum, sum_mag, "sum n=" + std::to_string(n));

    std::vector<float> y = b;
    y.push_back(99.0f);  // guard
    const float s = float(rng.normal());
    axpy_f32(y.data(), s, a.data(), n, isa());
    for (int64_t i = 0; i < n; ++i) {
      const double w = double(b[size_t(i)]) + double(s) * a[size_t(i)];
      expect_close(y[size_t(i)], w, std::abs(double(b[size_t(i)])) + std::abs(double(s) * a[size_t(i)]),
                   "axpy n=" + std::to_string(n));
    }
    ASSERT_EQ(y.back(), 99.0f) << "axpy wrote past the end";
  }
}

// Softmax against double over ragged and long lengths: every probability within 1e-6 relative of
// exp(x - max) / sum (the difference itself rounded to float first, as the kernel computes it),
// exponentials under the smallest normal float as 0, and the sum 1 at 70 000 scores.
TEST_P(KernelsIsa, SoftmaxMatchesDouble) {
  Rng rng(29);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 300; n += 1 + n / 16) lengths.push_back(n);
  lengths.push_back(4099);
  lengths.push_back(70000);
  for (int64_t n : lengths) {
    std::vector<float> x = random_floats(size_t(n), rng);
    for (float& v : x) v *= 12.0f;  // differences from the max down to ~-100: some underflow
    if (n > 3) x[2] = -1e30f;       // a masked-out score
    const float mx = *std::max_element(x.begin(), x.end());
    std::vector<double> want(static_cast<size_t>(n));
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += want[size_t(i)] = std::exp(double(x[size_t(i)] - mx));
    std::vector<float> y = x;
    y.push_back(99.0f);  // guard
    softmax_f32(y.data(), n, isa());
    ASSERT_EQ(y.back(), 99.0f) << "softmax wrote past the end, n=" << n;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double p = want[size_t(i)] / total;
      sum += y[size_t(i)];
      ASSERT_NEAR(y[size_t(i)], p, 1e-6 * p + 1e-37) << "n=" << n << " i=" << i << " x=" << x[size_t(i)];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "n=" << n;
    if (n > 3) {
      EXPECT_EQ(y[2], 0.0f);
    }
  }
}

// The online softmax's step: e^(x - shift) in place against double, for a shift above, at and
// below the block's max (a later block raised the max, or not yet), and the sum it returns.
TEST_P(KernelsIsa, ExpShiftedMatchesDouble) {
  Rng rng(31);
  for (int64_t n : {1, 7, 16, 17, 33, 64, 250}) {
    std::vector<float> x = random_floats(size_t(n), rng);
    for (float& v : x) v *= 8.0f;
    const float mx = *std::max_element(x.begin(), x.end());
    for (float shift : {mx + 3.0f, mx, mx - 2.0f}) {
      std::vector<float> y = x;
      y.push_back(99.0f);  // guard
      const float sum = exp_shifted_f32(y.data(), n, shift, isa());
      ASSERT_EQ(y.back(), 99.0f) << "exp_shifted wrote past the end, n=" << n;
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(x[size_t(i)] - shift));
        want_sum += want;
        ASSERT_NEAR(y[size_t(i)], want, 1e-6 * want + 1e-37) << "n=" << n << " i=" << i << " shift=" << shift;
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << "n=" << n << " shift=" << shift;
    }
  }
}

// silu(g) * u over g in [-100, 100] (through e^x's whole float range and both clamps) against
// double: within 1e-6 relative, or 1e-36 absolute where the value is below that; infinities and
// NaN as the C library's expression gives them.
TEST_P(KernelsIsa, SiluMulMatchesDouble) {
  std::vector<float> g, u;
  for (int i = -200000; i <= 200000; ++i) {
    g.push_back(float(i) * 5e-4f);
    u.push_back(1.0f + float(i % 7) * 0.25f);
  }
  for (float v : {0.0f, -0.0f, 88.3f, 88.4f, -88.3f, -88.4f, 87.3f, -87.4f, 1e-30f, -1e-30f}) {
    g.push_back(v);
    u.push_back(-2.0f);
  }
  const size_t n = g.size();
  std::vector<float> y = g;
  silu_mul_f32(y.data(), u.data(), int64_t(n), isa());
  for (size_t i = 0; i < n; ++i) {
    const double want = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
    ASSERT_NEAR(y[i], want, 1e-6 * std::abs(want) + 1e-36) << "g=" << g[i] << " u=" << u[i];
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> special = {inf, -inf, nan, 100.0f, -100.0f}, ones(special.size(), 1.0f);
  silu_mul_f32(special.data(), ones.data(), int64_t(special.size()), isa());
  EXPECT_EQ(special[0], inf);
  EXPECT_TRUE(std::isnan(special[1]));  // -inf / (1 + inf)
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_EQ(special[3], 100.0f);
  EXPECT_NEAR(special[4], 0.0f, 1e-36f);
}

// A decode step's small products (here 96 x 192, 18 K multiply-adds: mini's q_a) are shared by
// the pool's threads, one region; tiny ones (16 x 192, 3 K: a router) run inline on the caller.
TEST(MatmulThreads, SmallProductsAreSharedTinyOnesRunInline) {
  ThreadPool pool(2);
  Rng rng(5);
  const std::vector<float> x = random_floats(192, rng);
  std::vector<float> y(96);
  const TestWeights tiny = make_weights(DType::BF16, 16, 192, rng), small = make_weights(DType::BF16, 96, 192, rng);
  pool.set_region_timing(true);
  matmul(pool, tiny.matrix(), x.data(), 1, y.data());
  EXPECT_EQ(pool.region_times().regions, 0);
  matmul(pool, small.matrix(), x.data(), 1, y.data());
  EXPECT_EQ(pool.region_times().regions, 1);
  pool.set_region_timing(false);
  for (int64_t r = 0; r < 96; ++r) {
    double want = 0;
    for (int64_t k = 0; k < 192; ++k) want += small.values[size_t(r * 192 + k)] * double(x[size_t(k)]);
    EXPECT_NEAR(y[size_t(r)], want, 1e-3 * (1 + std::fabs(want))) << r;
  }
}

// matmul_batch gives each job exactly what matmul gives it alone: dense, int4 (f32 and int8
// activations) and int8 jobs of ragged shapes mixed in one batch, with empty jobs among them.
TEST_P(KernelsIsa, MatmulBatchEqualsSeparateProducts) {
  ThreadPool pool(3);
  Rng rng(21);
  struct Owned {
    TestWeights dense;
    std::vector<float> f32;
    std::vector<uint8_t> packed;
    std::vector<uint16_t> scales4;
    std::vector<int8_t> q8;
    std::vector<float> scales8;
  };
  std::vector<Owned> owned(9);
  std::vector<MatmulJob> jobs;
  std::vector<std::vector<float>> xs, batch_y, alone_y;
  for (size_t i = 0; i < owned.size(); ++i) {
    Owned& o = owned[i];
    const int64_t rows = i == 4 ? 0 : 1 + int64_t(rng.next_u64() % 37), cols = 64 * (1 + int64_t(rng.next_u64() % 3));
    const int64_t n = i == 6 ? 0 : 1 + int64_t(rng.next_u64() % 5);
    WeightMatrix w;
    if (i % 3 == 0) {
      o.dense = make_weights(kWeightDTypes[i / 3 % 3], rows, cols, rng);
      w = o.dense.matrix();
    } else {
      o.f32 = random_floats(size_t(rows * cols), rng);
      w.rows = rows;
      w.cols = cols;
      if (i % 3 == 1) {
        o.packed.resize(size_t(rows * cols / 2));
        o.scales4.resize(size_t(rows * cols / 32));
        quantize_int4_symmetric(o.f32.data(), rows, cols, 32, o.packed.data(), o.scales4.data());
        w.format = WeightFormat::Int4Group;
        w.data = o.packed.data();
        w.scales = o.scales4.data();
        w.group_size = 32;
        w.act_quant = i % 2 ? ActivationQuant::None : ActivationQuant::Int8PerToken;
      } else {
        o.q8.resize(size_t(rows * cols));
        o.scales8.resize(size_t(rows));
        quantize_int8_symmetric(o.f32.data(), rows, cols, cols, o.q8.data(), o.scales8.data());
        w.format = WeightFormat::Int8Group;
        w.data = o.q8.data();
        w.scales = o.scales8.data();
        w.scale_dtype = DType::F32;
        w.group_size = cols;
        w.act_quant = ActivationQuant::Int8PerToken;
      }
    }
    xs.push_back(random_floats(size_t(std::max<int64_t>(1, n * cols)), rng));
    batch_y.emplace_back(size_t(std::max<int64_t>(1, n * rows)), -7.0f);
    alone_y.emplace_back(size_t(std::max<int64_t>(1, n * rows)), -7.0f);
    jobs.push_back({w, xs.back().data(), n, nullptr});
  }
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].y = batch_y[i].data();
  matmul_batch(pool, jobs, isa());
  for (size_t i = 0; i < jobs.size(); ++i) {
    matmul(pool, jobs[i].w, jobs[i].x, jobs[i].n, alone_y[i].data(), isa());
    ASSERT_EQ(batch_y[i], alone_y[i]) << "job " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelsIsa, test::all_isas(), test::isa_param_name);

// KIMI_MAX_CPU_ISA's parts: names in any case, nothing else; a cap drops every wider extension.
TEST(Kernels, IsaCapParsesNamesAndDropsWiderExtensions) {
  EXPECT_EQ(parse_isa("avx2"), Isa::Avx2);
  EXPECT_EQ(parse_isa("AVX512"), Isa::Avx512);
  EXPECT_EQ(parse_isa("Scalar"), Isa::Scalar);
  EXPECT_EQ(parse_isa("sse4"), std::nullopt);
  EXPECT_EQ(parse_isa(""), std::nullopt);
  EXPECT_EQ(parse_isa("avx2 "), std::nullopt);

  CpuFeatures all;
  all.avx2 = all.fma = all.f16c = all.avx512f = all.avx512bw = all.avx512vl = all.avx512dq = true;
  all.avx512_bf16 = all.avx512_vnni = all.avx_vnni = true;
  const CpuFeatures same = capped_features(all, Isa::Avx512);
  EXPECT_TRUE(same.avx512f && same.avx512_bf16 && same.avx512_vnni && same.avx_vnni);
  const CpuFeatures avx2 = capped_features(all, Isa::Avx2);
  EXPECT_TRUE(avx2.avx2 && avx2.fma && avx2.f16c && avx2.avx_vnni);
  EXPECT_FALSE(avx2.avx512f || avx2.avx512bw || avx2.avx512vl || avx2.avx512dq || avx2.avx512_bf16 ||
               avx2.avx512_vnni);
  const CpuFeatures none = capped_features(all, Isa::Scalar);
  EXPECT_FALSE(none.avx2 || none.fma || none.f16c || none.avx_vnni || none.avx512f || none.avx512_bf16);
}

// Under the cap (the ctest entry kimi_tests_avx2_cap sets KIMI_MAX_CPU_ISA=avx2) nothing wider
// runs: no AVX-512 table, no AVX512_BF16 kernels, and the benchmarks' header says so.
TEST(Kernels, IsaCapFromTheEnvironmentHolds) {
  const char* cap = std::getenv("KIMI_MAX_CPU_ISA");
  if (!cap || parse_isa(cap) != Isa::Avx2) GTEST_SKIP() << "KIMI_MAX_CPU_ISA is not avx2";
  EXPECT_FALSE(isa_supported(Isa::Avx512));
  EXPECT_NE(best_isa(), Isa::Avx512);
  EXPECT_EQ(kernels::bf16_dot_rows(), nullptr);
  EXPECT_EQ(kernels::int4_bf16_dot_rows(), nullptr);
  EXPECT_NE(kernel_isa_summary().find("KIMI_MAX_CPU_ISA=avx2"), std::string::npos) << kernel_isa_summary();
}

TEST(Kernels, CpuFeaturesAreConsistent) {
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(isa_supported(Isa::Avx2), f.avx2 && f.fma && f.f16c);
  if (isa_supported(Isa::Avx512)) {
    EXPECT_TRUE(isa_supported(Isa::Avx2));
    EXPECT_EQ(best_isa(), Isa::Avx512);
  }
  EXPECT_EQ(isa_name(Isa::Avx512), "avx512");
}

TEST(Kernels, DefaultDispatchMatchesExplicitBestIsa) {
  ThreadPool pool(2);
  Rng rng(31);
  const TestWeights w = make_weights(DType::F16, 19, 45, rng);
  const std::vector<float> x = random_floats(2 * 45, rng);
  std::vector<float> a(2 * 19), b(2 * 19);
  matmul(pool, w.matrix(), x.data(), 2, a.data());
  matmul(pool, w.matrix(), x.data(), 2, b.data(), best_isa());
  EXPECT_EQ(a, b);
  EXPECT_EQ(dot_f32(x.data(), x.data() + 45, 45), dot_f32(x.data(), x.data() + 45, 45, best_isa()));
}

// The calling thread's product is matmul()'s, for every float dtype and few or many tokens.
TEST(Kernels, MatmulOnThreadEqualsMatmul) {
  ThreadPool pool(2);
  Rng rng(37);
  for (const DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const int64_t n : {1, 3, 13}) {
      const TestWeights w = make_weights(dt, 37, 200, rng);
      const std::vector<float> x = random_floats(size_t(n * 200), rng);
      std::vector<float> a(size_t(n * 37)), b(size_t(n * 37), -1.0f);
      matmul(pool, w.matrix(), x.data(), n, a.data());
      matmul_on_thread(w.matrix(), x.data(), n, b.data());
      EXPECT_EQ(a, b) << dtype_name(dt) << " n=" << n;
    }
}

TEST(Kernels, RejectsNonFloatDTypes) {
  ThreadPool pool(1);
  const int32_t data[4] = {1, 2, 3, 4};
  const WeightMatrix w{DType::I32, data, 2, 2};
  float x[4] = {}, y[4] = {};
  EXPECT_THROW(matmul(pool, w, x, 1, y), Error);
  EXPECT_THROW(matmul_untransposed(w, x, 1, y), Error);
  EXPECT_THROW(matmul_on_thread(w, x, 1, y), Error);
  const uint16_t bf16[4] = {};
  EXPECT_THROW(matmul_on_thread({.dtype = DType::BF16, .data = bf16, .rows = 2, .cols = 2,
                                 .act_quant = ActivationQuant::Bf16}, x, 1, y), Error)
      << "bf16 activations are the batch entry's";
  EXPECT_THROW(convert_to_f32(DType::I8, data, y, 4), Error);
  EXPECT_THROW(convert_to_f32(DType::F64, data, y, 2), Error);
}

TEST(Kernels, RowSliceBounds) {
  const uint16_t data[6] = {};
  const WeightMatrix w{DType::BF16, data, 3, 2};
  const WeightMatrix s = w.row_slice(1, 2);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.cols, 2);
  EXPECT_EQ(s.data, static_cast<const void*>(data + 2));
  EXPECT_THROW(w.row_slice(2, 2), Error);
  EXPECT_THROW(w.row_slice(-1, 1), Error);
}

TEST(Kernels, UnsupportedIsaThrows) {
  ThreadPool pool(1);
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) continue;
    const float data[1] = {1.0f};
    float y[1];
    EXPECT_THROW(matmul(pool, {DType::F32, data, 1, 1}, data, 1, y, isa), Error);
  }
}

TEST(Bandwidth, MeasuresSomething) {
  ThreadPool pool(2);
  const double bw = measure_read_bandwidth(pool, size_t(16) << 20, 2);
  EXPECT_GT(bw, 1e8);  // 100 MB/s: any machine, even under sanitizers
  if (best_isa() != Isa::Scalar) {
    EXPECT_GT(measure_matmul_flops(pool), 1e8);
    EXPECT_GT(measure_matmul_flops(pool, /*bf16_activations=*/true), 1e8);
  }
}

// A read of given regions: odd sizes and offsets (a region shorter than a word, one spanning
// several work items), two passes; nothing to read gives 0.
TEST(Bandwidth, ReadRateOfGivenRegions) {
  ThreadPool pool(2);
  std::vector<std::byte> buf((size_t(8) << 20) + 13, std::byte{7});
  const std::span<const std::byte> all(buf);
  const std::vector<ReadPass> passes = {{all.subspan(3, 5), all.subspan(100, (size_t(3) << 20) + 1)},
                                        {all.subspan((size_t(3) << 20) + 200)}};
  EXPECT_GT(measure_read_rate(pool, passes), 1e8);
  EXPECT_EQ(measure_read_rate(pool, {}), 0.0);
  EXPECT_EQ(measure_read_rate(pool, {ReadPass{}, ReadPass{all.subspan(0, 0)}}), 0.0);
}

// storage(): the spans a GEMV reads, whose sizes bytes() sums; absent parts empty.
TEST(WeightMatrixStorage, SpansOfDataScalesAndZeroPoints) {
  std::vector<uint16_t> bf16(6 * 64);
  const WeightMatrix dense{DType::BF16, bf16.data(), 6, 64};
  auto s = dense.storage();
  EXPECT_EQ(s[0].data(), reinterpret_cast<const std::byte*>(bf16.data()));
  EXPECT_EQ(s[0].size(), 6u * 64 * 2);
  EXPECT_TRUE(s[1].empty() && s[2].empty());
  EXPECT_EQ(dense.bytes(), 6u * 64 * 2);

  std::vector<uint8_t> q(6 * 32), zp(6 * 2);
  std::vector<float> scales(6 * 2);
  WeightMatrix int4{DType::F32, q.data(), 6, 64};
  int4.format = WeightFormat::Int4Group;
  int4.group_size = 32;
  int4.scales = scales.data();
  int4.scale_dtype = DType::F32;
  s = int4.storage();
  EXPECT_EQ(s[0].size(), 6u * 32);
  EXPECT_EQ(s[1].data(), reinterpret_cast<const std::byte*>(scales.data()));
  EXPECT_EQ(s[1].size(), 6u * 2 * 4);
  EXPECT_TRUE(s[2].empty());
  EXPECT_EQ(int4.bytes(), 6u * 32 + 6u * 2 * 4);
  int4.zero_points = zp.data();
  EXPECT_EQ(int4.storage()[2].size(), 6u * 2);
  EXPECT_EQ(int4.bytes(), 6u * 32 + 6u * 2 * 4 + 6u * 2);

  WeightMatrix int8 = int4;
  int8.format = WeightFormat::Int8Group;
  int8.zero_points = nullptr;
  EXPECT_EQ(int8.storage()[0].size(), 6u * 64);
}

}  // namespace
}  // namespace kimi
