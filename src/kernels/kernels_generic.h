#pragma once
// Kernel bodies written once against a small "vector traits" interface and instantiated by each
// ISA's source file (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) with its own
// compiler flags. A traits type `Tr` provides:
//   V, kLanes                         the vector type and its f32 lane count
//   kGemvUnroll                       column-loop unroll of the n == 1 kernel (more accumulators)
//   kPrefetch                         whether to prefetch weights coming from DRAM (SIMD only:
//                                     the scalar loop is far slower than memory anyway)
//   kGemmRows, kGemmTokens            register tile of the n > 1 kernel (rows x tokens)
//   kPairRows, kPairTokens            register tile of the n > 1 BF16 kernel when kBf16Pairs
//   kUntransTokens, kUntransVectors   register tile of matmul_untransposed (tokens x vectors)
//   zero(), set1(a), add(a, b), fma(a, b, c) = a * b + c, reduce(v) = sum of lanes,
//   mul(a, b), div(a, b), max(a, b) (b when either is NaN), reduce_max(v) = largest lane,
//   exp(v)                            e^v per lane (SIMD: exp_poly, from min(a, b), round(v),
//                                     pow2(n) and exp_range(x, y, lo, hi))
//   reduce4(a, b, c, d, out)          out[0..4) = reduce(a), ..., reduce(d)
//   load_x(p), load_x_tail(p, len), store(p, v), store_tail(p, v, len)   f32, len < kLanes
//   load_w<D>(row, k), load_w_tail<D>(row, k, len)   elements [k, k + kLanes) of a weight row
//                                                    of dtype D, converted to f32
//   kBf16Pairs                        whether the BF16 GEMM uses dot_tile_bf16_pairs, then also:
//   VI, load_bf16_raw(row, k), load_bf16_raw_tail(row, k, len < 2 kLanes)   2 kLanes bf16
//   bf16_even(raw), bf16_odd(raw)     their even / odd elements as f32
//   deinterleave_x(src, len <= 2 kLanes, dst)   dst = kLanes even then kLanes odd of src[0, len),
//                                               zero-padded
//   load_e4m3(p), load_e4m3_tail(p, len)   kLanes fp8 e4m3 bytes as f32 times 2^-8: the byte
//                                          moved into an f16's sign/exponent/mantissa (bias 15
//                                          instead of 7), so F16C converts it, subnormals
//                                          included; 0x7f/0xff (NaN in e4m3) read as +-480
//
// Everything is in an anonymous namespace on purpose: instantiations then have internal linkage,
// so the linker can never fold an AVX-512 copy of a function into code that runs on a CPU
// without AVX-512. For the same reason this header uses no out-of-line standard-library code.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/dtype.h"
#include "kernels/kernels_impl.h"
#include "kernels/matmul.h"
#include "kernels/mla_generic.h"
#include "kernels/prefetch.h"
#include "kernels/streaming.h"

