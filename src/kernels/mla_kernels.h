#pragma once
// The inner loops of absorbed MLA attention (model/attention.cpp) over the cached latent rows:
// several heads' scores against a run of rows, and several heads' probability-weighted sums of
// the rows' latents. Each cache row is loaded and widened from its dtype (f32, bf16, fp8 e4m3)
// once per pass and used by every head of the group from registers, so a narrow cache pays its
// conversion once per row, not once per row and head, and reads half (bf16) or a quarter (fp8)
// of float32's bytes.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"

namespace kimi {

enum class KvRowElem : uint8_t { F32, BF16, E4m3 };

// `count` cache rows at base + j * stride: each `lora` latent values then `rope` rope-key
// values in `elem`; e4m3 rows also hold two float scales (latent, rope) at scale_offset, and a
// value reads as scale * e4m3 (model/kv_cache.h says how they are chosen).
struct MlaRows {
  KvRowElem elem = KvRowElem::F32;
  const std::byte* base = nullptr;
  int64_t stride = 0;  // bytes
  int64_t count = 0;
  int64_t lora = 0, rope = 0;
  int64_t scale_offset = 0;
};

// The most heads one call serves (their accumulators stay in registers).
inline constexpr int kMlaMaxHeads = 8;

// For heads g < nh (1 <= nh <= kMlaMaxHeads) and rows j < rows.count:
//   scores[g * score_stride + j] = scale * (q_lat[g * q_lat_stride ..] . latent_j
//                                           + q_rope[g * q_rope_stride ..] . rope_j)
void mla_scores(const MlaRows& rows, int nh, const float* q_lat, int64_t q_lat_stride, const float* q_rope,
                int64_t q_rope_stride, float scale, float* scores, int64_t score_stride);
// For heads g < nh: out[g * out_stride + i] += sum_j p[g * p_stride + j] * latent_j[i], i < lora.
void mla_values(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out, int64_t out_stride);

// The same with an explicit instruction set (tests, benchmarks); kimi::Error if unsupported.
void mla_scores(const MlaRows& rows, int nh, const float* q_lat, int64_t q_lat_stride, const float* q_rope,
                int64_t q_rope_stride, float scale, float* scores, int64_t score_stride, Isa isa);
void mla_values(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out, int64_t out_stride,
                Isa isa);

namespace kernels {

// mla_scores over a bf16 cache (KvRowElem::BF16) from queries already rounded to bf16: head g's
// query is its lora then its rope values at q + g * q_stride. One VDPBF16PS per 32 products
// (exact in f32, summed in f32): twice the f32 kernel's products per instruction, and the rows
// are not widened. Null where the CPU (or a KIMI_MAX_CPU_ISA cap) has no AVX512_BF16.
using MlaScoresBf16 = void (*)(const MlaRows& rows, int nh, const uint16_t* q, int64_t q_stride, float scale,
                               float* scores, int64_t score_stride);
MlaScoresBf16 mla_scores_bf16();
// mla_values over a bf16 cache with the probabilities rounded to bf16 (as FlashAttention's P
// before its PV product): rows taken in pairs, one VDPBF16PS adds two rows' products into 16
// columns. Null where mla_scores_bf16 is.
using MlaValuesBf16 = void (*)(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out,
                               int64_t out_stride);
MlaValuesBf16 mla_values_bf16();

}  // namespace kernels

}  // namespace kimi
