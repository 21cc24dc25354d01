// The weight quantisers (compressed-tensors' int4 rules, symmetric int8), dequantize_row and
// the per-token activation quantiser: exact values on hand-made groups, the packed layout,
// grid round trips where the format makes them exact, error bounds, zero rows, ragged sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace kimi {
namespace {

int nibble(const std::vector<uint8_t>& packed, int64_t cols, int64_t r, int64_t i) {
  uint32_t word;  // the compressed-tensors view: 8 nibbles per little-endian int32
  std::memcpy(&word, &packed[size_t(r * cols / 2 + (i / 8) * 4)], 4);
  return int((word >> (4 * (i % 8))) & 0xF);
}

WeightMatrix int4_matrix(const std::vector<uint8_t>& packed, const std::vector<uint16_t>& scales,
                         const uint8_t* zeros, int64_t rows, int64_t cols, int64_t group) {
  WeightMatrix w;
  w.format = WeightFormat::Int4Group;
  w.data = packed.data();
  w.rows = rows;
  w.cols = cols;
  w.scales = scales.data();
  w.scale_dtype = DType::BF16;
  w.group_size = group;
  w.zero_points = zeros;
  return w;
}

TEST(Quantize, Int4SymmetricFollowsCompressedTensors) {
  // absmax 7.5 -> scale 7.5 / 7.5 = 1 exactly; round half to even; q clamped to [-8, 7].
  std::vector<float> w(32, 0.0f);
  const float vals[] = {7.5f, -7.5f, 3.25f, 2.5f, -0.5f, 1.5f, 6.9f, -3.5f};
  const int want[] = {7, -8, 3, 2, 0, 2, 7, -4};
  for (int i = 0; i < 8; ++i) w[size_t(i)] = vals[i];
  std::vector<uint8_t> packed(16);
  std::vector<uint16_t> scales(1);
  quantize_int4_symmetric(w.data(), 1, 32, 32, packed.data(), scales.data());
  EXPECT_EQ(bf16_to_f32(scales[0]), 1.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(nibble(packed, 32, 0, i) - 8, want[i]) << i;
  for (int i = 8; i < 32; ++i) EXPECT_EQ(nibble(packed, 32, 0, i), 8);
  // Byte j holds element 2j in its low nibble and 2j + 1 in its high nibble.
  EXPECT_EQ(packed[0], uint8_t((7 + 8) | ((-8 + 8) << 4)));
  // The scale is rounded to BF16 before q is computed: absmax 1 -> 1 / 7.5 -> bf16.
  std::vector<float> w2(32, 0.0f);
  w2[0] = 1.0f;
  w2[1] = 0.6f;
  quantize_int4_symmetric(w2.data(), 1, 32, 32, packed.data(), scales.data());
  const float s = bf16_to_f32(f32_to_bf16(1.0f / 7.5f));
  EXPECT_EQ(bf16_to_f32(scales[0]), s);
  EXPECT_EQ(nibble(packed, 32, 0, 1) - 8, int(std::nearbyint(0.6f / s)));
}

TEST(Quantize, Int4SymmetricErrorBoundAndRaggedPerChannel) {
  Rng rng(1);
  for (int64_t group : {32, 64, 40}) {  // 40: per channel with cols = 40
    const int64_t rows = 7, cols = group == 40 ? 40 : 256;
    std::vector<float> w(size_t(rows * cols));
    for (auto& v : w) v = float(rng.normal());
    std::vector<uint8_t> packed(size_t(rows * cols / 2));
    std::vector<uint16_t> scales(size_t(rows * cols / group));
    quantize_int4_symmetric(w.data(), rows, cols, group, packed.data(), scales.data());
    const WeightMatrix m = int4_matrix(packed, scales, nullptr, rows, cols, group);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(m, r, row.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float s = bf16_to_f32(scales[size_t(r * (cols / group) + i / group)]);
        // Half a step, plus what rounding the scale to BF16 (2^-9 relative) moves the clamped
        // extreme (7.5 steps) by.
        ASSERT_LE(std::fabs(row[size_t(i)] - w[size_t(r * cols + i)]), s * (0.5f + 7.5f / 256.0f))
            << "group " << group << " r " << r << " i " << i;
        ASSERT_EQ(row[size_t(i)], float(nibble(packed, cols, r, i) - 8) * s);
      }
    }
  }
}

// Symmetric int4 with scale = absmax / 7.5 is a projection onto its grid only for scales of the
// form 15 * 2^k / 16 in groups that contain -8 (the recomputed scale is then exactly 2^k and
// every q * 15/16 rounds back to q, -7.5 to even -8); that is where the round trip must be exact.
TEST(Quantize, Int4SymmetricGridRoundTrip) {
  Rng rng(2);
  const int64_t rows = 5, cols = 128, group = 32, groups = cols / group;
  std::vector<uint8_t> packed(size_t(rows * cols / 2));
  std::vector<uint16_t> scales(size_t(rows * groups));
  for (auto& b : packed) b = uint8_t(rng.next_u64());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      packed[size_t(r * cols / 2 + g * group / 2)] = uint8_t((packed[size_t(r * cols / 2 + g * group / 2)] & 0xF0) | 0);
      scales[size_t(r * groups + g)] = f32_to_bf16(std::ldexp(15.0f / 16.0f, int(rng.next_u64() % 20) - 10));
    }
  const WeightMatrix m = int4_matrix(packed, scales, nullptr, rows, cols, group);
  std::vector<float> deq(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(m, r, deq.data() + r * cols);
  std::vector<uint8_t> packed2(packed.size());
  std::vector<uint16_t> scales2(scales.size());
  quantize_int4_symmetric(deq.data(), rows, cols, group, packed2.data(), scales2.data());
  EXPECT_EQ(packed2, packed);
}

// Asymmetric int4: a group that uses both nibble 0 and 15 gets back its scale and zero point
// exactly, and so every nibble.
TEST(Quantize, Int4AsymmetricGridRoundTrip) {
  Rng rng(3);
  const int64_t rows = 6, cols = 96, group = 32, groups = cols / group;
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), zeros(size_t(rows * groups));
  std::vector<uint16_t> scales(size_t(rows * groups));
  for (auto& b : packed) b = uint8_t(rng.next_u64());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      packed[size_t(r * cols / 2 + g * group / 2)] = 0xF0;  // elements 0 and 1: nibbles 0 and 15
      zeros[size_t(r * groups + g)] = uint8_t(rng.next_u64() % 16);
      scales[size_t(r * groups + g)] = f32_to_bf16(float(0.001 + rng.uniform()));
    }
  const WeightMatrix m = int4_matrix(packed, scales, zeros.data(), rows, cols, group);
  std::vector<float> deq(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(m, r, deq.data() + r * cols);
  std::vector<uint8_t> packed2(packed.size()), zeros2(zeros.size());
  std::vector<uint16_t> scales2(scales.size());
  quantize_int4_asymmetric(deq.data(), rows, cols, group, packed2.data(), scales2.data(), zeros2.data());
  EXPECT_EQ(scales2, scales);
  EXPECT_EQ(zeros2, zeros);
  EXPECT_EQ(packed2, packed);
}

