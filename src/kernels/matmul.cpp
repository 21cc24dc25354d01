#include "kernels/matmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/bf16_dot.h"
#include "kernels/bf16_dot_rate.h"
#include "kernels/kernels_impl.h"
#include "kernels/quant_kernels.h"

namespace kimi {

namespace {

bool is_float_weight(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Float-only entry points (matmul_untransposed) reject the integer formats.
void check_dense_weight(const WeightMatrix& w, const char* what) {
  if (w.format != WeightFormat::Dense)
    throw Error(std::string(what) + ": integer-format weights are not supported (dequantize them first)");
  kernels::validate_weight(w, what);
}

// Work per parallel chunk, in multiply-adds (roughly 5-10 us of kernel time): large products are
// not cut finer than this, so chunk hand-outs stay rare.
constexpr int64_t kMinMacsPerChunk = int64_t(1) << 16;
// Products from this size up are still shared by every thread, in equal parts, when they are
// smaller than kMinMacsPerChunk per thread. Between the matmuls of a decode step the pool's
// threads spin (common/thread_pool.h), so handing one a part costs far less than a wake-up; with
// the 65536 floor alone most of a small model's per-token products (mini's q_a + kv_a, q_b, o,
// shared expert: 15-50 K) ran on one thread while the other waited (mini decode 1.23x with
// this, bench/results/2026-12-05-small-product-sharing.md).
constexpr int64_t kMinMacsToShare = int64_t(1) << 13;
// Threads split the rows in blocks of this many, so that every thread's share starts on a
// kernel row-tile boundary (ragged rows only at the very end).
constexpr int64_t kRowBlock = 4;

// One job's share of a batch: its row blocks are [first_block, first_block + blocks) of the
// batch's; w is the job's matrix as the kernels see it. Integer formats carry their prepared
// activations and kernel variant; bf16 activations their rounded copy (for an AVX512_BF16
// kernel, or widened back for the f32 kernels).
struct BatchPart {
  const MatmulJob* job;
  WeightMatrix w;
  int64_t first_block, blocks;
  const kernels::QuantKernelTable* quant = nullptr;
  kernels::PreparedInput prepared;
  kernels::Bf16DotRows bf16_dot = nullptr;
  kernels::Int4Bf16DotRows int4_bf16_dot = nullptr;
  std::vector<uint16_t> xb;
  std::vector<float> x_rounded;
};

const kernels::QuantKernelTable& quant_table(const kernels::KernelTable& k, const kernels::QuantKernelTable* quant,
                                             const WeightMatrix& w) {
  const kernels::QuantKernelTable& t = quant ? *quant : kernels::quant_kernels_for(kernels::quant_isa_for(k.isa));
  return kernels::quant_simd_supports(w, t.lanes) ? t : kernels::kQuantScalar;
}

// x rounded to bf16 once per product, before the threads share its rows: for the AVX512_BF16
// kernels when the table is AVX-512's (the tests' choice of ISA or variant is kept), else widened
// back to f32 for k's own kernels (the same values; INT4 weights then run the f32-activation INT4
// kernels, their matrix marked as such). INT4 weights take int16 activations instead, quantized
// per block by prepare_input, on the 8-lane variants, and on the 16-lane ones where the caller
// picked the integer variant or VDPBF16PS is slow (int4_word16_layout; why: bf16_dot_rate.h).
void prepare_bf16_activations(ThreadPool& pool, const kernels::KernelTable& k, const kernels::QuantKernelTable* quant,
                              const MatmulJob& j, BatchPart& p) {
  const size_t count = size_t(j.n * j.w.cols);
  if (j.w.format == WeightFormat::Dense) {
    if (k.isa == Isa::Avx512 && (j.n <= kernels::kSlowBf16DotMaxTokens || kernels::bf16_dot_is_fast()))
      p.bf16_dot = kernels::bf16_dot_rows();
    if (p.bf16_dot) {
      p.xb.resize(count);
      kernels::round_to_bf16(j.x, int64_t(count), p.xb.data());
      return;
    }
  } else {
    const kernels::QuantKernelTable& t = quant_table(k, quant, j.w);
    if (!quant && t.lanes == 16 && kernels::int4_bf16_layout(j.w) && kernels::bf16_dot_is_fast())
      p.int4_bf16_dot = kernels::int4_bf16_dot_rows();
    if (p.int4_bf16_dot) {
      p.xb.resize(size_t(j.n * kernels::int4_bf16_packed_cols(j.w.cols)));
      kernels::pack_int4_bf16_activations(j.x, j.n, j.w.cols, p.xb.data());
      return;
    }
    if (kernels::int4_word16_layout(j.w, t.lanes)) {
      p.quant = &t;
      kernels::prepare_input(pool, t, j.w, j.x, j.n, p.prepared);
      return;
    }
  }
  p.x_rounded.resize(count);
  for (size_t i = 0; i < count; ++i) p.x_rounded[i] = bf16_to_f32(f32_to_bf16(j.x[i]));
  if (j.w.format != WeightFormat::Dense) {
    p.w.act_quant = ActivationQuant::None;
    p.quant = &quant_table(k, quant, p.w);
    kernels::prepare_input(pool, *p.quant, p.w, p.x_rounded.data(), j.n, p.prepared);
  }
}

// Integer-format jobs use `quant` when given (the tests' choice of variant), else the best
// variant within k's ISA.
void matmul_batch_with(const kernels::KernelTable& k, ThreadPool& pool, std::span<const MatmulJob> jobs,
                       const kernels::QuantKernelTable* quant = nullptr) {
  std::vector<BatchPart> parts;
  parts.reserve(jobs.size());
  int64_t total_blocks = 0, total_macs = 0;
  for (const MatmulJob& j : jobs) {
    kernels::validate_weight(j.w, "matmul");
    if (j.n <= 0 || j.w.rows == 0) continue;
    if (j.w.cols == 0) {
      std::fill(j.y, j.y + j.n * j.w.rows, 0.0f);
      continue;
    }
    BatchPart& p = parts.emplace_back();
    p.job = &j;
    p.w = j.w;
    p.first_block = total_blocks;
    p.blocks = (j.w.rows + kRowBlock - 1) / kRowBlock;
    if (j.w.act_quant == ActivationQuant::Bf16) {
      prepare_bf16_activations(pool, k, quant, j, p);
    } else if (j.w.format != WeightFormat::Dense) {
      p.quant = &quant_table(k, quant, j.w);
      kernels::prepare_input(pool, *p.quant, j.w, j.x, j.n, p.prepared);
    }
    total_blocks += p.blocks;
    total_macs += j.w.rows * j.w.cols * j.n;
  }
  if (parts.empty()) return;
  const int64_t macs_per_block = std::max<int64_t>(1, total_macs / total_blocks);
  int64_t grain = std::max<int64_t>(1, kMinMacsPerChunk / macs_per_block);
  if (total_macs >= kMinMacsToShare) grain = std::min(grain, (total_blocks + pool.size() - 1) / pool.size());
  pool.parallel_for(total_blocks, grain, [&](int64_t b, int64_t e) {
    // The part holding block b, then on through the parts the chunk spans.
    auto it = std::upper_bound(parts.begin(), parts.end(), b,
                               [](int64_t v, const BatchPart& p) { return v < p.first_block; });
    for (--it; b < e; ++it) {
      const BatchPart& p = *it;
      const MatmulJob& j = *p.job;
      const int64_t end = std::min(e, p.first_block + p.blocks);
      const int64_t r0 = (b - p.first_block) * kRowBlock, r1 = std::min(j.w.rows, (end - p.first_block) * kRowBlock);
      if (p.quant)
        p.quant->matmul_rows(p.w, p.prepared.in, j.y, r0, r1);
      else if (p.int4_bf16_dot)
        p.int4_bf16_dot(p.w, p.xb.data(), j.n, j.y, r0, r1);
      else if (p.bf16_dot)
        p.bf16_dot(p.w, p.xb.data(), j.n, j.y, r0, r1);
      else
        k.matmul_rows(p.w, p.x_rounded.empty() ? j.x : p.x_rounded.data(), j.n, j.y, r0, r1);
      b = end;
    }
  });
}

void matmul_with(const kernels::KernelTable& k, ThreadPool& pool, const WeightMatrix& w,
                 const float* x, int64_t n, float* y) {
  const MatmulJob job{w, x, n, y};
  matmul_batch_with(k, pool, {&job, 1});
}

void convert_with(const kernels::KernelTable& k, DType src_dtype, const void* src, float* dst,
                  int64_t n) {
  if (!is_float_weight(src_dtype))
    throw Error("convert_to_f32: unsupported dtype " + std::string(dtype_name(src_dtype)));
  if (n > 0) k.convert_to_f32(src_dtype, src, dst, n);
}

}  // namespace

namespace kernels {

void quant_matmul(const QuantKernelTable& table, ThreadPool& pool, const WeightMatrix& w,
                  const float* x, int64_t n, float* y) {
  const MatmulJob job{w, x, n, y};
  matmul_batch_with(best_kernels(), pool, {&job, 1}, &table);
}

}  // namespace kernels

WeightMatrix WeightMatrix::row_slice(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows)
    throw Error("WeightMatrix::row_slice: rows [" + std::to_string(first) + ", " +
                std::to_string(first + count) + ") out of [0, " + std::to_string(rows) + ")");
  WeightMatrix s = *this;
  s.rows = count;
  if (format == WeightFormat::Dense) {
    s.data = static_cast<const std::byte*>(data) + size_t(first) * size_t(cols) * dtype_size(dtype);
    return s;
  }
  const size_t row_bytes = format == WeightFormat::Int4Group ? size_t(cols) / 2 : size_t(cols);
  const size_t groups = group_size > 0 ? size_t(cols / group_size) : 0;
  s.data = static_cast<const std::byte*>(data) + size_t(first) * row_bytes;
  if (scales) s.scales = static_cast<const std::byte*>(scales) + size_t(first) * groups * dtype_size(scale_dtype);
  if (zero_points) s.zero_points = zero_points + size_t(first) * groups;
  return s;
}

std::array<std::span<const std::byte>, 3> WeightMatrix::storage() const {
  const size_t elems = size_t(rows) * size_t(cols);
  const auto span = [](const void* p, size_t n) {
    return p ? std::span<const std::byte>(static_cast<const std::byte*>(p), n) : std::span<const std::byte>();
  };
  if (format == WeightFormat::Dense) return {span(data, elems * dtype_size(dtype)), {}, {}};
  const size_t scale_count = group_size > 0 ? size_t(rows) * size_t(cols / group_size) : 0;
  return {span(data, format == WeightFormat::Int4Group ? elems / 2 : elems),
          span(scales, scale_count * dtype_size(scale_dtype)), span(zero_points, scale_count)};
}

size_t WeightMatrix::bytes() const {
  size_t n = 0;
  for (const std::span<const std::byte> s : storage()) n += s.size();
  return n;
}

void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs) {
  matmul_batch_with(kernels::best_kernels(), pool, jobs);
}

