// The AVX512_BF16 kernels of bf16_dot.h (compiled with -mavx512bf16; only reached through
// bf16_dot_rows() when the CPU has it).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/avx512_traits.h"
#include "kernels/bf16_dot.h"
#include "kernels/prefetch.h"
#include "kernels/streaming.h"
#include "kernels/unroll.h"

namespace kimi::kernels {
namespace {

constexpr int kRows = 4;    // rows per register tile
constexpr int kTokens = 6;  // tokens per register tile: 4 x 6 accumulators + 6 x loads + 1 weight load
// Rows swept by every token block while they stay in L2 (a quarter of a 1 MiB L2).
constexpr int64_t kChunkBytes = int64_t(256) << 10;
// Columns per block of the prefill GEMM: a 6-token block of x is then 24 KiB, within L1.
constexpr int64_t kGemmColBlock = 2048;
// Decode reads rows up to this long one at a time (the f32 GEMV's kGemvShortRowBytes) in streamed
// matrices (kernels/streaming.h).
constexpr int64_t kShortRowBytes = 2048;
// Software prefetch distance per weight row, in bf16 elements (4 KiB). This loop takes 64 bytes
// per VDPBF16PS, so the f32 kernels' 768 bytes left it waiting on DRAM: on Zen 5, `small`'s
// cold expert batches 0.85x the time and its decode 1.13x faster with 4 KiB (2 KiB: 0.93-0.97x).
// Rows of 4 KiB or more (the real model's 2048-7168 columns) prefetch 1 KiB ahead instead: there
// 4 KiB ahead was a page ahead in each of a tile's rows, and cold [7168 x 2048] took 1.2-1.75x
// the time of 1 KiB, [2048 x 7168] 1.03-1.6x; the short rows' 4 KiB (which reaches the next
// tile's rows) stays best for them (bench/results/2026-12-07-absorbed-attention-split-kv.md).
constexpr int64_t kBf16PrefetchAhead = 2048;
constexpr int64_t kBf16PrefetchAheadLongRows = 512;
constexpr int64_t kBf16LongRowCols = 2048;

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// A tile's operands: rows of w (stride cols) and tokens of x (stride ldx) over the columns
// [k0, k1); y[t * ldy + r] receives (or, with accumulate, adds) the tile's products.
// lead > 0 (a streamed decode over rows that start lead elements past a 64-byte line): w and k
// count from the line, x is shifted to match (align_activations), and the first 32 columns'
// load is masked to the row's own lead..31, so that every weight load is one aligned line.
struct Tile {
  const uint16_t* w;
  const uint16_t* x;
  int64_t cols, ldx, k0, k1;
  float* y;
  int64_t ldy;
  bool accumulate;
  bool prefetch;
  int next_rows;
  int lead = 0;
};

// rows x tokens dot products over columns [k0, k1); U independent accumulators per pair keep the
// VDPBF16PS chains short when the tile is small (the GEMV). The loops over u, r and t are
// unrolled by force (KIMI_UNROLL): left rolled, the 4 x 6 tile's 24 accumulators lived on the
// stack and the prefill GEMM ran at 0.8x the f32 kernel's speed on Zen 5 (1.4-1.6x unrolled).
// prefetch: the rows stream from memory (this is the first pass over them): each row's line
// `ahead` ahead (by row length, above), and past the range's end the same line of the next tile's
// row from k0 (next_rows of them follow, contiguous), so that a tile of short rows does not start
// from DRAM.
template <int R, int T, int U>
void tile(const Tile& a) {
  const uint16_t* w = a.w;
  const uint16_t* x = a.x;
  const int64_t cols = a.cols;
  __m512 acc[U][R][T];
  KIMI_UNROLL for (int u = 0; u < U; ++u)
    KIMI_UNROLL for (int r = 0; r < R; ++r)
      KIMI_UNROLL for (int t = 0; t < T; ++t) acc[u][r][t] = _mm512_setzero_ps();
  const int64_t ahead = cols >= kBf16LongRowCols ? kBf16PrefetchAheadLongRows : kBf16PrefetchAhead;
  int64_t k = a.k0;
  if (a.lead > 0) {  // the line holding the rows' first columns, without the bytes before them
    const __mmask32 m = ~__mmask32(0) << a.lead;
    __m512bh xv[T];
    KIMI_UNROLL for (int t = 0; t < T; ++t) xv[t] = as_bh(_mm512_loadu_si512(x + t * a.ldx));
    KIMI_UNROLL for (int r = 0; r < R; ++r) {
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, w + r * cols));
      KIMI_UNROLL for (int t = 0; t < T; ++t) acc[0][r][t] = _mm512_dpbf16_ps(acc[0][r][t], wv, xv[t]);
    }
    k = 32;
  }
  for (; k + 32 * U <= a.k1; k += 32 * U) {
    KIMI_UNROLL for (int u = 0; u < U; ++u) {
      const int64_t kk = k + 32 * u;
      __m512bh xv[T];
      KIMI_UNROLL for (int t = 0; t < T; ++t) xv[t] = as_bh(_mm512_loadu_si512(x + t * a.ldx + kk));
      KIMI_UNROLL for (int r = 0; r < R; ++r) {
        if (a.prefetch) {
          const int64_t at = kk + ahead;
          if (at < a.k1)
            prefetch_l1(w + r * cols + at);
          else if (r < a.next_rows)
            prefetch_l1(w + (r + R) * cols + a.k0 + (at - a.k1));
        }
        const __m512bh wv = as_bh(_mm512_loadu_si512(w + r * cols + kk));
        KIMI_UNROLL for (int t = 0; t < T; ++t) acc[u][r][t] = _mm512_dpbf16_ps(acc[u][r][t], wv, xv[t]);
      }
    }
  }
  for (; k < a.k1; k += 32) {  // the rest, 32 at a time, zero-filled past the range's end
    const __mmask32 m = a.k1 - k >= 32 ? ~__mmask32(0) : (__mmask32(1) << (a.k1 - k)) - 1;
    __m512bh xv[T];
    KIMI_UNROLL for (int t = 0; t < T; ++t) xv[t] = as_bh(_mm512_maskz_loadu_epi16(m, x + t * a.ldx + k));
    KIMI_UNROLL for (int r = 0; r < R; ++r) {
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, w + r * cols + k));
      KIMI_UNROLL for (int t = 0; t < T; ++t) acc[0][r][t] = _mm512_dpbf16_ps(acc[0][r][t], wv, xv[t]);
    }
  }
  KIMI_UNROLL for (int u = 1; u < U; ++u)
    KIMI_UNROLL for (int r = 0; r < R; ++r)
      KIMI_UNROLL for (int t = 0; t < T; ++t) acc[0][r][t] = _mm512_add_ps(acc[0][r][t], acc[u][r][t]);
  KIMI_UNROLL for (int t = 0; t < T; ++t) {
    float sums[R];
    if constexpr (R == 4)
      Avx512Traits::reduce4(acc[0][0][t], acc[0][1][t], acc[0][2][t], acc[0][3][t], sums);
    else
      KIMI_UNROLL for (int r = 0; r < R; ++r) sums[r] = Avx512Traits::reduce(acc[0][r][t]);
    float* yt = a.y + t * a.ldy;
    KIMI_UNROLL for (int r = 0; r < R; ++r) yt[r] = a.accumulate ? yt[r] + sums[r] : sums[r];
  }
}

