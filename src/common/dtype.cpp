#include "common/dtype.h"

#include <cmath>
#include <cstring>

#include "common/error.h"

namespace kimi {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kInfos[] = {
    {DType::F32, "F32", 4},  {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2}, {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},    {DType::I16, "I16", 2}, {DType::I32, "I32", 4},   {DType::I64, "I64", 8},
    {DType::BOOL, "BOOL", 1}, {DType::F64, "F64", 8},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i.size;
  return 0;
}

DType parse_dtype(std::string_view name) {
  for (const auto& i : kInfos)
    if (i.name == name) return i.type;
  throw Error("unsupported tensor dtype '" + std::string(name) + "'");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Subnormal or zero: value = mant * 2^-24.
    const float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u; // overflow to inf (>= 65520 rounds up)
  const float a = std::bit_cast<float>(absu);
  if (absu < 0x38800000u) {
    // Subnormal half: round a / 2^-24 to nearest even integer.
    return sign | uint16_t(std::nearbyint(std::ldexp(a, 24)));
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return sign | uint16_t(((r >> 13) - (112u << 10)) & 0xffffu);
}

float fp8_e4m3_to_f32(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if (exp == 15 && mant == 7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exp == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(mant) * 0x1p-9f));
  return std::bit_cast<float>(sign | ((exp + 120) << 23) | (mant << 20));
}

uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7f;
  const float a = std::bit_cast<float>(absu);
  if (a >= kFp8E4m3Max) return sign | 0x7e;
  uint32_t bits;
  if (a < 0x1p-6f) {
    // Subnormal e4m3: a in units of 2^-9 (exact), rounded half to even. A result of 8 is the
    // smallest normal, whose encoding is also 8.
    const float units = a * 512.0f;
    bits = uint32_t(units);
    const float frac = units - float(bits);
    if (frac > 0.5f || (frac == 0.5f && (bits & 1u))) ++bits;
  } else {
    // Normal: rebias the exponent (127 -> 7), keep 3 of 23 mantissa bits, round half to even
    // (a carry into the exponent is the correct next binade).
    bits = (((absu >> 23) - 120u) << 3) | ((absu >> 20) & 0x7u);
    const uint32_t rest = absu & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (bits & 1u))) ++bits;
    if (bits > 0x7eu) bits = 0x7eu;  // just below 448 rounding up: still 448
  }
  return uint8_t(sign | bits);
}

}  // namespace kimi
