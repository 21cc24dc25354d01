#include "model/weight_binder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/cpu_features.h"
#include "kernels/quantize.h"

namespace kimi {

namespace {

bool is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

int64_t integer_at(const TensorView& t, int64_t i) {
  if (t.dtype == DType::I32) {
    int32_t v;
    std::memcpy(&v, t.data.data() + 4 * i, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, t.data.data() + 8 * i, 8);
  return v;
}

// Element i of a float tensor (BF16, F16 or F32) of the file, checked to be one.
float float_at(const TensorView& t, int64_t i) {
  if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
    throw Error(t.file.string() + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                " (expected BF16, F16 or F32)");
  float v = 0;
  convert_to_f32(t.dtype, t.data.data() + size_t(i) * dtype_size(t.dtype), &v, 1);
  return v;
}

}  // namespace

QuantizationRequest QuantizationRequest::parse(const std::string& value) {
  QuantizationRequest r;
  const std::string v = lower(value);
  if (v.empty() || v == "none") return r;
  if (v == "compressed-tensors" || v == "compressed_tensors") r.expect_method = "compressed-tensors";
  else if (v == "ascend" || v == "modelslim") r.expect_method = "ascend";
  else r.preset = parse_quant_preset(v);
  return r;
}

QuantizationRequest QuantizationRequest::parse(const std::string& quantization, const std::string& dtype) {
  QuantizationRequest r = parse(quantization);
  r.activations = parse_activation_dtype(dtype);
  return r;
}

ActivationDtype QuantizationRequest::parse_activation_dtype(const std::string& dtype) {
  const std::string v = lower(dtype);
  if (v.empty() || v == "auto") return ActivationDtype::Auto;
  if (v == "float32" || v == "float") return ActivationDtype::Float32;
  if (v == "bfloat16") return ActivationDtype::BFloat16;
  if (v == "float16" || v == "half")
    throw Error("--dtype " + dtype + ": kimi computes with float32 or bfloat16 activations, not float16");
  throw Error("--dtype " + dtype + ": expected auto, float32 or bfloat16");
}

ActivationPlan QuantizationRequest::activation_plan(const ModelConfig& config, bool bf16_dot, bool int16_int4) const {
  switch (activations) {
    case ActivationDtype::Float32: return {};
    case ActivationDtype::BFloat16: return {true, true};
    case ActivationDtype::Auto: break;
  }
  if (config.torch_dtype != "bfloat16") return {};
  return {bf16_dot, bf16_dot || int16_int4};
}

ActivationPlan QuantizationRequest::activation_plan(const ModelConfig& config) const {
  return activation_plan(config, has_avx512_bf16(), best_isa() == Isa::Avx2);
}

std::string activation_summary(const ActivationPlan& p, bool short_form) {
  if (short_form) return p.bf16_linears ? "bf16-act" : p.int4_linears ? "int4-16bit-act" : "f32-act";
  if (p.bf16_linears) return p.int4_linears ? "bf16 activations" : "bf16 activations, f32 for INT4";
  return p.int4_linears ? "f32 activations, 16-bit for INT4" : "f32 activations";
}

std::string_view activation_dtype_name(ActivationDtype d) {
  switch (d) {
    case ActivationDtype::Auto: return "auto";
    case ActivationDtype::Float32: return "float32";
    case ActivationDtype::BFloat16: return "bfloat16";
  }
  return "?";
}

WeightBinder::WeightBinder(const Checkpoint& ckpt, const ModelConfig& config, const QuantizationRequest& request)
    : ckpt_(ckpt), request_(request), plan_(request.activation_plan(config)) {
  const std::string source = (ckpt.dir() / "config.json").string();
  if (!config.quantization_config.is_null()) ct_ = CompressedTensorsConfig::parse(config.quantization_config, source);
  slim_ = ModelSlimDescription::load(ckpt.dir());
  if (ct_ && slim_)
    throw Error(ckpt.dir().string() + ": both a compressed-tensors quantization_config and " +
                ModelSlimDescription::kFileName + "; which one describes the weights is ambiguous");
  if (request.expect_method == "compressed-tensors" && !ct_)
    throw Error("--quantization compressed-tensors: " + source + " has no compressed-tensors quantization_config");
  if (request.expect_method == "ascend" && !slim_)
    throw Error("--quantization ascend: " + ckpt.dir().string() + " has no " + ModelSlimDescription::kFileName);
}

const TensorView& WeightBinder::tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  return ckpt_.get(name, shape);
}

uint8_t* WeightBinder::own(size_t bytes) {
  owned_.emplace_back(bytes);
  return owned_.back().data();
}

// The kernels read BF16 or F32 scales; F16 ones are widened once.
const void* WeightBinder::scales_in_kernel_dtype(const TensorView& t, DType& dtype) {
  if (t.dtype == DType::BF16 || t.dtype == DType::F32) {
    dtype = t.dtype;
    return t.data.data();
  }
  if (t.dtype != DType::F16)
    throw Error(t.file.string() + ": scale tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                "; expected BF16, F16 or F32");
  auto* out = reinterpret_cast<float*>(own(size_t(t.numel()) * 4));
  convert_to_f32(t.dtype, t.data.data(), out, t.numel());
  dtype = DType::F32;
  return out;
}

std::optional<WeightMatrix> WeightBinder::stored_compressed_tensors(const std::string& module, int64_t rows,
                                                                    int64_t cols) {
  const std::optional<CompressedTensorsScheme> s = ct_->scheme_for(module);
  if (!s) return std::nullopt;
  const int64_t group = s->group_size > 0 ? s->group_size : cols;
  if (cols % group != 0)
    throw Error(module + ": input size " + std::to_string(cols) + " is not a multiple of the group size " +
                std::to_string(group));
  const int64_t groups = cols / group;
  WeightMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  w.act_quant = s->dynamic_int8_activations ? ActivationQuant::Int8PerToken : ActivationQuant::None;
  if (s->bits == 4) {
    if (cols % 8 != 0) throw Error(module + ": input size " + std::to_string(cols) + " is not a multiple of 8");
    const TensorView& packed = tensor(module + ".weight_packed", {rows, cols / 8});
    if (packed.dtype != DType::I32)
      throw Error(packed.file.string() + ": tensor '" + packed.name + "' has dtype " +
                  std::string(dtype_name(packed.dtype)) + "; expected I32 (8 int4 values per word)");
    const TensorView& shape = tensor(module + ".weight_shape", {2});
    if ((shape.dtype != DType::I32 && shape.dtype != DType::I64) || integer_at(shape, 0) != rows ||
        integer_at(shape, 1) != cols)
      throw Error(shape.file.string() + ": tensor '" + shape.name + "' does not hold the shape [" +
                  std::to_string(rows) + ", " + std::to_string(cols) + "] the config implies");
    w.format = WeightFormat::Int4Group;
    w.data = packed.data.data();
    total_bytes_ += packed.data.size();
    if (!s->symmetric) {
      // Zero points are packed 8 per int32 along the OUTPUT dim ([ceil(rows/8), groups]) and,
      // like the weights, offset by 8; unpacked once to one byte per (row, group).
      const TensorView& zp = tensor(module + ".weight_zero_point", {(rows + 7) / 8, groups});
      if (zp.dtype != DType::I32)
        throw Error(zp.file.string() + ": tensor '" + zp.name + "' has dtype " + std::string(dtype_name(zp.dtype)) +
                    "; expected I32");
      uint8_t* z = own(size_t(rows * groups));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < groups; ++g)
          z[r * groups + g] = uint8_t((uint32_t(integer_at(zp, (r / 8) * groups + g)) >> (4 * (r % 8))) & 0xF);
      w.zero_points = z;
      total_bytes_ += zp.data.size();
    }
  } else {
    const TensorView& q = tensor(module + ".weight", {rows, cols});
    if (q.dtype != DType::I8)
      throw Error(q.file.string() + ": tensor '" + q.name + "' has dtype " + std::string(dtype_name(q.dtype)) +
                  "; expected I8");
    w.format = WeightFormat::Int8Group;
    w.data = q.data.data();
    total_bytes_ += q.data.size();
  }
  const TensorView& scale = tensor(module + ".weight_scale", {rows, groups});
  w.scales = scales_in_kernel_dtype(scale, w.scale_dtype);
  total_bytes_ += scale.data.size();
  ++(s->bits == 4 ? stored_int4_ : stored_int8_);
  return w;
}

std::optional<WeightMatrix> WeightBinder::stored_modelslim(const std::string& module, int64_t rows, int64_t cols) {
  const std::string type = slim_->type_of(module + ".weight");
  if (type == "FLOAT") return std::nullopt;
  const std::string where = slim_->source() + ": " + module + ".weight is " + type;
  if (type != "W8A8_DYNAMIC" && type != "W4A8_DYNAMIC")
    throw Error(where + "; supported types are FLOAT, W8A8_DYNAMIC and W4A8_DYNAMIC");
  if (ckpt_.contains(module + ".weight_scale_second"))
    throw Error(where + " with per-group second-level scales (weight_scale_second), which is not supported");
  const TensorView& scale = tensor(module + ".weight_scale", {rows, 1});
  const TensorView& offset = tensor(module + ".weight_offset", {rows, 1});
  WeightMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = cols;  // msModelSlim's dynamic types scale per output channel
  w.act_quant = ActivationQuant::Int8PerToken;
  w.scales = scales_in_kernel_dtype(scale, w.scale_dtype);
  total_bytes_ += scale.data.size() + offset.data.size();
  // value = (q + offset) * scale; symmetric files store offset 0.
  std::vector<int> zero(size_t(rows), 0);
  bool asymmetric = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float o = float_at(offset, r);
    if (o != std::nearbyint(o) || std::fabs(o) > 8)
      throw Error(where + ": weight_offset " + std::to_string(o) + " (row " + std::to_string(r) +
                  ") is not a small integer");
    zero[size_t(r)] = int(o);
    asymmetric |= o != 0;
  }
  if (type == "W8A8_DYNAMIC") {
    if (asymmetric) throw Error(where + " with a non-zero weight_offset; only symmetric int8 is supported");
    const TensorView& q = tensor(module + ".weight", {rows, cols});
    if (q.dtype != DType::I8) throw Error(where + " but its dtype is " + std::string(dtype_name(q.dtype)));
    w.format = WeightFormat::Int8Group;
    w.data = q.data.data();
    total_bytes_ += q.data.size();
    ++stored_int8_;
    return w;
  }
  // W4A8_DYNAMIC: two signed int4 per byte along the OUTPUT dim (even row in the low nibble);
  // repacked to the kernels' input-dim packing with unsigned nibbles.
  if (rows % 2 != 0 || cols % 8 != 0)
    throw Error(where + ": shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] cannot hold packed int4 (rows even, cols a multiple of 8)");
  const TensorView& q = tensor(module + ".weight", {rows / 2, cols});
  if (q.dtype != DType::I8 && q.dtype != DType::U8) throw Error(where + " but its dtype is " + std::string(dtype_name(q.dtype)));
  const auto* src = reinterpret_cast<const uint8_t*>(q.data.data());
  uint8_t* dst = own(size_t(rows * cols / 2));
  for (int64_t r = 0; r < rows; ++r) {
    const int shift = int(r % 2) * 4;
    const uint8_t* in = src + (r / 2) * cols;
    uint8_t* out = dst + r * cols / 2;
    for (int64_t i = 0; i < cols; i += 2) {
      // Sign-extend each nibble, then store q + 8 (unsigned, zero point 8).
      const int lo = ((int(in[i] >> shift) & 0xF) ^ 8) - 8, hi = ((int(in[i + 1] >> shift) & 0xF) ^ 8) - 8;
      out[i / 2] = uint8_t((lo + 8) | ((hi + 8) << 4));
    }
  }
  if (asymmetric) {
    uint8_t* z = own(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) z[r] = uint8_t(8 - zero[size_t(r)]);  // (q + offset) = (nibble - (8 - offset))
    w.zero_points = z;
  }
  w.format = WeightFormat::Int4Group;
  w.data = dst;
  total_bytes_ += q.data.size();
  ++stored_int4_;
  return w;
}

