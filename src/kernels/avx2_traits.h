#pragma once
// The AVX2 + FMA + F16C float traits (8 f32 lanes) of the float kernels (kernels_generic.h),
// which the integer-weight traits (quant_avx2_traits.h) extend. Included only by files compiled
// with those ISA flags; internal linkage, so no AVX2 code can be merged into a baseline caller.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernels_generic.h"  // kElemBytes, DType

namespace kimi::kernels {
namespace {

struct Avx2Traits {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kGemvUnroll = 2;  // 4 rows x 2 = 8 accumulators
  static constexpr bool kPrefetch = true;
  // 16 ymm registers: 2 x 4 accumulators + 2 weights + 1 x (4 x 2 would spill).
  static constexpr int kGemmRows = 2;
  static constexpr int kGemmTokens = 4;
  // The BF16 pairs tile (prefill): 4 x 3 accumulators + 4 weights, the third token's x taken as
  // the FMAs' memory operand. Twelve independent FMA chains instead of eight: 64 x [2048 x 2048]
  // 0.78x the time of 2 x 4 (Zen 5 capped at AVX2; 5 x 2, 3 x 3, 2 x 6 in between, 3 x 4 slower).
  static constexpr int kPairRows = 4;
  static constexpr int kPairTokens = 3;
  static constexpr int kUntransTokens = 2;
  static constexpr int kUntransVectors = 4;
  static constexpr int kMlaAccumulators = 8;  // the MLA tiles (mla_generic.h), with their loads

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float reduce_max(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  // exp_poly's (kernels_generic.h) pieces: round to nearest, 2^n of integral n in [-126, 127],
  // and y where x is in [kLo, kHi], 0 below, +inf above (NaN kept).
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static V exp_range(V x, V y, float lo, float hi) {
    const V y_or_inf = _mm256_blendv_ps(y, set1(__builtin_inff()), _mm256_cmp_ps(x, set1(hi), _CMP_GT_OQ));
    return _mm256_and_ps(y_or_inf, _mm256_cmp_ps(x, set1(lo), _CMP_NLT_UQ));
  }
  static V exp(V x) { return exp_poly<Avx2Traits>(x); }
  static float reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void reduce4(V a, V b, V c, V d, float* out) {
    // Per 128-bit half: hadd(hadd(a, b), hadd(c, d)) = partial sums [a, b, c, d].
    const V abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  static V load_x(const float* p) { return _mm256_loadu_ps(p); }
  static V in_register(V v) {  // as Avx512Traits::in_register
    asm("" : "+x"(v));
    return v;
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // AVX2 has no 16-bit masked loads: ragged ends go through a zero-padded copy (once per row).
  static V load_x_tail(const float* p, int len) {
    float buf[kLanes] = {};
    std::memcpy(buf, p, size_t(len) * sizeof(float));
    return _mm256_loadu_ps(buf);
  }
  static void store_tail(float* p, V v, int len) {
    float buf[kLanes];
    _mm256_storeu_ps(buf, v);
    std::memcpy(p, buf, size_t(len) * sizeof(float));
  }

  template <DType D>
  static V load_w(const std::byte* row, int64_t k) {
    if constexpr (D == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row + k * 4));
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k * 2));
      if constexpr (D == DType::BF16)  // bf16 is the top half of an f32: widen, shift up
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      else
        return _mm256_cvtph_ps(h);
    }
  }
  template <DType D>
  static V load_w_tail(const std::byte* row, int64_t k, int len) {
    alignas(32) std::byte buf[kLanes * 4] = {};
    std::memcpy(buf, row + k * int64_t(kElemBytes<D>), size_t(len) * kElemBytes<D>);
    return load_w<D>(buf, 0);
  }

  static V load_e4m3(const uint8_t* p) {
    // Each byte into the top of a 16-bit lane (b << 8), then an arithmetic shift by one and a
    // cleared bit 14: sign in bit 15, exponent and mantissa in bits 13..7 = an f16 of 2^-8 times
    // the e4m3 value.
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i h = _mm_unpacklo_epi8(_mm_setzero_si128(), b);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(h, 1), _mm_set1_epi16(int16_t(0xbfff))));
  }
  static V load_e4m3_tail(const uint8_t* p, int len) {
    alignas(8) uint8_t buf[kLanes] = {};
    std::memcpy(buf, p, size_t(len));
    return load_e4m3(buf);
  }

  static constexpr bool kBf16Pairs = true;
  using VI = __m256i;
  static VI load_bf16_raw(const std::byte* row, int64_t k) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k * 2));
  }
  static VI load_bf16_raw_tail(const std::byte* row, int64_t k, int len) {
    alignas(32) std::byte buf[2 * kLanes * 2] = {};
    std::memcpy(buf, row + k * 2, size_t(len) * 2);
    return load_bf16_raw(buf, 0);
  }
  static V bf16_even(VI raw) { return _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)); }
  static V bf16_odd(VI raw) {
    return _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(int(0xffff0000u))));
  }
  static void deinterleave_x(const float* src, int len, float* dst) {
    float buf[2 * kLanes] = {};
    if (len < 2 * kLanes) {
      std::memcpy(buf, src, size_t(len) * sizeof(float));
      src = buf;
    }
    const V a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + kLanes);
    // shuffle_ps works per 128-bit half ([a0 a2 b0 b2 | a4 a6 b4 b6]); the 64-bit permute
    // then puts the a pairs before the b pairs.
    const auto gather = [](V v) {
      return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
    };
    _mm256_storeu_ps(dst, gather(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))));
    _mm256_storeu_ps(dst + kLanes, gather(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  }
};

}  // namespace
}  // namespace kimi::kernels
