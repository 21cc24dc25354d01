#include "kernels/bf16_dot.h"

#include "common/dtype.h"
#include "kernels/cpu_features.h"

namespace kimi::kernels {

// bf16_dot_avx512bf16.cpp
void round_to_bf16_avx512bf16(const float* x, int64_t count, uint16_t* dst);
Bf16DotRows bf16_dot_rows_avx512bf16();
// int4_bf16_dot_avx512bf16.cpp
Int4Bf16DotRows int4_bf16_dot_rows_avx512bf16();
void pack_int4_bf16_activations_avx512bf16(const float* x, int64_t n, int64_t cols, uint16_t* dst);

Bf16DotRows bf16_dot_rows() { return has_avx512_bf16() ? bf16_dot_rows_avx512bf16() : nullptr; }

Int4Bf16DotRows int4_bf16_dot_rows() { return has_avx512_bf16() ? int4_bf16_dot_rows_avx512bf16() : nullptr; }

void pack_int4_bf16_activations(const float* x, int64_t n, int64_t cols, uint16_t* dst) {
  if (has_avx512_bf16()) return pack_int4_bf16_activations_avx512bf16(x, n, cols, dst);
  const int64_t ld = int4_bf16_packed_cols(cols);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    uint16_t* d = dst + t * ld;
    for (int64_t b = 0; b < ld / 128; ++b)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t l = 0; l < 16; ++l)
          for (int64_t half = 0; half < 2; ++half) {
            const int64_t i = 128 * b + 8 * l + 4 * half + j;
            d[128 * b + 32 * j + 2 * l + half] = i < cols ? f32_to_bf16(xt[i]) : uint16_t(0);
          }
  }
}

void round_to_bf16(const float* x, int64_t count, uint16_t* dst) {
  if (has_avx512_bf16()) return round_to_bf16_avx512bf16(x, count, dst);
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(x[i]);
}

}  // namespace kimi::kernels
