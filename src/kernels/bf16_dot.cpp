#include "kernels/bf16_dot.h"

#include "common/dtype.h"
#include "kernels/cpu_features.h"

namespace kimi::kernels {

// bf16_dot_avx512bf16.cpp
void round_to_bf16_avx512bf16(const float* x, int64_t count, uint16_t* dst);
Bf16DotRows bf16_dot_rows_avx512bf16();

namespace {

bool have_avx512_bf16() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16;
}

}  // namespace

Bf16DotRows bf16_dot_rows() { return have_avx512_bf16() ? bf16_dot_rows_avx512bf16() : nullptr; }

void round_to_bf16(const float* x, int64_t count, uint16_t* dst) {
  if (have_avx512_bf16()) return round_to_bf16_avx512bf16(x, count, dst);
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(x[i]);
}

}  // namespace kimi::kernels
