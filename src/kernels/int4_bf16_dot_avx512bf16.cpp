// The AVX512_BF16 kernel for INT4 weights with bf16 activations (bf16_dot.h; compiled with
// -mavx512bf16, only reached through int4_bf16_dot_rows() when the CPU has it).
//
// The f32-activation INT4 kernels turn every nibble into an f32 weight (a shift and a 16-entry
// permute per 16 weights) and spend one FMA per weight per token: on the real shapes they are
// bound by those instructions, not by memory. Here one VPSRLW and one VPERMW turn 32 nibbles
// into 32 bf16 weights q - 8 (exact in bf16) and one VDPBF16PS multiplies them with 32 bf16
// activations: three instructions per 32 weights instead of six.
//
// Pairing: a 64-byte block of a row (128 inputs) is 32 little-endian 16-bit words; word 2l holds
// inputs 8l .. 8l + 3 and word 2l + 1 inputs 8l + 4 .. 8l + 7 (nibble j at bits 4j), so shifting
// every word right by 4j puts inputs 8l + j and 8l + 4 + j in the two halves of dword l: the pair
// VDPBF16PS sums into lane l. The activations are laid out to match (pack_int4_bf16_activations).
// VPERMW reads five index bits; the fifth (bit 0 of the next nibble) is ignored by a 32-entry
// table holding the 16 values twice.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "kernels/avx512_traits.h"
#include "kernels/bf16_dot.h"
#include "kernels/prefetch.h"
#include "kernels/streaming.h"

