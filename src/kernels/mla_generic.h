#pragma once
// The MLA attention loops of kernels/mla_kernels.h written against the vector traits of
// kernels_generic.h (included from there, instantiated by each ISA's source file). Internal
// linkage throughout, for the reason kernels_generic.h gives.
//
// Scores: R rows at once against NH heads, R * NH accumulators (up to the traits'
// kMlaAccumulators: 8 fill an AVX2 core's two FMA pipes and leave room for the loaded vectors in
// its 16 registers; AVX-512's 32 hold 16, which halves the query loads per FMA) while every row
// vector is loaded once and every query vector once per R rows.
// Values: a tile of kValueTile rows (small enough to stay in L1 across the passes) is added into
// C output vectors of each of NH heads held in registers (NH * C <= kMlaAccumulators); every row
// vector is loaded once per tile and each output vector read and written once per tile, not once
// per row.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "kernels/mla_kernels.h"

namespace kimi::kernels {
namespace {

template <class Tr>
struct MlaF32 {
  static constexpr bool kScaled = false;
  static typename Tr::V load(const std::byte* row, int64_t i) {
    return Tr::load_x(reinterpret_cast<const float*>(row) + i);
  }
  static typename Tr::V load_tail(const std::byte* row, int64_t i, int len) {
    return Tr::load_x_tail(reinterpret_cast<const float*>(row) + i, len);
  }
  static float scale(const MlaRows&, const std::byte*, int) { return 1.0f; }
};

template <class Tr>
struct MlaBf16 {
  static constexpr bool kScaled = false;
  static typename Tr::V load(const std::byte* row, int64_t i) { return Tr::template load_w<DType::BF16>(row, i); }
  static typename Tr::V load_tail(const std::byte* row, int64_t i, int len) {
    return Tr::template load_w_tail<DType::BF16>(row, i, len);
  }
  static float scale(const MlaRows&, const std::byte*, int) { return 1.0f; }
};

template <class Tr>
struct MlaE4m3 {
  static constexpr bool kScaled = true;
  static typename Tr::V load(const std::byte* row, int64_t i) {
    return Tr::load_e4m3(reinterpret_cast<const uint8_t*>(row) + i);
  }
  static typename Tr::V load_tail(const std::byte* row, int64_t i, int len) {
    return Tr::load_e4m3_tail(reinterpret_cast<const uint8_t*>(row) + i, len);
  }
  // The row's scale of `part` (0 latent, 1 rope), times 256 to undo load_e4m3's 2^-8 exactly.
  static float scale(const MlaRows& m, const std::byte* row, int part) {
    float s;
    std::memcpy(&s, row + m.scale_offset + part * int64_t(sizeof(float)), sizeof s);
    return 256.0f * s;
  }
};

// Rows (scores) or output vectors (values) per head in one register tile: NH times it is at most
// kMlaAccumulators, a power of two.
template <class Tr, int NH>
constexpr int mla_tile_width() {
  constexpr int a = Tr::kMlaAccumulators;
  return NH >= 5 ? a / 8 : NH >= 3 ? a / 4 : a / 2;
}

// out[k] = sum of acc[k]'s lanes, k < N.
template <class Tr, int N>
inline void mla_reduce(const typename Tr::V* acc, float* out) {
  int k = 0;
  for (; k + 4 <= N; k += 4) Tr::reduce4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3], out + k);
  for (; k < N; ++k) out[k] = Tr::reduce(acc[k]);
}

// acc[r * NH + g] += q_g . row_r[off, off + n)
template <class Tr, class El, int NH, int R>
inline void mla_dot_part(const std::byte* const* row, int64_t off, const float* q, int64_t qs, int64_t n,
                         typename Tr::V* acc) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    V v[R];
    for (int r = 0; r < R; ++r) v[r] = El::load(row[r], off + i);
    for (int g = 0; g < NH; ++g) {
      const V qv = Tr::in_register(Tr::load_x(q + g * qs + i));  // one load for its R FMAs
      for (int r = 0; r < R; ++r) acc[r * NH + g] = Tr::fma(qv, v[r], acc[r * NH + g]);
    }
  }
  if (i < n) {
    const int len = int(n - i);
    V v[R];
    for (int r = 0; r < R; ++r) v[r] = El::load_tail(row[r], off + i, len);
    for (int g = 0; g < NH; ++g) {
      const V qv = Tr::load_x_tail(q + g * qs + i, len);
      for (int r = 0; r < R; ++r) acc[r * NH + g] = Tr::fma(qv, v[r], acc[r * NH + g]);
    }
  }
}

