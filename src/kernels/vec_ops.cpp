#include "kernels/vec_ops.h"

#include "kernels/kernels_impl.h"

namespace kimi {

float dot_f32(const float* a, const float* b, int64_t n) {
  return n > 0 ? kernels::best_kernels().dot(a, b, n) : 0.0f;
}

void axpy_f32(float* y, float a, const float* x, int64_t n) {
  if (n > 0) kernels::best_kernels().axpy(y, a, x, n);
}

float sum_f32(const float* x, int64_t n) {
  return n > 0 ? kernels::best_kernels().sum(x, n) : 0.0f;
}

float dot_f32(const float* a, const float* b, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  return n > 0 ? k.dot(a, b, n) : 0.0f;
}

void axpy_f32(float* y, float a, const float* x, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.axpy(y, a, x, n);
}

float sum_f32(const float* x, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  return n > 0 ? k.sum(x, n) : 0.0f;
}

float dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  return n > 0 ? kernels::best_kernels().dot_bf16(a, b, n) : 0.0f;
}
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n) {
  if (n > 0) kernels::best_kernels().axpy_bf16(y, a, x, n);
}
float dot_e4m3(const float* a, const uint8_t* b, int64_t n) {
  return n > 0 ? kernels::best_kernels().dot_e4m3(a, b, n) : 0.0f;
}
void axpy_e4m3(float* y, float a, const uint8_t* x, int64_t n) {
  if (n > 0) kernels::best_kernels().axpy_e4m3(y, a, x, n);
}
void e4m3_to_f32(const uint8_t* x, float scale, float* y, int64_t n) {
  if (n > 0) kernels::best_kernels().e4m3_to_f32(x, scale, y, n);
}

void softmax_f32(float* x, int64_t n) {
  if (n > 0) kernels::best_kernels().softmax(x, n);
}
float exp_shifted_f32(float* x, int64_t n, float shift) {
  return n > 0 ? kernels::best_kernels().exp_shifted(x, n, shift) : 0.0f;
}
void silu_mul_f32(float* gate, const float* up, int64_t n) {
  if (n > 0) kernels::best_kernels().silu_mul(gate, up, n);
}

float dot_bf16(const float* a, const uint16_t* b, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  return n > 0 ? k.dot_bf16(a, b, n) : 0.0f;
}
void axpy_bf16(float* y, float a, const uint16_t* x, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.axpy_bf16(y, a, x, n);
}
float dot_e4m3(const float* a, const uint8_t* b, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  return n > 0 ? k.dot_e4m3(a, b, n) : 0.0f;
}
void axpy_e4m3(float* y, float a, const uint8_t* x, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.axpy_e4m3(y, a, x, n);
}
void e4m3_to_f32(const uint8_t* x, float scale, float* y, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.e4m3_to_f32(x, scale, y, n);
}

void softmax_f32(float* x, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.softmax(x, n);
}
float exp_shifted_f32(float* x, int64_t n, float shift, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  return n > 0 ? k.exp_shifted(x, n, shift) : 0.0f;
}
void silu_mul_f32(float* gate, const float* up, int64_t n, Isa isa) {
  const kernels::KernelTable& k = kernels::kernels_for(isa);
  if (n > 0) k.silu_mul(gate, up, n);
}

}  // namespace kimi