namespace kimi::kernels {
namespace {

constexpr int kRows = 4;    // rows per register tile
constexpr int kTokens = 2;  // tokens per register tile: 4 x 2 block sums + 4 x 2 totals
// The tile of more tokens (prefill: an expert's share of a prompt): each nibble's shift and permute
// then serve four tokens, not two. 2 x 4 (2 x 4 block sums + 2 x 4 totals, no spills): 1.16-1.20x
// the GFLOP/s of 4 x 2 over 64 x [2048 x 7168] from cache; 4 x 4 (spilling) as fast, 3 x 4 and
// 2 x 6 slower (Zen 5).
constexpr int kGemmRows = 2, kGemmTokens = 4;
// Rows swept by every block of tokens while they stay in L2 (as the BF16 kernel's).
constexpr int64_t kChunkBytes = int64_t(256) << 10;
// Software prefetch distance per weight row, into L2 (prefetcht1): measured on Zen 4, two
// threads, cold, against 512 / 768 bytes and prefetches into L1: 2048 x 7168 0.95x the time,
// 7168 x 2048 (1 KiB rows) 0.7x (why L1 hurts the short rows so much was not found out).
constexpr int64_t kInt4PrefetchAhead = 1024;
// Decode over a streamed matrix (kernels/streaming.h) reads it one row at a time, one sequential
// stream prefetched kStreamAheadBytes ahead across row ends: the real shapes' experts take
// ~0.85-0.9x the time of 4-row tiles in decode; from L3 the 4-row tiles win by ~1.4x
// (bench/results/2026-12-06-int4-one-row-stream.md).

constexpr uint16_t bf16_of(int v) { return uint16_t(std::bit_cast<uint32_t>(float(v)) >> 16); }
constexpr auto kNibbleTable = [] {
  std::array<uint16_t, 32> t{};
  for (int i = 0; i < 32; ++i) t[size_t(i)] = bf16_of((i & 15) - 8);
  return t;
}();

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// Scales g0 .. g0 + count - 1 of a row as f32 in lanes 0 .. count - 1 (zero above).
inline __m512 scales_window(const std::byte* s, bool f32, int64_t g0, int count) {
  const __mmask16 m = __mmask16((1u << count) - 1u);
  if (f32) return _mm512_maskz_loadu_ps(m, s + g0 * 4);
  const __m256i h = _mm256_maskz_loadu_epi16(m, s + g0 * 2);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

struct Tile {
  const std::byte* w;  // the tile's first row
  int64_t row_bytes, cols;
  const std::byte* scales;  // the tile's first row's scales
  int64_t scale_row_bytes;
  bool f32_scales;
  int64_t group_size;
  const uint16_t* x;  // the tile's first token, packed
  int64_t ldx;
  float* y;  // y[t * ldy + r]
  int64_t ldy;
  bool prefetch;
  int next_rows;  // rows of the next tile of this call (contiguous), to prefetch past the end
  // One-row tiles of a streamed decode: the rows are one stream up to stream_end, prefetched
  // kStreamAheadBytes ahead; ahead_scales: the scales of the row that far ahead (or null).
  const std::byte* stream_end = nullptr;
  const std::byte* ahead_scales = nullptr;
};

// R rows x T tokens over whole rows. kGroup 32 or 64 (kPerBlock): a block's lane l is in its
// group 8l / kGroup, the block's sums scaled every block; 0: a group spans whole blocks (or the
// row) and its sums are scaled once at its end. The group size is a template argument because
// the divisions by it were IDIVs, 18 per call: with the one-row tiles of a streamed decode they
// took ~1/4 of a 7168-input row's time and ~1/2 of a 2048-input one's (L2-resident rows, Zen 5:
// 0.74x and 0.53x the time as constants).
template <int R, int T, int kGroup>
void tile(const Tile& a) {
  constexpr bool kPerBlock = kGroup != 0;
  const int64_t G = kPerBlock ? kGroup : a.group_size, groups = a.cols / G;
  const int64_t nblocks = (a.cols + 127) / 128, nfull = a.cols / 128;
  const int tail_bytes = int(a.row_bytes - nfull * 64);
  const __m512i table = _mm512_loadu_si512(kNibbleTable.data());
  static constexpr auto kLaneGroup = [] {
    std::array<int32_t, 16> g{};
    for (int l = 0; l < 16; ++l) g[size_t(l)] = kPerBlock ? 8 * l / std::max(kGroup, 1) : 0;
    return g;
  }();
  const __m512i idx = _mm512_loadu_si512(kLaneGroup.data());

  // The next tile's scales (contiguous after this tile's): short runs the stream prefetchers
  // start on late (2048 x 7168 cold: 0.88x the time with this).
  if (a.ahead_scales) {
    for (int64_t off = 0; off < a.scale_row_bytes; off += 64) prefetch_l2(a.ahead_scales + off);
  } else if (a.prefetch && a.next_rows > 0) {
    const std::byte* next = a.scales + R * a.scale_row_bytes;
    for (int64_t off = 0; off < a.next_rows * a.scale_row_bytes; off += 64) prefetch_l2(next + off);
  }
  // One token: two sums per row (even and odd j), so each VDPBF16PS chain is two long.
  constexpr int U = T == 1 ? 2 : 1;
  __m512 total[R][T], acc[U][R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) total[r][t] = _mm512_setzero_ps();
  const auto zero_acc = [&] {
    for (int u = 0; u < U; ++u)
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[u][r][t] = _mm512_setzero_ps();
  };
  const auto block = [&](int64_t b) {
    const int64_t byte = b * 64;
    if (a.stream_end) {
      const std::byte* ahead = a.w + byte + kStreamAheadBytes;
      if (ahead < a.stream_end) prefetch_l2(ahead);
    } else if (a.prefetch) {
      const int64_t at = byte + kInt4PrefetchAhead;
      if (at < a.row_bytes) {
        for (int r = 0; r < R; ++r) prefetch_l2(a.w + r * a.row_bytes + at);
      } else if (at - a.row_bytes < a.row_bytes) {
        for (int r = 0; r < a.next_rows; ++r) prefetch_l2(a.w + (R + r) * a.row_bytes + (at - a.row_bytes));
      }
    }
    __m512i v[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* p = a.w + r * a.row_bytes + byte;
      v[r] = b < nfull ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((__mmask64(1) << tail_bytes) - 1, p);
    }
    const uint16_t* xb = a.x + b * 128;
    for (unsigned j = 0; j < 4; ++j) {
      __m512bh xv[T];
      for (int t = 0; t < T; ++t) xv[t] = as_bh(_mm512_loadu_si512(xb + t * a.ldx + j * 32));
      for (int r = 0; r < R; ++r) {
        const __m512i q = j == 0 ? v[r] : _mm512_srli_epi16(v[r], 4 * j);
        const __m512bh wq = as_bh(_mm512_permutexvar_epi16(q, table));
        for (int t = 0; t < T; ++t) acc[j % U][r][t] = _mm512_dpbf16_ps(acc[j % U][r][t], wq, xv[t]);
      }
    }
  };
  const auto scale_into_total = [&](auto scale_of_row) {
    for (int r = 0; r < R; ++r) {
      const __m512 s = scale_of_row(r);
      for (int t = 0; t < T; ++t) {
        __m512 sum = acc[0][r][t];
        if constexpr (U == 2) sum = _mm512_add_ps(sum, acc[1][r][t]);
        total[r][t] = _mm512_fmadd_ps(sum, s, total[r][t]);
      }
    }
  };

  if constexpr (kPerBlock) {
    // Each row's scales 16 at a time (those of 16 / groups_per_block blocks), one load per
    // window instead of one per block; a block takes its lanes' scales by one permute.
    constexpr int64_t groups_per_block = 128 / std::max(kGroup, 1), window_blocks = 16 / groups_per_block;
    __m512 window[R];
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t k = b % window_blocks;
      if (k == 0) {
        const int64_t g0 = b * groups_per_block;
        const int count = int(std::min<int64_t>(16, groups - g0));
        for (int r = 0; r < R; ++r) window[r] = scales_window(a.scales + r * a.scale_row_bytes, a.f32_scales, g0, count);
      }
      zero_acc();
      block(b);
      const __m512i lanes = _mm512_add_epi32(idx, _mm512_set1_epi32(int32_t(k * groups_per_block)));
      scale_into_total([&](int r) { return _mm512_permutexvar_ps(lanes, window[r]); });
    }
  } else {
    const int64_t blocks_per_group = groups == 1 ? nblocks : G / 128;
    for (int64_t g = 0; g < groups; ++g) {
      zero_acc();
      const int64_t b1 = std::min(nblocks, (g + 1) * blocks_per_group);
      for (int64_t b = g * blocks_per_group; b < b1; ++b) block(b);
      scale_into_total([&](int r) {
        const std::byte* s = a.scales + r * a.scale_row_bytes;
        float f;
        if (a.f32_scales) {
          std::memcpy(&f, s + g * 4, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, s + g * 2, 2);
          f = std::bit_cast<float>(uint32_t(h) << 16);
        }
        return _mm512_set1_ps(f);
      });
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (R == 4)
      Avx512Traits::reduce4(total[0][t], total[1][t], total[2][t], total[3][t], a.y + t * a.ldy);
    else
      for (int r = 0; r < R; ++r) a.y[t * a.ldy + r] = Avx512Traits::reduce(total[r][t]);
  }
}

template <int R, int T>
void run(const Tile& a, bool per_block) {  // per_block: groups of 32 or 64 (int4_bf16_layout)
  if (!per_block)
    tile<R, T, 0>(a);
  else if (a.group_size == 32)
    tile<R, T, 32>(a);
  else
    tile<R, T, 64>(a);
}

template <int R, int... Ts>
void run_tokens(int tokens, const Tile& a, bool per_block, std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 && (run<R, Ts + 1>(a, per_block), true)) || ...);
}

// Tiles of up to kGemmRows rows take up to kGemmTokens tokens; the taller ones (decode's) kTokens.
template <int R>
void run_tokens(int tokens, const Tile& a, bool per_block) {
  constexpr int kMaxTokens = R <= kGemmRows ? std::max(kTokens, kGemmTokens) : kTokens;
  run_tokens<R>(tokens, a, per_block, std::make_integer_sequence<int, kMaxTokens>{});
}

void run_rows(int rows, int tokens, const Tile& a, bool per_block) {
  switch (rows) {
    case 1: return run_tokens<1>(tokens, a, per_block);
    case 2: return run_tokens<2>(tokens, a, per_block);
    case 3: return run_tokens<3>(tokens, a, per_block);
    default: return run_tokens<kRows>(tokens, a, per_block);
  }
}

void matmul_rows_int4_bf16(const WeightMatrix& w, const uint16_t* xp, int64_t n, float* y, int64_t r0, int64_t r1) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const int64_t row_bytes = w.cols / 2, groups = w.cols / w.group_size;
  const bool f32_scales = w.scale_dtype == DType::F32;
  const int64_t scale_row_bytes = groups * (f32_scales ? 4 : 2);
  const bool per_block = groups > 1 && w.group_size < 128;
  const int64_t ldx = int4_bf16_packed_cols(w.cols);
  const auto* scales = static_cast<const std::byte*>(w.scales);
  // One token over a streamed matrix: row by row (kStreamAheadBytes).
  if (n == 1 && is_streamed(w)) {
    const std::byte* end = base + r1 * row_bytes;
    const int64_t ahead_rows = stream_ahead_rows(row_bytes);
    for (int64_t r = r0; r < r1; ++r) {
      Tile a{base + r * row_bytes, row_bytes, w.cols, scales + r * scale_row_bytes, scale_row_bytes, f32_scales,
             w.group_size, xp, ldx, y + r, w.rows, true, 0};
      a.stream_end = end;
      if (r + ahead_rows < r1) a.ahead_scales = scales + (r + ahead_rows) * scale_row_bytes;
      run_rows(1, 1, a, per_block);
    }
    return;
  }
  // As the BF16 kernel: a chunk of rows is swept by every block of tokens while it stays in L2;
  // with one token block (a few tokens: verification, batched decode) that is one pass, streamed,
  // in 4-row tiles; more tokens take the GEMM tile. Either way the first token block brings the
  // chunk from memory, prefetched (an expert's ~12 tokens of a prompt, cold: 1.14-1.29x the
  // GFLOP/s of leaving the GEMM's first pass to the hardware prefetchers).
  const int64_t chunk = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(row_bytes, 1) / kRows * kRows, kRows, 256);
  const bool gemm = n > kTokens;
  const int64_t T = gemm ? kGemmTokens : kTokens, R = gemm ? kGemmRows : kRows;
  for (int64_t rc = r0; rc < r1; rc += chunk) {
    const int64_t rc_end = std::min(r1, rc + chunk);
    for (int64_t t0 = 0; t0 < n; t0 += T) {
      const int tokens = int(std::min<int64_t>(T, n - t0));
      for (int64_t r = rc; r < rc_end; r += R) {
        const Tile a{base + r * row_bytes,
                     row_bytes,
                     w.cols,
                     scales + r * scale_row_bytes,
                     scale_row_bytes,
                     f32_scales,
                     w.group_size,
                     xp + t0 * ldx,
                     ldx,
                     y + t0 * w.rows + r,
                     w.rows,
                     t0 == 0,
                     int(std::clamp<int64_t>(rc_end - r - R, 0, R))};
        run_rows(int(std::min<int64_t>(R, rc_end - r)), tokens, a, per_block);
      }
    }
  }
}

