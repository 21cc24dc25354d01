#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/quant_kernels.h"

namespace kimi {

namespace {

void check_shape(const char* what, int64_t rows, int64_t cols, int64_t group_size, bool int4) {
  if (rows < 0 || cols <= 0 || group_size <= 0 || cols % group_size != 0)
    throw Error(std::string(what) + ": group size " + std::to_string(group_size) +
                " does not divide the input size " + std::to_string(cols));
  if (int4 && cols % 8 != 0)
    throw Error(std::string(what) + ": the input size " + std::to_string(cols) +
                " is not a multiple of 8 (8 int4 values per 32-bit word)");
}

// round-half-to-even of a finite float of moderate size (the default rounding mode).
int round_even(float v) { return int(std::nearbyint(v)); }

// compressed-tensors clamps scales below at torch.finfo(torch.float32).eps.
constexpr float kMinScale = std::numeric_limits<float>::epsilon();

void put_nibble(uint8_t* row, int64_t i, int nibble) {
  uint8_t& b = row[i / 2];
  b = (i % 2) ? uint8_t((b & 0x0F) | (nibble << 4)) : uint8_t((b & 0xF0) | nibble);
}

template <bool kSymmetric>
void quantize_int4(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                   uint8_t* packed, uint16_t* scales_bf16, uint8_t* zero_points) {
  const int64_t groups = cols / group_size;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* prow = packed + r * (cols / 2);
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = w + r * cols + g * group_size;
      float lo = 0.0f, hi = 0.0f;  // min/max widened to include 0, as the helper does
      for (int64_t i = 0; i < group_size; ++i) {
        // NaN weights count as 0 here (they have no int4 value); comparisons skip them.
        lo = std::min(lo, src[i]);
        hi = std::max(hi, src[i]);
      }
      float scale;
      int zp = 0;  // signed zero point
      if constexpr (kSymmetric) {
        scale = std::max(std::max(-lo, hi) / 7.5f, kMinScale);
      } else {
        scale = std::max((hi - lo) / 15.0f, kMinScale);
      }
      if (!std::isfinite(scale)) scale = bf16_to_f32(0x7F7F);  // the largest finite bf16
      const uint16_t sb = f32_to_bf16(scale);
      const float s = bf16_to_f32(sb);
      if constexpr (!kSymmetric) zp = std::clamp(round_even(-8.0f - lo / s), -8, 7);
      scales_bf16[r * groups + g] = sb;
      if (zero_points) zero_points[r * groups + g] = uint8_t(zp + 8);
      for (int64_t i = 0; i < group_size; ++i) {
        const float v = src[i] / s;
        const int q = std::isnan(v) ? 0 : int(std::clamp(std::nearbyint(v), -16.0f, 16.0f)) + zp;
        put_nibble(prow, g * group_size + i, std::clamp(q, -8, 7) + 8);
      }
    }
  }
}

}  // namespace

void quantize_int4_symmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                             uint8_t* packed, uint16_t* scales_bf16) {
  check_shape("quantize_int4_symmetric", rows, cols, group_size, true);
  quantize_int4<true>(w, rows, cols, group_size, packed, scales_bf16, nullptr);
}

void quantize_int4_asymmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                              uint8_t* packed, uint16_t* scales_bf16, uint8_t* zero_points) {
  check_shape("quantize_int4_asymmetric", rows, cols, group_size, true);
  quantize_int4<false>(w, rows, cols, group_size, packed, scales_bf16, zero_points);
}

void quantize_int8_symmetric(const float* w, int64_t rows, int64_t cols, int64_t group_size,
                             int8_t* q, float* scales) {
  check_shape("quantize_int8_symmetric", rows, cols, group_size, false);
  const int64_t groups = cols / group_size;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = w + r * cols + g * group_size;
      int8_t* dst = q + r * cols + g * group_size;
      float absmax = 0.0f;
      for (int64_t i = 0; i < group_size; ++i) absmax = std::max(absmax, std::fabs(src[i]));
      if (!std::isfinite(absmax)) absmax = std::numeric_limits<float>::max();
      const float scale = absmax / 127.0f;
      scales[r * groups + g] = scale;
      for (int64_t i = 0; i < group_size; ++i) {
        const float v = scale > 0.0f ? src[i] / scale : 0.0f;
        dst[i] = std::isnan(v) ? 0 : int8_t(std::clamp(std::nearbyint(v), -127.0f, 127.0f));
      }
    }
}

float quantize_activation_row(const float* x, int64_t n, int8_t* q) {
  // Every decode product of an int8-activation format runs this once per token: the loops are
  // written to vectorise (no per-element calls, no data-dependent branches).
  float absmax = 0.0f, poison = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    absmax = absmax > a ? absmax : a;
    poison += x[i] * 0.0f;  // NaN once any element is NaN or infinite
  }
  if (poison != 0.0f || absmax == 0.0f) {
    std::fill_n(q, n, int8_t(0));
    return poison == 0.0f ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = absmax / 127.0f;
  const float inv = 1.0f / scale;
  // Adding and subtracting 1.5 * 2^23 rounds |v| <= 127 to the nearest integer, ties to even:
  // std::nearbyint's result in the default rounding mode, without a library call per element.
  constexpr float kRound = 12582912.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::min(127.0f, std::max(-127.0f, x[i] * inv));
    q[i] = int8_t(int32_t((v + kRound) - kRound));
  }
  return scale;
}

void dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  kernels::validate_weight(w, "dequantize_row");
  if (row < 0 || row >= w.rows)
    throw Error("dequantize_row: row " + std::to_string(row) + " out of [0, " +
                std::to_string(w.rows) + ")");
  const int64_t cols = w.cols;
  if (w.format == WeightFormat::Dense) {
    convert_to_f32(w.dtype, static_cast<const std::byte*>(w.data) + size_t(row * cols) * dtype_size(w.dtype),
                   out, cols);
    return;
  }
  const int64_t groups = cols / w.group_size;
  for (int64_t g = 0; g < groups; ++g) {
    const float s = kernels::scale_at(w, row, g);
    const int64_t k0 = g * w.group_size;
    if (w.format == WeightFormat::Int4Group) {
      const auto* p = static_cast<const uint8_t*>(w.data) + row * (cols / 2);
      const int z = w.zero_points ? w.zero_points[row * groups + g] : 8;
      for (int64_t i = k0; i < k0 + w.group_size; ++i)
        out[i] = float(((p[i / 2] >> (4 * (i % 2))) & 0xF) - z) * s;
    } else {
      const auto* p = static_cast<const int8_t*>(w.data) + row * cols;
      for (int64_t i = k0; i < k0 + w.group_size; ++i) out[i] = float(p[i]) * s;
    }
  }
}

}  // namespace kimi
