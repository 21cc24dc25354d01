// The AVX512_BF16 scores and values of kernels/mla_kernels.h (compiled with -mavx512bf16; only
// reached through mla_scores_bf16() / mla_values_bf16() when the CPU has it): a bf16 cache's rows
// against queries, or probabilities, rounded to bf16, one VDPBF16PS per 32 products with f32 sums,
// where the f32 kernels widen every row vector and do one FMA per 16.
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx512_traits.h"
#include "kernels/mla_kernels.h"
#include "kernels/unroll.h"

namespace kimi::kernels {
namespace {

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// Row pairs per values tile: 16 probabilities of a head converted by one VCVTNEPS2BF16.
constexpr int64_t kPairs = 8;

template <int NH, int R>
void scores_rows(const MlaRows& m, int64_t j, const uint16_t* q, int64_t qs, float scale, float* scores, int64_t ss) {
  const int64_t width = m.lora + m.rope;
  const uint16_t* row[R];
  KIMI_UNROLL for (int r = 0; r < R; ++r) row[r] = reinterpret_cast<const uint16_t*>(m.base + (j + r) * m.stride);
  __m512 acc[R][NH];
  KIMI_UNROLL for (int r = 0; r < R; ++r)
    KIMI_UNROLL for (int g = 0; g < NH; ++g) acc[r][g] = _mm512_setzero_ps();
  const auto step = [&](int64_t k, __mmask32 mask) {
    __m512bh rv[R];
    KIMI_UNROLL for (int r = 0; r < R; ++r) rv[r] = as_bh(_mm512_maskz_loadu_epi16(mask, row[r] + k));
    KIMI_UNROLL for (int g = 0; g < NH; ++g) {
      const __m512bh qv = as_bh(_mm512_maskz_loadu_epi16(mask, q + g * qs + k));
      KIMI_UNROLL for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], rv[r], qv);
    }
  };
  int64_t k = 0;
  for (; k + 32 <= width; k += 32) step(k, ~__mmask32(0));
  if (k < width) step(k, (__mmask32(1) << (width - k)) - 1);
  KIMI_UNROLL for (int r = 0; r < R; ++r) {
    float s[NH];
    int g = 0;
    for (; g + 4 <= NH; g += 4) Avx512Traits::reduce4(acc[r][g], acc[r][g + 1], acc[r][g + 2], acc[r][g + 3], s + g);
    for (; g < NH; ++g) s[g] = Avx512Traits::reduce(acc[r][g]);
    KIMI_UNROLL for (int h = 0; h < NH; ++h) scores[h * ss + j + r] = scale * s[h];
  }
}

template <int NH>
void scores_nh(const MlaRows& m, const uint16_t* q, int64_t qs, float scale, float* scores, int64_t ss) {
  constexpr int R = NH >= 5 ? 2 : NH >= 3 ? 4 : 8;
  int64_t j = 0;
  for (; j + R <= m.count; j += R) scores_rows<NH, R>(m, j, q, qs, scale, scores, ss);
  for (; j < m.count; ++j) scores_rows<NH, 1>(m, j, q, qs, scale, scores, ss);
}

void mla_scores_bf16_impl(const MlaRows& m, int nh, const uint16_t* q, int64_t qs, float scale, float* scores,
                          int64_t ss) {
  switch (nh) {
    case 1: return scores_nh<1>(m, q, qs, scale, scores, ss);
    case 2: return scores_nh<2>(m, q, qs, scale, scores, ss);
    case 3: return scores_nh<3>(m, q, qs, scale, scores, ss);
    case 4: return scores_nh<4>(m, q, qs, scale, scores, ss);
    case 5: return scores_nh<5>(m, q, qs, scale, scores, ss);
    case 6: return scores_nh<6>(m, q, qs, scale, scores, ss);
    case 7: return scores_nh<7>(m, q, qs, scale, scores, ss);
    default: return scores_nh<8>(m, q, qs, scale, scores, ss);
  }
}

