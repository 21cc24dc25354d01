// The portable kernels (baseline x86-64 or any other target), also the reference the SIMD
// variants are tested against. One "lane" per vector; the shared tile code still gives them
// several independent accumulators and reuse of each converted weight across tokens.
#include <cmath>
#include <cstring>

#include "kernels/kernels_generic.h"

namespace kimi::kernels {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE half -> float with integer operations only: rebiasing the exponent (15 -> 127) for
// normal halves, keeping the payload for Inf/NaN, and an exact int -> float conversion for
// subnormals (multiplying a subnormal float instead would take a slow microcode assist).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7fffu;
  uint32_t bits;
  if (mag >= 0x7c00u)
    bits = 0x7f800000u | ((mag & 0x3ffu) << 13);
  else if (mag >= 0x0400u)
    bits = (mag << 13) + (112u << 23);
  else
    bits = bits_of(float(int(mag)) * 0x1p-24f);
  return float_of(bits | sign);
}

struct ScalarTraits {
  using V = float;
  static constexpr int kLanes = 1;
  static constexpr int kGemvUnroll = 4;
  static constexpr bool kPrefetch = false;
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 2;
  static constexpr int kPairRows = 1;    // unused (no kBf16Pairs)
  static constexpr int kPairTokens = 2;  // unused (no kBf16Pairs)
  static constexpr int kUntransTokens = 4;
  static constexpr int kUntransVectors = 4;
  static constexpr int kMlaAccumulators = 8;

  static V zero() { return 0.0f; }
  static V set1(float a) { return a; }
  static V add(V a, V b) { return a + b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V max(V a, V b) { return a > b ? a : b; }  // b when either is NaN, as the SIMD max
  static float reduce_max(V v) { return v; }
  static V exp(V x) { return std::exp(x); }  // the reference the polynomial of the SIMD traits is tested against
  static float reduce(V v) { return v; }
  static void reduce4(V a, V b, V c, V d, float* out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
  }
  // Pairs of bf16 would not save anything here: widening one scalar is already a single shift.
  static constexpr bool kBf16Pairs = false;
  static V load_x(const float* p) { return *p; }
  static V in_register(V v) { return v; }
  static V load_x_tail(const float* p, int len) { return len > 0 ? *p : 0.0f; }
  static void store(float* p, V v) { *p = v; }
  static void store_tail(float* p, V v, int len) {
    if (len > 0) *p = v;
  }

  template <DType D>
  static V load_w(const std::byte* row, int64_t k) {
    // memcpy: checkpoint data need not be aligned to its element size.
    if constexpr (D == DType::F32) {
      float v;
      std::memcpy(&v, row + k * 4, 4);
      return v;
    } else {
      uint16_t h;
      std::memcpy(&h, row + k * 2, 2);
      if constexpr (D == DType::BF16)
        return float_of(uint32_t(h) << 16);
      else
        return half_to_float(h);
    }
  }
  template <DType D>
  static V load_w_tail(const std::byte* row, int64_t k, int len) {
    return len > 0 ? load_w<D>(row, k) : 0.0f;
  }
  // The same f16 route as the SIMD traits, so that every variant reads a byte alike.
  static V load_e4m3(const uint8_t* p) { return half_to_float(uint16_t(((*p & 0x7fu) << 7) | ((*p & 0x80u) << 8))); }
  static V load_e4m3_tail(const uint8_t* p, int len) { return len > 0 ? load_e4m3(p) : 0.0f; }
};

}  // namespace

const KernelTable kScalarKernels = make_table<ScalarTraits>(Isa::Scalar);

}  // namespace kimi::kernels
