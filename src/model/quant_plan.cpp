#include "model/quant_plan.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace kimi {

QuantPreset parse_quant_preset(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "int4" || s == "w4a16") return QuantPreset::Int4;
  if (s == "w4a8") return QuantPreset::W4A8;
  if (s == "w8a8") return QuantPreset::W8A8;
  throw Error("unknown quantization '" + std::string(name) + "' (expected int4, w4a16, w4a8 or w8a8)");
}

std::string_view quant_preset_name(QuantPreset p) {
  switch (p) {
    case QuantPreset::None: return "none";
    case QuantPreset::Int4: return "int4";
    case QuantPreset::W4A8: return "w4a8";
    case QuantPreset::W8A8: return "w8a8";
  }
  return "?";
}

bool is_routed_expert(const std::string& module) { return module.find(".mlp.experts.") != std::string::npos; }

bool is_kv_b_proj(const std::string& module) {
  const std::string_view suffix = "self_attn.kv_b_proj";
  return module.size() >= suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
}

namespace {
bool is_lm_head(const std::string& module) {
  const std::string_view suffix = "lm_head";
  return module.size() >= suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

LinearQuant linear_quant(QuantPreset preset, const std::string& module) {
  if (preset == QuantPreset::None || is_kv_b_proj(module) || is_lm_head(module)) return {};
  const bool expert = is_routed_expert(module);
  switch (preset) {
    case QuantPreset::Int4:
      if (expert) return {WeightFormat::Int4Group, ActivationQuant::None, 32};
      return {};
    case QuantPreset::W4A8:
      if (expert) return {WeightFormat::Int4Group, ActivationQuant::Int8PerToken, 32};
      return {WeightFormat::Int8Group, ActivationQuant::Int8PerToken, 0};
    case QuantPreset::W8A8: return {WeightFormat::Int8Group, ActivationQuant::Int8PerToken, 0};
    case QuantPreset::None: break;
  }
  return {};
}

}  // namespace kimi
