#pragma once
// Binds a checkpoint's tensors to the kernels' weight matrices, whatever way they are stored:
// float (BF16/F16/F32), compressed-tensors int4/int8, or msModelSlim W8A8/W4A8 (see
// format/quantization_config.h). Bytes that already have the kernels' layout are used in place
// from the mapped file (the official INT4 experts, int8 weights, their scales); the rest
// (msModelSlim's output-packed int4, unpacked zero points, weights quantized on load,
// dequantized kv_b) is converted once into buffers the binder owns.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/checkpoint.h"
#include "format/model_config.h"
#include "format/quantization_config.h"
#include "kernels/matmul.h"
#include "model/quant_plan.h"

namespace kimi {

// `--dtype`: the activations of the float and W4A16 linears.
enum class ActivationDtype { Auto, Float32, BFloat16 };
std::string_view activation_dtype_name(ActivationDtype d);  // "auto", "float32", "bfloat16"

// What `--dtype` comes to for one checkpoint on one CPU (QuantizationRequest::activation_plan):
// which linears take 16-bit activations (ActivationQuant::Bf16).
struct ActivationPlan {
  // The linears that stay BF16 round their activations to bf16 (products exact, sums f32), as
  // vLLM's bfloat16 and llama.cpp's BF16 matmuls do: twice the multiply rate with AVX512_BF16;
  // elsewhere widened back to f32 for the f32 kernels (the same values).
  bool bf16_linears = false;
  // INT4 linears with float activations (W4A16, whose A16 is vLLM's bf16) take 16-bit ones: bf16
  // for the AVX512_BF16 kernel, int16 per block of 64 inputs for the AVX2 one
  // (kernels/quant_kernels.h, int4_word16_layout). Int8-activation linears keep theirs.
  bool int4_linears = false;
};
// "bf16 activations", "f32 activations", "f32 activations, 16-bit for INT4" (logs, bench headers);
// short: "bf16-act", "f32-act", "int4-16bit-act" (table labels).
std::string activation_summary(const ActivationPlan& p, bool short_form = false);

// What `--quantization` and `--dtype` asked for.
struct QuantizationRequest {
  // None: load as stored. Otherwise float linears are quantized on load per linear_quant(), and
  // stored integer weights keep their format but take the preset's activation mode (an INT4
  // checkpoint loaded with w4a8 runs its experts with int8 activations).
  QuantPreset preset = QuantPreset::None;
  // "compressed-tensors" or "ascend": the checkpoint must be stored that way (vLLM's spelling).
  std::string expect_method;
  // `--dtype` as given: Float32 none, BFloat16 every linear of ActivationPlan, Auto decided by
  // activation_plan() for the checkpoint and the CPU.
  ActivationDtype activations = ActivationDtype::Float32;

  // Parses vLLM-style values: "" / "none", "compressed-tensors", "ascend", int4, w4a16, w4a8, w8a8.
  static QuantizationRequest parse(const std::string& value);
  // Both flags at once: `--quantization` as above and `--dtype` (parse_activation_dtype).
  static QuantizationRequest parse(const std::string& quantization, const std::string& dtype);
  // `--dtype`: "" / "auto" -> Auto, "float32" / "float" -> Float32, "bfloat16" -> BFloat16;
  // float16 / half are refused (kimi has no f16 activation kernels).
  static ActivationDtype parse_activation_dtype(const std::string& dtype);
  // Auto follows the checkpoint's dtype (config.json's torch_dtype), as vLLM's auto does, where
  // that is faster: for a bfloat16 checkpoint, the BF16 linears take bf16 where the CPU multiplies
  // it (bf16_dot: AVX512_BF16), and the INT4 linears 16-bit activations there and where the CPU's
  // kernels are AVX2's (int16_int4: their int16 kernel). Nothing else gains by them: bf16
  // activations widened back to f32 would only cost accuracy.
  ActivationPlan activation_plan(const ModelConfig& config, bool bf16_dot, bool int16_int4) const;
  // The same against this process's CPU (cpu_features() and best_isa(), KIMI_MAX_CPU_ISA applied).
  ActivationPlan activation_plan(const ModelConfig& config) const;
};

// Buffers that outlive the binder: ModelWeights keeps them beside the matrices pointing into them.
using OwnedWeightBuffers = std::vector<std::vector<uint8_t>>;

class WeightBinder {
 public:
  WeightBinder(const Checkpoint& ckpt, const ModelConfig& config, const QuantizationRequest& request);

  // A linear layer's weight, `module` being its published name without ".weight". With
  // need_float the result is always Dense (quantized storage is dequantized to F32).
  WeightMatrix linear(const std::string& module, int64_t rows, int64_t cols, bool need_float = false);
  // A float matrix stored as-is (embeddings, router).
  WeightMatrix dense(const std::string& name, int64_t rows, int64_t cols);
  // A float vector converted to f32 (norms, router bias).
  std::vector<float> vector(const std::string& name, int64_t n);

  // "bf16", "compressed-tensors int4 (group 32)", ... for the load summary.
  std::string storage_summary() const;
  size_t total_bytes() const { return total_bytes_; }
  OwnedWeightBuffers take_buffers() { return std::move(owned_); }

 private:
  const TensorView& tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  std::optional<WeightMatrix> stored_compressed_tensors(const std::string& module, int64_t rows, int64_t cols);
  std::optional<WeightMatrix> stored_modelslim(const std::string& module, int64_t rows, int64_t cols);
  WeightMatrix quantize(const WeightMatrix& dense, const LinearQuant& target);
  WeightMatrix dequantize(const WeightMatrix& w);
  // w with ActivationQuant::Bf16 where the activation plan asks for it and w can take it.
  WeightMatrix with_bf16_activations(WeightMatrix w);
  const void* scales_in_kernel_dtype(const TensorView& t, DType& dtype);
  uint8_t* own(size_t bytes);

  const Checkpoint& ckpt_;
  QuantizationRequest request_;
  ActivationPlan plan_;
  std::optional<CompressedTensorsConfig> ct_;
  std::optional<ModelSlimDescription> slim_;
  OwnedWeightBuffers owned_;
  size_t total_bytes_ = 0;
  int64_t stored_int4_ = 0, stored_int8_ = 0, quantized_on_load_ = 0, bf16_activation_linears_ = 0,
          int4_bf16_activation_linears_ = 0;
};

}  // namespace kimi
