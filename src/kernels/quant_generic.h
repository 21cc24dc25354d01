#pragma once
// The integer-weight kernel bodies, written once against a small "quant traits" interface and
// instantiated by each SIMD variant's file with its own compiler flags (quant_avx2.cpp,
// quant_avxvnni.cpp, quant_avx512.cpp, quant_avx512vnni.cpp). A traits type `Tr` provides:
//   V, VI, kLanes (L)            f32 / int vectors of L 32-bit lanes
//   kVnni                        dot_u8s8 is one instruction (else emulated; see below)
//   kGemmRows, kGemmTokens       register tile of the n > 1 kernels
//   zero, set1, add, fma, reduce, load_x  the float kernels' traits (avx2_traits.h, ...)
//   mul                                  f32 product
//   G4 make_group4(scale, zero), load_nib(p), load_nib_tail(p, bytes < L),
//   deq_lo(v, g4), deq_hi(v, g4)  L packed int4 bytes, one per lane, turned into the f32 weights
//                                 (nibble - zero) * scale of their low / high nibbles
//   load_i8(p), load_i8_tail(p, bytes < L), cvt(VI)      L int8 weights as int32 lanes -> f32
//   load_x_tail(p, len < L)      f32 loads of x, zero-filled past len
//   load_block(p), load_block_tail(p, bytes < 4L)        4L bytes (zero-filled past the end)
//   lo_nib(v), hi_nib(v)         the low / high nibble of each byte, as bytes
//   dot_u8s8(acc, u, s)          acc[j] += sum of u8 x s8 over the 4 bytes of lane j (VPDPBUSD;
//                                emulated with VPMADDUBSW + VPMADDWD, whose 16-bit pair sums must
//                                not saturate: callers keep |u * s| pairs below 2^15)
//   dot2_u4s8(acc, u0, s0, u1, s1)  dot_u8s8 twice, for nibbles u (<= 15): the emulation may add
//                                the two VPMADDUBSW results in int16 (|.| <= 2 * 2 * 15 * 128)
//   abs8(w), sign8(x, w)         |w| and x * sign(w) per byte (the non-VNNI int8 x int8 trick)
//   izero, iset1, iadd, isub, slli<n>, mullo, load_i
//   scales_window(row_groups, g, count) (f32 scales g..g+count of a row, zero-filled),
//   zeros_window(p, count), permute(v, idx), permute_i(v, idx)
//   8-lane variants only (int4_f32_words8_tile): nibble_in_place(words, j) (nibble j of each
//   lane as f32, times 16^j for j < 7), scale_pair(row_groups, g, count) ([s_g x4, s_g+1 x4])
//   nibble16(words, j), dot_i16(acc, a, b)  int4 x int16 (int4_word16_layout): nibble j of each
//                                16-bit half as an int16; acc[l] += a[2l] b[2l] + a[2l+1] b[2l+1]
//
// Everything is in an anonymous namespace (internal linkage) so that no AVX-512 instantiation
// can be merged into code that runs on a CPU without it; no out-of-line library code is used.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/prefetch.h"
#include "kernels/quant_kernels.h"
#include "kernels/streaming.h"

namespace kimi::kernels {
namespace {

constexpr int64_t qmin(int64_t a, int64_t b) { return a < b ? a : b; }

// Software prefetch distance per weight row (the GEMV streams rows from DRAM).
constexpr int64_t kQuantPrefetchAhead = 512;
// One token over a streamed matrix (kernels/streaming.h) reads it one row at a time, one stream
// prefetched kStreamAheadBytes ahead across row ends. On Zen 5, cold, 0.3-0.9x the time of 4-row
// tiles for the INT4 kernels; from L3 W4A8 takes 1.1-1.25x (bench/results/2026-12-06-int4-one-row-stream.md).
// Rows swept by every token block of the GEMM while they stay in L2.
constexpr int64_t kQuantRowChunk = 64;

struct QuantCtx {
  const WeightMatrix* w;
  const QuantInput* in;
  int64_t r0, t0;  // first row and token of the tile
  bool prefetch;
  int next_rows = 0;  // GEMV: rows of the next tile of this call, to prefetch (prefetch_ahead)
  // Streamed GEMV (one-row tiles): the rows after this one in the call, one stream with it.
  int64_t stream_rows = -1;
};

inline const uint8_t* row_ptr(const WeightMatrix& w, int64_t r) {
  const size_t row_bytes = w.format == WeightFormat::Int4Group ? size_t(w.cols) / 2 : size_t(w.cols);
  return static_cast<const uint8_t*>(w.data) + size_t(r) * row_bytes;
}

// One row's scales and zero points, located once per tile: the per-group loops then need no
// index arithmetic (a 64-bit division per group costs more than the group's dot product).
struct RowGroups {
  const std::byte* scales;
  const uint8_t* zeros;  // null: symmetric (zero 8 for int4)
  bool f32;

