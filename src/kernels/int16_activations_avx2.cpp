// The 8-lane int16 activations of int4_word16_layout (quant_kernels.h), vectorised: per block of
// 64 inputs the scale amax / 32767, the int16 q in the kernels' order and -8 x each lane's sum.
// The portable loop it replaces spent ~19.5 us on a 7168-input token (AVX2 machines quantize the
// 16-bit activations of every INT4 linear this way, ~16 times per MoE layer and step, on one
// thread while the other waits). Compiled with the AVX2 flags; called only by the 8-lane
// variants' prepare_input, which exist only on CPUs with AVX2.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels/quant_kernels.h"

namespace kimi::kernels {

// One token: x [cols]; per block b of 64 inputs, dst[64b + 16j + i] = q[64b + 4i + j] (the pair
// order (q[8l + j], q[8l + 4 + j]) of lane l = i / 2), scales[b] (NaN if an input is) and
// negsum[8b + l] = -8 x (q[64b + 8l] + ... + q[64b + 8l + 7]); zero past cols.
void quantize_word8_avx2(const float* x, int64_t cols, int16_t* dst, float* scales, int32_t* negsum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // Groups of 4 inputs g0 .. g7 come out of the 4 x 4 transposes as g0 g2 g4 g6 g1 g3 g5 g7.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones = _mm256_set1_epi16(1), floor = _mm256_set1_epi16(-32767);
  for (int64_t b = 0; b * 64 < cols; ++b) {
    const float* src = x + b * 64;
    const int64_t len = cols - b * 64 < 64 ? cols - b * 64 : 64;
    __m256 v[8];
    __m256 amax = _mm256_setzero_ps();
    int nan = 0;
    for (int m = 0; m < 8; ++m) {
      // Whole vectors: an INT4 matrix has a multiple of 8 inputs (validate_weight).
      v[m] = 8 * m < len ? _mm256_loadu_ps(src + 8 * m) : _mm256_setzero_ps();
      nan |= _mm256_movemask_ps(_mm256_cmp_ps(v[m], v[m], _CMP_UNORD_Q));
      // As std::max(amax, |x|): a NaN |x| leaves amax as it was (the documented layout's rule).
      amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[m]), amax);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float a = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    const float s = a / 32767.0f, inv = a > 0.0f ? 32767.0f / a : 0.0f;
    scales[b] = nan ? std::numeric_limits<float>::quiet_NaN() : s;
    const __m256 vinv = _mm256_set1_ps(inv);
    // Rounded to nearest even (MXCSR's default, as _mm_cvtss_si32); a NaN converts to INT_MIN.
    __m256i q[8];
    for (int m = 0; m < 8; ++m) q[m] = _mm256_cvtps_epi32(_mm256_mul_ps(v[m], vinv));
    // u[h][j]: inputs 32h + 4i + j, i = 0 .. 7, as int32 (a 4 x 4 transpose in each 128-bit half).
    __m256i u[2][4];
    for (int h = 0; h < 2; ++h) {
      const __m256i t0 = _mm256_unpacklo_epi32(q[4 * h], q[4 * h + 1]), t1 = _mm256_unpackhi_epi32(q[4 * h], q[4 * h + 1]);
      const __m256i t2 = _mm256_unpacklo_epi32(q[4 * h + 2], q[4 * h + 3]),
                    t3 = _mm256_unpackhi_epi32(q[4 * h + 2], q[4 * h + 3]);
      u[h][0] = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t0, t2), order);
      u[h][1] = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t0, t2), order);
      u[h][2] = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t1, t3), order);
      u[h][3] = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t1, t3), order);
    }
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      // Saturating to int16 caps at 32767 as the clamp does; the floor lifts -32768 (a NaN's
      // INT_MIN) to -32767.
      const __m256i packed = _mm256_packs_epi32(u[0][j], u[1][j]);  // 128-bit halves interleaved
      const __m256i seg = _mm256_max_epi16(_mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)), floor);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + b * 64 + 16 * j), seg);
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(seg, ones));  // lane l: q[8l + j] + q[8l + 4 + j]
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(negsum + b * 8),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 3)));
  }
}

}  // namespace kimi::kernels
