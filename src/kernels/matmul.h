#pragma once
// Dense products of f32 activations with checkpoint-typed weight matrices (BF16, F16 or F32,
// used in place from the mapped file). These are the hot loops of the forward pass: decode is
// a GEMV bound by how fast the weights stream from memory, prefill a GEMM over many tokens.
#include <cstdint>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"

namespace kimi {

// A row-major [rows, cols] matrix; in the PyTorch nn.Linear convention rows = out_features and
// cols = in_features. `data` is not owned.
struct WeightMatrix {
  DType dtype = DType::BF16;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  // Rows [first, first + count) as a matrix of their own (they are contiguous).
  WeightMatrix row_slice(int64_t first, int64_t count) const;
};

// y[n, w.rows] = x[n, w.cols] . w^T  (x, y row-major f32, not aliasing). Work is split over
// the pool's threads by output rows; all ISAs give results within float rounding of each other.
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y);
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa);

// y[n, w.cols] = x[n, w.rows] . w  (the untransposed product; the absorbed MLA attention uses it
// to fold kv_b_proj's key half into the query). Single-threaded: callers parallelise over heads.
void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y);
void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa);

// dst[i] = float(src[i]) for i < n; src of any float dtype (for embedding rows and norms).
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n);
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n, Isa isa);

}  // namespace kimi
