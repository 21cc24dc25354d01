#include "kernels/matmul.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/kernels_impl.h"

namespace kimi {

namespace {

bool is_float_weight(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_weight(const WeightMatrix& w, const char* what) {
  if (!is_float_weight(w.dtype))
    throw Error(std::string(what) + ": unsupported weight dtype " + std::string(dtype_name(w.dtype)) +
                " (expected F32, F16 or BF16)");
  if (w.rows < 0 || w.cols < 0 || (w.data == nullptr && w.rows * w.cols > 0))
    throw Error(std::string(what) + ": invalid weight matrix [" + std::to_string(w.rows) + ", " +
                std::to_string(w.cols) + "]");
}

// Work per parallel chunk, in multiply-adds: below this, waking another thread costs more than
// it saves (a wake-up is several microseconds; this is roughly 5-10 us of kernel time).
constexpr int64_t kMinMacsPerChunk = int64_t(1) << 16;
// Threads split the rows in blocks of this many, so that every thread's share starts on a
// kernel row-tile boundary (ragged rows only at the very end).
constexpr int64_t kRowBlock = 4;

void matmul_with(const kernels::KernelTable& k, ThreadPool& pool, const WeightMatrix& w,
                 const float* x, int64_t n, float* y) {
  check_weight(w, "matmul");
  if (n <= 0 || w.rows == 0) return;
  const int64_t blocks = (w.rows + kRowBlock - 1) / kRowBlock;
  const int64_t macs_per_block = std::max<int64_t>(1, kRowBlock * w.cols * n);
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerChunk / macs_per_block);
  pool.parallel_for(blocks, grain, [&](int64_t b, int64_t e) {
    k.matmul_rows(w, x, n, y, b * kRowBlock, std::min(w.rows, e * kRowBlock));
  });
}

void convert_with(const kernels::KernelTable& k, DType src_dtype, const void* src, float* dst,
                  int64_t n) {
  if (!is_float_weight(src_dtype))
    throw Error("convert_to_f32: unsupported dtype " + std::string(dtype_name(src_dtype)));
  if (n > 0) k.convert_to_f32(src_dtype, src, dst, n);
}

}  // namespace

WeightMatrix WeightMatrix::row_slice(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows)
    throw Error("WeightMatrix::row_slice: rows [" + std::to_string(first) + ", " +
                std::to_string(first + count) + ") out of [0, " + std::to_string(rows) + ")");
  WeightMatrix s = *this;
  s.data = static_cast<const std::byte*>(data) + size_t(first) * size_t(cols) * dtype_size(dtype);
  s.rows = count;
  return s;
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y) {
  matmul_with(kernels::best_kernels(), pool, w, x, n, y);
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y,
            Isa isa) {
  matmul_with(kernels::kernels_for(isa), pool, w, x, n, y);
}

void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  check_weight(w, "matmul_untransposed");
  if (n > 0) kernels::best_kernels().matmul_untransposed(w, x, n, y);
}

void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa) {
  check_weight(w, "matmul_untransposed");
  if (n > 0) kernels::kernels_for(isa).matmul_untransposed(w, x, n, y);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n) {
  convert_with(kernels::best_kernels(), src_dtype, src, dst, n);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n, Isa isa) {
  convert_with(kernels::kernels_for(isa), src_dtype, src, dst, n);
}

}  // namespace kimi
