#pragma once
// Internal to src/kernels: the integer-weight matmul kernels (WeightFormat::Int4Group /
// Int8Group, f32 or dynamic int8 activations) and their run-time selection. Like the float
// kernels, each variant lives in a file compiled with its ISA flags (quant_scalar.cpp,
// quant_avx2.cpp, quant_avxvnni.cpp, quant_avx512.cpp, quant_avx512vnni.cpp,
// quant_avx512vbmi.cpp); matmul.cpp
// validates, prepares the activations once per call (quant_activations.cpp) and splits rows.
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace kimi::kernels {

// The quantized-kernel variants: the float ISAs, plus VNNI (integer dot products) where present,
// plus VBMI (VPMULTISHIFTQB: bit-field extraction off the shift port) with AVX-512 VNNI.
enum class QuantIsa { Scalar, Avx2, Avx2Vnni, Avx512, Avx512Vnni, Avx512VnniVbmi };
std::string_view quant_isa_name(QuantIsa isa);
bool quant_isa_supported(QuantIsa isa);
// The fastest variant within the float ISA `isa` (adds VNNI, then VBMI, when the CPU has them).
QuantIsa quant_isa_for(Isa isa);

// The activations of one call, prepared once (quant_activations.cpp) in the layout the chosen
// variant reads. Lanes L: 16 (AVX-512), 8 (AVX2), 0 (scalar: everything in natural order).
struct QuantInput {
  const float* x = nullptr;  // [n, cols] as given
  int64_t n = 0, cols = 0;
  // Int4Group x f32 (SIMD only): x split per chunk of 2L inputs into its L even then L odd
  // elements (matching the low / high nibbles of L packed bytes), zero-padded; [n, ldxf].
  // Where int4_word_layout() holds instead, per block of 128 inputs: for j = 0..7 the 16
  // inputs 8l + j (l < 16), matching nibble j of the block's 16 packed words. Where
  // int4_word8_layout() holds (8 lanes), 72 floats per block of 64 inputs (see there).
  const float* xf = nullptr;
  int64_t ldxf = 0;
  // Int8PerToken: x quantised per token (quantize_activation_row). Int4Group (SIMD): per block
  // of 8L inputs, the 4L even then the 4L odd elements; Int8Group: natural order, stored as
  // q + 128 (unsigned) when the variant is VNNI. Zero-padded to a whole block; [n, ldxq].
  const int8_t* xq = nullptr;
  int64_t ldxq = 0;
  const float* xscale = nullptr;  // [n]
  // Int4Group x int8 (SIMD): -(sum of xq over inputs [8j, 8j + 8)), zero-padded; [n, ldsum].
  const int32_t* negsum = nullptr;
  int64_t ldsum = 0;
  // Int4Group x 16-bit activations (int4_word16_layout): per block of 8L inputs, x as int16
  // q = round(x / s) with the block's own s = amax / 32767, 8L shorts laid out for j = 0..3 as
  // (q[8l + j], q[8l + 4 + j]) for l < L; [n, ldxw]. The blocks' s in xwscale [n, ldxws], and in
  // negsum ([n, ldsum], L per block) -8 * (the sum of lane l's 8 q), the zero point folded in.
  const int16_t* xw = nullptr;
  int64_t ldxw = 0;
  const float* xwscale = nullptr;
  int64_t ldxws = 0;
  // A streamed one-token product on those: how many runs of a thread's rows are read side by side
  // (1 or 2: int4_stream_runs(), streaming.h).
  int stream_runs = 1;
};

struct QuantKernelTable {
  QuantIsa isa;
  int lanes;  // f32 lanes of the variant's vectors; 0 for the scalar reference
  bool vnni;
  // y[t * w.rows + r] for t < in.n and r in [row_begin, row_end): one thread's share.
  void (*matmul_rows)(const WeightMatrix& w, const QuantInput& in, float* y, int64_t row_begin,
                      int64_t row_end);
};

extern const QuantKernelTable kQuantScalar;
extern const QuantKernelTable kQuantAvx2;
extern const QuantKernelTable kQuantAvx2Vnni;
extern const QuantKernelTable kQuantAvx512;
extern const QuantKernelTable kQuantAvx512Vnni;
extern const QuantKernelTable kQuantAvx512VnniVbmi;

// The table for `isa`; throws kimi::Error if this CPU cannot run it.
const QuantKernelTable& quant_kernels_for(QuantIsa isa);

// Whether the SIMD kernels with `lanes` lanes handle this matrix's group layout. The integer
// dot-product kernels need the groups to align with their blocks of 8L (int4) / 4L (int8)
// inputs (a group size dividing or divisible by the block, or one group per row); other group
// sizes (e.g. 96) run on the scalar reference.
bool quant_simd_supports(const WeightMatrix& w, int lanes);


// Whether w's groups tile blocks of 128 inputs (32, 64, 128, multiples of 128) or are one per
// row: the kernels that read a row 64 bytes (128 int4 inputs) at a time scale per block or per
// group then.
inline bool groups_tile_blocks_of_128(const WeightMatrix& w) {
  const int64_t g = w.group_size;
  return g > 0 && (g == w.cols || 128 % g == 0 || g % 128 == 0);
}

// Whether int4 x f32 runs on whole packed words (the 16-lane variants, symmetric weights, groups
// that tile blocks of 128 inputs).
inline bool int4_word_layout(const WeightMatrix& w, int lanes) {
  return lanes == 16 && w.format == WeightFormat::Int4Group && w.act_quant == ActivationQuant::None &&
         w.zero_points == nullptr && groups_tile_blocks_of_128(w);
}

// Whether int4 x f32 runs on whole packed words with 8 lanes (AVX2): symmetric weights, groups of
// 32 (two per block of 64 inputs), multiples of 64, or one per row. A 32-byte block is 8 words
// of 8 nibbles, word l's nibble j being input 64b + 8l + j; QuantInput::xf then holds per block
// 72 floats: for j = 0..7 the 8 inputs 8l + j times 16^-j (16^0 for j = 7), then the 8 sums
// -8 * (x[8l] + ... + x[8l + 7]), which fold the zero point 8 into the accumulator's start.
inline bool int4_word8_layout(const WeightMatrix& w, int lanes) {
  const int64_t g = w.group_size;
  return lanes == 8 && w.format == WeightFormat::Int4Group && w.act_quant == ActivationQuant::None &&
         w.zero_points == nullptr && (g == w.cols || g == 32 || g % 64 == 0);
}
constexpr int64_t kWord8BlockFloats = 72;

// Whether int4 x 16-bit activations (ActivationQuant::Bf16: `--dtype bfloat16`) runs as int4 x
// int16 on the variant's packed words: on 8 lanes (AVX2) always, since nothing there multiplies
// bf16 and the f32 kernel spends a conversion and an FMA per weight; on 16 lanes (AVX-512) where
// the CPU's VDPBF16PS is slow (bf16_dot_rate.h: Intel; matmul.cpp), or where a caller picks the
// variant. One shift and one AND take 2L nibbles in place from their words as int16 for one
// VPMADDWD (VPDPWSSD with VNNI) with 2L int16 activations. Each block of 8L inputs (64 or 128) is
// quantized on its own (amax / 32767): its error is at most 2^-16 of the block's largest input,
// below bf16's 2^-9 relative rounding for every input within 128x of that largest. Groups: 8
// lanes take 32 (two per block), multiples of 64, or one per row; 16 lanes groups that tile
// blocks of 128 (32, 64, multiples of 128) or one per row.
inline bool int4_word16_layout(const WeightMatrix& w, int lanes) {
  const int64_t g = w.group_size;
  if (w.format != WeightFormat::Int4Group || w.act_quant != ActivationQuant::Bf16 || w.zero_points != nullptr)
    return false;
  if (lanes == 8) return g == w.cols || g == 32 || g % 64 == 0;
  return lanes == 16 && groups_tile_blocks_of_128(w);
}
// Inputs (and int16 activations) per block of the int16 layout: 8 per lane.
constexpr int64_t word16_block(int64_t lanes) { return 8 * lanes; }
// The pair order of the 16-lane INT4 layouts (the int16 one above and the AVX512_BF16 kernel's
// bf16 one, bf16_dot.h): vector j of a block of 128 inputs holds inputs 4i + j (i < 32), pair l
// being (8l + j, 8l + 4 + j). VPERMT2W indices into two registers of a half block's 64 inputs
// that give its inputs 4i + j (i < 16), then 4i + j + 1: vectors j and j + 1's halves.
constexpr std::array<uint16_t, 32> word_pair_index(int j) {
  std::array<uint16_t, 32> idx{};
  for (int i = 0; i < 32; ++i) idx[size_t(i)] = uint16_t(i < 16 ? 4 * i + j : 4 * (i - 16) + j + 1);
  return idx;
}
// One token's 16-lane int16 activations as QuantInput documents them (xw, xwscale, negsum rows),
// with AVX-512 (int16_activations_avx512.cpp); only where the CPU has it.
void quantize_word16_avx512(const float* x, int64_t cols, int16_t* dst, float* scales, int32_t* negsum);
// The same on 8 lanes with AVX2 (int16_activations_avx2.cpp); only where the CPU has it.
void quantize_word8_avx2(const float* x, int64_t cols, int16_t* dst, float* scales, int32_t* negsum);

// Owns the buffers a QuantInput points into.
struct PreparedInput {
  QuantInput in;
  std::vector<float> xf, xscale;
  std::vector<int8_t> xq;
  std::vector<int32_t> negsum;
  std::vector<int16_t> xw;
  std::vector<float> xwscale;
};
// Prepares x[n, w.cols] for table `k` (tokens in parallel on `pool`).
void prepare_input(ThreadPool& pool, const QuantKernelTable& k, const WeightMatrix& w,
                   const float* x, int64_t n, PreparedInput& out);

// y = x . w^T for an integer-format w on variant `k` (matmul() picks the CPU's best variant;
// tests call this with each). Runs through matmul()'s batch path.
// Falls back to the scalar reference where quant_simd_supports() says the variant cannot follow
// the group layout.
void quant_matmul(const QuantKernelTable& k, ThreadPool& pool, const WeightMatrix& w, const float* x,
                  int64_t n, float* y);

// Throws kimi::Error unless `w` is a valid matrix of any format (shapes, group size, dtypes).
void validate_weight(const WeightMatrix& w, const char* what);

// The f32 value of scale [row, group] of an integer-format matrix.
inline float scale_at(const WeightMatrix& w, int64_t row, int64_t group) {
  // memcpy: scales mapped from a file need not be aligned to their element size.
  const int64_t i = row * (w.cols / w.group_size) + group;
  const auto* p = static_cast<const std::byte*>(w.scales);
  if (w.scale_dtype == DType::F32) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p + i * 2, 2);
  return bf16_to_f32(b);
}

}  // namespace kimi::kernels