TEST(Quantize, Int4AsymmetricErrorBound) {
  Rng rng(4);
  const int64_t rows = 4, cols = 64, group = 32;
  std::vector<float> w(size_t(rows * cols));
  for (auto& v : w) v = float(rng.normal() + 0.7);  // off-centre, where a zero point helps
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), zeros(size_t(rows * 2));
  std::vector<uint16_t> scales(size_t(rows * 2));
  quantize_int4_asymmetric(w.data(), rows, cols, group, packed.data(), scales.data(), zeros.data());
  const WeightMatrix m = int4_matrix(packed, scales, zeros.data(), rows, cols, group);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(m, r, row.data());
    for (int64_t i = 0; i < cols; ++i) {
      const float s = bf16_to_f32(scales[size_t(r * 2 + i / group)]);
      // Half a step, plus the zero point's rounding (half a step) at the clamped ends.
      ASSERT_LE(std::fabs(row[size_t(i)] - w[size_t(r * cols + i)]), s * 1.05f) << r << " " << i;
    }
  }
}

TEST(Quantize, Int8SymmetricRoundTripAndBounds) {
  Rng rng(5);
  const int64_t rows = 6, cols = 37;  // per channel, ragged
  std::vector<float> w(size_t(rows * cols));
  for (auto& v : w) v = float(rng.normal());
  std::vector<int8_t> q(w.size());
  std::vector<float> scales(static_cast<size_t>(rows));
  quantize_int8_symmetric(w.data(), rows, cols, cols, q.data(), scales.data());
  WeightMatrix m;
  m.format = WeightFormat::Int8Group;
  m.data = q.data();
  m.rows = rows;
  m.cols = cols;
  m.scales = scales.data();
  m.scale_dtype = DType::F32;
  m.group_size = cols;
  std::vector<float> deq(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(m, r, deq.data() + r * cols);
    for (int64_t i = 0; i < cols; ++i)
      ASSERT_LE(std::fabs(deq[size_t(r * cols + i)] - w[size_t(r * cols + i)]), scales[size_t(r)] * 0.5001f);
  }
  // The grid round trip: every row holds +-127, so the scale comes back and so does every q.
  std::vector<int8_t> q2(q.size());
  std::vector<float> scales2(scales.size());
  quantize_int8_symmetric(deq.data(), rows, cols, cols, q2.data(), scales2.data());
  EXPECT_EQ(q2, q);
  for (size_t r = 0; r < scales.size(); ++r) EXPECT_FLOAT_EQ(scales2[r], scales[r]);
}

