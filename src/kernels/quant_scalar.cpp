// The portable integer-weight kernels, written straight from the format definitions
// (kernels/matmul.h): the reference every SIMD variant is tested against, and the fallback for
// CPUs without AVX2 and for group sizes the SIMD blocks cannot follow.
//   f32 activations:  y = sum_g sum_{i in g} ((q_i - zero_g) * scale_g) * x_i
//   int8 activations: y = x_scale * sum_g scale_g * sum_{i in g} (q_i - zero_g) * xq_i
// with exact int32 inner sums and the outer sums in double (a reference need not be fast).
#include "kernels/quant_kernels.h"

namespace kimi::kernels {
namespace {

int weight_at(const WeightMatrix& w, const uint8_t* row, int64_t i) {
  if (w.format == WeightFormat::Int4Group) return (row[i / 2] >> (4 * (i % 2))) & 0xF;
  return int(reinterpret_cast<const int8_t*>(row)[i]);
}

void matmul_rows(const WeightMatrix& w, const QuantInput& in, float* y, int64_t r0, int64_t r1) {
  const bool int4 = w.format == WeightFormat::Int4Group;
  const int64_t cols = w.cols, groups = cols / w.group_size;
  const size_t row_bytes = int4 ? size_t(cols) / 2 : size_t(cols);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + size_t(r) * row_bytes;
    for (int64_t t = 0; t < in.n; ++t) {
      double total = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        const float s = scale_at(w, r, g);
        const int zero = !int4 ? 0 : w.zero_points ? w.zero_points[r * groups + g] : 8;
        const int64_t k0 = g * w.group_size, k1 = k0 + w.group_size;
        if (w.act_quant == ActivationQuant::Int8PerToken) {
          const int8_t* xq = in.xq + t * in.ldxq;
          int32_t acc = 0;
          for (int64_t i = k0; i < k1; ++i) acc += (weight_at(w, row, i) - zero) * int32_t(xq[i]);
          total += double(s) * acc;
        } else {
          const float* x = in.x + t * cols;
          for (int64_t i = k0; i < k1; ++i) total += double(float(weight_at(w, row, i) - zero) * s) * x[i];
        }
      }
      if (w.act_quant == ActivationQuant::Int8PerToken) total *= in.xscale[t];
      y[t * w.rows + r] = float(total);
    }
  }
}

}  // namespace

const QuantKernelTable kQuantScalar{QuantIsa::Scalar, 0, false, &matmul_rows};

}  // namespace kimi::kernels