namespace kimi::kernels {
namespace {

// Bytes per weight of the dtypes the kernels read (F32, F16, BF16).
template <DType D>
constexpr size_t kElemBytes = D == DType::F32 ? 4 : 2;

constexpr int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---------------------------------------------------------------------------------------------
// matmul: y[n, rows] = x[n, cols] . W^T

// Many row tiles share each block of tokens (x stays in L1) and many token blocks share each
// chunk of rows (W stays in L2); kColBlock bounds the x block: 6 tokens x 1024 f32 = 24 KiB.
constexpr int64_t kRowChunk = 128;
constexpr int64_t kColBlock = 1024;
// Software prefetch distance, per weight row (12 lines; 512-1024 measured alike).
constexpr int64_t kPrefetchAhead = 768;
// The GEMV reads rows up to this long one at a time (see matmul_rows_typed). Measured on AVX2,
// BF16, cold, one and two threads: rows of 1024 and 512 inputs 0.6-0.8x the time of 4-row
// tiles; rows of 2048 (4 KiB) and 7168 inputs 1.1-1.25x, so they keep the tiles.
constexpr size_t kGemvShortRowBytes = 2048;
// Up to this many tokens the matmul streams W like the GEMV (see matmul_rows_typed); measured
// on AVX2 (2048 x 7168 bf16, cold): n = 2 and 4 gain, at n = 8 the GEMM is as fast...
constexpr int64_t kSmallBatch = 4;
// ... for 3..4 tokens only from matrices this large: smaller ones tend to stay in cache between
// calls (a small model), and from cache the GEMM's BF16 pairs tile, converting half as much,
// measured 10-25% faster at n = 4 (mini's 4352 x 192 and 512 x 192 bf16).
constexpr size_t kSmallBatchMinBytes = size_t(8) << 20;

struct TileArgs {
  const std::byte* w;  // first row of the tile
  size_t row_bytes;
  const float* x;  // first token of the tile (or, for a packed tile, its packed x block)
  int64_t ldx;
  int64_t k0, k1;  // column range
  float* y;        // y[t * ldy + r] for the tile's tokens t and rows r
  int64_t ldy;
  bool accumulate;  // add to y (a later column block) instead of overwriting it
  // Whole rows only (k0 = 0, k1 = cols): rows of the next tile of this call, contiguous after
  // this tile's, to prefetch past the rows' ends (see prefetch_rows).
  int next_rows = 0;
};

// Streaming W from DRAM, the hardware prefetchers alone keep too few lines in flight per core
// for these instruction-heavy loops (bf16 widening): prefetching each row kPrefetchAhead bytes
// ahead measured +15-20% for the GEMV. Called once per `step_bytes` of each row, and only for
// lines inside [k0, k1) (beyond that, the next column block is read much later), except where
// the tile is followed by `next_rows` rows of the same call (a GEMV over whole rows): there the
// lines past a row's end are those of the next tile's row, prefetched so that a short row (an
// expert's down projection has 2048 inputs, 4 KiB) does not start every tile from DRAM.
template <int R>
inline void prefetch_rows(const std::byte* const (&rows)[R], int64_t byte_pos, int64_t byte_end,
                          int64_t step_bytes, int next_rows = 0) {
  for (int64_t b = kPrefetchAhead; b < kPrefetchAhead + step_bytes; b += 64) {
    if (byte_pos + b >= byte_end) {
      // Rows are contiguous: row r of the next tile starts R rows after row r of this one.
      const int64_t past = byte_pos + b - byte_end;
      if (past >= byte_end) return;
      for (int r = 0; r < next_rows; ++r) prefetch_l1(rows[r] + R * byte_end + past);
      continue;
    }
    for (int r = 0; r < R; ++r) prefetch_l1(rows[r] + byte_pos + b);
  }
}

// Reduces the tile's accumulators and writes (or adds) them to y. Groups of four rows are
// reduced together (their sums are contiguous in y): about a third of the work of reducing
// each vector alone, which matters because a tile is reduced once per column block.
template <class Tr, int R, int T>
void store_tile(const typename Tr::V (&acc)[R][T], const TileArgs& a) {
  for (int t = 0; t < T; ++t) {
    float* dst = a.y + t * a.ldy;
    int r = 0;
    for (; r + 4 <= R; r += 4) {
      float s[4];
      Tr::reduce4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t], s);
      for (int i = 0; i < 4; ++i) dst[r + i] = a.accumulate ? dst[r + i] + s[i] : s[i];
    }
    for (; r < R; ++r) {
      const float v = Tr::reduce(acc[r][t]);
      dst[r] = a.accumulate ? dst[r] + v : v;
    }
  }
}

// The register tile: R rows x T tokens of dot products over columns [k0, k1). Each weight vector
// is loaded and converted once and used for T tokens; each x vector is used for R rows; U
// independent accumulator sets hide the FMA latency when R * T alone is too small for that.
// kPrefetch: this pass reads the tile's weights from DRAM (the GEMV), so it prefetches them. The
// GEMM's tiles are compiled without it: with the prefetch code in the loop, even switched off,
// its tiles took 1.3-2x the time (the addresses it keeps live; bench/results/2026-12-07-prefetch.md).
template <class Tr, DType D, int R, int T, int U, bool kPrefetch>
void dot_tile(const TileArgs& a) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  constexpr int64_t kElem = kElemBytes<D>;
  V acc[U][R][T];
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[u][r][t] = Tr::zero();
  const std::byte* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.w + size_t(r) * a.row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = a.x + t * a.ldx;

  int64_t k = a.k0;
  for (; k + U * L <= a.k1; k += U * L) {
    if constexpr (kPrefetch) prefetch_rows<R>(rows, k * kElem, a.k1 * kElem, U * L * kElem, a.next_rows);
    for (int u = 0; u < U; ++u) {
      V xv[T];
      for (int t = 0; t < T; ++t) xv[t] = Tr::load_x(xs[t] + k + u * L);
      for (int r = 0; r < R; ++r) {
        const V wv = Tr::template load_w<D>(rows[r], k + u * L);
        for (int t = 0; t < T; ++t) acc[u][r][t] = Tr::fma(wv, xv[t], acc[u][r][t]);
      }
    }
  }
  if constexpr (U > 1) {
    for (; k + L <= a.k1; k += L) {
      V xv[T];
      for (int t = 0; t < T; ++t) xv[t] = Tr::load_x(xs[t] + k);
      for (int r = 0; r < R; ++r) {
        const V wv = Tr::template load_w<D>(rows[r], k);
        for (int t = 0; t < T; ++t) acc[0][r][t] = Tr::fma(wv, xv[t], acc[0][r][t]);
      }
    }
  }
  if (k < a.k1) {  // ragged end: partial vectors, zero-filled
    const int len = int(a.k1 - k);
    V xv[T];
    for (int t = 0; t < T; ++t) xv[t] = Tr::load_x_tail(xs[t] + k, len);
    for (int r = 0; r < R; ++r) {
      const V wv = Tr::template load_w_tail<D>(rows[r], k, len);
      for (int t = 0; t < T; ++t) acc[0][r][t] = Tr::fma(wv, xv[t], acc[0][r][t]);
    }
  }

  V sum[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      sum[r][t] = acc[0][r][t];
      for (int u = 1; u < U; ++u) sum[r][t] = Tr::add(sum[r][t], acc[u][r][t]);
    }
  store_tile<Tr, R, T>(sum, a);
}

