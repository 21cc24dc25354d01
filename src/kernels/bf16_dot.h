#pragma once
// Products of BF16 or INT4 weights with activations rounded to BF16 (ActivationQuant::Bf16, the
// `--dtype bfloat16` of vLLM and what llama.cpp's CPU BF16 matmul does): each product of two
// bf16 values is exact in f32 and the sums are f32, so only the activations' rounding differs
// from the f32 kernels. On CPUs with AVX512_BF16 one VDPBF16PS multiplies 32 pairs, twice the
// f32 FMA's work per instruction and no widening of the weights; elsewhere matmul() rounds the
// activations and runs the f32 kernels on them (the same values, summed in another order). Where
// VDPBF16PS is slow (bf16_dot_rate.h: Intel) matmul() takes these kernels for few tokens only.
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/quant_kernels.h"

namespace kimi::kernels {

// The AVX512_BF16 kernel: y[t * w.rows + r] for t < n, r in [r0, r1); w Dense BF16, xb the
// activations in bf16 [n, w.cols]. Null where the CPU (or the build) has no AVX512_BF16.
using Bf16DotRows = void (*)(const WeightMatrix& w, const uint16_t* xb, int64_t n, float* y, int64_t r0, int64_t r1);
Bf16DotRows bf16_dot_rows();

// INT4 weights (WeightFormat::Int4Group) with bf16 activations: W4A16 as vLLM runs it, the
// activations in bf16. Where the CPU has AVX512_BF16 and the layout fits (int4_bf16_layout), one
// VPSRLW + VPERMW turn 32 nibbles into bf16 weights for one VDPBF16PS (three instructions per 32
// weights, against six for the f32-activation kernels, which are compute-bound on the real
// shapes); elsewhere matmul() rounds the activations and runs the f32-activation INT4 kernels.
// Symmetric weights (zero 8), groups that tile blocks of 128 inputs (32, 64, multiples of 128)
// or one group per row.
inline bool int4_bf16_layout(const WeightMatrix& w) {
  return w.format == WeightFormat::Int4Group && w.zero_points == nullptr && groups_tile_blocks_of_128(w);
}
// Elements per token of the packed activations: cols rounded up to whole blocks of 128.
inline int64_t int4_bf16_packed_cols(int64_t cols) { return (cols + 127) / 128 * 128; }
// x [n, cols] in bf16, in the kernel's pair order: per block b of 128 inputs and j < 4, 32 values
// whose pair l is (x[128b + 8l + j], x[128b + 8l + 4 + j]); zero past cols. dst [n, packed cols].
void pack_int4_bf16_activations(const float* x, int64_t n, int64_t cols, uint16_t* dst);
// y[t * w.rows + r] for t < n, r in [r0, r1); xp packed as above. Null without AVX512_BF16.
using Int4Bf16DotRows = void (*)(const WeightMatrix& w, const uint16_t* xp, int64_t n, float* y, int64_t r0,
                                 int64_t r1);
Int4Bf16DotRows int4_bf16_dot_rows();

// dst[i] = x[i] rounded to bf16, to nearest even (NaN stays NaN); vectorised where the CPU allows.
void round_to_bf16(const float* x, int64_t count, uint16_t* dst);

}  // namespace kimi::kernels