template <int R, int T>
void run(const Tile& a) {
  if constexpr (T <= 2)
    tile<R, T, 2>(a);
  else
    tile<R, T, 1>(a);
}

template <int R, int... Ts>
void dispatch_tokens(int tokens, const Tile& a, std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 && (run<R, Ts + 1>(a), true)) || ...);
}

template <int... Rs>
void dispatch(int rows, int tokens, const Tile& a, std::integer_sequence<int, Rs...>) {
  (void)((rows == Rs + 1 &&
          (dispatch_tokens<Rs + 1>(tokens, a, std::make_integer_sequence<int, kTokens>{}), true)) ||
         ...);
}

// Elements by which every row of w starts past a 64-byte line, where that is the same for all rows
// (a row of a multiple of 64 bytes) and w streams in decode; 0 otherwise. Safetensors aligns
// tensors to 8 bytes only, so the mapped BF16 matrices of a checkpoint sit anywhere in their
// lines (k25-int4's at 16-56 mod 64), and then every 64-byte load of a row spans two. Loading the
// lines themselves: 8192 x 1024 cold 0.81-0.98x the time, k25-int4's BF16 decode phases 0.95-1.0x
// (bench/results/2026-12-06-aligned-read-probe.md).
int row_lead(const WeightMatrix& w, int64_t n) {
  const auto addr = reinterpret_cast<uintptr_t>(w.data);
  if (n > kTokens || !is_streamed(w) || (w.cols * 2) % 64 != 0 || addr % 2 != 0) return 0;
  return int(addr % 64 / 2);
}

// x [n, cols] shifted right by lead elements, zero-filled before and after, into rows of ldx.
void align_activations(const uint16_t* x, int64_t n, int64_t cols, int lead, int64_t ldx, uint16_t* dst) {
  for (int64_t t = 0; t < n; ++t) {
    uint16_t* d = dst + t * ldx;
    std::fill(d, d + lead, uint16_t(0));
    std::copy_n(x + t * cols, cols, d + lead);
    std::fill(d + lead + cols, d + ldx, uint16_t(0));
  }
}