// The BF16 tile of the GEMM, with half the conversion work of dot_tile: 2L bf16 weights are
// loaded as L 32-bit pairs, and one shift (even columns) or one mask (odd columns) turns them
// into f32, where widening costs two instructions per L weights. The x block must be packed to
// match (pack_x_pairs): for each 2L columns, the L even ones, then the L odd ones, zero-padded.
template <class Tr, int R, int T>
void dot_tile_bf16_pairs(const TileArgs& a) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t L = Tr::kLanes;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Tr::zero();
  const std::byte* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.w + size_t(r) * a.row_bytes;

  // Both halves use the same raw pairs; reloading them (an L1 hit) keeps register pressure at
  // R * T accumulators + T x + 1 weight.
  const auto step = [&](int64_t j, auto&& load_raw) {
    for (int half = 0; half < 2; ++half) {
      V xv[T];
      for (int t = 0; t < T; ++t) xv[t] = Tr::load_x(a.x + t * a.ldx + j + half * L);
      for (int r = 0; r < R; ++r) {
        const VI raw = load_raw(rows[r]);
        const V wv = half == 0 ? Tr::bf16_even(raw) : Tr::bf16_odd(raw);
        for (int t = 0; t < T; ++t) acc[r][t] = Tr::fma(wv, xv[t], acc[r][t]);
      }
    }
  };
  const int64_t len = a.k1 - a.k0;
  int64_t j = 0;
  for (; j + 2 * L <= len; j += 2 * L)
    step(j, [&](const std::byte* row) { return Tr::load_bf16_raw(row, a.k0 + j); });
  if (j < len) {
    const int tail = int(len - j);
    step(j, [&](const std::byte* row) { return Tr::load_bf16_raw_tail(row, a.k0 + j, tail); });
  }
  store_tile<Tr, R, T>(acc, a);
}

// Packs x[t][k0, k1) of `tokens` tokens for dot_tile_bf16_pairs into xp[t * ldp + j].
template <class Tr>
void pack_x_pairs(const float* x, int64_t ldx, int tokens, int64_t k0, int64_t k1, float* xp,
                  int64_t ldp) {
  constexpr int64_t L2 = 2 * Tr::kLanes;
  for (int t = 0; t < tokens; ++t)
    for (int64_t j = 0; k0 + j < k1; j += L2)
      Tr::deinterleave_x(x + t * ldx + k0 + j, int(min_i64(L2, k1 - k0 - j)), xp + t * ldp + j);
}

template <class Tr, DType D, int U, bool kPrefetch>
struct PlainTile {
  template <int R, int T>
  static void run(const TileArgs& a) {
    dot_tile<Tr, D, R, T, U, kPrefetch>(a);
  }
};
// The tile of the few-token path: dot_tile over whole rows, with enough accumulator sets
// (U * R * T >= 6) that a ragged tile of one or two tokens is not bound by the FMA latency.
template <class Tr, DType D>
struct SmallBatchTile {
  template <int R, int T>
  static void run(const TileArgs& a) {
    dot_tile<Tr, D, R, T, (R * T >= 6 ? 1 : R * T >= 3 ? 2 : 4), Tr::kPrefetch>(a);
  }
};
template <class Tr>
struct Bf16PairTile {
  template <int R, int T>
  static void run(const TileArgs& a) {
    dot_tile_bf16_pairs<Tr, R, T>(a);
  }
};

// Runtime (rows, tokens) of a ragged tile -> the matching compile-time instantiation.
template <class Tile, int R, int... Ts>
void dispatch_tokens(int tokens, const TileArgs& a, std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 && (Tile::template run<R, Ts + 1>(a), true)) || ...);
}
template <class Tile, int MaxT, int... Rs>
void dispatch_tile(int rows, int tokens, const TileArgs& a, std::integer_sequence<int, Rs...>) {
  (void)((rows == Rs + 1 &&
          (dispatch_tokens<Tile, Rs + 1>(tokens, a, std::make_integer_sequence<int, MaxT>{}),
           true)) ||
         ...);
}
template <class Tile, int MaxR, int MaxT>
void run_tile(int rows, int tokens, const TileArgs& a) {
  if (rows == MaxR && tokens == MaxT)
    Tile::template run<MaxR, MaxT>(a);
  else
    dispatch_tile<Tile, MaxT>(rows, tokens, a, std::make_integer_sequence<int, MaxR>{});
}

