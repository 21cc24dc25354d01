#pragma once
// `kimi make-model`: writes a complete Hugging Face checkpoint directory of the Kimi-K2.5 layout
// (config.json with text_config, generation_config.json, safetensors shards with their index)
// filled with deterministic random weights.
#include <cstdint>
#include <filesystem>
#include <string>

#include "common/dtype.h"
#include "model/quant_plan.h"

namespace kimi {

enum class CheckpointForm {
  KimiK25,     // KimiK25ForConditionalGeneration: text model under text_config, "language_model." names
  DeepseekV3,  // flat DeepseekV3ForCausalLM (Kimi-K2, Moonlight, DeepSeek-V3)
};

struct MakeModelOptions {
  std::string preset = "tiny";
  uint64_t seed = 0;
  DType dtype = DType::BF16;  // of the weight matrices and norms; the router bias is always F32
  CheckpointForm form = CheckpointForm::KimiK25;
  size_t max_shard_bytes = size_t(512) << 20;
  // None: float weights. Int4: the official INT4 release's compressed-tensors layout (routed
  // experts). W4A8 / W8A8: msModelSlim files with quant_model_description.json.
  QuantPreset quant = QuantPreset::None;
};

struct MakeModelResult {
  int64_t num_tensors = 0;
  int64_t num_parameters = 0;
  size_t bytes = 0;
};

MakeModelResult make_model(const std::filesystem::path& out_dir, const MakeModelOptions& options);

}  // namespace kimi