template <class Tr, class El, int NH, int R>
void mla_scores_rows(const MlaRows& m, int64_t j, const float* ql, int64_t qls, const float* qr, int64_t qrs,
                     float scale, float* scores, int64_t ss) {
  using V = typename Tr::V;
  const std::byte* row[R];
  for (int r = 0; r < R; ++r) row[r] = m.base + (j + r) * m.stride;
  V acc[R * NH];
  for (auto& a : acc) a = Tr::zero();
  float lat[R * NH];
  mla_dot_part<Tr, El, NH, R>(row, 0, ql, qls, m.lora, acc);
  if constexpr (El::kScaled) {
    // Latent and rope key have a scale each: two sums per head, combined once per row.
    mla_reduce<Tr, R * NH>(acc, lat);
    for (auto& a : acc) a = Tr::zero();
    mla_dot_part<Tr, El, NH, R>(row, m.lora, qr, qrs, m.rope, acc);
    float rp[R * NH];
    mla_reduce<Tr, R * NH>(acc, rp);
    for (int r = 0; r < R; ++r) {
      const float sl = El::scale(m, row[r], 0) * scale, sr = El::scale(m, row[r], 1) * scale;
      for (int g = 0; g < NH; ++g) scores[g * ss + j + r] = sl * lat[r * NH + g] + sr * rp[r * NH + g];
    }
  } else {
    mla_dot_part<Tr, El, NH, R>(row, m.lora, qr, qrs, m.rope, acc);
    mla_reduce<Tr, R * NH>(acc, lat);
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < NH; ++g) scores[g * ss + j + r] = scale * lat[r * NH + g];
  }
}

template <class Tr, class El, int NH>
void mla_scores_nh(const MlaRows& m, const float* ql, int64_t qls, const float* qr, int64_t qrs, float scale,
                   float* scores, int64_t ss) {
  constexpr int R = mla_tile_width<Tr, NH>();
  int64_t j = 0;
  for (; j + R <= m.count; j += R) mla_scores_rows<Tr, El, NH, R>(m, j, ql, qls, qr, qrs, scale, scores, ss);
  for (; j < m.count; ++j) mla_scores_rows<Tr, El, NH, 1>(m, j, ql, qls, qr, qrs, scale, scores, ss);
}

inline constexpr int64_t kValueTile = 16;

// out_g[i, i + C * kLanes) += sum over the tile's rows of pw[g][j] * row_j[...]; Tail: one
// vector of len < kLanes lanes (C == 1).
template <class Tr, class El, int NH, int C, bool Tail>
inline void mla_values_pass(const MlaRows& m, int64_t j0, int64_t jn, const float* pw, int64_t i, int len,
                            float* out, int64_t os) {
  using V = typename Tr::V;
  constexpr int64_t L = Tr::kLanes;
  V acc[NH * C];
  for (int g = 0; g < NH; ++g)
    for (int c = 0; c < C; ++c)
      acc[g * C + c] = Tail ? Tr::load_x_tail(out + g * os + i, len) : Tr::load_x(out + g * os + i + c * L);
  for (int64_t j = 0; j < jn; ++j) {
    const std::byte* row = m.base + (j0 + j) * m.stride;
    V v[C];
    for (int c = 0; c < C; ++c) v[c] = Tail ? El::load_tail(row, i, len) : El::load(row, i + c * L);
    for (int g = 0; g < NH; ++g) {
      const V p = Tr::in_register(Tr::set1(pw[g * kValueTile + j]));  // one broadcast for its C FMAs
      for (int c = 0; c < C; ++c) acc[g * C + c] = Tr::fma(p, v[c], acc[g * C + c]);
    }
  }
  for (int g = 0; g < NH; ++g)
    for (int c = 0; c < C; ++c) {
      if constexpr (Tail)
        Tr::store_tail(out + g * os + i, acc[g * C + c], len);
      else
        Tr::store(out + g * os + i + c * L, acc[g * C + c]);
    }
}

template <class Tr, class El, int NH>
void mla_values_nh(const MlaRows& m, const float* p, int64_t ps, float* out, int64_t os) {
  constexpr int C = mla_tile_width<Tr, NH>();
  constexpr int64_t L = Tr::kLanes;
  float pw[NH * kValueTile];
  for (int64_t j0 = 0; j0 < m.count; j0 += kValueTile) {
    const int64_t jn = m.count - j0 < kValueTile ? m.count - j0 : kValueTile;
    for (int64_t j = 0; j < jn; ++j) {
      const float s = El::scale(m, m.base + (j0 + j) * m.stride, 0);
      for (int g = 0; g < NH; ++g) pw[g * kValueTile + j] = p[g * ps + j0 + j] * s;
    }
    int64_t i = 0;
    for (; i + C * L <= m.lora; i += C * L) mla_values_pass<Tr, El, NH, C, false>(m, j0, jn, pw, i, 0, out, os);
    for (; i + L <= m.lora; i += L) mla_values_pass<Tr, El, NH, 1, false>(m, j0, jn, pw, i, 0, out, os);
    if (i < m.lora) mla_values_pass<Tr, El, NH, 1, true>(m, j0, jn, pw, i, int(m.lora - i), out, os);
  }
}

