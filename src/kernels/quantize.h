#pragma once
// Weight quantisers for the integer WeightMatrix formats (kernels/matmul.h), the dynamic
// per-token activation quantiser the W4A8 / W8A8 kernels use, and dequantisation back to f32.
// Rounding is round-half-to-even everywhere (torch.round's rule), so results match what
// compressed-tensors writes for the same input.
#include <cstdint>

#include "kernels/matmul.h"

namespace kimi {

// Symmetric int4 per group of `group_size` inputs (cols % group_size == 0, cols % 8 == 0),
// compressed-tensors' minmax rule (quantization/utils/helpers.py, calculate_qparams):
//   scale = max(|min(w, 0)|, |max(w, 0)|) / (bit_range / 2), bit_range = 7 - (-8) = 15, i.e.
//   absmax / 7.5, clamped below at float32 eps (so an all-zero group gets a tiny scale, not 0);
//   q = clamp(round(w / scale), -8, 7) (lifecycle/forward.py, _quantize).
// Scales are rounded to BF16 first and q is computed with the rounded scale, so dequantising
// gives exactly what a loader of the stored file computes. packed: rows * cols / 2 bytes in the
// Int4Group layout (nibble q + 8); scales_bf16: [rows, cols / group_size].
void quantize_int4_symmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                             uint8_t* packed, uint16_t* scales_bf16);

// Asymmetric int4, the same helper's asymmetric branch: min/max are widened to include 0,
// scale = (max - min) / 15 (eps-clamped, BF16-rounded), signed zero point
// zp = clamp(round(-8 - min / scale), -8, 7), q = clamp(round(w / scale) + zp, -8, 7). Stored
// unsigned: nibble q + 8, zero_points[r, g] = zp + 8 in [0, 15], so value = (nibble - zero) * scale.
void quantize_int4_asymmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                              uint8_t* packed, uint16_t* scales_bf16, uint8_t* zero_points);

// Symmetric int8, scale = absmax / 127 (f32; 0 for an all-zero group, which dequantises to 0),
// q = clamp(round(w / scale), -127, 127); scales [rows, cols / group_size]; group_size = cols is
// per output channel.
void quantize_int8_symmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                             int8_t* q, float* scales);

// Row `row` of any WeightMatrix (Dense or integer) as f32 (for kv_b, tests and debugging).
// Throws kimi::Error on an invalid matrix or row.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);

// The activation side of ActivationQuant::Int8PerToken, one token (row of x) of n values:
// scale = max|x| / 127, q = clamp(round_half_even(x * (1 / scale)), -127, 127) (as vLLM's
// dynamic per-token quantisation multiplies by the reciprocal). An all-zero row gets scale 0 and
// q = 0; a row with a NaN or infinity gets scale NaN (the products then come out NaN) and q = 0.
// Returns the scale.
float quantize_activation_row(const float* x, int64_t n, int8_t* q);

}  // namespace kimi