// Values: two rows at a time, interleaved column by column (VPERMT2W) so that one VDPBF16PS adds
// both rows' products into 16 columns, against the pair of their probabilities rounded to bf16.
// One pass: columns [i, i + 32) (fewer at the lora's end: masked) of NH heads over the tile's rows.
template <int NH>
void values_pass(const MlaRows& m, int64_t j0, int64_t jn, const uint32_t* pw, int64_t i, float* out, int64_t os) {
  const int64_t len = m.lora - i < 32 ? m.lora - i : 32;
  const __mmask32 lm = len == 32 ? ~__mmask32(0) : (__mmask32(1) << len) - 1;
  const __mmask16 m0 = __mmask16(lm), m1 = __mmask16(lm >> 16);
  // Words 0-15 of a and b interleaved (a0 b0 a1 b1 ...), then words 16-31.
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  __m512 acc[NH][2];
  KIMI_UNROLL for (int g = 0; g < NH; ++g) {
    acc[g][0] = _mm512_maskz_loadu_ps(m0, out + g * os + i);
    acc[g][1] = _mm512_maskz_loadu_ps(m1, out + g * os + i + 16);
  }
  for (int64_t k = 0; k < jn; k += 2) {
    const auto row = [&](int64_t j) {
      return _mm512_maskz_loadu_epi16(lm, reinterpret_cast<const uint16_t*>(m.base + (j0 + j) * m.stride) + i);
    };
    const __m512i a = row(k), b = k + 1 < jn ? row(k + 1) : _mm512_setzero_si512();
    const __m512bh lo = as_bh(_mm512_permutex2var_epi16(a, lo_idx, b));
    const __m512bh hi = as_bh(_mm512_permutex2var_epi16(a, hi_idx, b));
    KIMI_UNROLL for (int g = 0; g < NH; ++g) {
      const __m512bh pv = as_bh(_mm512_set1_epi32(int(pw[g * kPairs + k / 2])));
      acc[g][0] = _mm512_dpbf16_ps(acc[g][0], lo, pv);
      acc[g][1] = _mm512_dpbf16_ps(acc[g][1], hi, pv);
    }
  }
  KIMI_UNROLL for (int g = 0; g < NH; ++g) {
    _mm512_mask_storeu_ps(out + g * os + i, m0, acc[g][0]);
    _mm512_mask_storeu_ps(out + g * os + i + 16, m1, acc[g][1]);
  }
}

template <int NH>
void values_nh(const MlaRows& m, const float* p, int64_t ps, float* out, int64_t os) {
  alignas(64) uint32_t pw[NH * kPairs];
  for (int64_t j0 = 0; j0 < m.count; j0 += 2 * kPairs) {
    const int64_t jn = m.count - j0 < 2 * kPairs ? m.count - j0 : 2 * kPairs;
    const __mmask16 pm = __mmask16((uint32_t(1) << jn) - 1);  // rows past jn: probability 0
    KIMI_UNROLL for (int g = 0; g < NH; ++g) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(pm, p + g * ps + j0));
      _mm256_store_si256(reinterpret_cast<__m256i*>(pw + g * kPairs), reinterpret_cast<const __m256i&>(b));
    }
    for (int64_t i = 0; i < m.lora; i += 32) values_pass<NH>(m, j0, jn, pw, i, out, os);
  }
}

void mla_values_bf16_impl(const MlaRows& m, int nh, const float* p, int64_t ps, float* out, int64_t os) {
  switch (nh) {
    case 1: return values_nh<1>(m, p, ps, out, os);
    case 2: return values_nh<2>(m, p, ps, out, os);
    case 3: return values_nh<3>(m, p, ps, out, os);
    case 4: return values_nh<4>(m, p, ps, out, os);
    case 5: return values_nh<5>(m, p, ps, out, os);
    case 6: return values_nh<6>(m, p, ps, out, os);
    case 7: return values_nh<7>(m, p, ps, out, os);
    default: return values_nh<8>(m, p, ps, out, os);
  }
}

}  // namespace

MlaScoresBf16 mla_scores_bf16_avx512bf16() { return &mla_scores_bf16_impl; }
MlaValuesBf16 mla_values_bf16_avx512bf16() { return &mla_values_bf16_impl; }

}  // namespace kimi::kernels