  RowGroups() = default;
  RowGroups(const WeightMatrix& w, int64_t row) {
    const int64_t groups = w.cols / w.group_size;
    f32 = w.scale_dtype == DType::F32;
    scales = static_cast<const std::byte*>(w.scales) + size_t(row * groups) * (f32 ? 4 : 2);
    zeros = w.zero_points ? w.zero_points + row * groups : nullptr;
  }
  float scale(int64_t g) const {
    if (f32) {
      float f;
      __builtin_memcpy(&f, scales + g * 4, 4);
      return f;
    }
    uint16_t b;
    __builtin_memcpy(&b, scales + g * 2, 2);
    return bf16_to_f32(b);
  }
  int zero(int64_t g) const { return zeros ? zeros[g] : 8; }
};

// The data and the scales / zero points of the tile's rows r0 .. r0 + R - 1.
template <int R>
inline void locate_rows(const WeightMatrix& w, int64_t r0, const uint8_t* (&rows)[R], RowGroups (&rg)[R]) {
  for (int r = 0; r < R; ++r) {
    rows[r] = row_ptr(w, r0 + r);
    rg[r] = RowGroups(w, r0 + r);
  }
}

// The int8 activations (and, for int4 weights, their negated sums) of the tile's tokens.
template <int T>
inline void locate_tokens(const QuantInput& in, int64_t t0, bool int4, const int8_t* (&xs)[T],
                          const int32_t* (&ns)[T]) {
  for (int t = 0; t < T; ++t) {
    xs[t] = in.xq + (t0 + t) * in.ldxq;
    ns[t] = int4 ? in.negsum + (t0 + t) * in.ldsum : nullptr;
  }
}

// The int16 activations (xs), their lanes' negated sums (ns) and their blocks' scales (ss) of the
// tile's tokens t0 .. t0 + T - 1 (int4_word16_layout).
template <int T>
struct Int16Tokens {
  const int16_t* xs[T];
  const int32_t* ns[T];
  const float* ss[T];
  Int16Tokens(const QuantInput& in, int64_t t0) {
    for (int t = 0; t < T; ++t) {
      xs[t] = in.xw + (t0 + t) * in.ldxw;
      ns[t] = in.negsum + (t0 + t) * in.ldsum;
      ss[t] = in.xwscale + (t0 + t) * in.ldxws;
    }
  }
};

template <class Tr, class V, int R, int T>
inline void zero_tile(V (&a)[R][T]) {
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a[r][t] = Tr::zero();
}

// Prefetches each row's line kQuantPrefetchAhead bytes past pos (end: the row's byte length).
// Past the rows' ends, the same line of the next tile's rows when the GEMV has `next_rows` more
// (rows are contiguous): an expert's down projection has rows of 1 KiB in INT4, which would
// otherwise start every tile from DRAM. A streamed one-row tile prefetches its stream
// kStreamAheadBytes ahead, into the rows after it.
template <int R>
inline void prefetch_ahead(const uint8_t* const (&rows)[R], int64_t pos, int64_t end, const QuantCtx& c) {
  if constexpr (R == 1) {
    if (c.stream_rows >= 0) {
      const int64_t at = pos + kStreamAheadBytes;
      if (at < end * (1 + c.stream_rows)) prefetch_l1(rows[0] + at);
      return;
    }
  }
  const int64_t at = pos + kQuantPrefetchAhead;
  if (at < end) {
    for (int r = 0; r < R; ++r) prefetch_l1(rows[r] + at);
  } else if (at - end < end) {
    for (int r = 0; r < c.next_rows; ++r) prefetch_l1(rows[r] + R * end + (at - end));
  }
}

// Group arithmetic without divisions for the tiles that scale every block (kPerBlock): there the
// group size divides the block, a power of two, so lane -> group is a shift. A tile of a streamed
// decode is one row, and the 8-16 IDIVs it spent mapping lanes took ~1/4 of a 7168-input row's
// time and ~1/2 of a 2048-input one's (measured on the AVX512_BF16 INT4 kernel, which had them too).
inline int group_shift(int64_t group_size) { return std::countr_zero(uint64_t(group_size)); }
template <bool kPerBlock>
int64_t group_count(const WeightMatrix& w) {
  return kPerBlock ? w.cols >> group_shift(w.group_size) : w.cols / w.group_size;
}

// ---------------------------------------------------------------------------------------------
// Int4Group x f32: each chunk of 2L inputs is L packed bytes; their low nibbles pair with the
// L even inputs and the high nibbles with the L odd ones (x is split to match, QuantInput::xf).
template <class Tr, int R, int T>
void int4_f32_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t L = Tr::kLanes;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t G = w.group_size, groups = w.cols / G, row_end = w.cols / 2;
  V acc[R][T];
  zero_tile<Tr>(acc);
  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = in.xf + (c.t0 + t) * in.ldxf;

