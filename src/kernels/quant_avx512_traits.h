#pragma once
// The AVX-512 (F/BW/VL/DQ) traits of the integer-weight kernels (quant_generic.h), with or
// without AVX-512 VNNI and VBMI: the float kernels' AVX-512 traits (zero, set1, add, fma, reduce,
// load_x, mask ...) plus the integer operations. Included only by quant_avx512.cpp,
// quant_avx512vnni.cpp and quant_avx512vbmi.cpp, which are compiled with those ISA flags.
#include "kernels/avx512_traits.h"
#include "kernels/quant_generic.h"

namespace kimi::kernels {
namespace {

template <bool kVnniOn, bool kVbmi = false>
struct Avx512QuantTraits : Avx512Traits {
  static constexpr bool kVnni = kVnniOn;
  // 32 zmm registers: 4 x 3 f32 totals (+ their int32 sums while a segment runs), x, weights.
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 3;

  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V cvt(VI v) { return _mm512_cvtepi32_ps(v); }

  // int4 x f32: a 16-entry table of (q - zero) * scale, indexed by the nibble (VPERMPS reads
  // only the low 4 bits of each index, so the low nibble needs no mask).
  using G4 = V;
  static G4 make_group4(float scale, int zero) {
    const V iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(float(zero))), _mm512_set1_ps(scale));
  }
  static VI load_nib(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static VI load_nib_tail(const uint8_t* p, int bytes) {
    return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask(bytes), p));
  }
  static V deq_lo(VI v, const G4& table) { return _mm512_permutexvar_ps(v, table); }
  // int4 x f32 on whole words (int4_word_layout): the nibble at bits 4j of each 32-bit lane,
  // looked up in a 16-entry table (VPERMPS ignores the index bits above the low 4).
  static V lut_nibble(VI words, unsigned j, V table) {
    return _mm512_permutexvar_ps(_mm512_srli_epi32(words, j * 4), table);
  }
  static V deq_hi(VI v, const G4& table) {
    return _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  }
  static VI load_i8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static VI load_i8_tail(const uint8_t* p, int bytes) {
    return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask(bytes), p));
  }

  // Integer blocks of 64 bytes.
  static VI load_block(const void* p) { return _mm512_loadu_si512(p); }
  static VI load_block_tail(const void* p, int bytes) {
    return _mm512_maskz_loadu_epi8(bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1, p);
  }
  static VI lo_nib(VI v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  static VI hi_nib(VI v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
  static VI dot_u8s8(VI acc, VI u, VI s) {
    if constexpr (kVnni)
      return _mm512_dpbusd_epi32(acc, u, s);
    else
      return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
  // Two dot products, as before (the AVX2 traits fuse the emulated pair; not measured here).
  static VI dot2_u4s8(VI acc, VI u0, VI s0, VI u1, VI s1) { return dot_u8s8(dot_u8s8(acc, u0, s0), u1, s1); }
  static VI ones8() { return _mm512_set1_epi8(1); }
  static VI abs8(VI w) { return _mm512_abs_epi8(w); }
  static VI sign8(VI x, VI w) {
    // No VPSIGNB on zmm: negate x where w is negative (where w is 0, |w| = 0 anyway).
    return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
  }
  static VI izero() { return _mm512_setzero_si512(); }
  static VI iset1(int v) { return _mm512_set1_epi32(v); }
  static VI iadd(VI a, VI b) { return _mm512_add_epi32(a, b); }
  static VI isub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
  template <int N>
  static VI slli(VI a) { return _mm512_slli_epi32(a, N); }
  static VI mullo(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
  static VI load_i(const int32_t* p) { return _mm512_loadu_si512(p); }

  static V scales_window(const RowGroups& rg, int64_t g, int count) {
    if (rg.f32) return _mm512_maskz_loadu_ps(mask(count), rg.scales + g * 4);
    const __m256i h = _mm256_maskz_loadu_epi16(mask(count), rg.scales + g * 2);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static VI zeros_window(const uint8_t* p, int count) {
    return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask(count), p));
  }
  static V permute(V v, VI idx) { return _mm512_permutexvar_ps(idx, v); }
  static VI permute_i(VI v, VI idx) { return _mm512_permutexvar_epi32(idx, v); }

  // int4 x int16 (int4_word16_layout): nibble j of every 16-bit half as an int16, and the
  // products of int16 pairs added into the int32 lanes. With VBMI, VPMULTISHIFTQB moves each
  // half's bits 4j.. to its low byte (the AND clears the rest): VPSRLW has one port on Intel
  // (p0, beside VPDPWSSD and the conversion), VPMULTISHIFTQB another (p5); the int16 kernel
  // took 0.79x the time from L1 (4.25 -> 3.35 ns a block, Emerald Rapids).
  static VI nibble16(VI words, unsigned j) {
    if constexpr (kVbmi) {
      if (j != 0) {
        // Byte 2h and 2h + 1 of each qword (half h) read from bit 16h + 4j.
        const VI from = _mm512_set1_epi64(int64_t(0x0101010101010101ull * (4 * j) + 0x3030202010100000ull));
        return _mm512_and_si512(_mm512_multishift_epi64_epi8(from, words), _mm512_set1_epi16(0xF));
      }
    }
    if (j == 3) return _mm512_srli_epi16(words, 12);
    const VI m = _mm512_set1_epi16(0xF);
    return _mm512_and_si512(j == 0 ? words : _mm512_srli_epi16(words, int(4 * j)), m);
  }
  static VI dot_i16(VI acc, VI a, VI b) {
    if constexpr (kVnni)
      return _mm512_dpwssd_epi32(acc, a, b);
    else
      return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
};

}  // namespace
}  // namespace kimi::kernels
