#include "model/weights.h"

#include <map>

#include "common/error.h"

#include "model/tensor_layout.h"
#include "model/weight_binder.h"

namespace kimi {

namespace {

// What one token's forward pass reads of the weights.
struct ActiveWeights {
  size_t bytes = 0;
  int64_t params = 0;
  void add(const WeightMatrix& w, int64_t times = 1) {
    bytes += size_t(times) * w.bytes();
    params += times * w.rows * w.cols;
  }
  void add(const MlpWeights& m, int64_t times = 1) {
    add(m.gate, times);
    add(m.up, times);
    add(m.down, times);
  }
  // Of a token's `times` expert picks, times * share / of fall on the `share` of `of` experts
  // this rank holds, on average under uniform routing: the expected reads of m here.
  void add_share(const MlpWeights& m, int64_t times, int64_t share, int64_t of) {
    ActiveWeights one;
    one.add(m, times * share);
    bytes += one.bytes / size_t(of);
    params += one.params / of;
  }
};

// Binds decoder layer l's tensors (shapes from `shapes`), split for tensor parallelism by `tp`
// (row-parallel slices are copied into `shards`), adding what a token reads to `active`.
LayerWeights bind_layer(WeightBinder& b, const ModelConfig& c, int64_t l,
                        const std::map<std::string, std::vector<int64_t>>& shapes, const TensorParallel& tp,
                        OwnedWeightBuffers& shards, ActiveWeights& active) {
  auto shape_of = [&](const std::string& name) -> const std::vector<int64_t>& {
    auto it = shapes.find(name);
    if (it == shapes.end()) throw Error("internal: tensor '" + name + "' is not in the model layout");
    return it->second;
  };
  // Linear modules are named without ".weight": quantized storage replaces that tensor.
  auto linear = [&](const std::string& weight_name, bool need_float = false) {
    const auto& s = shape_of(weight_name);
    return b.linear(weight_name.substr(0, weight_name.size() - 7), s[0], s[1], need_float);
  };
  auto vec = [&](const std::string& name) { return b.vector(name, shape_of(name)[0]); };
  auto dense = [&](const std::string& name) {
    const auto& s = shape_of(name);
    return b.dense(name, s[0], s[1]);
  };
  auto mlp = [&](const std::string& prefix, const TensorParallel& split) {
    return MlpWeights{column_parallel(linear(layer_tensor(c, l, prefix + "gate_proj.weight")), split),
                      column_parallel(linear(layer_tensor(c, l, prefix + "up_proj.weight")), split),
                      row_parallel(linear(layer_tensor(c, l, prefix + "down_proj.weight")), split, shards), {}};
  };
  const RowParallelReduce reduce{tp.group};
  LayerWeights L;
  L.input_norm = vec(layer_tensor(c, l, "input_layernorm.weight"));
  L.post_attention_norm = vec(layer_tensor(c, l, "post_attention_layernorm.weight"));
  AttentionWeights& a = L.attn;
  if (c.q_lora_rank > 0) {
    a.q_a = linear(layer_tensor(c, l, "self_attn.q_a_proj.weight"));
    a.q_a_norm = vec(layer_tensor(c, l, "self_attn.q_a_layernorm.weight"));
    a.q_b = column_parallel(linear(layer_tensor(c, l, "self_attn.q_b_proj.weight")), tp, c.qk_head_dim());
    active.add(a.q_a);
    active.add(a.q_b);
  } else {
    a.q_proj = column_parallel(linear(layer_tensor(c, l, "self_attn.q_proj.weight")), tp, c.qk_head_dim());
    active.add(a.q_proj);
  }
  a.kv_a = linear(layer_tensor(c, l, "self_attn.kv_a_proj_with_mqa.weight"));
  a.kv_a_norm = vec(layer_tensor(c, l, "self_attn.kv_a_layernorm.weight"));
  a.kv_b = column_parallel(linear(layer_tensor(c, l, "self_attn.kv_b_proj.weight"), /*need_float=*/true), tp,
                           c.qk_nope_head_dim + c.v_head_dim);
  a.o = row_parallel(linear(layer_tensor(c, l, "self_attn.o_proj.weight")), tp, shards);
  a.o_reduce = reduce;
  active.add(a.kv_a);
  active.add(a.kv_b);
  active.add(a.o);

  if (!c.is_moe_layer(l)) {
    L.dense = mlp("mlp.", tp);
    L.dense->reduce = reduce;
    active.add(*L.dense);
    return L;
  }
  MoeWeights& m = L.moe.emplace();
  m.router = dense(layer_tensor(c, l, "mlp.gate.weight"));
  if (c.topk_method == "noaux_tc") m.correction_bias = vec(layer_tensor(c, l, "mlp.gate.e_score_correction_bias"));
  // Only this rank's experts are bound (all of them without EP): the rest stay unread.
  const TensorParallel routed = tp.routed_experts();
  const ExpertRange mine = routed.experts(c);
  m.first_expert = mine.first;
  for (int64_t e = mine.first; e < mine.first + mine.count; ++e)
    m.experts.push_back(mlp("mlp.experts." + std::to_string(e) + ".", routed.routed_expert_split()));
  if (c.n_shared_experts > 0) m.shared = mlp("mlp.shared_experts.", tp);
  m.reduce = reduce;
  if (tp.moe_data_parallel()) {
    m.data_parallel = tp.data_parallel;
    m.routed_reduce = RowParallelReduce{tp.moe_group};
    m.exchange = tp.exchange;
  }
  active.add(m.router);
  active.add_share(m.experts[0], c.num_experts_per_tok, mine.count, c.n_routed_experts);
  if (m.shared) active.add(*m.shared);
  return L;
}

}  // namespace

LayerWeights load_layer_weights(WeightBinder& b, const ModelConfig& c, int64_t layer) {
  std::vector<TensorLayout> layout;
  append_decoder_layer_layout(c, layer, layout);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& t : layout) shapes.emplace(t.name, t.shape);
  ActiveWeights unused;
  OwnedWeightBuffers no_shards;  // one whole layer (TP size 1): nothing is sliced
  return bind_layer(b, c, layer, shapes, TensorParallel{}, no_shards, unused);
}

ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& c, const QuantizationRequest& quant,
                          const TensorParallel& tp) {
  tp.check(c);
  WeightBinder b(ckpt, c, quant);
  ModelWeights w;
  OwnedWeightBuffers shards;  // row-parallel slices (copied columns)
  // Shapes come from the one layout table, so the loader and make-model cannot drift apart.
  // (MTP layers, model.layers.<num_hidden_layers>..., are not in it: the target never reads them.)
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& t : text_model_layout(c)) shapes.emplace(t.name, t.shape);
  auto shape_of = [&](const std::string& name) -> const std::vector<int64_t>& {
    auto it = shapes.find(name);
    if (it == shapes.end()) throw Error("internal: tensor '" + name + "' is not in the model layout");
    return it->second;
  };
  auto linear = [&](const std::string& weight_name) {
    const auto& s = shape_of(weight_name);
    return b.linear(weight_name.substr(0, weight_name.size() - 7), s[0], s[1]);
  };
  auto vec = [&](const std::string& name) { return b.vector(name, shape_of(name)[0]); };
  auto dense = [&](const std::string& name) {
    const auto& s = shape_of(name);
    return b.dense(name, s[0], s[1]);
  };
  // The vocabulary is split too when it divides evenly (ParallelEmbedding, and an lm_head whose
  // logits are gathered); otherwise both stay whole on every rank.
  const bool vocab_split = tp.size() > 1 && c.vocab_size % tp.size() == 0;
  w.embed = dense(model_tensor(c, "embed_tokens.weight"));
  if (vocab_split) w.embed = column_parallel(w.embed, tp);
  ActiveWeights active;
  w.layers.reserve(size_t(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    w.layers.push_back(bind_layer(b, c, l, shapes, tp, shards, active));
  w.final_norm = vec(model_tensor(c, "norm.weight"));
  w.lm_head = c.tie_word_embeddings ? w.embed
              : vocab_split           ? column_parallel(linear(lm_head_tensor(c)), tp)
                                      : linear(lm_head_tensor(c));
  active.add(w.lm_head);
  w.active_bytes_per_token = active.bytes;
  w.active_params_per_token = active.params;
  w.total_bytes = b.total_bytes();
  w.storage = b.storage_summary();
  w.buffers = b.take_buffers();
  for (auto& s : shards) w.buffers.push_back(std::move(s));
  return w;
}

}  // namespace kimi
