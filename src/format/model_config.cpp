#include "format/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <type_traits>

#include "common/error.h"

namespace kimi {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double ModelConfig::softmax_scale() const {
  double s = 1.0 / std::sqrt(double(qk_head_dim()));
  if (rope_scaling.type == "yarn" && rope_scaling.mscale_all_dim != 0.0) {
    const double m = yarn_get_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    s *= m * m;
  }
  return s;
}

namespace {

// Typed lookups that say which key of which file is wrong.
class Reader {
 public:
  Reader(const nlohmann::json& j, std::string source) : j_(j), source_(std::move(source)) {}

  template <class T>
  T get(const char* key, std::optional<T> fallback = std::nullopt) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (fallback) return *fallback;
      throw Error(source_ + ": missing key '" + key + "'");
    }
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!it->is_boolean()) throw Error("");
      } else if constexpr (std::is_integral_v<T>) {
        if (!it->is_number_integer()) throw Error("");
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!it->is_number()) throw Error("");
      } else {
        if (!it->is_string()) throw Error("");
      }
      return it->get<T>();
    } catch (const std::exception&) {
      throw Error(source_ + ": key '" + key + "' has the wrong type (" + it->dump() + ")");
    }
  }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
};

// eos_token_id may be an int or a list (generation configs); the first is the primary one.
int64_t token_id(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int64_t>();
  return -1;
}

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& root, const std::string& source) {
  if (!root.is_object()) throw Error(source + ": not a JSON object");
  ModelConfig c;
  if (root.contains("architectures") && root["architectures"].is_array() && !root["architectures"].empty()) {
    const auto& a = root["architectures"][0];
    if (!a.is_string()) throw Error(source + ": key 'architectures' has the wrong type (" + a.dump() + ")");
    c.architecture = a.get<std::string>();
  }

  const nlohmann::json* text = &root;
  if (root.contains("text_config")) {
    if (!root["text_config"].is_object()) throw Error(source + ": 'text_config' is not an object");
    text = &root["text_config"];
    c.tensor_prefix = "language_model.";
  }
  const Reader r(*text, c.tensor_prefix.empty() ? source : source + " (text_config)");
  c.model_type = r.get<std::string>("model_type", std::string());

  c.vocab_size = r.get<int64_t>("vocab_size");
  c.hidden_size = r.get<int64_t>("hidden_size");
  c.intermediate_size = r.get<int64_t>("intermediate_size");
  c.num_hidden_layers = r.get<int64_t>("num_hidden_layers");
  c.num_attention_heads = r.get<int64_t>("num_attention_heads");
  c.num_key_value_heads = r.get<int64_t>("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = r.get<int64_t>("max_position_embeddings", int64_t(4096));
  c.rms_norm_eps = r.get<double>("rms_norm_eps", 1e-6);
  c.rope_theta = r.get<double>("rope_theta", 10000.0);
  c.tie_word_embeddings = r.get<bool>("tie_word_embeddings", false);
  c.hidden_act = r.get<std::string>("hidden_act", std::string("silu"));

  c.q_lora_rank = r.get<int64_t>("q_lora_rank", int64_t(0));
  c.kv_lora_rank = r.get<int64_t>("kv_lora_rank");
  c.qk_nope_head_dim = r.get<int64_t>("qk_nope_head_dim");
  c.qk_rope_head_dim = r.get<int64_t>("qk_rope_head_dim");
  c.v_head_dim = r.get<int64_t>("v_head_dim");

  c.n_routed_experts = r.get<int64_t>("n_routed_experts", int64_t(0));
  c.n_shared_experts = r.get<int64_t>("n_shared_experts", int64_t(0));
  c.num_experts_per_tok = r.get<int64_t>("num_experts_per_tok", int64_t(0));
  c.moe_intermediate_size = r.get<int64_t>("moe_intermediate_size", int64_t(0));
  c.first_k_dense_replace = r.get<int64_t>("first_k_dense_replace", int64_t(0));
  c.moe_layer_freq = r.get<int64_t>("moe_layer_freq", int64_t(1));
  c.n_group = r.get<int64_t>("n_group", int64_t(1));
  c.topk_group = r.get<int64_t>("topk_group", int64_t(1));
  c.routed_scaling_factor = r.get<double>("routed_scaling_factor", 1.0);
  c.norm_topk_prob = r.get<bool>("norm_topk_prob", true);
  c.scoring_func = r.get<std::string>("scoring_func", std::string("softmax"));
  c.topk_method = r.get<std::string>("topk_method", std::string("greedy"));
  c.num_nextn_predict_layers = r.get<int64_t>("num_nextn_predict_layers", int64_t(0));

  if (r.has("rope_scaling")) {
    const auto& rs = (*text)["rope_scaling"];
    if (!rs.is_object()) throw Error(r.source() + ": 'rope_scaling' is not an object");
    const Reader s(rs, r.source() + " rope_scaling");
    // transformers has written both "type" and "rope_type".
    c.rope_scaling.type = s.has("type") ? s.get<std::string>("type") : s.get<std::string>("rope_type", std::string());
    c.rope_scaling.factor = s.get<double>("factor", 1.0);
    c.rope_scaling.original_max_position_embeddings =
        s.get<int64_t>("original_max_position_embeddings", int64_t(4096));
    c.rope_scaling.beta_fast = s.get<double>("beta_fast", 32.0);
    c.rope_scaling.beta_slow = s.get<double>("beta_slow", 1.0);
    c.rope_scaling.mscale = s.get<double>("mscale", 1.0);
    c.rope_scaling.mscale_all_dim = s.get<double>("mscale_all_dim", 0.0);
  }

  // Special ids live at the top level of the K2.5 file and inside text_config too.
  c.bos_token_id = token_id(*text, "bos_token_id");
  if (c.bos_token_id < 0) c.bos_token_id = token_id(root, "bos_token_id");
  c.eos_token_id = token_id(*text, "eos_token_id");
  if (c.eos_token_id < 0) c.eos_token_id = token_id(root, "eos_token_id");

  if (text->contains("quantization_config")) c.quantization_config = (*text)["quantization_config"];
  else if (root.contains("quantization_config")) c.quantization_config = root["quantization_config"];

  for (const nlohmann::json* level : {text, &root})
    for (const char* key : {"torch_dtype", "dtype"})
      if (c.torch_dtype.empty() && level->contains(key) && (*level)[key].is_string())
        c.torch_dtype = (*level)[key].get<std::string>();

  if (c.eos_token_id >= 0) c.eos_token_ids.push_back(c.eos_token_id);
  c.validate(r.source());
  return c;
}

void ModelConfig::validate(const std::string& source) const {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw Error(source + ": " + what);
  };
  require(vocab_size > 0 && hidden_size > 0 && num_hidden_layers > 0 && num_attention_heads > 0,
          "vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive");
  require(kv_lora_rank > 0 && qk_nope_head_dim > 0 && v_head_dim > 0,
          "kv_lora_rank, qk_nope_head_dim and v_head_dim must be positive (MLA attention)");
  require(qk_rope_head_dim > 0 && qk_rope_head_dim % 2 == 0 && qk_rope_head_dim <= 512,
          "qk_rope_head_dim must be even and in 2..512");
  require(q_lora_rank >= 0, "q_lora_rank must not be negative");
  // Sizes the engine multiplies and adds in int64 (head dims, expert counts, sizes): bounded so
  // that no absurd value overflows on the way to being rejected by an allocation.
  constexpr int64_t kMaxDim = int64_t(1) << 31;
  for (const int64_t d : {vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
                          num_key_value_heads, max_position_embeddings, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                          qk_rope_head_dim, v_head_dim, n_routed_experts, n_shared_experts, num_experts_per_tok,
                          moe_intermediate_size, first_k_dense_replace, moe_layer_freq, n_group, topk_group,
                          num_nextn_predict_layers})
    require(d < kMaxDim, "a size of " + std::to_string(d) + " is absurd (limit 2^31)");
  require(rope_theta > 0, "rope_theta must be positive");
  require(rms_norm_eps > 0, "rms_norm_eps must be positive");
  require(hidden_act == "silu", "hidden_act '" + hidden_act + "' is not supported (only silu)");
  require(rope_scaling.type.empty() || rope_scaling.type == "yarn",
          "rope_scaling type '" + rope_scaling.type + "' is not supported (only yarn)");
  require(first_k_dense_replace >= 0 && moe_layer_freq >= 1, "bad first_k_dense_replace / moe_layer_freq");
  if (n_routed_experts > 0) {
    require(num_experts_per_tok > 0 && num_experts_per_tok <= n_routed_experts,
            "num_experts_per_tok must be in 1..n_routed_experts");
    require(moe_intermediate_size > 0, "moe_intermediate_size must be positive");
    require(n_group >= 1 && n_routed_experts % n_group == 0, "n_routed_experts must divide into n_group groups");
    require(topk_group >= 1 && topk_group <= n_group, "topk_group must be in 1..n_group");
    require(num_experts_per_tok <= topk_group * (n_routed_experts / n_group),
            "num_experts_per_tok exceeds the experts in topk_group groups");
    require(scoring_func == "sigmoid" || scoring_func == "softmax",
            "scoring_func '" + scoring_func + "' is not supported");
    require(topk_method == "noaux_tc" || topk_method == "greedy" || topk_method == "group_limited_greedy",
            "topk_method '" + topk_method + "' is not supported");
  }
  if (first_k_dense_replace > 0) require(intermediate_size > 0, "intermediate_size must be positive");
  const double scale = softmax_scale();
  require(std::isfinite(scale) && scale > 0,
          "rope_scaling (factor, mscale_all_dim) gives an unusable attention scale (" + std::to_string(scale) + ")");
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open (is '" + model_dir.string() + "' a model directory?)");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
  ModelConfig c = from_json(j, path.string());
  // Chat models often end turns with another token than config.json's eos (Kimi: <|im_end|>);
  // generation_config.json lists it, and vLLM stops on either.
  const auto gen_path = model_dir / "generation_config.json";
  if (std::ifstream gin(gen_path); gin) {
    nlohmann::json g;
    try {
      gin >> g;
    } catch (const std::exception& e) {
      throw Error(gen_path.string() + ": invalid JSON: " + e.what());
    }
    const auto eos = g.find("eos_token_id");
    if (eos != g.end()) {
      std::vector<int64_t> ids;
      if (eos->is_number_integer()) ids.push_back(eos->get<int64_t>());
      else if (eos->is_array())
        for (const auto& v : *eos)
          if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
      for (int64_t id : ids)
        if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
          c.eos_token_ids.push_back(id);
    }
  }
  return c;
}

}  // namespace kimi
