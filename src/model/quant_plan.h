#pragma once
// Which linear layers a quantization preset turns into which integer format. One table, used by
// `kimi make-model --quant` (what it writes) and by `--quantization` (what a float checkpoint is
// quantized to on load), so the two agree.
//  - int4 (= w4a16): the official Kimi-K2.5 INT4 release: routed experts int4, symmetric, group
//    32, float activations; attention, shared experts, dense MLPs and lm_head stay float.
//  - w4a8: routed experts int4 (group 32 on load; per channel in the msModelSlim files
//    make-model writes, as the Ascend release stores them), every other linear int8 per output
//    channel, activations dynamically quantized to int8 per token.
//  - w8a8: every linear int8 per output channel, int8 activations.
// kv_b_proj stays float in all presets (the absorbed MLA attention folds it into queries and
// outputs, as vLLM does after dequantizing it), and so do the router, embeddings and lm_head.
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/matmul.h"

namespace kimi {

enum class QuantPreset { None, Int4, W4A8, W8A8 };

// "int4" | "w4a16" | "w4a8" | "w8a8" (case-insensitive); throws kimi::Error otherwise.
QuantPreset parse_quant_preset(std::string_view name);
std::string_view quant_preset_name(QuantPreset p);

struct LinearQuant {
  WeightFormat format = WeightFormat::Dense;
  ActivationQuant act = ActivationQuant::None;
  int64_t group_size = 0;  // 0: one scale per output channel
};

// The target of a linear module (published name without ".weight") under a preset.
LinearQuant linear_quant(QuantPreset preset, const std::string& module);

// Module-name classification shared with the loader.
bool is_routed_expert(const std::string& module);
bool is_kv_b_proj(const std::string& module);

}  // namespace kimi