void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs, Isa isa) {
  matmul_batch_with(kernels::kernels_for(isa), pool, jobs);
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y) {
  matmul_with(kernels::best_kernels(), pool, w, x, n, y);
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n, float* y,
            Isa isa) {
  matmul_with(kernels::kernels_for(isa), pool, w, x, n, y);
}

void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  check_dense_weight(w, "matmul_untransposed");
  if (n > 0) kernels::best_kernels().matmul_untransposed(w, x, n, y);
}

void matmul_untransposed(const WeightMatrix& w, const float* x, int64_t n, float* y, Isa isa) {
  check_dense_weight(w, "matmul_untransposed");
  if (n > 0) kernels::kernels_for(isa).matmul_untransposed(w, x, n, y);
}

void matmul_on_thread(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  check_dense_weight(w, "matmul_on_thread");
  if (w.act_quant != ActivationQuant::None)
    throw Error("matmul_on_thread: takes f32 activations only (the weight asks for bf16 ones)");
  if (n > 0 && w.rows > 0) kernels::best_kernels().matmul_rows(w, x, n, y, 0, w.rows);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n) {
  convert_with(kernels::best_kernels(), src_dtype, src, dst, n);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, int64_t n, Isa isa) {
  convert_with(kernels::kernels_for(isa), src_dtype, src, dst, n);
}

}  // namespace kimi
