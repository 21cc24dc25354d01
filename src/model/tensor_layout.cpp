#include "model/tensor_layout.h"

namespace kimi {

std::string model_tensor(const ModelConfig& c, const std::string& rest) { return c.tensor_prefix + "model." + rest; }

std::string layer_tensor(const ModelConfig& c, int64_t layer, const std::string& rest) {
  return model_tensor(c, "layers." + std::to_string(layer) + "." + rest);
}

std::string lm_head_tensor(const ModelConfig& c) { return c.tensor_prefix + "lm_head.weight"; }

namespace {

void append_norm(std::vector<TensorLayout>& out, std::string name, int64_t n) {
  out.push_back({std::move(name), {n}, TensorRole::Norm, DType::BF16, 0});
}
void append_linear(std::vector<TensorLayout>& out, std::string name, int64_t rows, int64_t cols) {
  out.push_back({std::move(name), {rows, cols}, TensorRole::Linear, DType::BF16, cols});
}

}  // namespace

void append_decoder_layer_layout(const ModelConfig& c, int64_t l, std::vector<TensorLayout>& out) {
  auto norm = [&](std::string name, int64_t n) { append_norm(out, std::move(name), n); };
  auto linear = [&](std::string name, int64_t rows, int64_t cols) { append_linear(out, std::move(name), rows, cols); };
  auto mlp = [&](int64_t layer, const std::string& prefix, int64_t inter) {
    linear(layer_tensor(c, layer, prefix + "gate_proj.weight"), inter, c.hidden_size);
    linear(layer_tensor(c, layer, prefix + "up_proj.weight"), inter, c.hidden_size);
    linear(layer_tensor(c, layer, prefix + "down_proj.weight"), c.hidden_size, inter);
  };
  const int64_t H = c.num_attention_heads;
  norm(layer_tensor(c, l, "input_layernorm.weight"), c.hidden_size);
  if (c.q_lora_rank > 0) {
    linear(layer_tensor(c, l, "self_attn.q_a_proj.weight"), c.q_lora_rank, c.hidden_size);
    norm(layer_tensor(c, l, "self_attn.q_a_layernorm.weight"), c.q_lora_rank);
    linear(layer_tensor(c, l, "self_attn.q_b_proj.weight"), H * c.qk_head_dim(), c.q_lora_rank);
  } else {
    linear(layer_tensor(c, l, "self_attn.q_proj.weight"), H * c.qk_head_dim(), c.hidden_size);
  }
  linear(layer_tensor(c, l, "self_attn.kv_a_proj_with_mqa.weight"), c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size);
  norm(layer_tensor(c, l, "self_attn.kv_a_layernorm.weight"), c.kv_lora_rank);
  linear(layer_tensor(c, l, "self_attn.kv_b_proj.weight"), H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  linear(layer_tensor(c, l, "self_attn.o_proj.weight"), c.hidden_size, H * c.v_head_dim);
  norm(layer_tensor(c, l, "post_attention_layernorm.weight"), c.hidden_size);
  if (!c.is_moe_layer(l)) {
    mlp(l, "mlp.", c.intermediate_size);
    return;
  }
  out.push_back({layer_tensor(c, l, "mlp.gate.weight"), {c.n_routed_experts, c.hidden_size}, TensorRole::Router,
                 DType::BF16, c.hidden_size});
  if (c.topk_method == "noaux_tc")
    out.push_back({layer_tensor(c, l, "mlp.gate.e_score_correction_bias"), {c.n_routed_experts}, TensorRole::RouterBias,
                   DType::F32, 0});
  for (int64_t e = 0; e < c.n_routed_experts; ++e) mlp(l, "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size);
  if (c.n_shared_experts > 0) mlp(l, "mlp.shared_experts.", c.moe_intermediate_size * c.n_shared_experts);
}

std::vector<TensorLayout> text_model_layout(const ModelConfig& c) {
  std::vector<TensorLayout> out;
  out.push_back({model_tensor(c, "embed_tokens.weight"), {c.vocab_size, c.hidden_size}, TensorRole::Embedding,
                 DType::BF16, 0});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) append_decoder_layer_layout(c, l, out);
  append_norm(out, model_tensor(c, "norm.weight"), c.hidden_size);
  if (!c.tie_word_embeddings)
    out.push_back({lm_head_tensor(c), {c.vocab_size, c.hidden_size}, TensorRole::LmHead, DType::BF16, c.hidden_size});
  return out;
}

std::vector<TensorLayout> mtp_layer_layout(const ModelConfig& c, int64_t index) {
  std::vector<TensorLayout> out;
  const int64_t l = c.num_hidden_layers + index, H = c.hidden_size;
  // DeepSeek-V3's order within model.layers.61: its own copy of the embedding, the two input
  // norms and the projection, the decoder block, then the shared head.
  out.push_back({layer_tensor(c, l, "embed_tokens.weight"), {c.vocab_size, H}, TensorRole::Embedding, DType::BF16, 0});
  append_norm(out, layer_tensor(c, l, "enorm.weight"), H);
  append_norm(out, layer_tensor(c, l, "hnorm.weight"), H);
  append_linear(out, layer_tensor(c, l, "eh_proj.weight"), H, 2 * H);
  append_decoder_layer_layout(c, l, out);
  append_norm(out, layer_tensor(c, l, "shared_head.norm.weight"), H);
  out.push_back({layer_tensor(c, l, "shared_head.head.weight"), {c.vocab_size, H}, TensorRole::LmHead, DType::BF16, H});
  return out;
}

}  // namespace kimi