  for (int64_t g = 0; g < groups; ++g) {
    typename Tr::G4 st[R];
    for (int r = 0; r < R; ++r) st[r] = Tr::make_group4(rg[r].scale(g), rg[r].zero(g));
    const int64_t k1 = (g + 1) * G;
    for (int64_t k = g * G; k < k1; k += 2 * L) {
      const int64_t byte = k / 2;
      if (c.prefetch && byte % 64 == 0) prefetch_ahead<R>(rows, byte, row_end, c);
      const int nbytes = int(qmin(L, (k1 - k) / 2));
      V xe[T], xo[T];
      for (int t = 0; t < T; ++t) {
        xe[t] = Tr::load_x(xs[t] + k);
        xo[t] = Tr::load_x(xs[t] + k + L);
      }
      for (int r = 0; r < R; ++r) {
        const VI v = nbytes == L ? Tr::load_nib(rows[r] + byte) : Tr::load_nib_tail(rows[r] + byte, nbytes);
        const V lo = Tr::deq_lo(v, st[r]), hi = Tr::deq_hi(v, st[r]);
        for (int t = 0; t < T; ++t) acc[r][t] = Tr::fma(hi, xo[t], Tr::fma(lo, xe[t], acc[r][t]));
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(acc[r][t]);
}

// Int4Group x f32 on whole packed words, for 16-lane variants and symmetric weights whose groups
// tile blocks of 128 inputs (int4_word_layout). A 64-byte block is 16 words of 8 nibbles; word
// l's nibble j is input 8l + j, so shifting all 16 words by 4j and looking the low nibble up in a
// table of q - 8 gives 16 weights in one shift and one permute, with no unpacking shuffles; x is
// laid out to match (QuantInput::xf). The sums are scaled once per block (kPerBlock: groups of 32
// or 64, lane l in group 8l / G of the block) or once per group (groups of whole blocks).
template <class Tr, int R, int T, bool kPerBlock>
void int4_f32_words_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t G = w.group_size, groups = group_count<kPerBlock>(w);
  const int64_t row_bytes = w.cols / 2, nblocks = (w.cols + 127) / 128, nfull = w.cols / 128;
  const int tail_bytes = int(row_bytes - nfull * 64);
  const V table = Tr::make_group4(1.0f, 8);  // q - 8

  const int shift = kPerBlock ? group_shift(G) : 0;
  alignas(64) int32_t lane_group[16];
  for (int l = 0; l < 16; ++l) lane_group[l] = kPerBlock ? int32_t((8 * l) >> shift) : 0;
  const VI idx = Tr::load_i(lane_group);

  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = in.xf + (c.t0 + t) * in.ldxf;
  V total[R][T], acc[R][T];
  zero_tile<Tr>(total);
  const auto block = [&](int64_t b) {
    const int64_t byte = b * 64;
    if (c.prefetch) prefetch_ahead<R>(rows, byte, row_bytes, c);
    VI v[R];
    for (int r = 0; r < R; ++r)
      v[r] = b < nfull ? Tr::load_block(rows[r] + byte) : Tr::load_block_tail(rows[r] + byte, tail_bytes);
    for (unsigned j = 0; j < 8; ++j) {
      V xv[T];
      for (int t = 0; t < T; ++t) xv[t] = Tr::load_x(xs[t] + b * 128 + j * 16);
      for (int r = 0; r < R; ++r) {
        const V q = Tr::lut_nibble(v[r], j, table);
        for (int t = 0; t < T; ++t) acc[r][t] = Tr::fma(q, xv[t], acc[r][t]);
      }
    }
  };
  const auto scale_into_total = [&](auto scale_of_row) {
    for (int r = 0; r < R; ++r) {
      const V s = scale_of_row(r);
      for (int t = 0; t < T; ++t) total[r][t] = Tr::fma(acc[r][t], s, total[r][t]);
    }
  };

  if constexpr (kPerBlock) {
    const int64_t groups_per_block = 128 >> shift;
    for (int64_t b = 0; b < nblocks; ++b) {
      zero_tile<Tr>(acc);
      block(b);
      const int64_t g0 = b * groups_per_block;
      const int count = int(qmin(16, groups - g0));
      scale_into_total([&](int r) { return Tr::permute(Tr::scales_window(rg[r], g0, count), idx); });
    }
  } else {
    const int64_t blocks_per_group = groups == 1 ? nblocks : G / 128;
    for (int64_t g = 0; g < groups; ++g) {
      zero_tile<Tr>(acc);
      const int64_t b1 = qmin(nblocks, (g + 1) * blocks_per_group);
      for (int64_t b = g * blocks_per_group; b < b1; ++b) block(b);
      scale_into_total([&](int r) { return Tr::set1(rg[r].scale(g)); });
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]);
}

// The walk the two word8-layout tiles below share (int4_word8_layout: 32-byte blocks of 64
// inputs): block by block, prefetching, each row's block and the scales of its lanes' groups
// (kPair: groups of 32, the block's lanes 0-3 in one group and 4-7 in the next; else a group
// spans whole blocks, or the row), handed to body(b, r, words, scales).
template <class Tr, int R, bool kPair, class Body>
inline void for_word8_blocks(const QuantCtx& c, const uint8_t* const (&rows)[R], const RowGroups (&rg)[R],
                             Body&& body) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  const WeightMatrix& w = *c.w;
  const int64_t G = w.group_size, groups = w.cols / G;
  const int64_t row_bytes = w.cols / 2, nblocks = (w.cols + 63) / 64, nfull = w.cols / 64;
  const int tail_bytes = int(row_bytes - nfull * 32);
  const int64_t blocks_per_group = groups == 1 ? nblocks : G / 64;  // unless kPair
  int64_t g = 0, left = blocks_per_group;  // the group of block b, and its blocks still to come
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t byte = b * 32;
    if (c.prefetch && (b & 1) == 0) prefetch_ahead<R>(rows, byte, row_bytes, c);
    if constexpr (!kPair) {
      if (left == 0) {
        ++g;
        left = blocks_per_group;
      }
      --left;
    }
    for (int r = 0; r < R; ++r) {
      const VI v = b < nfull ? Tr::load_block(rows[r] + byte) : Tr::load_block_tail(rows[r] + byte, tail_bytes);
      V s;
      if constexpr (kPair)
        s = Tr::scale_pair(rg[r], 2 * b, int(qmin(2, groups - 2 * b)));
      else
        s = Tr::set1(rg[r].scale(g));
      body(b, r, v, s);
    }
  }
}

// Int4Group x f32 on whole packed words with 8 lanes (AVX2; int4_word8_layout). A 32-byte block
// is 8 words of 8 nibbles, word l's nibble j being input 8l + j of the block's 64. Nibble j is
// read in place (one AND, or a shift for j = 7, and one conversion per 8 weights: no unpacking
// shuffles), against x pre-scaled by 16^-j; the zero point 8 is folded into the accumulator's
// start, -8 * (sum of the word's 8 inputs), so each block costs 8 x (op, convert, FMA) per row
// and one scale FMA. Rows run one after another within a block (x stays in L1), each with two
// accumulators per token so the FMA chains are short.
template <class Tr, int R, int T, bool kPair>
void int4_f32_words8_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = in.xf + (c.t0 + t) * in.ldxf;
  V total[R][T];
  zero_tile<Tr>(total);
  for_word8_blocks<Tr, R, kPair>(c, rows, rg, [&](int64_t b, int r, VI v, V s) {
    V a0[T], a1[T];
    for (int t = 0; t < T; ++t) {
      a0[t] = Tr::load_x(xs[t] + b * kWord8BlockFloats + 64);  // -8 * word sums
      a1[t] = Tr::zero();
    }
    for (unsigned j = 0; j < 8; j += 2) {
      const V q0 = Tr::nibble_in_place(v, j), q1 = Tr::nibble_in_place(v, j + 1);
      for (int t = 0; t < T; ++t) {
        const float* xb = xs[t] + b * kWord8BlockFloats + j * 8;
        a0[t] = Tr::fma(q0, Tr::load_x(xb), a0[t]);
        a1[t] = Tr::fma(q1, Tr::load_x(xb + 8), a1[t]);
      }
    }
    for (int t = 0; t < T; ++t) total[r][t] = Tr::fma(Tr::add(a0[t], a1[t]), s, total[r][t]);
  });
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]);
}

// Int4Group x int16 activations on the words of int4_word8_layout (AVX2; int4_word16_layout).
// The 16-bit halves of word l hold inputs 8l .. 8l + 3 and 8l + 4 .. 8l + 7, so shifting every
// half right by 4j and masking leaves inputs 8l + j and 8l + 4 + j as int16 in the two halves of
// lane l: one VPMADDWD (or VPDPWSSD) against x laid out to match adds both products into lane l.
// Per 64 weights and row: three shifts and three ANDs (shared by the tokens), and per token four
// multiply-adds into int32 (exact: |sum| < 8 x 2 x 15 x 32767) started from -8 x the lane's
// inputs, one conversion and one FMA by (weight scale x block scale).
template <class Tr, int R, int T, bool kPair>
void int4_i16_words8_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const Int16Tokens<T> tok(in, c.t0);
  const auto& [xs, ns, ss] = tok;
  V total[R][T];
  zero_tile<Tr>(total);
  for_word8_blocks<Tr, R, kPair>(c, rows, rg, [&](int64_t b, int r, VI v, V s) {
    VI q[4];
    for (unsigned j = 0; j < 4; ++j) q[j] = Tr::nibble16(v, j);
    for (int t = 0; t < T; ++t) {
      const int16_t* xb = xs[t] + b * word16_block(8);
      VI a0 = Tr::load_i(ns[t] + b * 8), a1 = Tr::izero();
      a0 = Tr::dot_i16(a0, q[0], Tr::load_block(xb));
      a1 = Tr::dot_i16(a1, q[1], Tr::load_block(xb + 16));
      a0 = Tr::dot_i16(a0, q[2], Tr::load_block(xb + 32));
      a1 = Tr::dot_i16(a1, q[3], Tr::load_block(xb + 48));
      total[r][t] = Tr::fma(Tr::cvt(Tr::iadd(a0, a1)), Tr::mul(s, Tr::set1(ss[t][b])), total[r][t]);
    }
  });
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]);
}

