#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "format/model_config.h"
#include "modelgen/presets.h"

namespace kimi {
namespace {

// Kimi-K2.5's published text_config values (shared/kimi-k25-facts.md, section 1.2).
nlohmann::json kimi_k25_text_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
    "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
    "num_attention_heads": 64, "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": true,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "hidden_act": "silu", "rope_theta": 50000.0, "max_position_embeddings": 262144, "rms_norm_eps": 1e-05,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "attention_bias": false, "tie_word_embeddings": false,
    "bos_token_id": 163584, "eos_token_id": 163585, "pad_token_id": 163839})");
}

TEST(ModelConfig, ParsesKimiK25MultimodalForm) {
  nlohmann::json root = {{"architectures", {"KimiK25ForConditionalGeneration"}},
                         {"model_type", "kimi_k25"},
                         {"text_config", kimi_k25_text_config()},
                         {"vision_config", {{"vt_hidden_size", 1152}}},
                         {"bos_token_id", 163584},
                         {"eos_token_id", 163585}};
  const ModelConfig c = ModelConfig::from_json(root);
  EXPECT_EQ(c.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(c.tensor_prefix, "language_model.");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(60));
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.eos_token_id, 163585);
  // 1/sqrt(192) times the squared YaRN mscale for factor 64.
  const double m = 0.1 * std::log(64.0) + 1.0;
  EXPECT_NEAR(c.softmax_scale(), m * m / std::sqrt(192.0), 1e-12);
}

TEST(ModelConfig, ParsesFlatDeepseekV3Form) {
  const ModelConfig c = ModelConfig::from_json(kimi_k25_text_config());
  EXPECT_EQ(c.tensor_prefix, "");
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.kv_lora_rank, 512);
}

// The published dtype: text_config's torch_dtype first, then the file's (newer transformers
// write "dtype"), empty when neither says.
TEST(ModelConfig, ReadsTheCheckpointDtype) {
  nlohmann::json text = kimi_k25_text_config();
  EXPECT_EQ(ModelConfig::from_json(text).torch_dtype, "");
  nlohmann::json root = {{"text_config", text}, {"dtype", "bfloat16"}};
  EXPECT_EQ(ModelConfig::from_json(root).torch_dtype, "bfloat16");
  root["text_config"]["torch_dtype"] = "float32";
  EXPECT_EQ(ModelConfig::from_json(root).torch_dtype, "float32");
  text["dtype"] = "float16";
  EXPECT_EQ(ModelConfig::from_json(text).torch_dtype, "float16");
}

TEST(ModelConfig, AcceptsRopeTypeSpellingAndNullQLora) {
  nlohmann::json j = kimi_k25_text_config();
  j["rope_scaling"].erase("type");
  j["rope_scaling"]["rope_type"] = "yarn";
  j["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite style: q_proj instead of q_a/q_b
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.q_lora_rank, 0);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  auto expect_error = [](nlohmann::json j, const std::string& needle) {
    try {
      ModelConfig::from_json(j, "/m/config.json");
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("/m/config.json"), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = kimi_k25_text_config();
  j.erase("hidden_size");
  expect_error(j, "hidden_size");
  j = kimi_k25_text_config();
  j["num_hidden_layers"] = "61";
  expect_error(j, "num_hidden_layers");
  j = kimi_k25_text_config();
  j["topk_group"] = 2;
  expect_error(j, "topk_group");
  j = kimi_k25_text_config();
  j["n_group"] = 5;  // 384 experts do not split into 5 groups
  expect_error(j, "n_group");
  j = kimi_k25_text_config();
  j["rope_scaling"]["type"] = "longrope";
  expect_error(j, "longrope");
  j = kimi_k25_text_config();
  j["qk_rope_head_dim"] = 63;
  expect_error(j, "qk_rope_head_dim");
  expect_error(nlohmann::json::array(), "not a JSON object");
  expect_error({{"text_config", 3}}, "text_config");
}

TEST(ModelConfig, PresetsAreValidAndUnknownOnesListTheKnown) {
  for (const auto& name : preset_names()) {
    const ModelConfig c = ModelConfig::from_json(preset_text_config(name), name);
    EXPECT_EQ(c.topk_method, "noaux_tc") << name;
    EXPECT_EQ(c.rope_scaling.type, "yarn") << name;
  }
  try {
    preset_text_config("huge");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny"), std::string::npos);
  }
}

}  // namespace
}  // namespace kimi
