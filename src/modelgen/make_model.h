#pragma once
// `kimi make-model`: writes a complete Hugging Face checkpoint directory of the Kimi-K2.5 layout
// (config.json with text_config, generation_config.json, safetensors shards with their index)
// filled with deterministic random weights.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/safetensors.h"

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
  // Overrides of the preset's sizes (0: the preset's): the number of decoder layers (the first
  // first_k_dense_replace of them dense, the rest MoE) and of routed experts per MoE layer (at
  // least num_experts_per_tok, which stays the preset's). They let the kimi-k2.5 preset's real
  // shapes fit in memory: 2 layers in the release's INT4 layout are ~15 GB.
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  // DeepSeek-V3's multi-token-prediction layers written after the decoder layers
  // (config num_nextn_predict_layers; model.layers.<num_hidden_layers>...), for `mtp` speculation.
  int64_t mtp_layers = 0;
};

// The preset's text_config with the options' size overrides applied; throws kimi::Error for an
// override out of range. What make_model writes, without writing anything.
nlohmann::json make_model_text_config(const MakeModelOptions& options);

struct MakeModelResult {
  int64_t num_tensors = 0;
  int64_t num_parameters = 0;
  size_t bytes = 0;
};

// Everything make_model writes except the tokenizer, before any weight is generated: the tensors'
// fill functions run only when written, so a plan of the real shapes costs nothing.
struct MakeModelPlan {
  nlohmann::json config;                 // config.json
  nlohmann::json modelslim_description = nlohmann::json::object();  // quant_model_description.json (w4a8 / w8a8)
  std::vector<TensorSpec> specs;         // in the order written
  MakeModelResult result;
};
MakeModelPlan plan_model(const MakeModelOptions& options);

// Writes the plan's files, its tensors streamed one at a time (memory: the largest tensor).
MakeModelResult make_model(const std::filesystem::path& out_dir, const MakeModelOptions& options);

}  // namespace kimi
