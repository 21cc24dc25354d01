// Validation, variant selection and the once-per-call activation preparation of the
// integer-weight kernels (baseline-compiled: the SIMD files stay free of exceptions).
#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/quant_kernels.h"
#include "kernels/quantize.h"
#include "kernels/streaming.h"

namespace kimi::kernels {

std::string_view quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::Scalar: return "scalar";
    case QuantIsa::Avx2: return "avx2";
    case QuantIsa::Avx2Vnni: return "avx2-vnni";
    case QuantIsa::Avx512: return "avx512";
    case QuantIsa::Avx512Vnni: return "avx512-vnni";
    case QuantIsa::Avx512VnniVbmi: return "avx512-vnni-vbmi";
  }
  return "?";
}

bool quant_isa_supported(QuantIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case QuantIsa::Scalar: return true;
    case QuantIsa::Avx2: return isa_supported(Isa::Avx2);
    case QuantIsa::Avx2Vnni: return isa_supported(Isa::Avx2) && f.avx_vnni;
    case QuantIsa::Avx512: return isa_supported(Isa::Avx512);
    case QuantIsa::Avx512Vnni: return isa_supported(Isa::Avx512) && f.avx512_vnni;
    case QuantIsa::Avx512VnniVbmi: return isa_supported(Isa::Avx512) && f.avx512_vnni && f.avx512_vbmi;
  }
  return false;
}

QuantIsa quant_isa_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      for (QuantIsa q : {QuantIsa::Avx512VnniVbmi, QuantIsa::Avx512Vnni})
        if (quant_isa_supported(q)) return q;
      return QuantIsa::Avx512;
    case Isa::Avx2:
      return quant_isa_supported(QuantIsa::Avx2Vnni) ? QuantIsa::Avx2Vnni : QuantIsa::Avx2;
    case Isa::Scalar: break;
  }
  return QuantIsa::Scalar;
}

const QuantKernelTable& quant_kernels_for(QuantIsa isa) {
  if (!quant_isa_supported(isa))
    throw Error("kernels: this CPU does not support the " + std::string(quant_isa_name(isa)) +
                " instruction set");
  switch (isa) {
    case QuantIsa::Avx512VnniVbmi: return kQuantAvx512VnniVbmi;
    case QuantIsa::Avx512Vnni: return kQuantAvx512Vnni;
    case QuantIsa::Avx512: return kQuantAvx512;
    case QuantIsa::Avx2Vnni: return kQuantAvx2Vnni;
    case QuantIsa::Avx2: return kQuantAvx2;
    case QuantIsa::Scalar: break;
  }
  return kQuantScalar;
}

bool quant_simd_supports(const WeightMatrix& w, int lanes) {
  if (lanes == 0) return true;
  if (w.act_quant == ActivationQuant::None) return true;  // any group of whole 2L / L chunks
  const int64_t block = (w.format == WeightFormat::Int4Group ? 8 : 4) * lanes;
  const int64_t g = w.group_size;
  return g == w.cols || g % block == 0 || block % g == 0;
}

void validate_weight(const WeightMatrix& w, const char* what) {
  // Called for every product: the messages are built only when one is thrown.
  const auto fail = [&](const std::string& why) {
    std::string shape = "[";  // built by appending: GCC 12 warns falsely on "[" + std::string&&
    shape += std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]";
    throw Error(std::string(what) + ": " + shape + " " + why);
  };
  if (w.rows < 0 || w.cols < 0 || (w.data == nullptr && w.rows * w.cols > 0)) fail("is an invalid weight matrix");
  switch (w.format) {
    case WeightFormat::Dense:
      if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
        fail("has unsupported weight dtype " + std::string(dtype_name(w.dtype)) + " (expected F32, F16 or BF16)");
      if (w.act_quant == ActivationQuant::Bf16 && w.dtype != DType::BF16)
        fail("has bf16 activations but " + std::string(dtype_name(w.dtype)) + " weights (they need BF16)");
      if (w.act_quant != ActivationQuant::None && w.act_quant != ActivationQuant::Bf16)
        fail("is float and cannot take int8 activations");
      return;
    case WeightFormat::Int4Group:
    case WeightFormat::Int8Group: break;
    default: fail("has an unknown weight format");
  }
  if (w.act_quant == ActivationQuant::Bf16 && w.format != WeightFormat::Int4Group)
    fail("is int8 and cannot take bf16 activations (only BF16 and INT4 weights can)");
  if (w.act_quant != ActivationQuant::None && w.act_quant != ActivationQuant::Int8PerToken &&
      w.act_quant != ActivationQuant::Bf16)
    fail("has an unknown activation quantization");
  if (w.rows * w.cols == 0) return;
  const bool int4 = w.format == WeightFormat::Int4Group;
  if (w.scales == nullptr) fail("is quantized but has no scales");
  if (w.scale_dtype != DType::BF16 && w.scale_dtype != DType::F32)
    fail("has unsupported scale dtype " + std::string(dtype_name(w.scale_dtype)) + " (expected BF16 or F32)");
  if (w.group_size <= 0 || w.cols % w.group_size != 0 || (w.group_size != w.cols && w.group_size % 32 != 0))
    fail("has group size " + std::to_string(w.group_size) +
         ", which must divide the input size and be a multiple of 32 (or equal it)");
  if (int4 && w.cols % 8 != 0) fail("is int4 and needs an input size that is a multiple of 8");
  if (!int4 && w.zero_points != nullptr) fail("is int8, which is symmetric; zero points are not supported");
}

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Per chunk of `chunk` elements (cols even): its even elements, then its odd ones, at
// dst[c .. c + chunk); a partial last chunk keeps the full chunk's halves (zero-filled by the caller).
template <class T>
void split_even_odd(const T* src, int64_t cols, int64_t chunk, T* dst) {
  const int64_t half = chunk / 2;
  for (int64_t c = 0; c < cols; c += chunk) {
    const int64_t pairs = std::min(chunk, cols - c) / 2;
    for (int64_t j = 0; j < pairs; ++j) {
      dst[c + j] = src[c + 2 * j];
      dst[c + half + j] = src[c + 2 * j + 1];
    }
  }
}

}  // namespace

