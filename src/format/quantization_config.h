#pragma once
// How a published checkpoint says its weights are quantized. Two conventions exist for Kimi-K2.5:
//  - compressed-tensors (`quantization_config` in config.json, quant_method "compressed-tensors",
//    format "pack-quantized"): config groups whose `targets` select modules, an `ignore` list,
//    per-group or per-channel int4/int8 weights in `weight_packed` / `weight_scale` /
//    `weight_shape` (+ `weight_zero_point` when asymmetric). The official INT4 release uses it.
//  - msModelSlim (Ascend; `quant_model_description.json` beside the shards): a flat map from
//    tensor names to a type string (FLOAT, W8A8_DYNAMIC, W4A8_DYNAMIC, ...).
// This file only interprets the descriptions; model/weight_binder.cpp reads the tensors.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <memory>
#include <string>
#include <vector>

struct pcre2_real_code_8;  // PCRE2's compiled pattern (pcre2.h stays out of this header)

namespace kimi {

// A "re:" module pattern, matched against the whole module name with PCRE2 under a match limit:
// the pattern comes from the checkpoint's config.json, and std::regex (which this replaced) ran
// for hours on nested quantifiers such as ".**x" (found by fuzz_config).
class ModulePattern {
 public:
  ModulePattern(const std::string& pattern, const std::string& source);  // throws kimi::Error if invalid
  bool matches(const std::string& module) const;  // throws kimi::Error past the match limit

 private:
  std::string pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;
};

// One compressed-tensors config group's weight (and activation) arguments.
struct CompressedTensorsScheme {
  int bits = 4;
  bool symmetric = true;
  int64_t group_size = 0;         // 0: per channel (strategy "channel")
  bool dynamic_int8_activations = false;  // input_activations {num_bits 8, dynamic true}
};

class CompressedTensorsConfig {
 public:
  // Parses config.json's quantization_config; throws kimi::Error naming `source` for a method,
  // format or argument this engine cannot run (e.g. fp8, marlin-24, 3-bit, actorder).
  static CompressedTensorsConfig parse(const nlohmann::json& qc, const std::string& source);

  // The scheme of a Linear module (its name without ".weight", e.g.
  // "language_model.model.layers.3.mlp.experts.7.up_proj"), or nullopt when it stays unquantized:
  // listed in `ignore` (exact name or "re:" regex) or matched by no group's `targets`. Targets
  // are "Linear" (any linear module), exact names or "re:" regexes, as in compressed-tensors.
  std::optional<CompressedTensorsScheme> scheme_for(const std::string& module) const;

  // The Kimi-K2.5 release's own config (INT4, symmetric, group 32, routed experts only),
  // which make-model writes for `--quant int4`.
  static nlohmann::json kimi_k25_int4_json();

 private:
  static CompressedTensorsConfig parse_checked(const nlohmann::json& qc, const std::string& source);
  struct Group {
    CompressedTensorsScheme scheme;
    bool any_linear = false;
    std::vector<std::string> names;
    std::vector<ModulePattern> patterns;
  };
  std::vector<Group> groups_;
  std::vector<std::string> ignore_names_;
  std::vector<ModulePattern> ignore_patterns_;
};

// msModelSlim's quant_model_description.json.
class ModelSlimDescription {
 public:
  static constexpr const char* kFileName = "quant_model_description.json";
  static std::optional<ModelSlimDescription> load(const std::filesystem::path& model_dir);  // nullopt if absent
  static ModelSlimDescription parse(const nlohmann::json& j, const std::string& source);

  // The type string of a tensor ("FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC", ...); "FLOAT" when absent.
  std::string type_of(const std::string& tensor_name) const;
  const std::string& model_quant_type() const { return model_quant_type_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string model_quant_type_;
  std::map<std::string, std::string, std::less<>> types_;
};

}  // namespace kimi