// Rows of the tile after a full tile of R rows at r, within [.., r1): what it may prefetch.
inline int next_tile_rows(int64_t r, int64_t r1, int R) {
  const int64_t left = r1 - r - R;
  return left <= 0 ? 0 : int(min_i64(left, R));
}

// Rows [r0, r1) of the few-token path (see matmul_rows_typed): R x T tiles over whole rows;
// the caller keeps n <= T, so every weight vector is loaded and converted once.
template <class Tr, DType D, int R, int T>
void small_batch_rows(const std::byte* base, size_t row_bytes, const float* x, int64_t n,
                      float* y, int64_t r0, int64_t r1, int64_t cols, int64_t ldy) {
  for (int64_t r = r0; r < r1; r += R)
    run_tile<SmallBatchTile<Tr, D>, R, T>(int(min_i64(R, r1 - r)), int(n),
                                          {base + size_t(r) * row_bytes, row_bytes, x, cols, 0,
                                           cols, y + r, ldy, false, next_tile_rows(r, r1, R)});
}

template <class Tr, DType D>
void matmul_rows_typed(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t r0,
                       int64_t r1) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const size_t row_bytes = size_t(w.cols) * kElemBytes<D>;
  const int64_t cols = w.cols, ldy = w.rows;
  if (cols == 0) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = r0; r < r1; ++r) y[t * ldy + r] = 0.0f;
    return;
  }

  if (n == 1) {
    // Decode GEMV, bound by streaming W: 4 rows at a time share every x load, each row is one
    // sequential stream for the prefetchers, no column blocking.
    if (row_bytes <= kGemvShortRowBytes) {
      // Short rows: one row at a time, so W is read as one sequential stream (four rows a few
      // KiB apart made four short streams, each starting cold), with 4 accumulators.
      using Tile = PlainTile<Tr, D, 4, Tr::kPrefetch>;
      for (int64_t r = r0; r < r1; ++r)
        run_tile<Tile, 1, 1>(1, 1, {base + size_t(r) * row_bytes, row_bytes, x, cols, 0, cols, y + r, ldy, false,
                                    next_tile_rows(r, r1, 1)});
      return;
    }
    constexpr int R = 4;
    using Tile = PlainTile<Tr, D, Tr::kGemvUnroll, Tr::kPrefetch>;
    for (int64_t r = r0; r < r1; r += R)
      run_tile<Tile, R, 1>(int(min_i64(R, r1 - r)), 1,
                           {base + size_t(r) * row_bytes, row_bytes, x, cols, 0, cols, y + r, ldy,
                            false, next_tile_rows(r, r1, R)});
    return;
  }

  if (n <= 2 || (n <= kSmallBatch && size_t(w.rows) * row_bytes >= kSmallBatchMinBytes)) {
    // A few tokens (speculative verification, batched decode): still bound by streaming W, so
    // stream it like the GEMV, each row tile once over all columns, with every converted weight
    // vector used by all n tokens. The GEMM's column blocks would cut each row into short
    // scattered runs the prefetchers follow badly, and its x packing is pure overhead when few
    // row tiles share a token block. Two tokens take the GEMV's four rows (measured ~10-20%
    // faster than 2 rows x 4 tokens at n = 2, cold); more take the GEMM's register tile.
    // Short rows of a matrix too large to stay in cache: as the GEMV, one sequential stream
    // (8192 x 1024 bf16 cold, 2 tokens: 0.77x the time); from cache the 4-row tile's shared x
    // loads win (512 x 192 hot, one thread: 1.1x the time row by row).
    if (n <= 2 && row_bytes <= kGemvShortRowBytes && is_streamed(w))
      small_batch_rows<Tr, D, 1, 2>(base, row_bytes, x, n, y, r0, r1, cols, ldy);
    else if (n <= 2)
      small_batch_rows<Tr, D, 4, 2>(base, row_bytes, x, n, y, r0, r1, cols, ldy);
    else
      small_batch_rows<Tr, D, Tr::kGemmRows, (Tr::kGemmTokens < kSmallBatch ? int(kSmallBatch)
                                                                            : Tr::kGemmTokens)>(
          base, row_bytes, x, n, y, r0, r1, cols, ldy);
    return;
  }

  // Prefill GEMM, meant to be compute-bound: a chunk of rows x a block of columns is swept by
  // every token block, and inside it every row tile reuses the token block's x from L1.
  constexpr bool kPairs = D == DType::BF16 && Tr::kBf16Pairs;
  constexpr int R = kPairs ? Tr::kPairRows : Tr::kGemmRows, T = kPairs ? Tr::kPairTokens : Tr::kGemmTokens;
  constexpr int64_t kPad = 2 * Tr::kLanes;
  // The packed x block of the BF16 tile (unused otherwise): T x kColBlock floats on the stack.
  alignas(64) float packed[kPairs ? T * kColBlock : 1];
  for (int64_t rc = r0; rc < r1; rc += kRowChunk) {
    const int64_t rc_end = min_i64(r1, rc + kRowChunk);
    for (int64_t kc = 0; kc < cols;) {
      // Split the columns into near-equal blocks so that no block is a sliver.
      const int64_t blocks_left = (cols - kc + kColBlock - 1) / kColBlock;
      const int64_t kc_end = kc + (cols - kc + blocks_left - 1) / blocks_left;
      const int64_t ldp = (kc_end - kc + kPad - 1) / kPad * kPad;  // <= kColBlock
      for (int64_t t0 = 0; t0 < n; t0 += T) {
        const int tokens = int(min_i64(T, n - t0));
        if constexpr (kPairs) pack_x_pairs<Tr>(x + t0 * cols, cols, tokens, kc, kc_end, packed, ldp);
        for (int64_t r = rc; r < rc_end; r += R) {
          const int rows = int(min_i64(R, rc_end - r));
          const std::byte* wr = base + size_t(r) * row_bytes;
          float* yr = y + t0 * ldy + r;
          if constexpr (kPairs)
            run_tile<Bf16PairTile<Tr>, R, T>(
                rows, tokens,
                {wr, row_bytes, packed, ldp, kc, kc_end, yr, ldy, kc > 0});
          else
            run_tile<PlainTile<Tr, D, 1, false>, R, T>(
                rows, tokens, {wr, row_bytes, x + t0 * cols, cols, kc, kc_end, yr, ldy, kc > 0});
        }
      }
      kc = kc_end;
    }
  }
}

