#pragma once
// The AVX-512 (F/BW/VL/DQ) + FMA + F16C float traits (16 f32 lanes) of the float kernels
// (kernels_generic.h), which the integer-weight traits (quant_avx512_traits.h) extend. Included
// only by files compiled with those ISA flags; internal linkage, so no AVX-512 code can be merged
// into a baseline caller.
// GCC 12.2's AVX-512 intrinsics build their "undefined" pass-through operands from a
// self-initialised variable, which -Wuninitialized flags wherever they are inlined (GCC bug
// 105593, fixed in 12.3); the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels_generic.h"  // kElemBytes, DType

namespace kimi::kernels {
namespace {

struct Avx512Traits {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kGemvUnroll = 2;  // 4 rows x 2 = 8 accumulators in flight
  static constexpr bool kPrefetch = true;
  // 32 zmm registers: 4 x 6 accumulators + 6 x + 1 weight. The BF16 pairs tile does best with
  // 4 x 5 (measured: 4 x 6 leaves the compiler no spare register and it spills).
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 6;
  static constexpr int kPairRows = kGemmRows;
  static constexpr int kPairTokens = 5;
  static constexpr int kUntransTokens = 4;
  static constexpr int kUntransVectors = 4;
  // The MLA tiles (mla_generic.h): 16 accumulators, so that a row vector serves 2 rows x 8 heads'
  // FMAs per query load (8 left the loop bound by its loads).
  static constexpr int kMlaAccumulators = 16;

  static __mmask16 mask(int len) { return __mmask16((1u << len) - 1u); }

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  // exp_poly's (kernels_generic.h) pieces: round to nearest, 2^n of integral n in [-126, 127],
  // and y where x is in [kLo, kHi], 0 below, +inf above (NaN kept).
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V round(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static V exp_range(V x, V y, float lo, float hi) {
    const V y_or_inf = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, set1(hi), _CMP_GT_OQ), set1(__builtin_inff()));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(lo), _CMP_NLT_UQ), y_or_inf);
  }
  static V exp(V x) { return exp_poly<Avx512Traits>(x); }
  static float reduce(V v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void reduce4(V a, V b, V c, V d, float* out) {
    // Per 128-bit lane: unpack + add gives [a0+a2, b0+b2, a1+a3, b1+b3] (and the same for c, d),
    // two shuffles + add give [a, b, c, d] partial sums; then the four lanes are added.
    const V ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const V cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const V s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
  static V load_x(const float* p) { return _mm512_loadu_ps(p); }
  // v held in a register: GCC otherwise folds a load that several FMAs share into each of them as
  // a memory operand, one load each (the MLA score tile ran bound by those loads).
  static V in_register(V v) {
    asm("" : "+v"(v));
    return v;
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // Masked loads neither read nor fault on the lanes past the end.
  static V load_x_tail(const float* p, int len) { return _mm512_maskz_loadu_ps(mask(len), p); }
  static void store_tail(float* p, V v, int len) { _mm512_mask_storeu_ps(p, mask(len), v); }

  template <DType D>
  static V convert(__m256i h) {
    if constexpr (D == DType::BF16)  // bf16 is the top half of an f32: widen, shift up
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
  template <DType D>
  static V load_w(const std::byte* row, int64_t k) {
    if constexpr (D == DType::F32)
      return _mm512_loadu_ps(row + k * 4);
    else
      return convert<D>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * 2)));
  }
  template <DType D>
  static V load_w_tail(const std::byte* row, int64_t k, int len) {
    if constexpr (D == DType::F32)
      return _mm512_maskz_loadu_ps(mask(len), row + k * 4);
    else
      return convert<D>(_mm256_maskz_loadu_epi16(mask(len), row + k * 2));
  }

  // e4m3 bytes as f16 of 2^-8 times their value (see Avx2Traits::load_e4m3).
  static V e4m3_from_bytes(__m128i b) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(int16_t(0xbfff))));
  }
  static V load_e4m3(const uint8_t* p) {
    return e4m3_from_bytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_e4m3_tail(const uint8_t* p, int len) { return e4m3_from_bytes(_mm_maskz_loadu_epi8(mask(len), p)); }

  static constexpr bool kBf16Pairs = true;
  using VI = __m512i;
  static VI load_bf16_raw(const std::byte* row, int64_t k) {
    return _mm512_loadu_si512(row + k * 2);
  }
  static VI load_bf16_raw_tail(const std::byte* row, int64_t k, int len) {
    return _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << len) - 1), row + k * 2);
  }
  static V bf16_even(VI raw) { return _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)); }
  static V bf16_odd(VI raw) {
    // A zero-masking move clears the even halves without tying up a vector register for a mask.
    return _mm512_castsi512_ps(_mm512_maskz_mov_epi16(__mmask32(0xaaaaaaaau), raw));
  }
  static void deinterleave_x(const float* src, int len, float* dst) {
    const int lo = len < kLanes ? len : kLanes;
    const V a = _mm512_maskz_loadu_ps(mask(lo), src);
    const V b = _mm512_maskz_loadu_ps(mask(len - lo), src + kLanes);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(dst + kLanes, _mm512_permutex2var_ps(a, odd, b));
  }
};

}  // namespace
}  // namespace kimi::kernels
