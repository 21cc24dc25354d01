#pragma once
// Small vector primitives of the attention inner loops and activations, vectorised with run-time
// dispatch: f32, f32 against the KV cache's narrow rows (bf16, fp8 e4m3), which they convert as
// they load, and the exponentials of softmax and SwiGLU.
#include <cstdint>

#include "kernels/cpu_features.h"

namespace kimi {

float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float* y, float a, const float* x, int64_t n);  // y += a * x
float sum_f32(const float* x, int64_t n);

// a . b and y += a * x with b, x in bf16 (raw bits, top half of an f32).
float dot_bf16(const float* a, const uint16_t* b, int64_t n);
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n);
// The same with b, x in fp8 e4m3 (common/dtype.h). The bytes 0x7f / 0xff (NaN in e4m3) are not
// expected: the KV cache never stores them (it marks a row with NaN through its scale), and
// these kernels read them as +-480.
float dot_e4m3(const float* a, const uint8_t* b, int64_t n);
void axpy_e4m3(float* y, float a, const uint8_t* x, int64_t n);
void e4m3_to_f32(const uint8_t* x, float scale, float* y, int64_t n);  // y = scale * x

// In place: x = softmax(x) over n scores, max-subtracted; the sum of the exponentials is kept in
// double across blocks (long contexts). The SIMD exponential is within 1e-6 relative of e^x (the
// tests' bound), 0 where e^x is below the smallest normal float (kernels_generic.h's ExpConstants).
void softmax_f32(float* x, int64_t n);
// In place: x[i] = e^(x[i] - shift), the same exponential; returns their sum (in f32: for blocks
// of a few hundred scores, as an online softmax takes them).
float exp_shifted_f32(float* x, int64_t n, float shift);
// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i]: the SwiGLU activation.
void silu_mul_f32(float* gate, const float* up, int64_t n);

// The same with an explicit instruction set (tests, benchmarks); kimi::Error if unsupported.
float dot_f32(const float* a, const float* b, int64_t n, Isa isa);
void axpy_f32(float* y, float a, const float* x, int64_t n, Isa isa);
float sum_f32(const float* x, int64_t n, Isa isa);
float dot_bf16(const float* a, const uint16_t* b, int64_t n, Isa isa);
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n, Isa isa);
float dot_e4m3(const float* a, const uint8_t* b, int64_t n, Isa isa);
void axpy_e4m3(float* y, float a, const uint8_t* x, int64_t n, Isa isa);
void e4m3_to_f32(const uint8_t* x, float scale, float* y, int64_t n, Isa isa);
void softmax_f32(float* x, int64_t n, Isa isa);
float exp_shifted_f32(float* x, int64_t n, float shift, Isa isa);
void silu_mul_f32(float* gate, const float* up, int64_t n, Isa isa);

}  // namespace kimi
