#include "model/ops.h"

#include <algorithm>
#include <cmath>

namespace kimi {

void rms_norm_to(const float* src, float* dst, int64_t n, int64_t dim, const float* weight, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float* x = src + r * dim;
    float* y = dst + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
    const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * inv * weight[i];
  }
}

void rms_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* weight, float eps) {
  for (int64_t r = 0; r < n; ++r) rms_norm_to(x + r * stride, x + r * stride, 1, dim, weight, eps);
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace kimi
