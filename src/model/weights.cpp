#include "model/weights.h"

#include <map>

#include "common/error.h"
#include "model/tensor_layout.h"

namespace kimi {

namespace {

bool is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

class Binder {
 public:
  Binder(const Checkpoint& ckpt, const ModelConfig& c) : ckpt_(ckpt) {
    // Shapes come from the one layout table, so the loader and make-model cannot drift apart.
    for (auto& t : text_model_layout(c)) shapes_.emplace(t.name, t.shape);
  }

  WeightMatrix matrix(const std::string& name) {
    const TensorView& t = view(name);
    total_bytes += t.data.size();
    return WeightMatrix{t.dtype, t.data.data(), t.shape[0], t.shape[1]};
  }

  std::vector<float> vector(const std::string& name) {
    const TensorView& t = view(name);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data.data(), v.data(), t.numel());
    total_bytes += t.data.size();
    return v;
  }

  size_t total_bytes = 0;

 private:
  const TensorView& view(const std::string& name) {
    auto it = shapes_.find(name);
    if (it == shapes_.end()) throw Error("internal: tensor '" + name + "' is not in the model layout");
    const TensorView& t = ckpt_.get(name, it->second);
    if (!is_float(t.dtype))
      throw Error(t.file.string() + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                  "; expected BF16, F16 or F32 (quantized checkpoints are not supported yet)");
    return t;
  }

  const Checkpoint& ckpt_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// What one token's forward pass reads of the weights.
struct ActiveWeights {
  size_t bytes = 0;
  int64_t params = 0;
  void add(const WeightMatrix& w, int64_t times = 1) {
    bytes += size_t(times * w.rows * w.cols) * dtype_size(w.dtype);
    params += times * w.rows * w.cols;
  }
  void add(const MlpWeights& m, int64_t times = 1) {
    add(m.gate, times);
    add(m.up, times);
    add(m.down, times);
  }
};

}  // namespace

ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& c) {
  Binder b(ckpt, c);
  ModelWeights w;
  w.embed = b.matrix(model_tensor(c, "embed_tokens.weight"));
  w.layers.resize(size_t(c.num_hidden_layers));
  ActiveWeights active;
  auto mlp = [&](int64_t l, const std::string& prefix) {
    return MlpWeights{b.matrix(layer_tensor(c, l, prefix + "gate_proj.weight")),
                      b.matrix(layer_tensor(c, l, prefix + "up_proj.weight")),
                      b.matrix(layer_tensor(c, l, prefix + "down_proj.weight"))};
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.input_norm = b.vector(layer_tensor(c, l, "input_layernorm.weight"));
    L.post_attention_norm = b.vector(layer_tensor(c, l, "post_attention_layernorm.weight"));
    AttentionWeights& a = L.attn;
    if (c.q_lora_rank > 0) {
      a.q_a = b.matrix(layer_tensor(c, l, "self_attn.q_a_proj.weight"));
      a.q_a_norm = b.vector(layer_tensor(c, l, "self_attn.q_a_layernorm.weight"));
      a.q_b = b.matrix(layer_tensor(c, l, "self_attn.q_b_proj.weight"));
      active.add(a.q_a);
      active.add(a.q_b);
    } else {
      a.q_proj = b.matrix(layer_tensor(c, l, "self_attn.q_proj.weight"));
      active.add(a.q_proj);
    }
    a.kv_a = b.matrix(layer_tensor(c, l, "self_attn.kv_a_proj_with_mqa.weight"));
    a.kv_a_norm = b.vector(layer_tensor(c, l, "self_attn.kv_a_layernorm.weight"));
    a.kv_b = b.matrix(layer_tensor(c, l, "self_attn.kv_b_proj.weight"));
    a.o = b.matrix(layer_tensor(c, l, "self_attn.o_proj.weight"));
    active.add(a.kv_a);
    active.add(a.kv_b);
    active.add(a.o);

    if (!c.is_moe_layer(l)) {
      L.dense = mlp(l, "mlp.");
      active.add(*L.dense);
      continue;
    }
    MoeWeights& m = L.moe.emplace();
    m.router = b.matrix(layer_tensor(c, l, "mlp.gate.weight"));
    if (c.topk_method == "noaux_tc") m.correction_bias = b.vector(layer_tensor(c, l, "mlp.gate.e_score_correction_bias"));
    for (int64_t e = 0; e < c.n_routed_experts; ++e) m.experts.push_back(mlp(l, "mlp.experts." + std::to_string(e) + "."));
    if (c.n_shared_experts > 0) m.shared = mlp(l, "mlp.shared_experts.");
    active.add(m.router);
    active.add(m.experts[0], c.num_experts_per_tok);
    if (m.shared) active.add(*m.shared);
  }
  w.final_norm = b.vector(model_tensor(c, "norm.weight"));
  w.lm_head = c.tie_word_embeddings ? w.embed : b.matrix(lm_head_tensor(c));
  active.add(w.lm_head);
  w.active_bytes_per_token = active.bytes;
  w.active_params_per_token = active.params;
  w.total_bytes = b.total_bytes;
  return w;
}

}  // namespace kimi