WeightMatrix WeightBinder::quantize(const WeightMatrix& dense, const LinearQuant& t) {
  std::vector<float> f(size_t(dense.rows * dense.cols));
  convert_to_f32(dense.dtype, dense.data, f.data(), dense.rows * dense.cols);
  WeightMatrix w;
  w.rows = dense.rows;
  w.cols = dense.cols;
  w.format = t.format;
  w.act_quant = t.act;
  w.group_size = t.group_size > 0 && dense.cols % t.group_size == 0 ? t.group_size : dense.cols;
  const int64_t groups = w.cols / w.group_size;
  if (t.format == WeightFormat::Int4Group && w.cols % 8 == 0) {
    uint8_t* packed = own(size_t(w.rows * w.cols / 2));
    auto* scales = reinterpret_cast<uint16_t*>(own(size_t(w.rows * groups) * 2));
    quantize_int4_symmetric(f.data(), w.rows, w.cols, w.group_size, packed, scales);
    w.data = packed;
    w.scales = scales;
    w.scale_dtype = DType::BF16;
  } else {
    auto* q = reinterpret_cast<int8_t*>(own(size_t(w.rows * w.cols)));
    auto* scales = reinterpret_cast<float*>(own(size_t(w.rows * groups) * 4));
    quantize_int8_symmetric(f.data(), w.rows, w.cols, w.group_size, q, scales);
    w.format = WeightFormat::Int8Group;
    w.data = q;
    w.scales = scales;
    w.scale_dtype = DType::F32;
  }
  ++quantized_on_load_;
  return w;
}