template <class Tr>
void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t r0,
                 int64_t r1) {
  switch (w.dtype) {
    case DType::BF16: return matmul_rows_typed<Tr, DType::BF16>(w, x, n, y, r0, r1);
    case DType::F16: return matmul_rows_typed<Tr, DType::F16>(w, x, n, y, r0, r1);
    case DType::F32: return matmul_rows_typed<Tr, DType::F32>(w, x, n, y, r0, r1);
    default: return;  // rejected by the caller
  }
}

// ---------------------------------------------------------------------------------------------
// matmul_untransposed: y[n, cols] = x[n, rows] . W

// A strip of S vectors of columns for T tokens, accumulated down all rows: every converted
// weight vector is used by T tokens, every broadcast x by S vectors. With kTail the strip's last
// vector is partial (tail_len lanes).
template <class Tr, DType D, int T, int S, bool kTail>
void untransposed_strip(const WeightMatrix& w, const float* x, int64_t c, int tail_len,
                        float* y) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const auto* base = static_cast<const std::byte*>(w.data);
  const size_t row_bytes = size_t(w.cols) * kElemBytes<D>;
  V acc[T][S];
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < S; ++s) acc[t][s] = Tr::zero();
  for (int64_t r = 0; r < w.rows; ++r) {
    const std::byte* row = base + size_t(r) * row_bytes;
    V wv[S];
    for (int s = 0; s < S; ++s)
      wv[s] = (kTail && s == S - 1) ? Tr::template load_w_tail<D>(row, c + s * L, tail_len)
                                    : Tr::template load_w<D>(row, c + s * L);
    for (int t = 0; t < T; ++t) {
      const V xb = Tr::set1(x[t * w.rows + r]);
      for (int s = 0; s < S; ++s) acc[t][s] = Tr::fma(xb, wv[s], acc[t][s]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < S; ++s) {
      float* dst = y + t * w.cols + c + s * L;
      if (kTail && s == S - 1)
        Tr::store_tail(dst, acc[t][s], tail_len);
      else
        Tr::store(dst, acc[t][s]);
    }
}

template <class Tr, DType D, int T>
void untransposed_tokens(const WeightMatrix& w, const float* x, float* y) {
  constexpr int64_t L = Tr::kLanes;
  constexpr int S = Tr::kUntransVectors;
  int64_t c = 0;
  for (; c + S * L <= w.cols; c += S * L) untransposed_strip<Tr, D, T, S, false>(w, x, c, 0, y);
  for (; c + L <= w.cols; c += L) untransposed_strip<Tr, D, T, 1, false>(w, x, c, 0, y);
  if (c < w.cols) untransposed_strip<Tr, D, T, 1, true>(w, x, c, int(w.cols - c), y);
}

template <class Tr, DType D, int... Ts>
void untransposed_dispatch(int tokens, const WeightMatrix& w, const float* x, float* y,
                           std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 && (untransposed_tokens<Tr, D, Ts + 1>(w, x, y), true)) || ...);
}