void prepare_input(ThreadPool& pool, const QuantKernelTable& k, const WeightMatrix& w,
                   const float* x, int64_t n, PreparedInput& out) {
  const int64_t cols = w.cols;
  const int64_t L = k.lanes;
  const bool int4 = w.format == WeightFormat::Int4Group;
  QuantInput& in = out.in;
  in = QuantInput{};
  in.x = x;
  in.n = n;
  in.cols = cols;
  if (int4_word16_layout(w, int(L))) {
    const int64_t B = word16_block(L), nblocks = (cols + B - 1) / B;
    in.ldxw = nblocks * B;
    in.ldxws = nblocks;
    in.ldsum = nblocks * L;
    out.xw.assign(size_t(n * in.ldxw), 0);
    out.xwscale.assign(size_t(n * in.ldxws), 0.0f);
    out.negsum.assign(size_t(n * in.ldsum), 0);
    // Only the SIMD variants have the layout, each on a CPU with its instruction set.
    const auto quantize = L == 16 ? quantize_word16_avx512 : quantize_word8_avx2;
    pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        quantize(x + t * cols, cols, out.xw.data() + t * in.ldxw, out.xwscale.data() + t * in.ldxws,
                 out.negsum.data() + t * in.ldsum);
    });
    in.xw = out.xw.data();
    in.xwscale = out.xwscale.data();
    in.negsum = out.negsum.data();
    in.stream_runs = int4_stream_runs();
    return;
  }
  if (w.act_quant == ActivationQuant::Bf16)  // matmul.cpp rounds them for every other variant
    throw Error("internal: 16-bit activations reach the integer kernels only on the int4 word16 layout");
  if (w.act_quant == ActivationQuant::None) {
    if (!int4 || L == 0) return;  // the kernels read x as it is
    if (int4_word_layout(w, int(L))) {
      in.ldxf = round_up(cols, 128);
      out.xf.assign(size_t(n * in.ldxf), 0.0f);
      pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* src = x + t * cols;
          float* dst = out.xf.data() + t * in.ldxf;
          for (int64_t i = 0; i < cols; ++i) dst[(i & ~int64_t(127)) + (i & 7) * 16 + ((i & 127) >> 3)] = src[i];
        }
      });
      in.xf = out.xf.data();
      return;
    }
    if (int4_word8_layout(w, int(L))) {
      const int64_t nblocks = (cols + 63) / 64;
      in.ldxf = nblocks * kWord8BlockFloats;
      out.xf.assign(size_t(n * in.ldxf), 0.0f);
      pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* src = x + t * cols;
          float* dst = out.xf.data() + t * in.ldxf;
          // 16^-j is a power of two: the products are exact (short of f32 underflow).
          static constexpr float kScale[8] = {1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 1.0f};
          for (int64_t i = 0; i < cols; ++i) {
            const int64_t b = i / 64, l = (i % 64) / 8, j = i % 8;
            float* blk = dst + b * kWord8BlockFloats;
            blk[j * 8 + l] = src[i] * kScale[j];
            blk[64 + l] -= 8.0f * src[i];
          }
        }
      });
      in.xf = out.xf.data();
      return;
    }
    const int64_t chunk = 2 * L;
    in.ldxf = round_up(cols, chunk);
    out.xf.assign(size_t(n * in.ldxf), 0.0f);
    pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        split_even_odd(x + t * cols, cols, chunk, out.xf.data() + t * in.ldxf);
    });
    in.xf = out.xf.data();
    return;
  }

  // Int8PerToken: quantise each token once, then lay it out for the variant.
  const int64_t block = L == 0 ? 1 : (int4 ? 8 : 4) * L;
  in.ldxq = round_up(cols, block);
  out.xq.assign(size_t(n * in.ldxq), 0);
  out.xscale.assign(size_t(n), 0.0f);
  const bool split = int4 && L > 0;
  if (split) {
    in.ldsum = in.ldxq / 8;
    out.negsum.assign(size_t(n * in.ldsum), 0);
  }
  const bool offset = !int4 && k.vnni;
  pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int8_t> q(static_cast<size_t>(cols));
    for (int64_t t = t0; t < t1; ++t) {
      int8_t* dst = out.xq.data() + t * in.ldxq;
      out.xscale[size_t(t)] = quantize_activation_row(x + t * cols, cols, split ? q.data() : dst);
      if (split) {
        split_even_odd(q.data(), cols, block, dst);
        int32_t* s = out.negsum.data() + t * in.ldsum;
        for (int64_t i = 0; i < cols; ++i) s[i / 8] -= q[size_t(i)];
      } else if (offset) {
        // x + 128 as an unsigned byte is x with its sign bit flipped.
        for (int64_t i = 0; i < in.ldxq; ++i) dst[i] = int8_t(uint8_t(dst[i]) ^ 0x80u);
      }
    }
  });
  in.xq = out.xq.data();
  in.xscale = out.xscale.data();
  if (split) in.negsum = out.negsum.data();
}

}  // namespace kimi::kernels