TEST(Quantize, ZeroRowsGiveZerosNotNaN) {
  const int64_t rows = 2, cols = 64;
  std::vector<float> w(size_t(rows * cols), 0.0f);
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), zeros(size_t(rows * 2));
  std::vector<uint16_t> scales(size_t(rows * 2));
  std::vector<float> row(static_cast<size_t>(cols));
  quantize_int4_symmetric(w.data(), rows, cols, 32, packed.data(), scales.data());
  for (uint8_t b : packed) EXPECT_EQ(b, 0x88);
  for (uint16_t s : scales) EXPECT_GT(bf16_to_f32(s), 0.0f);  // eps-clamped, as compressed-tensors
  dequantize_row(int4_matrix(packed, scales, nullptr, rows, cols, 32), 1, row.data());
  for (float v : row) EXPECT_EQ(v, 0.0f);
  quantize_int4_asymmetric(w.data(), rows, cols, 32, packed.data(), scales.data(), zeros.data());
  dequantize_row(int4_matrix(packed, scales, zeros.data(), rows, cols, 32), 0, row.data());
  for (float v : row) EXPECT_EQ(v, 0.0f);
  std::vector<int8_t> q(w.size(), 1);
  std::vector<float> s8(static_cast<size_t>(rows * cols / 32), 1.0f);  // [rows, groups]
  quantize_int8_symmetric(w.data(), rows, cols, 32, q.data(), s8.data());
  for (int8_t v : q) EXPECT_EQ(v, 0);
  for (float s : s8) EXPECT_FALSE(std::isnan(s));
}

TEST(Quantize, RejectsBadShapes) {
  std::vector<float> w(64);
  std::vector<uint8_t> packed(64);
  std::vector<uint16_t> scales(8);
  std::vector<int8_t> q(64);
  std::vector<float> s(8);
  EXPECT_THROW(quantize_int4_symmetric(w.data(), 1, 60, 32, packed.data(), scales.data()), Error);
  EXPECT_THROW(quantize_int4_symmetric(w.data(), 1, 36, 36, packed.data(), scales.data()), Error);
  EXPECT_THROW(quantize_int8_symmetric(w.data(), 1, 64, 0, q.data(), s.data()), Error);
}

TEST(Quantize, DequantizeRowOfDenseAndChecksRow) {
  const std::vector<uint16_t> bf = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.25f), 0};
  const WeightMatrix m{DType::BF16, bf.data(), 2, 2};
  std::vector<float> row(2);
  dequantize_row(m, 1, row.data());
  EXPECT_EQ(row[0], 0.25f);
  EXPECT_EQ(row[1], 0.0f);
  EXPECT_THROW(dequantize_row(m, 2, row.data()), Error);
}

TEST(Quantize, ActivationRowRoundsHalfToEven) {
  const float x[] = {127.0f, 0.5f, 1.5f, -2.5f, -127.0f, 3.49f};
  int8_t q[6];
  EXPECT_EQ(quantize_activation_row(x, 6, q), 1.0f);
  const int8_t want[] = {127, 0, 2, -2, -127, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], want[i]) << i;
  const float zeros[3] = {};
  EXPECT_EQ(quantize_activation_row(zeros, 3, q), 0.0f);
  EXPECT_EQ(q[0], 0);
  const float bad[2] = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isnan(quantize_activation_row(bad, 2, q)));
  EXPECT_EQ(q[1], 0);
  // A long row (the vectorised loops and their tails): ties everywhere, a NaN at the end.
  std::vector<float> ties(203);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = float(int(i % 101) - 50) + 0.5f;
  ties[7] = -127.0f;
  std::vector<int8_t> tq(ties.size());
  EXPECT_EQ(quantize_activation_row(ties.data(), int64_t(ties.size()), tq.data()), 1.0f);
  for (size_t i = 0; i < ties.size(); ++i) EXPECT_EQ(tq[i], int8_t(std::nearbyint(ties[i]))) << i;
  ties.back() = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(quantize_activation_row(ties.data(), int64_t(ties.size()), tq.data())));
}

}  // namespace
}  // namespace kimi