template <class Tr, DType D>
void matmul_untransposed_typed(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  constexpr int T = Tr::kUntransTokens;
  for (int64_t t0 = 0; t0 < n; t0 += T) {
    const int tokens = int(min_i64(T, n - t0));
    untransposed_dispatch<Tr, D>(tokens, w, x + t0 * w.rows, y + t0 * w.cols,
                                 std::make_integer_sequence<int, T>{});
  }
}

template <class Tr>
void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  switch (w.dtype) {
    case DType::BF16: return matmul_untransposed_typed<Tr, DType::BF16>(w, x, n, y);
    case DType::F16: return matmul_untransposed_typed<Tr, DType::F16>(w, x, n, y);
    case DType::F32: return matmul_untransposed_typed<Tr, DType::F32>(w, x, n, y);
    default: return;  // rejected by the caller
  }
}

// ---------------------------------------------------------------------------------------------
// Conversions and vector primitives

template <class Tr, DType D>
void convert_typed(const void* src, float* dst, int64_t n) {
  constexpr int64_t L = Tr::kLanes;
  const auto* s = static_cast<const std::byte*>(src);
  int64_t i = 0;
  for (; i + L <= n; i += L) Tr::store(dst + i, Tr::template load_w<D>(s, i));
  if (i < n) Tr::store_tail(dst + i, Tr::template load_w_tail<D>(s, i, int(n - i)), int(n - i));
}

template <class Tr>
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n) {
  switch (src_dtype) {
    case DType::BF16: return convert_typed<Tr, DType::BF16>(src, dst, n);
    case DType::F16: return convert_typed<Tr, DType::F16>(src, dst, n);
    case DType::F32: return convert_typed<Tr, DType::F32>(src, dst, n);
    default: return;  // rejected by the caller
  }
}

template <class Tr>
float dot(const float* a, const float* b, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  // Four accumulators: a single one would make the loop wait on the add latency.
  V acc0 = Tr::zero(), acc1 = Tr::zero(), acc2 = Tr::zero(), acc3 = Tr::zero();
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = Tr::fma(Tr::load_x(a + i), Tr::load_x(b + i), acc0);
    acc1 = Tr::fma(Tr::load_x(a + i + L), Tr::load_x(b + i + L), acc1);
    acc2 = Tr::fma(Tr::load_x(a + i + 2 * L), Tr::load_x(b + i + 2 * L), acc2);
    acc3 = Tr::fma(Tr::load_x(a + i + 3 * L), Tr::load_x(b + i + 3 * L), acc3);
  }
  for (; i + L <= n; i += L) acc0 = Tr::fma(Tr::load_x(a + i), Tr::load_x(b + i), acc0);
  if (i < n) {
    const int len = int(n - i);
    acc1 = Tr::fma(Tr::load_x_tail(a + i, len), Tr::load_x_tail(b + i, len), acc1);
  }
  return Tr::reduce(Tr::add(Tr::add(acc0, acc1), Tr::add(acc2, acc3)));
}

template <class Tr>
float sum(const float* a, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  V acc0 = Tr::zero(), acc1 = Tr::zero(), acc2 = Tr::zero(), acc3 = Tr::zero();
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = Tr::add(acc0, Tr::load_x(a + i));
    acc1 = Tr::add(acc1, Tr::load_x(a + i + L));
    acc2 = Tr::add(acc2, Tr::load_x(a + i + 2 * L));
    acc3 = Tr::add(acc3, Tr::load_x(a + i + 3 * L));
  }
  for (; i + L <= n; i += L) acc0 = Tr::add(acc0, Tr::load_x(a + i));
  if (i < n) acc1 = Tr::add(acc1, Tr::load_x_tail(a + i, int(n - i)));
  return Tr::reduce(Tr::add(Tr::add(acc0, acc1), Tr::add(acc2, acc3)));
}

template <class Tr>
void axpy(float* y, float a, const float* x, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const V av = Tr::set1(a);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    Tr::store(y + i, Tr::fma(av, Tr::load_x(x + i), Tr::load_x(y + i)));
    Tr::store(y + i + L, Tr::fma(av, Tr::load_x(x + i + L), Tr::load_x(y + i + L)));
  }
  for (; i + L <= n; i += L) Tr::store(y + i, Tr::fma(av, Tr::load_x(x + i), Tr::load_x(y + i)));
  if (i < n) {
    const int len = int(n - i);
    Tr::store_tail(y + i, Tr::fma(av, Tr::load_x_tail(x + i, len), Tr::load_x_tail(y + i, len)),
                   len);
  }
}

