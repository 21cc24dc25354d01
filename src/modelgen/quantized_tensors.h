#pragma once
// The tensors `kimi make-model --quant` writes in place of a float linear weight, in the two
// published conventions (format/quantization_config.h):
//  - int4: compressed-tensors pack-quantized, as the official Kimi-K2.5 INT4 release
//    (weight_packed int32 [out, in/8], weight_scale bf16 [out, in/32], weight_shape int32 [2]);
//  - w4a8 / w8a8: msModelSlim W4A8_DYNAMIC (weight int8 [out/2, in], two int4 per byte along the
//    output dim, even row in the low nibble) and W8A8_DYNAMIC (weight int8 [out, in]), each with
//    weight_scale / weight_offset float32 [out, 1], listed in quant_model_description.json.
// The values quantized are the float model's own (same seed), so the two can be compared.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "model/quant_plan.h"

namespace kimi {

// The float weight of a [rows, cols] linear, produced on demand (it is needed once per tensor).
using FloatWeightSource = std::function<std::vector<float>()>;

// Appends the tensors that store `module` (published name without ".weight") under `preset`;
// returns false, appending nothing, when the preset keeps this linear in float. Records each
// written tensor's msModelSlim type in `description` for the w4a8/w8a8 presets.
bool append_quantized_linear(QuantPreset preset, const std::string& module, int64_t rows, int64_t cols,
                             FloatWeightSource source, std::vector<TensorSpec>& specs, nlohmann::json& description);

}  // namespace kimi
