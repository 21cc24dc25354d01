#include "kernels/mla_kernels.h"

#include <string>

#include "common/error.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels_impl.h"

namespace kimi {

namespace {

void check_heads(int nh) {
  if (nh < 1 || nh > kMlaMaxHeads)
    throw Error("MLA attention kernel: " + std::to_string(nh) + " heads per call, expected 1.." +
                std::to_string(kMlaMaxHeads));
}

}  // namespace

void mla_scores(const MlaRows& rows, int nh, const float* q_lat, int64_t q_lat_stride, const float* q_rope,
                int64_t q_rope_stride, float scale, float* scores, int64_t score_stride, Isa isa) {
  check_heads(nh);
  if (rows.count > 0)
    kernels::kernels_for(isa).mla_scores(rows, nh, q_lat, q_lat_stride, q_rope, q_rope_stride, scale, scores,
                                         score_stride);
}

void mla_values(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out, int64_t out_stride,
                Isa isa) {
  check_heads(nh);
  if (rows.count > 0) kernels::kernels_for(isa).mla_values(rows, nh, p, p_stride, out, out_stride);
}

void mla_scores(const MlaRows& rows, int nh, const float* q_lat, int64_t q_lat_stride, const float* q_rope,
                int64_t q_rope_stride, float scale, float* scores, int64_t score_stride) {
  check_heads(nh);
  if (rows.count > 0)
    kernels::best_kernels().mla_scores(rows, nh, q_lat, q_lat_stride, q_rope, q_rope_stride, scale, scores,
                                       score_stride);
}

void mla_values(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out, int64_t out_stride) {
  check_heads(nh);
  if (rows.count > 0) kernels::best_kernels().mla_values(rows, nh, p, p_stride, out, out_stride);
}

namespace kernels {

MlaScoresBf16 mla_scores_bf16_avx512bf16();  // mla_bf16_avx512bf16.cpp
MlaValuesBf16 mla_values_bf16_avx512bf16();

MlaScoresBf16 mla_scores_bf16() { return has_avx512_bf16() ? mla_scores_bf16_avx512bf16() : nullptr; }
MlaValuesBf16 mla_values_bf16() { return has_avx512_bf16() ? mla_values_bf16_avx512bf16() : nullptr; }

}  // namespace kernels

}  // namespace kimi
