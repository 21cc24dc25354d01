#pragma once
// Products of BF16 weights with activations rounded to BF16 (ActivationQuant::Bf16, the
// `--dtype bfloat16` of vLLM and what llama.cpp's CPU BF16 matmul does): each product of two
// bf16 values is exact in f32 and the sums are f32, so only the activations' rounding differs
// from the f32 kernels. On CPUs with AVX512_BF16 one VDPBF16PS multiplies 32 pairs, twice the
// f32 FMA's work per instruction and no widening of the weights; elsewhere matmul() rounds the
// activations and runs the f32 kernels on them (the same values, summed in another order).
#include <cstdint>

#include "kernels/matmul.h"

namespace kimi::kernels {

// The AVX512_BF16 kernel: y[t * w.rows + r] for t < n, r in [r0, r1); w Dense BF16, xb the
// activations in bf16 [n, w.cols]. Null where the CPU (or the build) has no AVX512_BF16.
using Bf16DotRows = void (*)(const WeightMatrix& w, const uint16_t* xb, int64_t n, float* y, int64_t r0, int64_t r1);
Bf16DotRows bf16_dot_rows();

// dst[i] = x[i] rounded to bf16, to nearest even (NaN stays NaN); vectorised where the CPU allows.
void round_to_bf16(const float* x, int64_t count, uint16_t* dst);

}  // namespace kimi::kernels