WeightMatrix WeightBinder::dequantize(const WeightMatrix& q) {
  auto* f = reinterpret_cast<float*>(own(size_t(q.rows * q.cols) * 4));
  for (int64_t r = 0; r < q.rows; ++r) dequantize_row(q, r, f + r * q.cols);
  return WeightMatrix{.dtype = DType::F32, .data = f, .rows = q.rows, .cols = q.cols};
}

WeightMatrix WeightBinder::linear(const std::string& module, int64_t rows, int64_t cols, bool need_float) {
  std::optional<WeightMatrix> stored;
  if (ct_) stored = stored_compressed_tensors(module, rows, cols);
  else if (slim_) stored = stored_modelslim(module, rows, cols);
  if (stored) {
    // Integer weights keep their format; a requested preset only decides the activations.
    if (request_.preset != QuantPreset::None) {
      const LinearQuant target = linear_quant(request_.preset, module);
      stored->act_quant = target.format == WeightFormat::Dense ? stored->act_quant : target.act;
    }
    return need_float ? dequantize(*stored) : with_bf16_activations(*stored);
  }
  WeightMatrix w = dense(module + ".weight", rows, cols);
  const LinearQuant target = linear_quant(request_.preset, module);
  if (need_float) return w;
  if (target.format != WeightFormat::Dense) return with_bf16_activations(quantize(w, target));
  return with_bf16_activations(w);
}