// The rows of a streamed one-token product taken as S runs of `count` rows, run s from row
// first[s] (int4_i16_words16_runs, int4_i16_words8_runs), each run one stream: each run's row i
// and its groups, the prefetch of the scales of the row stream_ahead_rows further (a second,
// short stream per run, kept in a separate array), and of the weights kStreamAheadBytes ahead up
// to the run's end.
template <size_t S>
struct StreamRuns {
  const WeightMatrix& w;
  const std::array<int64_t, S>& first;
  int64_t count, ahead_rows, scale_bytes;
  const uint8_t* end[S];

  StreamRuns(const WeightMatrix& m, const std::array<int64_t, S>& f, int64_t n, int64_t row_bytes)
      : w(m), first(f), count(n), ahead_rows(stream_ahead_rows(row_bytes)),
        scale_bytes((m.cols / m.group_size) * (m.scale_dtype == DType::F32 ? 4 : 2)) {
    for (size_t s = 0; s < S; ++s) end[s] = row_ptr(w, first[s] + count);
  }
  void locate(int64_t i, const uint8_t* (&row)[S], RowGroups (&rg)[S]) const {
    for (size_t s = 0; s < S; ++s) {
      row[s] = row_ptr(w, first[s] + i);
      rg[s] = RowGroups(w, first[s] + i);
      if (i + ahead_rows < count) {
        const std::byte* scales = RowGroups(w, first[s] + i + ahead_rows).scales;
        for (int64_t off = 0; off < scale_bytes; off += 64) prefetch_l2(scales + off);
      }
    }
  }
  void prefetch(size_t s, const uint8_t* p) const {
    if (p + kStreamAheadBytes < end[s]) prefetch_l1(p + kStreamAheadBytes);
  }
};

// One token over the StreamRuns of a streamed int4_word16_layout matrix with groups of 32 or 64
// and whole scale windows (every real shape; int4_i16_words16_stream_window): the runs' rows side
// by side with int4_i16_words16_tile's arithmetic and none of its per-row set-up.
// kWindow blocks share one load of 16 scales, each block picks its lanes' scales with a constant
// index, and its four VPDPWSSD form one chain from the lanes' -8 x sums. The tile's general loop
// spent ~45 instructions a block, most of them scalar (window index, prefetch bounds, a pointer
// per array): ~12 cycles a block against ~8 here. Out of line, once per call (and so that
// tests/prefetch_check finds it by name).
template <class Tr, int kWindow, size_t S>
[[gnu::noinline]] void int4_i16_words16_runs(const WeightMatrix& w, const QuantInput& in, float* y,
                                             const std::array<int64_t, S>& first, int64_t count) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t B = word16_block(16), kGroupsPerBlock = 16 / kWindow;
  alignas(64) int32_t lanes[kWindow][16];
  for (int k = 0; k < kWindow; ++k)
    for (int l = 0; l < 16; ++l) lanes[k][l] = int32_t(k * kGroupsPerBlock + l * kGroupsPerBlock / 16);
  VI idx[kWindow];
  for (int k = 0; k < kWindow; ++k) idx[k] = Tr::load_i(lanes[k]);
  const int16_t* x = in.xw;
  const int32_t* negsum = in.negsum;
  const float* xscale = in.xwscale;
  const int64_t nblocks = w.cols / B;
  const StreamRuns<S> runs(w, first, count, nblocks * 64);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* row[S];
    RowGroups rg[S];
    runs.locate(i, row, rg);
    V total[S];
    for (size_t s = 0; s < S; ++s) total[s] = Tr::zero();
    for (int64_t b0 = 0; b0 < nblocks; b0 += kWindow) {
      V window[S];
      for (size_t s = 0; s < S; ++s) window[s] = Tr::scales_window(rg[s], b0 * kGroupsPerBlock, 16);
      for (int k = 0; k < kWindow; ++k) {
        const int64_t b = b0 + k;
        const int16_t* xb = x + b * B;
        for (size_t s = 0; s < S; ++s) {
          const uint8_t* p = row[s] + b * 64;
          runs.prefetch(s, p);
          const VI v = Tr::load_block(p);
          VI a = Tr::load_i(negsum + b * 16);
          a = Tr::dot_i16(a, Tr::nibble16(v, 0), Tr::load_block(xb));
          a = Tr::dot_i16(a, Tr::nibble16(v, 1), Tr::load_block(xb + 32));
          a = Tr::dot_i16(a, Tr::nibble16(v, 2), Tr::load_block(xb + 64));
          a = Tr::dot_i16(a, Tr::nibble16(v, 3), Tr::load_block(xb + 96));
          total[s] = Tr::fma(Tr::cvt(a), Tr::mul(Tr::permute(window[s], idx[k]), Tr::set1(xscale[b])), total[s]);
        }
      }
    }
    for (size_t s = 0; s < S; ++s) y[first[s] + i] = Tr::reduce(total[s]);
  }
}

// Rows r0 .. r1 as `nruns` runs (int4_stream_runs(), streaming.h: why): one, or two, the first
// and the second half of the range side by side (runs(first, count) with first an array of 2,
// then of 1 for an odd last row).
template <class Runs>
void in_runs(int nruns, int64_t r0, int64_t r1, Runs&& runs) {
  if (nruns != 2) return runs(std::array<int64_t, 1>{r0}, r1 - r0);
  const int64_t half = (r1 - r0) / 2;
  if (half > 0) runs(std::array<int64_t, 2>{r0, r0 + half}, half);
  if (r0 + 2 * half < r1) runs(std::array<int64_t, 1>{r1 - 1}, int64_t(1));
}

// The scale window (in blocks) of int4_i16_words16_runs for w, or 0 where it does not apply: one
// token of 16-bit activations over a streamed matrix whose groups of 32 / 64 tile whole blocks and
// whose rows hold whole windows of 16 groups.
inline int int4_i16_words16_stream_window(const WeightMatrix& w, const QuantInput& in) {
  constexpr int64_t B = word16_block(16);
  if (in.n != 1 || w.act_quant != ActivationQuant::Bf16 || !is_streamed(w)) return 0;
  if (w.group_size != 32 && w.group_size != 64) return 0;
  if (w.cols % B != 0 || w.cols / w.group_size <= 1) return 0;
  const int window = int(16 / (B / w.group_size));
  return (w.cols / B) % window == 0 ? window : 0;
}

