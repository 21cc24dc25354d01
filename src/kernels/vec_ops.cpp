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

}  // namespace kimi
