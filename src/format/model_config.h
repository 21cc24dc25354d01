#pragma once
// The text model's hyper-parameters, read from a Hugging Face config.json in either published
// form: Kimi-K2.5's multimodal KimiK25ForConditionalGeneration (text model under "text_config",
// tensors prefixed "language_model.") or the flat DeepseekV3ForCausalLM of Kimi-K2, Moonlight
// and DeepSeek-V3.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kimi {

struct RopeScaling {
  std::string type;  // "yarn" (the only scaling these models publish), or empty for plain RoPE
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct ModelConfig {
  std::string architecture;      // architectures[0] of the file
  std::string model_type;        // text model_type (kimi_k2, deepseek_v3, ...)
  std::string tensor_prefix;     // "language_model." for the K2.5 form, "" for the flat form

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;       // dense MLP layers
  int64_t moe_intermediate_size = 0;   // each routed / shared expert
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";

  // Multi-head latent attention.
  int64_t q_lora_rank = 0;             // 0: no query compression (q_proj instead of q_a/q_b)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Mixture of experts.
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  std::string scoring_func = "sigmoid";  // or "softmax" (DeepSeek-V2)
  std::string topk_method = "noaux_tc";  // noaux_tc uses e_score_correction_bias for selection

  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  // Every id that ends generation: eos_token_id plus generation_config.json's (an int or a list).
  std::vector<int64_t> eos_token_ids;
  int64_t num_nextn_predict_layers = 0;
  nlohmann::json quantization_config;   // null when the weights are unquantized
  // The dtype the checkpoint was published in ("bfloat16", "float16", "float32"): text_config's
  // or the file's torch_dtype, or "dtype" as newer transformers write it; empty when none says.
  std::string torch_dtype;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // Attention softmax scale, including YaRN's mscale correction (applied squared, as in the
  // DeepSeek-V3 modelling code).
  double softmax_scale() const;

  // Throws kimi::Error naming the file and key for missing keys, wrong types or values that are
  // inconsistent (e.g. topk_group > n_group, experts not divisible into groups).
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json");
  static ModelConfig load(const std::filesystem::path& model_dir);
  void validate(const std::string& source) const;
};

// YaRN's attention-temperature term: 0.1 * mscale * ln(scale) + 1 for scale > 1, else 1.
double yarn_get_mscale(double scale, double mscale);

}  // namespace kimi