// int4_i16_words16_runs on 8 lanes (AVX2; int4_word16_layout) for groups of 32 over whole blocks
// of 64 inputs (every real shape; int4_i16_words8_stream_applies): int4_i16_words8_tile's
// arithmetic over the StreamRuns' rows side by side, the set-up once per call; out of line as
// that one.
template <class Tr, size_t S>
[[gnu::noinline]] void int4_i16_words8_runs(const WeightMatrix& w, const QuantInput& in, float* y,
                                            const std::array<int64_t, S>& first, int64_t count) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t B = word16_block(8);
  const int16_t* x = in.xw;
  const int32_t* negsum = in.negsum;
  const float* xscale = in.xwscale;
  const int64_t nblocks = w.cols / B;
  const StreamRuns<S> runs(w, first, count, nblocks * 32);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* row[S];
    RowGroups rg[S];
    runs.locate(i, row, rg);
    V total[S];
    for (size_t s = 0; s < S; ++s) total[s] = Tr::zero();
    for (int64_t b = 0; b < nblocks; ++b) {
      const int16_t* xb = x + b * B;
      for (size_t s = 0; s < S; ++s) {
        const uint8_t* p = row[s] + b * 32;
        if ((b & 1) == 0) runs.prefetch(s, p);
        const VI v = Tr::load_block(p);
        VI a0 = Tr::load_i(negsum + b * 8), a1 = Tr::izero();
        a0 = Tr::dot_i16(a0, Tr::nibble16(v, 0), Tr::load_block(xb));
        a1 = Tr::dot_i16(a1, Tr::nibble16(v, 1), Tr::load_block(xb + 16));
        a0 = Tr::dot_i16(a0, Tr::nibble16(v, 2), Tr::load_block(xb + 32));
        a1 = Tr::dot_i16(a1, Tr::nibble16(v, 3), Tr::load_block(xb + 48));
        const V scales = Tr::mul(Tr::scale_pair(rg[s], 2 * b, 2), Tr::set1(xscale[b]));
        total[s] = Tr::fma(Tr::cvt(Tr::iadd(a0, a1)), scales, total[s]);
      }
    }
    for (size_t s = 0; s < S; ++s) y[first[s] + i] = Tr::reduce(total[s]);
  }
}

// Whether int4_i16_words8_runs takes w: one token of 16-bit activations over a streamed matrix
// with groups of 32 and whole blocks of 64 inputs.
inline bool int4_i16_words8_stream_applies(const WeightMatrix& w, const QuantInput& in) {
  return in.n == 1 && w.act_quant == ActivationQuant::Bf16 && is_streamed(w) && w.group_size == 32 &&
         w.cols % word16_block(8) == 0;
}