// Heads one tile takes where more would leave it one row (or output vector) per head: past this
// many, the heads go in two tiles of up to this many, each loading the rows again (from L1), so
// that a query vector serves two rows. AVX2 (8 accumulators) then loads 6 vectors per 8 FMAs
// where one tile of 8 heads loaded 9; AVX-512's tiles already take 8 heads x 2.
template <class Tr>
constexpr int mla_split_heads() {
  return Tr::kMlaAccumulators / 2;
}

// Run-time nh and element type to the instantiations above.
template <class Tr, class El>
void mla_scores_el(const MlaRows& m, int nh, const float* ql, int64_t qls, const float* qr, int64_t qrs,
                   float scale, float* scores, int64_t ss) {
  constexpr int split = mla_split_heads<Tr>();
  if (nh > split) {
    mla_scores_el<Tr, El>(m, split, ql, qls, qr, qrs, scale, scores, ss);
    return mla_scores_el<Tr, El>(m, nh - split, ql + split * qls, qls, qr + split * qrs, qrs, scale,
                                 scores + split * ss, ss);
  }
  switch (nh) {
    case 1: return mla_scores_nh<Tr, El, 1>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 2: return mla_scores_nh<Tr, El, 2>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 3: return mla_scores_nh<Tr, El, 3>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 4: return mla_scores_nh<Tr, El, 4>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 5: return mla_scores_nh<Tr, El, 5>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 6: return mla_scores_nh<Tr, El, 6>(m, ql, qls, qr, qrs, scale, scores, ss);
    case 7: return mla_scores_nh<Tr, El, 7>(m, ql, qls, qr, qrs, scale, scores, ss);
    default: return mla_scores_nh<Tr, El, 8>(m, ql, qls, qr, qrs, scale, scores, ss);
  }
}

template <class Tr, class El>
void mla_values_el(const MlaRows& m, int nh, const float* p, int64_t ps, float* out, int64_t os) {
  constexpr int split = mla_split_heads<Tr>();
  if (nh > split) {
    mla_values_el<Tr, El>(m, split, p, ps, out, os);
    return mla_values_el<Tr, El>(m, nh - split, p + split * ps, ps, out + split * os, os);
  }
  switch (nh) {
    case 1: return mla_values_nh<Tr, El, 1>(m, p, ps, out, os);
    case 2: return mla_values_nh<Tr, El, 2>(m, p, ps, out, os);
    case 3: return mla_values_nh<Tr, El, 3>(m, p, ps, out, os);
    case 4: return mla_values_nh<Tr, El, 4>(m, p, ps, out, os);
    case 5: return mla_values_nh<Tr, El, 5>(m, p, ps, out, os);
    case 6: return mla_values_nh<Tr, El, 6>(m, p, ps, out, os);
    case 7: return mla_values_nh<Tr, El, 7>(m, p, ps, out, os);
    default: return mla_values_nh<Tr, El, 8>(m, p, ps, out, os);
  }
}

template <class Tr>
void mla_scores(const MlaRows& m, int nh, const float* ql, int64_t qls, const float* qr, int64_t qrs, float scale,
                float* scores, int64_t ss) {
  switch (m.elem) {
    case KvRowElem::F32: return mla_scores_el<Tr, MlaF32<Tr>>(m, nh, ql, qls, qr, qrs, scale, scores, ss);
    case KvRowElem::BF16: return mla_scores_el<Tr, MlaBf16<Tr>>(m, nh, ql, qls, qr, qrs, scale, scores, ss);
    case KvRowElem::E4m3: return mla_scores_el<Tr, MlaE4m3<Tr>>(m, nh, ql, qls, qr, qrs, scale, scores, ss);
  }
}

template <class Tr>
void mla_values(const MlaRows& m, int nh, const float* p, int64_t ps, float* out, int64_t os) {
  switch (m.elem) {
    case KvRowElem::F32: return mla_values_el<Tr, MlaF32<Tr>>(m, nh, p, ps, out, os);
    case KvRowElem::BF16: return mla_values_el<Tr, MlaBf16<Tr>>(m, nh, p, ps, out, os);
    case KvRowElem::E4m3: return mla_values_el<Tr, MlaE4m3<Tr>>(m, nh, p, ps, out, os);
  }
}

}  // namespace
}  // namespace kimi::kernels
