#pragma once
// Element-wise pieces of the decoder (all f32): normalisation, activation, softmax.
#include <cstdint>

namespace kimi {

// Each of the n rows of x (dim floats, `stride` apart) becomes x * rsqrt(mean(x^2) + eps) * weight.
void rms_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* weight, float eps);
// As rms_norm, reading from src and writing to dst (both [n, dim] contiguous).
void rms_norm_to(const float* src, float* dst, int64_t n, int64_t dim, const float* weight, float eps);
// gate[i] = silu(gate[i]) * up[i]: the SwiGLU activation (kernels/vec_ops.h's silu_mul_f32).
void silu_mul(float* gate, const float* up, int64_t n);
// In-place softmax of n scores (kernels/vec_ops.h's softmax_f32: max-subtracted, summed in double
// across blocks for long contexts).
void softmax(float* x, int64_t n);

}  // namespace kimi