void matmul_rows_bf16dot(const WeightMatrix& w, const uint16_t* xb, int64_t n, float* y, int64_t r0, int64_t r1) {
  const auto* base = static_cast<const uint16_t*>(w.data);
  const int64_t cols = w.cols, ldy = w.rows;
  if (cols == 0) {
    for (int64_t t = 0; t < n; ++t) std::fill(y + t * ldy + r0, y + t * ldy + r1, 0.0f);
    return;
  }
  // Decode over a streamed matrix whose rows start mid-line: loads from the lines themselves, the
  // rows counted from the line before each (w_rows), x shifted to match (x_rows, ldx long).
  const int lead = row_lead(w, n);
  std::vector<uint16_t> shifted;
  const uint16_t* w_rows = base;
  const uint16_t* x_rows = xb;
  int64_t ldx = cols;
  if (lead > 0) {
    ldx = (cols + lead + 31) / 32 * 32;
    shifted.resize(static_cast<size_t>(n * ldx));
    align_activations(xb, n, cols, lead, ldx, shifted.data());
    x_rows = shifted.data();
    // Through an integer: the line's start lies before the tensor itself.
    w_rows = reinterpret_cast<const uint16_t*>(reinterpret_cast<uintptr_t>(base) - 2 * uintptr_t(lead));
  }
  const int64_t len = cols + lead;  // columns of each row as the tiles count them
  // Decode over short rows of a matrix too large to stay in cache (an expert's down projection):
  // one row at a time, so the weights are one sequential stream (four rows a few KiB apart start
  // four: 8192 x 1024 cold 1.5x the time, 16384 x 512 1.85x). From cache the 4-row tile's shared x
  // loads and reductions win (512 x 192 hot: 0.6x the time). The f32 kernels draw the same line.
  if (n == 1 && cols * 2 <= kShortRowBytes && is_streamed(w)) {
    for (int64_t r = r0; r < r1; ++r)
      tile<1, 1, 2>({w_rows + r * cols, x_rows, cols, ldx, 0, len, y + r, ldy, false, true, r + 1 < r1 ? 1 : 0, lead});
    return;
  }
  if (lead > 0) {  // the rest of a mid-line decode: one pass of 4-row tiles
    for (int64_t r = r0; r < r1; r += kRows)
      dispatch(int(std::min<int64_t>(kRows, r1 - r)), int(n),
               {w_rows + r * cols, x_rows, cols, ldx, 0, len, y + r, ldy, false, true,
                int(std::clamp<int64_t>(r1 - r - kRows, 0, kRows)), lead},
               std::make_integer_sequence<int, kRows>{});
    return;
  }
  // One token block (decode, verification): one pass over whole rows, streamed from memory, so
  // prefetched. More (prefill, a batched decode of 8): a GEMM blocked for the caches, columns cut
  // into blocks of at most kGemmColBlock so that a token block's x stays in L1 while a chunk of
  // rows' block (in L2) sweeps it; without the cut a token block over 7168-18432 columns (86-221
  // KiB) came from L2 and the whole x, re-read for every few rows, from L3. The first token block
  // brings the chunk's block from memory, prefetched as a decode's pass is: [2048 x 7168] cold at
  // 8 tokens 0.80x the time of leaving it to the hardware prefetchers, 64 tokens unchanged, and
  // k25-int4's batch-8 decode step 0.76x (bench/results/2026-12-07-phase-load-rates-and-batch8-prefetch.md).
  const bool gemm = n > kTokens;
  // Tokens in blocks of at most kTokens, of equal size (to one): a batched decode's 8 as 4 + 4, not
  // 6 + 2, whose 2-token pass does a third of the first's multiplies per weight loaded from L2 and
  // ran at about half its rate ([2048 x 7168], 8 tokens: 0.82x the time hot, 0.9x cold).
  const int64_t token_blocks = (n + kTokens - 1) / kTokens;
  const int64_t blocks = gemm ? (cols + kGemmColBlock - 1) / kGemmColBlock : 1;
  const int64_t block = ((cols + blocks - 1) / blocks + 31) / 32 * 32;  // whole 32-wide steps
  const int64_t chunk = std::clamp<int64_t>(kChunkBytes / (block * 2) / kRows * kRows, kRows, 128);
  for (int64_t rc = r0; rc < r1; rc += chunk) {
    const int64_t rc_end = std::min(r1, rc + chunk);
    for (int64_t k0 = 0; k0 < cols; k0 += block) {
      const int64_t k1 = std::min(cols, k0 + block);
      for (int64_t b = 0; b < token_blocks; ++b) {
        const int64_t t0 = b * n / token_blocks;
        const int tokens = int((b + 1) * n / token_blocks - t0);
        for (int64_t r = rc; r < rc_end; r += kRows)
          dispatch(int(std::min<int64_t>(kRows, rc_end - r)), tokens,
                   {base + r * cols, xb + t0 * cols, cols, cols, k0, k1, y + t0 * ldy + r, ldy, k0 > 0, t0 == 0,
                    int(std::clamp<int64_t>(rc_end - r - kRows, 0, kRows))},
                   std::make_integer_sequence<int, kRows>{});
      }
    }
  }
}

}  // namespace

// Defined here, declared in bf16_dot.cpp: the AVX512_BF16 rounding of activations.
void round_to_bf16_avx512bf16(const float* x, int64_t count, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(dst + i, reinterpret_cast<const __m512i&>(v));
  }
  for (; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (count - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(dst + i, m, reinterpret_cast<const __m256i&>(v));
  }
}

Bf16DotRows bf16_dot_rows_avx512bf16() { return &matmul_rows_bf16dot; }

}  // namespace kimi::kernels
