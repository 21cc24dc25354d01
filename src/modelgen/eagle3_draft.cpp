#include "modelgen/eagle3_draft.h"

#include <algorithm>
#include <fstream>

#include "common/error.h"
#include "format/safetensors.h"
#include "modelgen/random_init.h"

namespace kimi {

nlohmann::json eagle3_draft_config(const MakeModelOptions& target) {
  const nlohmann::json t = make_model_text_config(target);
  const int64_t H = t["hidden_size"].get<int64_t>(), heads = t["num_attention_heads"].get<int64_t>();
  const int64_t L = t["num_hidden_layers"].get<int64_t>();
  // vLLM's default capture (2, L/2, L-3), kept inside the target's layers for the small presets.
  std::vector<int64_t> ids = {std::clamp<int64_t>(2, 0, L), L / 2, std::clamp<int64_t>(L - 3, 0, L)};
  std::sort(ids.begin(), ids.end());  // [low, mid, high], as fc expects them
  const nlohmann::json aux = ids;
  return {{"architectures", {"LlamaForCausalLMEagle3"}},
          {"model_type", "llama"},
          {"num_hidden_layers", 1},
          {"hidden_size", H},
          {"target_hidden_size", H},
          // Kimi-K2.5's published draft: 12288 for a hidden size of 7168.
          {"intermediate_size", (H * 12 / 7 + 63) / 64 * 64},
          {"num_attention_heads", heads},
          {"num_key_value_heads", heads},
          {"head_dim", H / heads},
          {"hidden_act", "silu"},
          {"vocab_size", t["vocab_size"]},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 50000.0},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"type", "yarn"},
            {"factor", 64.0},
            {"original_max_position_embeddings", 4096},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0}}},
          {"max_position_embeddings", t["max_position_embeddings"]},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"norm_before_residual", false},
          {"bos_token_id", t["bos_token_id"]},
          {"eos_token_id", t["eos_token_id"]},
          {"torch_dtype", "bfloat16"},
          {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", aux}, {"use_aux_hidden_state", true}}}};
}

MakeModelResult make_eagle3_draft(const std::filesystem::path& out_dir, const MakeModelOptions& target) {
  const nlohmann::json c = eagle3_draft_config(target);
  const int64_t H = c["hidden_size"].get<int64_t>(), V = c["vocab_size"].get<int64_t>();
  const int64_t I = c["intermediate_size"].get<int64_t>();
  const int64_t q = c["num_attention_heads"].get<int64_t>() * c["head_dim"].get<int64_t>();
  const int64_t kv = c["num_key_value_heads"].get<int64_t>() * c["head_dim"].get<int64_t>();
  const DType dtype = target.dtype;
  auto layout = [](std::string name, std::vector<int64_t> shape, TensorRole role) {
    const int64_t fan_in = shape.size() == 2 ? shape[1] : 0;
    return TensorLayout{std::move(name), std::move(shape), role, DType::BF16, fan_in};
  };
  const std::vector<TensorLayout> tensors = {
      layout("embed_tokens.weight", {V, H}, TensorRole::Embedding),
      layout("fc.weight", {H, 3 * H}, TensorRole::Linear),
      layout("midlayer.hidden_norm.weight", {H}, TensorRole::Norm),
      layout("midlayer.input_layernorm.weight", {H}, TensorRole::Norm),
      layout("midlayer.self_attn.q_proj.weight", {q, 2 * H}, TensorRole::Linear),
      layout("midlayer.self_attn.k_proj.weight", {kv, 2 * H}, TensorRole::Linear),
      layout("midlayer.self_attn.v_proj.weight", {kv, 2 * H}, TensorRole::Linear),
      layout("midlayer.self_attn.o_proj.weight", {H, q}, TensorRole::Linear),
      layout("midlayer.post_attention_layernorm.weight", {H}, TensorRole::Norm),
      layout("midlayer.mlp.gate_proj.weight", {I, H}, TensorRole::Linear),
      layout("midlayer.mlp.up_proj.weight", {I, H}, TensorRole::Linear),
      layout("midlayer.mlp.down_proj.weight", {H, I}, TensorRole::Linear),
      layout("norm.weight", {H}, TensorRole::Norm),
      layout("lm_head.weight", {V, H}, TensorRole::LmHead),
  };
  MakeModelResult result;
  std::vector<TensorSpec> specs;
  for (const TensorLayout& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    result.num_parameters += numel;
    result.bytes += size_t(numel) * dtype_size(dtype);
    // The draft's streams are its own ("eagle3." + name), apart from the target's.
    specs.push_back({t.name, dtype, t.shape, [t, dtype, seed = target.seed](std::span<std::byte> out) {
                       fill_random_tensor(t, "eagle3." + t.name, dtype, seed, out);
                     }});
  }
  result.num_tensors = int64_t(specs.size());
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir / "config.json") << c.dump(2) << "\n";
  if (!std::filesystem::exists(out_dir / "config.json")) throw Error((out_dir / "config.json").string() + ": write failed");
  write_safetensors(out_dir / "model.safetensors", specs);
  return result;
}

}  // namespace kimi
