#pragma once
// Element types of checkpoint tensors and the scalar conversions between them.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kimi {

enum class DType { F32, F16, BF16, I8, U8, I16, I32, I64, BOOL, F64 };

// Safetensors spelling ("F32", "BF16", ...). parse_dtype throws kimi::Error on unknown names.
std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t v) { return std::bit_cast<float>(uint32_t(v) << 16); }

// Round-to-nearest-even, NaN kept quiet: the same rounding torch uses for .to(torch.bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// OCP FP8 E4M3 (torch.float8_e4m3fn, vLLM's "fp8_e4m3"): 1 sign, 4 exponent bits (bias 7),
// 3 mantissa bits; no infinities, largest finite value 448, NaN = S.1111.111, subnormals
// m * 2^-9. The KV cache stores its fp8 rows in this format.
constexpr float kFp8E4m3Max = 448.0f;
float fp8_e4m3_to_f32(uint8_t v);
// Round-to-nearest-even; magnitudes beyond 448 (Inf included) saturate to +-448 as vLLM's
// scaled fp8 conversions clamp; NaN stays NaN (0x7f with the sign).
uint8_t f32_to_fp8_e4m3(float f);

}  // namespace kimi
