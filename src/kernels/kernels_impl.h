#pragma once
// Internal to src/kernels: the per-ISA kernel entry points and their run-time selection.
// Each ISA's table lives in a source file compiled with that ISA's flags (kernels_scalar.cpp,
// kernels_avx2.cpp, kernels_avx512.cpp); callers must only use a table the CPU supports.
// Argument validation (dtypes, shapes) happens in the baseline-compiled callers, so the SIMD
// files stay free of exceptions and standard-library code that could be merged across ISAs.
#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/mla_kernels.h"

namespace kimi::kernels {

struct KernelTable {
  Isa isa;
  // y[t * w.rows + r] for t < n and r in [row_begin, row_end): one thread's share of matmul().
  void (*matmul_rows)(const WeightMatrix& w, const float* x, int64_t n, float* y, int64_t row_begin,
                      int64_t row_end);
  void (*matmul_untransposed)(const WeightMatrix& w, const float* x, int64_t n, float* y);
  // src_dtype is one of F32, F16, BF16.
  void (*convert_to_f32)(DType src_dtype, const void* src, float* dst, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float* y, float a, const float* x, int64_t n);
  float (*sum)(const float* x, int64_t n);
  // The KV cache's narrow rows (vec_ops.h): bf16, and fp8 e4m3 read as exact e4m3 values.
  float (*dot_bf16)(const float* a, const uint16_t* b, int64_t n);
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int64_t n);
  float (*dot_e4m3)(const float* a, const uint8_t* b, int64_t n);
  void (*axpy_e4m3)(float* y, float a, const uint8_t* x, int64_t n);
  void (*e4m3_to_f32)(const uint8_t* x, float scale, float* y, int64_t n);
  // Absorbed MLA attention over cached rows (mla_kernels.h); nh already checked.
  void (*mla_scores)(const MlaRows& rows, int nh, const float* q_lat, int64_t q_lat_stride, const float* q_rope,
                     int64_t q_rope_stride, float scale, float* scores, int64_t score_stride);
  void (*mla_values)(const MlaRows& rows, int nh, const float* p, int64_t p_stride, float* out, int64_t out_stride);
  // vec_ops.h's softmax_f32 (n >= 1), exp_shifted_f32 and silu_mul_f32.
  void (*softmax)(float* x, int64_t n);
  float (*exp_shifted)(float* x, int64_t n, float shift);
  void (*silu_mul)(float* gate, const float* up, int64_t n);
};

// Constant-initialised (only function pointers), so usable from any static initialiser.
extern const KernelTable kScalarKernels;
extern const KernelTable kAvx2Kernels;
extern const KernelTable kAvx512Kernels;

// The table for `isa`; throws kimi::Error if this CPU cannot run it.
const KernelTable& kernels_for(Isa isa);
// The table for best_isa(), looked up once.
const KernelTable& best_kernels();

}  // namespace kimi::kernels