WeightMatrix WeightBinder::with_bf16_activations(WeightMatrix w) {
  if (w.act_quant != ActivationQuant::None) return w;
  if (w.format == WeightFormat::Int4Group && plan_.int4_linears) {
    w.act_quant = ActivationQuant::Bf16;
    ++int4_bf16_activation_linears_;
  } else if (w.format == WeightFormat::Dense && w.dtype == DType::BF16 && plan_.bf16_linears) {
    w.act_quant = ActivationQuant::Bf16;
    ++bf16_activation_linears_;
  }
  return w;
}

WeightMatrix WeightBinder::dense(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = tensor(name, {rows, cols});
  if (!is_float(t.dtype))
    throw Error(t.file.string() + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                "; expected BF16, F16 or F32" +
                (ct_ || slim_ ? "" : " (integer weights need a quantization_config or " +
                                         std::string(ModelSlimDescription::kFileName) + ")"));
  total_bytes_ += t.data.size();
  return WeightMatrix{.dtype = t.dtype, .data = t.data.data(), .rows = rows, .cols = cols};
}

std::vector<float> WeightBinder::vector(const std::string& name, int64_t n) {
  const TensorView& t = tensor(name, {n});
  if (!is_float(t.dtype))
    throw Error(t.file.string() + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                "; expected BF16, F16 or F32");
  std::vector<float> v(static_cast<size_t>(n));
  convert_to_f32(t.dtype, t.data.data(), v.data(), n);
  total_bytes_ += t.data.size();
  return v;
}

std::string WeightBinder::storage_summary() const {
  std::string s = ct_ ? "compressed-tensors" : slim_ ? "msModelSlim " + slim_->model_quant_type() : "float";
  if (stored_int4_ || stored_int8_)
    s += ": " + std::to_string(stored_int4_) + " int4 and " + std::to_string(stored_int8_) + " int8 linears stored";
  if (quantized_on_load_)
    s += "; " + std::to_string(quantized_on_load_) + " linears quantized on load (" +
         std::string(quant_preset_name(request_.preset)) + ")";
  if (bf16_activation_linears_) s += "; " + std::to_string(bf16_activation_linears_) + " BF16 linears with bf16 activations";
  if (int4_bf16_activation_linears_)
    s += "; " + std::to_string(int4_bf16_activation_linears_) + " INT4 linears with 16-bit activations";
  return s;
}

}  // namespace kimi
