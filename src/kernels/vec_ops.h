#pragma once
// Small vector primitives of the attention inner loops (f32), vectorised with run-time dispatch.
#include <cstdint>

#include "kernels/cpu_features.h"

namespace kimi {

float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float* y, float a, const float* x, int64_t n);  // y += a * x
float sum_f32(const float* x, int64_t n);

// The same with an explicit instruction set (tests, benchmarks); kimi::Error if unsupported.
float dot_f32(const float* a, const float* b, int64_t n, Isa isa);
void axpy_f32(float* y, float a, const float* x, int64_t n, Isa isa);
float sum_f32(const float* x, int64_t n, Isa isa);

}  // namespace kimi
