#include "modelgen/quantized_tensors.h"

#include <cstring>
#include <memory>

#include "common/error.h"
#include "kernels/quantize.h"

namespace kimi {

namespace {

// The int4 values of a quantized matrix, unpacked: q(r, i) in [-8, 7].
int unpacked_q(const std::vector<uint8_t>& packed, int64_t cols, int64_t r, int64_t i) {
  const uint8_t b = packed[size_t(r * cols / 2 + i / 2)];
  return int((i % 2) ? (b >> 4) : (b & 0xF)) - 8;
}

struct Int4Result {
  std::vector<uint8_t> packed;    // [rows, cols / 2], compressed-tensors nibble order
  std::vector<uint16_t> scales;   // bf16 [rows, cols / group]
};

Int4Result quantize_int4(const FloatWeightSource& source, int64_t rows, int64_t cols, int64_t group) {
  const std::vector<float> w = source();
  Int4Result r{std::vector<uint8_t>(size_t(rows * cols / 2)), std::vector<uint16_t>(size_t(rows * (cols / group)))};
  quantize_int4_symmetric(w.data(), rows, cols, group, r.packed.data(), r.scales.data());
  return r;
}

void put_f32_column(std::span<std::byte> out, const std::vector<float>& v) {
  std::memcpy(out.data(), v.data(), v.size() * 4);
}

void append_modelslim_common(const std::string& module, int64_t rows, const std::string& type,
                             std::function<std::vector<float>()> scales, std::vector<TensorSpec>& specs,
                             nlohmann::json& description) {
  specs.push_back({module + ".weight_scale", DType::F32, {rows, 1},
                   [scales](std::span<std::byte> out) { put_f32_column(out, scales()); }});
  specs.push_back({module + ".weight_offset", DType::F32, {rows, 1},
                   [](std::span<std::byte> out) { std::memset(out.data(), 0, out.size()); }});
  for (const char* suffix : {".weight", ".weight_scale", ".weight_offset"}) description[module + suffix] = type;
}

}  // namespace

bool append_quantized_linear(QuantPreset preset, const std::string& module, int64_t rows, int64_t cols,
                             FloatWeightSource source, std::vector<TensorSpec>& specs, nlohmann::json& description) {
  const LinearQuant target = linear_quant(preset, module);
  if (target.format == WeightFormat::Dense) return false;

  if (preset == QuantPreset::Int4) {  // compressed-tensors, as the official release
    const int64_t group = target.group_size;
    if (cols % group != 0 || cols % 8 != 0)
      throw Error("make-model --quant int4: " + module + " has " + std::to_string(cols) +
                  " inputs, not a multiple of the group size " + std::to_string(group));
    specs.push_back({module + ".weight_packed", DType::I32, {rows, cols / 8}, [=](std::span<std::byte> out) {
                       const Int4Result q = quantize_int4(source, rows, cols, group);
                       std::memcpy(out.data(), q.packed.data(), q.packed.size());  // little-endian words
                     }});
    specs.push_back({module + ".weight_scale", DType::BF16, {rows, cols / group}, [=](std::span<std::byte> out) {
                       const Int4Result q = quantize_int4(source, rows, cols, group);
                       std::memcpy(out.data(), q.scales.data(), q.scales.size() * 2);
                     }});
    specs.push_back({module + ".weight_shape", DType::I32, {2}, [=](std::span<std::byte> out) {
                       const int32_t shape[2] = {int32_t(rows), int32_t(cols)};
                       std::memcpy(out.data(), shape, sizeof shape);
                     }});
    return true;
  }

  // msModelSlim: one scale per output channel.
  if (target.format == WeightFormat::Int4Group) {
    if (rows % 2 != 0 || cols % 8 != 0)
      throw Error("make-model --quant: " + module + " [" + std::to_string(rows) + ", " + std::to_string(cols) +
                  "] cannot be stored as W4A8 (rows even, cols a multiple of 8)");
    specs.push_back({module + ".weight", DType::I8, {rows / 2, cols}, [=](std::span<std::byte> out) {
                       const Int4Result q = quantize_int4(source, rows, cols, cols);
                       auto* o = reinterpret_cast<uint8_t*>(out.data());
                       for (int64_t p = 0; p < rows / 2; ++p)
                         for (int64_t i = 0; i < cols; ++i)
                           o[p * cols + i] = uint8_t((unpacked_q(q.packed, cols, 2 * p, i) & 0xF) |
                                                     ((unpacked_q(q.packed, cols, 2 * p + 1, i) & 0xF) << 4));
                     }});
    append_modelslim_common(module, rows, "W4A8_DYNAMIC", [=] {
      const Int4Result q = quantize_int4(source, rows, cols, cols);
      std::vector<float> s(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) s[size_t(r)] = bf16_to_f32(q.scales[size_t(r)]);
      return s;
    }, specs, description);
    return true;
  }
  auto quantize8 = [=] {
    const std::vector<float> w = source();
    auto r = std::make_pair(std::vector<int8_t>(size_t(rows * cols)), std::vector<float>(size_t(rows)));
    quantize_int8_symmetric(w.data(), rows, cols, cols, r.first.data(), r.second.data());
    return r;
  };
  specs.push_back({module + ".weight", DType::I8, {rows, cols}, [=](std::span<std::byte> out) {
                     const auto q = quantize8();
                     std::memcpy(out.data(), q.first.data(), q.first.size());
                   }});
  append_modelslim_common(module, rows, "W8A8_DYNAMIC", [=] { return quantize8().second; }, specs, description);
  return true;
}

}  // namespace kimi