// Int4Group x int16 activations on 16 lanes (AVX-512; int4_word16_layout): the 64-byte blocks of
// int4_f32_words_tile, each 16 words of 8 nibbles, with int4_i16_words8_tile's arithmetic: per
// 128 weights and row three shifts and three ANDs, and per token four VPDPWSSD (VPMADDWD +
// VPADDD without VNNI) from -8 x the lanes' input sums, one conversion and one FMA by (the lanes'
// weight scales x the block's activation scale). Where VDPBF16PS is slow (Emerald Rapids) this
// takes 0.62-0.66x the AVX512_BF16 kernel's time over 12-64 tokens, 0.75x over one from L3
// (bench/results/2026-12-07-intel-bf16-dot-rate.md).
template <class Tr, int R, int T, bool kPerBlock>
void int4_i16_words16_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  static_assert(Tr::kLanes == 16);
  constexpr int64_t B = word16_block(16);
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t G = w.group_size, groups = group_count<kPerBlock>(w);
  const int64_t row_bytes = w.cols / 2, nblocks = (w.cols + B - 1) / B, nfull = w.cols / B;
  const int tail_bytes = int(row_bytes - nfull * 64);
  const int shift = kPerBlock ? group_shift(G) : 0;
  alignas(64) int32_t lane_group[16];
  for (int l = 0; l < 16; ++l) lane_group[l] = kPerBlock ? int32_t((8 * l) >> shift) : 0;
  const VI idx = Tr::load_i(lane_group);
  const int64_t groups_per_block = kPerBlock ? B >> shift : 1, window_blocks = 16 / groups_per_block;
  const int64_t blocks_per_group = kPerBlock ? 0 : groups == 1 ? nblocks : G / B;

  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const Int16Tokens<T> tok(in, c.t0);
  const auto& [xs, ns, ss] = tok;
  V total[R][T], ws[R], window[R];
  zero_tile<Tr>(total);
  if (R == 1 && c.stream_rows > 0) {
    const int64_t ahead_rows = stream_ahead_rows(row_bytes);
    if (ahead_rows <= c.stream_rows) {
      const std::byte* s = RowGroups(w, c.r0 + ahead_rows).scales;
      const int64_t sbytes = groups * (rg[0].f32 ? 4 : 2);
      for (int64_t off = 0; off < sbytes; off += 64) prefetch_l2(s + off);
    }
  }
  int64_t k = 0;  // block b's place in its scale window (b % window_blocks, without a division)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t byte = b * 64;
    if (c.prefetch) prefetch_ahead<R>(rows, byte, row_bytes, c);
    if constexpr (kPerBlock) {
      // Each row's scales 16 at a time (those of 16 / groups_per_block blocks): one load per
      // window, and per block one permute picks its lanes' scales.
      if (k == window_blocks) k = 0;
      if (k == 0) {
        const int64_t g0 = b * groups_per_block;
        const int count = int(qmin(16, groups - g0));
        for (int r = 0; r < R; ++r) window[r] = Tr::scales_window(rg[r], g0, count);
      }
      const VI lanes = Tr::iadd(idx, Tr::iset1(int(k * groups_per_block)));
      for (int r = 0; r < R; ++r) ws[r] = Tr::permute(window[r], lanes);
      ++k;
    } else if (b % blocks_per_group == 0) {
      for (int r = 0; r < R; ++r) ws[r] = Tr::set1(rg[r].scale(b / blocks_per_group));
    }
    for (int r = 0; r < R; ++r) {
      const VI v = b < nfull ? Tr::load_block(rows[r] + byte) : Tr::load_block_tail(rows[r] + byte, tail_bytes);
      VI q[4];
      for (unsigned j = 0; j < 4; ++j) q[j] = Tr::nibble16(v, j);
      for (int t = 0; t < T; ++t) {
        const int16_t* xb = xs[t] + b * B;
        VI a0 = Tr::load_i(ns[t] + b * 16), a1 = Tr::izero();
        a0 = Tr::dot_i16(a0, q[0], Tr::load_block(xb));
        a1 = Tr::dot_i16(a1, q[1], Tr::load_block(xb + 32));
        a0 = Tr::dot_i16(a0, q[2], Tr::load_block(xb + 64));
        a1 = Tr::dot_i16(a1, q[3], Tr::load_block(xb + 96));
        total[r][t] = Tr::fma(Tr::cvt(Tr::iadd(a0, a1)), Tr::mul(ws[r], Tr::set1(ss[t][b])), total[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]);
}

// Int8Group x f32: L int8 weights per step, widened and scaled in registers.
template <class Tr, int R, int T>
void int8_f32_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t L = Tr::kLanes;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t G = w.group_size, groups = w.cols / G;
  V acc[R][T];
  zero_tile<Tr>(acc);
  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = in.x + (c.t0 + t) * w.cols;

  for (int64_t g = 0; g < groups; ++g) {
    V s[R];
    for (int r = 0; r < R; ++r) s[r] = Tr::set1(rg[r].scale(g));
    const int64_t k1 = (g + 1) * G;
    for (int64_t k = g * G; k < k1; k += L) {
      if (c.prefetch && k % 64 == 0) prefetch_ahead<R>(rows, k, w.cols, c);
      const int len = int(qmin(L, k1 - k));
      V xv[T];
      for (int t = 0; t < T; ++t) xv[t] = len == L ? Tr::load_x(xs[t] + k) : Tr::load_x_tail(xs[t] + k, len);
      for (int r = 0; r < R; ++r) {
        const VI q = len == L ? Tr::load_i8(rows[r] + k) : Tr::load_i8_tail(rows[r] + k, len);
        const V wv = Tr::mul(Tr::cvt(q), s[r]);
        for (int t = 0; t < T; ++t) acc[r][t] = Tr::fma(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(acc[r][t]);
}

// ---------------------------------------------------------------------------------------------
// Integer weights x int8 activations. The row is walked in blocks of 4L weight bytes (8L int4
// or 4L int8 inputs); int32 lane j of a block covers E = 8 (int4) or 4 (int8) consecutive
// inputs. Blocks are grouped into segments over which every lane keeps one group: a whole group
// when the group size is a multiple of the block (or one group per row), else (kPerBlock) a
// single block whose lanes belong to B / G groups, scaled by a per-lane vector. At the end of a
// segment the int32 sums (exact) are corrected, converted and added, scaled, to the f32 totals.
// The modes are template parameters so that the hot loop has no run-time branches and its
// accumulators stay in registers.
template <class Tr, int R, int T, bool kInt4, bool kPerBlock, bool kAsym>
void int_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  constexpr int64_t L = Tr::kLanes;
  constexpr int64_t kBlockBytes = 4 * L;
  constexpr int64_t E = kInt4 ? 8 : 4;
  constexpr int64_t B = E * L;  // inputs per block
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t cols = w.cols, G = w.group_size, groups = group_count<kPerBlock>(w);
  const int64_t row_bytes = kInt4 ? cols / 2 : cols;
  const int64_t nblocks = (cols + B - 1) / B, nfull = cols / B;

  const int shift = kPerBlock ? group_shift(G) : 0;
  alignas(64) int32_t lane_group[L];  // lane -> group within a block (kPerBlock)
  for (int64_t j = 0; j < L; ++j) lane_group[j] = kPerBlock ? int32_t((j * E) >> shift) : 0;
  const VI idx = Tr::load_i(lane_group);

  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const int8_t* xs[T];
  const int32_t* ns[T];
  locate_tokens<T>(in, c.t0, kInt4, xs, ns);
  V total[R][T];
  zero_tile<Tr>(total);
  VI acc[R][T], wsum[R], nsum[T];

  const auto start = [&] {
    for (int r = 0; r < R; ++r) {
      if constexpr (!kInt4 && Tr::kVnni) wsum[r] = Tr::izero();
      for (int t = 0; t < T; ++t) acc[r][t] = Tr::izero();
    }
    if constexpr (kInt4)
      for (int t = 0; t < T; ++t) nsum[t] = Tr::izero();
  };
  const auto block = [&](int64_t b, auto load_w) {
    const int64_t byte = b * kBlockBytes;
    if (c.prefetch) prefetch_ahead<R>(rows, byte, row_bytes, c);
    if constexpr (kInt4) {
      for (int t = 0; t < T; ++t) nsum[t] = Tr::iadd(nsum[t], Tr::load_i(ns[t] + b * L));
      for (int r = 0; r < R; ++r) {
        const VI v = load_w(rows[r] + byte);
        const VI lo = Tr::lo_nib(v), hi = Tr::hi_nib(v);
        for (int t = 0; t < T; ++t) {
          // Nibbles (<= 15) x int8 (|x| <= 127): pair sums fit int16 for the emulation.
          const int8_t* xb = xs[t] + b * B;
          acc[r][t] = Tr::dot2_u4s8(acc[r][t], lo, Tr::load_block(xb), hi, Tr::load_block(xb + B / 2));
        }
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const VI v = load_w(rows[r] + byte);
        if constexpr (Tr::kVnni) {
          // x is stored as x + 128 (unsigned): sum (x + 128) w = sum x w + 128 sum w.
          wsum[r] = Tr::dot_u8s8(wsum[r], Tr::ones8(), v);
          for (int t = 0; t < T; ++t)
            acc[r][t] = Tr::dot_u8s8(acc[r][t], Tr::load_block(xs[t] + b * B), v);
        } else {
          // |w| (<= 128) x x * sign(w) (|.| <= 127): pair sums stay below 2^15.
          const VI aw = Tr::abs8(v);
          for (int t = 0; t < T; ++t)
            acc[r][t] = Tr::dot_u8s8(acc[r][t], aw, Tr::sign8(Tr::load_block(xs[t] + b * B), v));
        }
      }
    }
  };
  // Segment end: zero-point / offset corrections, then scale and add.
  // kPerBlock: each row's scales of groups [w0, w0 + L), loaded when a block starts a window
  // (blocks hold whole power-of-two shares of it) and permuted to each block's lanes.
  V window[R];
  for (int r = 0; r < R; ++r) window[r] = Tr::zero();
  const auto finish = [&](int64_t g0) {
    const int count = int(qmin(L, groups - g0));
    VI block_idx = idx;
    if constexpr (kPerBlock) {
      if (g0 % L == 0)
        for (int r = 0; r < R; ++r) window[r] = Tr::scales_window(rg[r], g0, count);
      else
        block_idx = Tr::iadd(idx, Tr::iset1(int(g0 % L)));
    }
    VI corr[T];  // symmetric int4: the zero point 8 times each token's negated input sums
    if constexpr (kInt4 && !kAsym)
      for (int t = 0; t < T; ++t) corr[t] = Tr::template slli<3>(nsum[t]);
    for (int r = 0; r < R; ++r) {
      V svec;
      if constexpr (kPerBlock)
        svec = Tr::permute(window[r], block_idx);
      else
        svec = Tr::set1(rg[r].scale(g0));
      VI zvec = Tr::iset1(8);
      if constexpr (kAsym) {
        if constexpr (kPerBlock)
          zvec = Tr::permute_i(Tr::zeros_window(rg[r].zeros + g0, count), idx);
        else
          zvec = Tr::iset1(rg[r].zeros[g0]);
      }
      for (int t = 0; t < T; ++t) {
        VI a = acc[r][t];
        if constexpr (kInt4) {
          if constexpr (kAsym)
            a = Tr::iadd(a, Tr::mullo(nsum[t], zvec));
          else
            a = Tr::iadd(a, corr[t]);
        } else if constexpr (Tr::kVnni) {
          a = Tr::isub(a, Tr::template slli<7>(wsum[r]));
        }
        total[r][t] = Tr::fma(Tr::cvt(a), svec, total[r][t]);
      }
    }
  };
  const auto full = [](const uint8_t* p) { return Tr::load_block(p); };
  const int tail_bytes = int(row_bytes - nfull * kBlockBytes);
  const auto tail = [tail_bytes](const uint8_t* p) { return Tr::load_block_tail(p, tail_bytes); };

  if constexpr (kPerBlock) {
    const int64_t groups_per_block = B >> shift;
    for (int64_t b = 0; b < nfull; ++b) {
      start();
      block(b, full);
      finish(b * groups_per_block);
    }
    if (nfull < nblocks) {
      start();
      block(nfull, tail);
      finish(nfull * groups_per_block);
    }
  } else {
    const int64_t per_group = groups == 1 ? nblocks : G / B;
    for (int64_t g = 0; g < groups; ++g) {
      start();
      const int64_t b1 = qmin(nfull, (g + 1) * per_group);
      for (int64_t b = g * per_group; b < b1; ++b) block(b, full);
      if (g == groups - 1 && nfull < nblocks) block(nfull, tail);
      finish(g);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r)
      y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]) * in.xscale[c.t0 + t];
}

// Int4Group (symmetric, groups of 32) x int8 per token with 8 lanes (AVX2), rows a multiple of
// 256 inputs: the release's routed experts run with int8 activations (the w4a8 preset, or
// `--quantization w4a8` over the INT4 checkpoint). int_tile scales every 64-input block (two
// groups) on its own: a permute, a conversion and an FMA per block and row, which cost more
// than the block's integer dot products. Here a super-block of 4 blocks (8 groups) keeps each
// block's int32 sums apart, folds them with 3 horizontal adds into one vector of the 8 groups'
// sums (lanes in group order 0 2 4 6 1 3 5 7), and scales that once: one conversion and one FMA
// per 256 inputs, the 8 scales one load and one permute.
inline bool int4_super_layout(const WeightMatrix& w, int lanes) {
  return lanes == 8 && w.format == WeightFormat::Int4Group && w.act_quant == ActivationQuant::Int8PerToken &&
         w.zero_points == nullptr && w.group_size == 32 && w.cols % 256 == 0;
}

template <class Tr, int R, int T>
void int4_int8_super_tile(const QuantCtx& c, float* y) {
  using V = typename Tr::V;
  using VI = typename Tr::VI;
  static_assert(Tr::kLanes == 8);
  constexpr int64_t kBlockInputs = 64, kSuperBytes = 128, kSuperInputs = 256;
  const WeightMatrix& w = *c.w;
  const QuantInput& in = *c.in;
  const int64_t supers = w.cols / kSuperInputs, row_bytes = w.cols / 2;
  alignas(32) static constexpr int32_t kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const VI order = Tr::load_i(kOrder);

  const uint8_t* rows[R];
  RowGroups rg[R];
  locate_rows<R>(w, c.r0, rows, rg);
  const int8_t* xs[T];
  const int32_t* ns[T];
  locate_tokens<T>(in, c.t0, true, xs, ns);
  V total[R][T];
  zero_tile<Tr>(total);
  for (int64_t s = 0; s < supers; ++s) {
    const int64_t byte = s * kSuperBytes;
    if (c.prefetch) {
      prefetch_ahead<R>(rows, byte, row_bytes, c);
      prefetch_ahead<R>(rows, byte + 64, row_bytes, c);
    }
    // The zero point 8 times each group's negated input sum, in the sums' lane order.
    VI corr[T];
    for (int t = 0; t < T; ++t) {
      const int32_t* n = ns[t] + s * 32;
      const VI n01 = Tr::hadd_i(Tr::load_i(n), Tr::load_i(n + 8));
      const VI n23 = Tr::hadd_i(Tr::load_i(n + 16), Tr::load_i(n + 24));
      corr[t] = Tr::template slli<3>(Tr::hadd_i(n01, n23));
    }
    for (int r = 0; r < R; ++r) {
      const V scales = Tr::permute(Tr::scales_window(rg[r], 8 * s, 8), order);
      VI p[T][4];
      for (int k = 0; k < 4; ++k) {
        const VI v = Tr::load_block(rows[r] + byte + 32 * k);
        const VI lo = Tr::lo_nib(v), hi = Tr::hi_nib(v);
        for (int t = 0; t < T; ++t) {
          const int8_t* xb = xs[t] + s * kSuperInputs + k * kBlockInputs;
          p[t][k] = Tr::dot2_u4s8(Tr::izero(), lo, Tr::load_block(xb), hi, Tr::load_block(xb + 32));
        }
      }
      for (int t = 0; t < T; ++t) {
        const VI sums = Tr::hadd_i(Tr::hadd_i(p[t][0], p[t][1]), Tr::hadd_i(p[t][2], p[t][3]));
        total[r][t] = Tr::fma(Tr::cvt(Tr::iadd(sums, corr[t])), scales, total[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r)
      y[(c.t0 + t) * w.rows + c.r0 + r] = Tr::reduce(total[r][t]) * in.xscale[c.t0 + t];
}

template <class Tr, int R, int T, bool kInt4>
void int_tile_modes(const QuantCtx& c, float* y) {
  const WeightMatrix& w = *c.w;
  constexpr int64_t B = (kInt4 ? 8 : 4) * Tr::kLanes;
  const bool per_block = w.cols / w.group_size > 1 && w.group_size % B != 0;
  if constexpr (kInt4) {
    if (w.zero_points != nullptr)
      return per_block ? int_tile<Tr, R, T, true, true, true>(c, y) : int_tile<Tr, R, T, true, false, true>(c, y);
  }
  if (per_block)
    int_tile<Tr, R, T, kInt4, true, false>(c, y);
  else
    int_tile<Tr, R, T, kInt4, false, false>(c, y);
}

// ---------------------------------------------------------------------------------------------
// Row / token tiling, shared by all formats.

template <class Tr, int R, int T>
void run_kind(const QuantCtx& c, float* y) {
  const WeightMatrix& w = *c.w;
  const bool int4 = w.format == WeightFormat::Int4Group;
  if (w.act_quant == ActivationQuant::Int8PerToken) {
    if constexpr (Tr::kLanes == 8 && T == 1) {  // the GEMM's token tiles gain nothing: measured
      if (int4_super_layout(w, 8)) return int4_int8_super_tile<Tr, R, T>(c, y);
    }
    if (int4)
      int_tile_modes<Tr, R, T, true>(c, y);
    else
      int_tile_modes<Tr, R, T, false>(c, y);
  } else if (w.act_quant == ActivationQuant::Bf16) {
    // Only int4_word16_layout's matrices reach a quantized kernel with 16-bit activations.
    if constexpr (Tr::kLanes == 8) {
      if (w.group_size == 32 && w.cols > 32) return int4_i16_words8_tile<Tr, R, T, true>(c, y);
      return int4_i16_words8_tile<Tr, R, T, false>(c, y);
    } else {
      if (w.cols / w.group_size > 1 && w.group_size < 128) return int4_i16_words16_tile<Tr, R, T, true>(c, y);
      return int4_i16_words16_tile<Tr, R, T, false>(c, y);
    }
  } else if (int4) {
    if constexpr (Tr::kLanes == 16) {
      if (int4_word_layout(w, 16)) {
        if (w.cols / w.group_size > 1 && w.group_size < 128)
          return int4_f32_words_tile<Tr, R, T, true>(c, y);
        return int4_f32_words_tile<Tr, R, T, false>(c, y);
      }
    }
    if constexpr (Tr::kLanes == 8) {
      if (int4_word8_layout(w, 8)) {
        if (w.group_size == 32 && w.cols > 32) return int4_f32_words8_tile<Tr, R, T, true>(c, y);
        return int4_f32_words8_tile<Tr, R, T, false>(c, y);
      }
    }
    int4_f32_tile<Tr, R, T>(c, y);
  } else {
    int8_f32_tile<Tr, R, T>(c, y);
  }
}

template <class Tr, int R, int... Ts>
void dispatch_q_tokens(int tokens, const QuantCtx& c, float* y, std::integer_sequence<int, Ts...>) {
  (void)((tokens == Ts + 1 && (run_kind<Tr, R, Ts + 1>(c, y), true)) || ...);
}
template <class Tr, int MaxT, int... Rs>
void dispatch_q(int rows, int tokens, const QuantCtx& c, float* y, std::integer_sequence<int, Rs...>) {
  (void)((rows == Rs + 1 &&
          (dispatch_q_tokens<Tr, Rs + 1>(tokens, c, y, std::make_integer_sequence<int, MaxT>{}), true)) ||
         ...);
}
template <class Tr, int MaxR, int MaxT>
void run_q_tile(int rows, int tokens, const QuantCtx& c, float* y) {
  if (rows == MaxR && tokens == MaxT)
    run_kind<Tr, MaxR, MaxT>(c, y);
  else
    dispatch_q<Tr, MaxT>(rows, tokens, c, y, std::make_integer_sequence<int, MaxR>{});
}

template <class Tr>
void quant_matmul_rows(const WeightMatrix& w, const QuantInput& in, float* y, int64_t r0, int64_t r1) {
  // A streamed one-token product of the int16 kernel over every real shape: in runs (in_runs).
  if constexpr (Tr::kLanes == 8) {
    if (int4_i16_words8_stream_applies(w, in))
      return in_runs(in.stream_runs, r0, r1, [&](const auto& first, int64_t count) {
        int4_i16_words8_runs<Tr>(w, in, y, first, count);
      });
  }
  if constexpr (Tr::kLanes == 16) {
    if (const int window = int4_i16_words16_stream_window(w, in)) {
      return in_runs(in.stream_runs, r0, r1, [&](const auto& first, int64_t count) {
        if (window == 4) return int4_i16_words16_runs<Tr, 4>(w, in, y, first, count);
        return int4_i16_words16_runs<Tr, 8>(w, in, y, first, count);
      });
    }
  }
  if (in.n == 1 && is_streamed(w)) {
    // Decode GEMV over a streamed matrix: one row at a time, one stream (kStreamAheadBytes).
    for (int64_t r = r0; r < r1; ++r) {
      QuantCtx c{&w, &in, r, 0, true};
      c.stream_rows = r1 - r - 1;
      run_q_tile<Tr, 1, 1>(1, 1, c, y);
    }
    return;
  }
  if (in.n == 1) {
    // Decode GEMV from cache: 4 rows share every x load.
    constexpr int R = 4;
    for (int64_t r = r0; r < r1; r += R)
      run_q_tile<Tr, R, 1>(int(qmin(R, r1 - r)), 1,
                           QuantCtx{&w, &in, r, 0, true, int(r1 - r - R <= 0 ? 0 : qmin(r1 - r - R, R))}, y);
    return;
  }
  // Prefill GEMM: a chunk of rows is swept by every token block while it stays in L2, and each
  // unpacked weight vector serves the tile's T tokens.
  constexpr int R = Tr::kGemmRows, T = Tr::kGemmTokens;
  for (int64_t rc = r0; rc < r1; rc += kQuantRowChunk) {
    const int64_t rc_end = qmin(r1, rc + kQuantRowChunk);
    for (int64_t t0 = 0; t0 < in.n; t0 += T) {
      const int tokens = int(qmin(T, in.n - t0));
      for (int64_t r = rc; r < rc_end; r += R)
        run_q_tile<Tr, R, T>(int(qmin(R, rc_end - r)), tokens, QuantCtx{&w, &in, r, t0, t0 == 0}, y);
    }
  }
}

}  // namespace
}  // namespace kimi::kernels
