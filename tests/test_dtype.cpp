// Scalar dtype conversions: bf16 and f16 rounding (nearest, ties to even), specials, and exhaustive
// checks over every 16-bit pattern against an independent reference written here.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/dtype.h"
#include "common/error.h"

using namespace kimi;

namespace {

float bits_f(uint32_t u) { return std::bit_cast<float>(u); }

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// Reference f16 decoding straight from the IEEE definition (no bit tricks).
double f16_reference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(double(mant), -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(double(1024 + mant), exp - 25);
}

}  // namespace

TEST(DType, NamesSizesAndParsing) {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::I8,   DType::U8,
                       DType::I16, DType::I32, DType::I64,  DType::BOOL, DType::F64};
  const size_t sizes[] = {4, 2, 2, 1, 1, 2, 4, 8, 1, 8};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(parse_dtype(dtype_name(all[i])), all[i]);
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << dtype_name(all[i]);
  }
  EXPECT_EQ(dtype_name(DType::BF16), "BF16");
  EXPECT_THROW(parse_dtype("F8_E4M3"), Error);
  EXPECT_THROW(parse_dtype("bf16"), Error);  // safetensors spelling is upper case
  EXPECT_THROW(parse_dtype(""), Error);
}

// --- bf16 -----------------------------------------------------------------------------------

TEST(DType, Bf16ExactAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Ties go to the even bf16 mantissa; anything off the tie goes to the nearer one.
  EXPECT_EQ(f32_to_bf16(bits_f(0x3f808000u)), 0x3f80);  // tie, 0x3f80 even
  EXPECT_EQ(f32_to_bf16(bits_f(0x3f818000u)), 0x3f82);  // tie, 0x3f81 odd -> up
  EXPECT_EQ(f32_to_bf16(bits_f(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(bits_f(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_f(0xbf818000u)), 0xbf82);  // sign does not change the rounding
  EXPECT_EQ(f32_to_bf16(bits_f(0x3fffffffu)), 0x4000);  // carry into the exponent
  EXPECT_EQ(f32_to_bf16(bits_f(0x00008000u)), 0x0000);  // subnormal tie to even zero
  EXPECT_EQ(f32_to_bf16(bits_f(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(bits_f(0x007fffffu)), 0x0080);  // largest subnormal rounds to smallest normal
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
}

TEST(DType, Bf16Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past the largest bf16
  EXPECT_EQ(f32_to_bf16(bits_f(0x7f7f7fffu)), 0x7f7f);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7f80)));
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // NaNs stay NaN, including those whose payload sits only in the low 16 bits (naive truncation
  // would turn them into infinity), and keep their sign.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = f32_to_bf16(bits_f(nan));
    EXPECT_TRUE(bf16_is_nan(h)) << std::hex << nan << " -> " << h;
    EXPECT_EQ(h >> 15, nan >> 31);
    EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  }
}

TEST(DType, Bf16AllPatternsRoundTripAndMidpoints) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (bf16_is_nan(uint16_t(h))) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(bf16_is_nan(f32_to_bf16(f)));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
  // Between every pair of neighbouring finite bf16 values (same sign): the exact midpoint goes to
  // the even one and the floats just either side of it go to the nearer one. The midpoint needs
  // 9 significant bits, so it is exact in f32.
  for (uint32_t base : {0x0000u, 0x8000u}) {
    for (uint32_t m = 0; m < 0x7f7f; ++m) {
      const uint16_t lo = uint16_t(base | m), hi = uint16_t(base | (m + 1));
      const float a = bf16_to_f32(lo), b = bf16_to_f32(hi);
      const float mid = a + (b - a) / 2;  // (a + b) / 2 would overflow near FLT_MAX
      ASSERT_EQ(f32_to_bf16(mid), (m % 2 == 0) ? lo : hi) << std::hex << lo;
      ASSERT_EQ(f32_to_bf16(std::nextafter(mid, a)), lo) << std::hex << lo;
      ASSERT_EQ(f32_to_bf16(std::nextafter(mid, b)), hi) << std::hex << lo;
    }
  }
}

// --- f16 ------------------------------------------------------------------------------------

TEST(DType, F16NormalsSubnormalsOverflow) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);          // largest finite
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);        // just below the overflow tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);          // tie between 65504 and "65536" -> inf (even)
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // tie, rounds up into the normals
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);  // tie between 1 and 2 -> 2
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, odd -> up
  EXPECT_EQ(f32_to_f16(2.0f - std::ldexp(1.0f, -12)), 0x4000);  // carry into the exponent

  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(DType, F16Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_f16(inf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x7c00), inf);
  EXPECT_EQ(f16_to_f32(0xfc00), -inf);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u}) {
    const uint16_t h = f32_to_f16(bits_f(nan));
    EXPECT_TRUE(f16_is_nan(h)) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31);
  }
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // signalling pattern decodes as NaN, not inf
}

TEST(DType, F16AllPatternsMatchReferenceAndRoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const double ref = f16_reference(uint16_t(h));
    if (f16_is_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(double(f), ref) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DType, F16MidpointsRoundToNearestEven) {
  // Every pair of neighbouring finite f16 values, both signs, subnormals included; the midpoint
  // needs 12 significant bits, exact in f32. 0x7bff's upper neighbour is the overflow tie (65520).
  for (uint32_t base : {0x0000u, 0x8000u}) {
    for (uint32_t m = 0; m < 0x7c00; ++m) {
      const uint16_t lo = uint16_t(base | m), hi = uint16_t(base | (m + 1));
      const float a = f16_to_f32(lo);
      const float b = (m + 1 == 0x7c00) ? (base ? -65536.0f : 65536.0f) : f16_to_f32(hi);
      const float mid = a + (b - a) / 2;  // (a + b) / 2 would overflow near FLT_MAX
      ASSERT_EQ(f32_to_f16(mid), (m % 2 == 0) ? lo : hi) << std::hex << lo;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, a)), lo) << std::hex << lo;
      ASSERT_EQ(f32_to_f16(std::nextafter(mid, b)), hi) << std::hex << lo;
    }
  }
}