// ---------------------------------------------------------------------------------------------
// The KV cache's bf16 and fp8 rows: dot and axpy against f32, converting each vector as it is
// loaded (the cache is read in its own dtype, never expanded to f32 first).

template <class Tr>
struct Bf16Elems {
  using E = uint16_t;
  static typename Tr::V load(const E* p) {
    return Tr::template load_w<DType::BF16>(reinterpret_cast<const std::byte*>(p), 0);
  }
  static typename Tr::V load_tail(const E* p, int len) {
    return Tr::template load_w_tail<DType::BF16>(reinterpret_cast<const std::byte*>(p), 0, len);
  }
};
template <class Tr>
struct E4m3Elems {  // values times 2^-8 (see load_e4m3); the callers scale by 256
  using E = uint8_t;
  static typename Tr::V load(const E* p) { return Tr::load_e4m3(p); }
  static typename Tr::V load_tail(const E* p, int len) { return Tr::load_e4m3_tail(p, len); }
};

template <class Tr, class Elems>
float dot_narrow(const float* a, const typename Elems::E* b, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  V acc0 = Tr::zero(), acc1 = Tr::zero(), acc2 = Tr::zero(), acc3 = Tr::zero();
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = Tr::fma(Tr::load_x(a + i), Elems::load(b + i), acc0);
    acc1 = Tr::fma(Tr::load_x(a + i + L), Elems::load(b + i + L), acc1);
    acc2 = Tr::fma(Tr::load_x(a + i + 2 * L), Elems::load(b + i + 2 * L), acc2);
    acc3 = Tr::fma(Tr::load_x(a + i + 3 * L), Elems::load(b + i + 3 * L), acc3);
  }
  for (; i + L <= n; i += L) acc0 = Tr::fma(Tr::load_x(a + i), Elems::load(b + i), acc0);
  if (i < n) {
    const int len = int(n - i);
    acc1 = Tr::fma(Tr::load_x_tail(a + i, len), Elems::load_tail(b + i, len), acc1);
  }
  return Tr::reduce(Tr::add(Tr::add(acc0, acc1), Tr::add(acc2, acc3)));
}

template <class Tr, class Elems>
void axpy_narrow(float* y, float a, const typename Elems::E* x, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const V av = Tr::set1(a);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    Tr::store(y + i, Tr::fma(av, Elems::load(x + i), Tr::load_x(y + i)));
    Tr::store(y + i + L, Tr::fma(av, Elems::load(x + i + L), Tr::load_x(y + i + L)));
  }
  for (; i + L <= n; i += L) Tr::store(y + i, Tr::fma(av, Elems::load(x + i), Tr::load_x(y + i)));
  if (i < n) {
    const int len = int(n - i);
    Tr::store_tail(y + i, Tr::fma(av, Elems::load_tail(x + i, len), Tr::load_x_tail(y + i, len)), len);
  }
}

