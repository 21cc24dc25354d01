#pragma once
// Scaled-down model shapes of the Kimi-K2.5 architecture for development, tests and benchmarks.
// Every preset keeps the real model's structure (MLA with q/kv LoRA, sigmoid noaux_tc MoE with
// shared experts and a dense first layer, YaRN rope with Kimi-K2.5's published parameters);
// only the sizes shrink.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kimi {

// The text_config object of a preset, with the same keys as Kimi-K2.5's config.json.
// Throws kimi::Error listing the known presets for an unknown name.
nlohmann::json preset_text_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace kimi