// Columns j and j + 1 of the 32 x 4 matrix x[4w + j] of a half block (w < 16), j = 0 or 2.
constexpr auto kColumns01 = word_pair_index(0);
constexpr auto kColumns23 = word_pair_index(2);

}  // namespace

// Defined here, declared in bf16_dot.cpp: pack_int4_bf16_activations with AVX512_BF16. Output
// vector j of a block is x[128b + 4w + j] for w < 32: column j of the block's 128 values seen as
// 32 x 4. Each half block (64 values, two registers once rounded) gives columns 0 and 1 (and 2
// and 3) in one VPERMT2W; the halves' 256-bit parts are then put side by side. Rounding as
// round_to_bf16_avx512bf16's (VCVTNE2PS2BF16).
void pack_int4_bf16_activations_avx512bf16(const float* x, int64_t n, int64_t cols, uint16_t* dst) {
  const int64_t ld = int4_bf16_packed_cols(cols);
  const __m512i c01 = _mm512_loadu_si512(kColumns01.data()), c23 = _mm512_loadu_si512(kColumns23.data());
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    uint16_t* d = dst + t * ld;
    for (int64_t b = 0; b < ld / 128; ++b) {
      const float* xb = xt + 128 * b;
      const int64_t valid = cols - 128 * b;
      const auto load16 = [&](int g) {  // floats 16g .. 16g + 15 of the block, zero past cols
        const int64_t left = valid - 16 * g;
        if (left >= 16) return _mm512_loadu_ps(xb + 16 * g);
        return left > 0 ? _mm512_maskz_loadu_ps(__mmask16((1u << left) - 1u), xb + 16 * g) : _mm512_setzero_ps();
      };
      __m512i w[4];  // words 32q .. 32q + 31 of the block, rounded
      for (int q = 0; q < 4; ++q) {
        const __m512bh v = _mm512_cvtne2ps_pbh(load16(2 * q + 1), load16(2 * q));
        w[q] = reinterpret_cast<const __m512i&>(v);
      }
      const __m512i lo01 = _mm512_permutex2var_epi16(w[0], c01, w[1]), hi01 = _mm512_permutex2var_epi16(w[2], c01, w[3]);
      const __m512i lo23 = _mm512_permutex2var_epi16(w[0], c23, w[1]), hi23 = _mm512_permutex2var_epi16(w[2], c23, w[3]);
      uint16_t* out = d + 128 * b;
      _mm512_storeu_si512(out, _mm512_inserti64x4(lo01, _mm512_castsi512_si256(hi01), 1));
      _mm512_storeu_si512(out + 32, _mm512_shuffle_i64x2(lo01, hi01, _MM_SHUFFLE(3, 2, 3, 2)));
      _mm512_storeu_si512(out + 64, _mm512_inserti64x4(lo23, _mm512_castsi512_si256(hi23), 1));
      _mm512_storeu_si512(out + 96, _mm512_shuffle_i64x2(lo23, hi23, _MM_SHUFFLE(3, 2, 3, 2)));
    }
  }
}

Int4Bf16DotRows int4_bf16_dot_rows_avx512bf16() { return &matmul_rows_int4_bf16; }

}  // namespace kimi::kernels