template <class Tr>
float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  return dot_narrow<Tr, Bf16Elems<Tr>>(a, b, n);
}
template <class Tr>
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  axpy_narrow<Tr, Bf16Elems<Tr>>(y, a, x, n);
}
// The factors 256 undo load_e4m3's 2^-8 exactly (a power of two).
template <class Tr>
float dot_e4m3(const float* a, const uint8_t* b, int64_t n) {
  return 256.0f * dot_narrow<Tr, E4m3Elems<Tr>>(a, b, n);
}
template <class Tr>
void axpy_e4m3(float* y, float a, const uint8_t* x, int64_t n) {
  axpy_narrow<Tr, E4m3Elems<Tr>>(y, a * 256.0f, x, n);
}
template <class Tr>
void e4m3_to_f32(const uint8_t* x, float scale, float* y, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const V s = Tr::set1(scale * 256.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) Tr::store(y + i, Tr::fma(s, Tr::load_e4m3(x + i), Tr::zero()));
  if (i < n) {
    const int len = int(n - i);
    Tr::store_tail(y + i, Tr::fma(s, Tr::load_e4m3_tail(x + i, len), Tr::zero()), len);
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax and the SwiGLU activation: every attention score and every MLP's intermediate goes
// through an exponential, which the C library computes one at a time (std::exp was ~10 % of a
// long-context decode profile).

// The SIMD traits' exp: e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2, |r| <= ln 2 / 2
// (ln 2 split in a short high part, so that n ln2_hi is exact, and the rest: Cody and Waite);
// e^r by its Taylor polynomial of degree 7, whose truncation error is below 1e-8 relative there;
// 2^n built in the exponent field. Below kLo = ln(2^-126) e^x is under the smallest normal float
// and comes out 0 (no subnormals); above kHi = 127.5 ln 2 it comes out +inf (e^x within 1.5x of
// FLT_MAX there).
struct ExpConstants {
  static constexpr float kLo = -87.3365447505531f;
  static constexpr float kHi = 88.3762626647949f;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f;
  static constexpr float kLn2Lo = -2.12194440e-4f;
  static constexpr int kTerms = 8;
  static constexpr float kTaylor[kTerms] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                            1.0f / 6,    0.5f,       1.0f,       1.0f};  // highest degree first
};

template <class Tr>
typename Tr::V exp_poly(typename Tr::V x) {
  using V = typename Tr::V;
  using E = ExpConstants;
  // max / min return their second operand when one is NaN: a NaN x stays NaN.
  const V xc = Tr::min(Tr::set1(E::kHi), Tr::max(Tr::set1(E::kLo), x));
  const V n = Tr::round(Tr::mul(xc, Tr::set1(E::kLog2e)));
  const V r = Tr::fma(n, Tr::set1(-E::kLn2Lo), Tr::fma(n, Tr::set1(-E::kLn2Hi), xc));
  V p = Tr::set1(E::kTaylor[0]);
  for (int i = 1; i < E::kTerms; ++i) p = Tr::fma(p, r, Tr::set1(E::kTaylor[i]));
  return Tr::exp_range(x, Tr::mul(p, Tr::pow2(n)), E::kLo, E::kHi);
}

// x[i] = e^(x[i] - shift) for i < n; returns their sum, added in f32 lanes (callers keep n to a
// few hundred).
template <class Tr>
float exp_shifted(float* x, int64_t n, float shift) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const V neg = Tr::set1(-shift);
  V acc = Tr::zero();
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V v = Tr::exp(Tr::add(Tr::load_x(x + j), neg));
    Tr::store(x + j, v);
    acc = Tr::add(acc, v);
  }
  if (j < n) {
    const int len = int(n - j);
    Tr::store_tail(x + j, Tr::exp(Tr::add(Tr::load_x_tail(x + j, len), neg)), len);
    acc = Tr::add(acc, Tr::load_x_tail(x + j, len));  // zero-padded: only the len stored values
  }
  return Tr::reduce(acc);
}

// The exponentials of softmax are summed in f32 lanes over blocks of this many scores, the blocks'
// sums in double: long contexts keep a double's accuracy at SIMD speed.
constexpr int64_t kSoftmaxBlock = 256;

template <class Tr>
void softmax(float* x, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  float mx = x[0];
  int64_t i = 0;
  if (n >= L) {
    V m = Tr::load_x(x);
    for (i = L; i + L <= n; i += L) m = Tr::max(m, Tr::load_x(x + i));
    mx = Tr::reduce_max(m);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double total = 0;
  for (int64_t b = 0; b < n; b += kSoftmaxBlock)
    total += double(exp_shifted<Tr>(x + b, (n - b < kSoftmaxBlock ? n - b : kSoftmaxBlock), mx));
  const V inv = Tr::set1(float(1.0 / total));
  for (i = 0; i + L <= n; i += L) Tr::store(x + i, Tr::mul(Tr::load_x(x + i), inv));
  if (i < n) Tr::store_tail(x + i, Tr::mul(Tr::load_x_tail(x + i, int(n - i)), inv), int(n - i));
}

// gate = silu(gate) * up = gate / (1 + e^-gate) * up.
template <class Tr>
void silu_mul(float* gate, const float* up, int64_t n) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  const V one = Tr::set1(1.0f), minus_one = Tr::set1(-1.0f);
  auto silu_times = [&](V g, V u) { return Tr::mul(Tr::div(g, Tr::add(one, Tr::exp(Tr::mul(g, minus_one)))), u); };
  int64_t i = 0;
  for (; i + L <= n; i += L) Tr::store(gate + i, silu_times(Tr::load_x(gate + i), Tr::load_x(up + i)));
  if (i < n) {
    const int len = int(n - i);
    Tr::store_tail(gate + i, silu_times(Tr::load_x_tail(gate + i, len), Tr::load_x_tail(up + i, len)), len);
  }
}

template <class Tr>
constexpr KernelTable make_table(Isa isa) {
  return KernelTable{isa,           &matmul_rows<Tr>, &matmul_untransposed<Tr>, &convert_to_f32<Tr>,
                     &dot<Tr>,      &axpy<Tr>,        &sum<Tr>,                 &dot_bf16<Tr>,
                     &axpy_bf16<Tr>, &dot_e4m3<Tr>,   &axpy_e4m3<Tr>,           &e4m3_to_f32<Tr>,
                     &mla_scores<Tr>, &mla_values<Tr>, &softmax<Tr>,    &exp_shifted<Tr>, &silu_mul<Tr>};
}

}  // namespace
}  // namespace kimi::kernels
