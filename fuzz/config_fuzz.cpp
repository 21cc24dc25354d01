// The config.json reader (and the compressed-tensors quantization_config it carries) on fuzzer
// text. Whatever the input, the readers either reject it with kimi::Error or accept it; any other
// exception (nlohmann type errors, std::regex errors, ...) escapes and counts as a crash, as does
// UB under UBSan (overflowing arithmetic on absurd sizes). An accepted config must pass its own
// validation again and give a usable attention scale (finite, positive); an accepted quantization
// config must answer scheme_for() for the module names a loader asks about.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "format/model_config.h"
#include "format/quantization_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const kimi::ModelConfig c = kimi::ModelConfig::from_json(j);
    c.validate("config.json");  // what from_json accepted stays valid
    const double scale = c.softmax_scale();
    KIMI_FUZZ_CHECK(std::isfinite(scale) && scale > 0, std::to_string(scale));
    for (int64_t layer : {int64_t(0), c.first_k_dense_replace, c.num_hidden_layers - 1}) (void)c.is_moe_layer(layer);
  } catch (const kimi::Error&) {
  }
  // The quantization_config, wherever the file has it (the model reader passes it on as is).
  const nlohmann::json* qc = &j;
  if (j.is_object() && j.contains("quantization_config")) qc = &j["quantization_config"];
  try {
    const auto q = kimi::CompressedTensorsConfig::parse(*qc, "config.json");
    for (const char* module : {"language_model.model.layers.3.mlp.experts.7.up_proj",
                               "language_model.model.layers.0.self_attn.q_a_proj", "lm_head",
                               "model.layers.1.mlp.shared_experts.down_proj"})
      if (const auto s = q.scheme_for(module)) {
        KIMI_FUZZ_CHECK(s->bits == 4 || s->bits == 8, std::to_string(s->bits));
        KIMI_FUZZ_CHECK(s->group_size >= 0, std::to_string(s->group_size));
      }
  } catch (const kimi::Error&) {
  }
  return 0;
}
