#pragma once
// Dense products of f32 activations with checkpoint-typed weight matrices (BF16, F16 or F32,
// used in place from the mapped file). These are the hot loops of the forward pass: decode is
// a GEMV bound by how fast the weights stream from memory, prefill a GEMM over many tokens.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"

namespace kimi {

// How a weight matrix's elements are stored. Quantized formats are the kernels' own in-memory
// layouts; the loader maps the published checkpoint formats (compressed-tensors pack-quantized,
// msModelSlim W4A8/W8A8) onto them, in place where the bytes already match.
enum class WeightFormat {
  Dense,  // `dtype` elements (F32, F16 or BF16), row-major
  // 4-bit integers packed along the input dimension exactly as compressed-tensors does: row r's
  // element i is nibble (i % 8) (bits 4*(i%8)..+3) of little-endian uint32 word r*cols/8 + i/8,
  // i.e. byte j of a row holds element 2j in its low and 2j+1 in its high nibble. Nibbles are
  // unsigned q in [0, 15]; value = (q - zero) * scale[r, i / group_size], zero = 8 unless
  // `zero_points` is set (asymmetric).
  Int4Group,
  // int8 per element, row-major; value = q * scale[r, i / group_size] (symmetric).
  Int8Group,
};

// What the activations are turned into before an integer weight format multiplies them.
enum class ActivationQuant {
  None,          // f32 activations; weights are dequantised in registers (W4A16 / W8A16)
  Int8PerToken,  // dynamic symmetric int8 per token (row of x): scale = max|x| / 127 (W4A8 / W8A8)
  // Dense BF16 or Int4Group weights: x rounded to bf16 (to nearest even), products exact, sums
  // in f32 (`--dtype bfloat16`; kernels/bf16_dot.h). One VDPBF16PS per 32 weights on AVX512_BF16.
  Bf16,
};

// A row-major [rows, cols] matrix; in the PyTorch nn.Linear convention rows = out_features and
// cols = in_features. `data`, `scales` and `zero_points` are not owned.
struct WeightMatrix {
  DType dtype = DType::BF16;  // Dense: the element type; ignored for the integer formats
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  WeightFormat format = WeightFormat::Dense;
  ActivationQuant act_quant = ActivationQuant::None;  // integer formats, or Bf16 for BF16 / Int4Group
  // Integer formats: scales [rows, cols / group_size] of `scale_dtype` (BF16 or F32), row-major.
  // group_size divides cols and is a multiple of 32, or equals cols (per-channel scales).
  const void* scales = nullptr;
  DType scale_dtype = DType::BF16;
  int64_t group_size = 0;
  // Int4Group, asymmetric only: zero points [rows, cols / group_size], one uint8 in [0, 15] each.
  const uint8_t* zero_points = nullptr;

  // The bytes `data`, `scales` and `zero_points` point to, in that order (empty where absent):
  // what a GEMV reads.
  std::array<std::span<const std::byte>, 3> storage() const;
  // Their sizes summed.
  size_t bytes() const;

  // Rows [first, first + count) as a matrix of their own (they are contiguous).
  WeightMatrix row_slice(int64_t first, int64_t count) const;
};

// y[n, w.rows] = x[n, w.cols] . w^T  (x, y row-major f32, not aliasing). Work is split over
// the pool's threads by output rows; all ISAs give results within float rounding of each other.
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y);
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa);

// One product of a batch: y[n, w.rows] = x[n, w.cols] . w^T.
struct MatmulJob {
  WeightMatrix w;
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
};

// Several independent products in one parallel_for: their rows share the threads, so many small
// products (a decode step's selected experts, gate and up of one MLP) cost one dispatch and one
// wait instead of one each, and a thread that finishes one product's rows takes the next's.
// Results are those of matmul() for each job.
void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs);
void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs, Isa isa);

// y[n, w.cols] = x[n, w.rows] . w  (the untransposed product; the absorbed MLA attention uses it
// to fold kv_b_proj's key half into the query). Single-threaded: callers parallelise over heads.
void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y);
void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa);

// y[n, w.rows] = x[n, w.cols] . w^T for dense float weights and f32 activations, on the calling
// thread alone: for callers that already run one product per thread (attention's heads).
void matmul_on_thread(const WeightMatrix& w, const float* x, int64_t n, float* y);
// dst[i] = float(src[i]) for i < n; src of any float dtype (for embedding rows and norms).
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n);
void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n, Isa isa);

}  // namespace kimi
