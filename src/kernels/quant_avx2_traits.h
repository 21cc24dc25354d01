#pragma once
// The AVX2 (+FMA) traits of the integer-weight kernels (quant_generic.h), with or without
// AVX-VNNI (VEX-encoded VPDPBUSD): the float kernels' AVX2 traits (zero, set1, add, fma,
// reduce, load_x ...) plus the integer operations. Included only by quant_avx2.cpp and
// quant_avxvnni.cpp, which are compiled with those ISA flags.
#include <cstring>

#include "kernels/avx2_traits.h"
#include "kernels/quant_generic.h"

namespace kimi::kernels {
namespace {

template <bool kVnniOn>
struct Avx2QuantTraits : Avx2Traits {
  static constexpr bool kVnni = kVnniOn;
  // 16 ymm registers: 2 x 3 f32 totals (+ their int32 sums), x, weights.
  static constexpr int kGemmRows = 2;
  static constexpr int kGemmTokens = 3;

  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V cvt(VI v) { return _mm256_cvtepi32_ps(v); }

  // Partial loads copy into a zeroed buffer (AVX2 has no byte-masked loads); only row tails.
  static __m128i load8(const uint8_t* p, int bytes) {
    uint64_t u = 0;
    std::memcpy(&u, p, size_t(bytes));
    return _mm_cvtsi64_si128(int64_t(u));
  }

  struct G4 {
    VI zero;
    V scale;
  };
  static G4 make_group4(float scale, int zero) { return {_mm256_set1_epi32(zero), _mm256_set1_ps(scale)}; }
  static VI load_nib(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static VI load_nib_tail(const uint8_t* p, int bytes) { return _mm256_cvtepu8_epi32(load8(p, bytes)); }
  static V deq_lo(VI v, const G4& g) {
    const VI q = _mm256_sub_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xF)), g.zero);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), g.scale);
  }
  static V deq_hi(VI v, const G4& g) {
    const VI q = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), g.zero);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), g.scale);
  }
  static VI load_i8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static VI load_i8_tail(const uint8_t* p, int bytes) { return _mm256_cvtepi8_epi32(load8(p, bytes)); }

  // Integer blocks of 32 bytes.
  static VI load_block(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static VI load_block_tail(const void* p, int bytes) {
    alignas(32) uint8_t buf[32] = {};
    std::memcpy(buf, p, size_t(bytes));
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
  }
  static VI lo_nib(VI v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static VI hi_nib(VI v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
  static VI dot_u8s8(VI acc, VI u, VI s) {
    if constexpr (kVnni)
      return _mm256_dpbusd_avx_epi32(acc, u, s);
    else
      return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  // Nibbles (<= 15) x int8: each VPMADDUBSW pair sum is at most 2 * 15 * 128 = 3840 in size, so
  // two add in int16 before one VPMADDWD (one widening per 64 int4 weights instead of two).
  static VI dot2_u4s8(VI acc, VI u0, VI s0, VI u1, VI s1) {
    if constexpr (kVnni) {
      return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, u0, s0), u1, s1);
    } else {
      const VI p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
      return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
  }
  static VI ones8() { return _mm256_set1_epi8(1); }
  static VI abs8(VI w) { return _mm256_abs_epi8(w); }
  static VI sign8(VI x, VI w) { return _mm256_sign_epi8(x, w); }
  static VI izero() { return _mm256_setzero_si256(); }
  static VI iset1(int v) { return _mm256_set1_epi32(v); }
  static VI iadd(VI a, VI b) { return _mm256_add_epi32(a, b); }
  static VI isub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
  template <int N>
  static VI slli(VI a) { return _mm256_slli_epi32(a, N); }
  static VI mullo(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
  static VI load_i(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  // Within each 128-bit half: a's pair sums, then b's (int4_int8_super_tile's folds).
  static VI hadd_i(VI a, VI b) { return _mm256_hadd_epi32(a, b); }

  static V scales_window(const RowGroups& rg, int64_t g, int count) {
    // A whole window is one load (and a widening for bf16): per block of the W4A8 kernel, where
    // the scalar fill below measured as the kernel's bottleneck. Only a row's last windows fill.
    if (count == 8) {
      if (rg.f32) return _mm256_loadu_ps(reinterpret_cast<const float*>(rg.scales + g * 4));
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rg.scales + g * 2));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    alignas(32) float buf[8] = {};
    for (int i = 0; i < count; ++i) buf[i] = rg.scale(g + i);
    return _mm256_load_ps(buf);
  }
  static VI zeros_window(const uint8_t* p, int count) {
    alignas(32) int32_t buf[8] = {};
    for (int i = 0; i < count; ++i) buf[i] = p[i];
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
  }
  static V permute(V v, VI idx) { return _mm256_permutevar8x32_ps(v, idx); }
  // int4 x f32 on whole words (int4_word8_layout): nibble j of each 32-bit lane as an f32 without
  // moving it. For j < 7 the masked lane is nibble * 16^j, exact in f32 (x is pre-scaled by
  // 16^-j to match); nibble 7 is shifted down, since masking it in place would set the sign bit.
  // One integer op and one conversion per 8 weights.
  static V nibble_in_place(VI words, unsigned j) {
    if (j == 7) return _mm256_cvtepi32_ps(_mm256_srli_epi32(words, 28));
    return _mm256_cvtepi32_ps(_mm256_and_si256(words, _mm256_set1_epi32(int32_t(0xFu << (4 * j)))));
  }
  // [s_g x4, s_g+1 x4]: the scales of a 64-input block's two groups of 32 (count 1: the second is
  // past the row's end and reads as 0).
  static V scale_pair(const RowGroups& rg, int64_t g, int count) {
    // Fixed-size copies (inlined loads; a variable size would call memcpy per block).
    __m128i s;
    if (rg.f32) {
      uint64_t u;
      if (count == 2) {
        std::memcpy(&u, rg.scales + g * 4, 8);
      } else {
        uint32_t one;
        std::memcpy(&one, rg.scales + g * 4, 4);
        u = one;
      }
      s = _mm_cvtsi64_si128(int64_t(u));
    } else {
      uint32_t u;
      if (count == 2) {
        std::memcpy(&u, rg.scales + g * 2, 4);
      } else {
        uint16_t one;
        std::memcpy(&one, rg.scales + g * 2, 2);
        u = one;
      }
      s = _mm_slli_epi32(_mm_cvtepu16_epi32(_mm_cvtsi32_si128(int32_t(u))), 16);
    }
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castsi128_ps(s)),
                                    _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
  }

  static VI permute_i(VI v, VI idx) { return _mm256_permutevar8x32_epi32(v, idx); }

  // int4 x int16 (int4_word16_layout): nibble j of every 16-bit half as an int16, and the
  // products of int16 pairs added into the int32 lanes.
  static VI nibble16(VI words, unsigned j) {
    if (j == 3) return _mm256_srli_epi16(words, 12);
    const VI m = _mm256_set1_epi16(0xF);
    return _mm256_and_si256(j == 0 ? words : _mm256_srli_epi16(words, int(4 * j)), m);
  }
  static VI dot_i16(VI acc, VI a, VI b) {
    if constexpr (kVnni)
      return _mm256_dpwssd_avx_epi32(acc, a, b);
    else
      return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

}  // namespace
}  // namespace kimi::kernels
