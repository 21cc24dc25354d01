#include "export/gguf_deepseek2.h"

#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "format/checkpoint.h"
#include "format/gguf_writer.h"
#include "format/model_config.h"
#include "model/tensor_layout.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

namespace {

constexpr uint32_t kGatingSoftmax = 1, kGatingSigmoid = 2;               // llama_expert_gating_func_type
constexpr uint32_t kFtypeAllF32 = 0, kFtypeF16 = 1, kFtypeBf16 = 32;  // llama_ftype

GgmlType ggml_type_of(const TensorView& t) {
  switch (t.dtype) {
    case DType::F32: return GgmlType::F32;
    case DType::F16: return GgmlType::F16;
    case DType::BF16: return GgmlType::BF16;
    default:
      throw Error(t.file.string() + ": tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)) +
                  "; export-gguf supports BF16, F16 and F32 checkpoints only");
  }
}

float element_as_f32(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, t.data.data() + i * 4, 4);
      return v;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, t.data.data() + i * 2, 2);
      return t.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default: ggml_type_of(t); return 0.0f;  // throws
  }
}

// A sink of F32 bytes seen as a sink of `from`'s bytes: each piece (whole elements) is widened.
GgufSink widening_to_f32(DType from, const GgufSink& sink) {
  return [from, &sink](std::span<const std::byte> piece) {
    if (from == DType::F32) return sink(piece);
    constexpr size_t kChunk = 1 << 15;
    std::vector<float> buf;
    const size_t n = piece.size() / 2;
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t m = std::min(kChunk, n - i);
      buf.resize(m);
      for (size_t j = 0; j < m; ++j) {
        uint16_t h;
        std::memcpy(&h, piece.data() + (i + j) * 2, 2);
        buf[j] = from == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      sink(std::as_bytes(std::span(buf)));
    }
  };
}

// Builds the tensor list; every producer reads from the checkpoint's mapped shards.
class Deepseek2Exporter {
 public:
  Deepseek2Exporter(const ModelConfig& c, const Checkpoint& ck, GgufWriter& w, GgufOutType out)
      : c_(c), ck_(ck), w_(w), widen_(out == GgufOutType::F32) {}

  // The tensor as it is stored (ggml dims are the safetensors shape reversed), or widened to F32.
  void same(const std::string& gguf_name, const std::string& hf_name, const std::vector<int64_t>& shape) {
    const TensorView& t = ck_.get(hf_name, shape);
    const GgmlType type = out_type(t);
    const bool widen = widen_;
    w_.add_tensor({gguf_name, type, reversed(shape), [&t, widen](const GgufSink& sink) {
                     if (widen) widening_to_f32(t.dtype, sink)(t.data);
                     else sink(t.data);
                   }});
  }

  // Converted to F32, as llama.cpp's converter stores norms, biases and the router.
  void as_f32(const std::string& gguf_name, const std::string& hf_name, const std::vector<int64_t>& shape) {
    const TensorView& t = ck_.get(hf_name, shape);
    ggml_type_of(t);
    w_.add_tensor({gguf_name, GgmlType::F32, reversed(shape), [&t](const GgufSink& sink) {
                     constexpr int64_t kChunk = 1 << 16;
                     std::vector<float> buf;
                     for (int64_t i = 0; i < t.numel(); i += kChunk) {
                       const int64_t n = std::min(kChunk, t.numel() - i);
                       buf.resize(size_t(n));
                       for (int64_t j = 0; j < n; ++j) buf[size_t(j)] = element_as_f32(t, i + j);
                       sink(std::as_bytes(std::span(buf)));
                     }
                   }});
  }

  // Experts 0..n-1 of one projection stacked: ne {cols, rows, n_experts}.
  void stacked_experts(int64_t layer, const std::string& gguf_name, const std::string& proj, int64_t rows,
                       int64_t cols) {
    std::vector<const TensorView*> parts;
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      const TensorView& t =
          ck_.get(layer_tensor(c_, layer, "mlp.experts." + std::to_string(e) + "." + proj + ".weight"), {rows, cols});
      if (!parts.empty() && t.dtype != parts[0]->dtype)
        throw Error(t.file.string() + ": tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)) +
                    " but expert 0 is " + std::string(dtype_name(parts[0]->dtype)) +
                    " (experts are stacked into one tensor)");
      parts.push_back(&t);
    }
    const bool widen = widen_;
    w_.add_tensor({gguf_name, out_type(*parts[0]), {cols, rows, c_.n_routed_experts},
                   [parts, widen](const GgufSink& sink) {
                     for (const TensorView* t : parts) {
                       if (widen) widening_to_f32(t->dtype, sink)(t->data);
                       else sink(t->data);
                     }
                   }});
  }

  // kv_b_proj [H * (nope + v), kv_lora] split per head into k_b (transposed) and v_b.
  void split_kv_b(int64_t layer) {
    const int64_t H = c_.num_attention_heads, nope = c_.qk_nope_head_dim, v = c_.v_head_dim, r = c_.kv_lora_rank;
    const TensorView& t = ck_.get(layer_tensor(c_, layer, "self_attn.kv_b_proj.weight"), {H * (nope + v), r});
    const GgmlType type = out_type(t);
    const size_t es = ggml_type_size(ggml_type_of(t));
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const bool widen = widen_;
    // k_b[h] = kv_b[h][0:nope, :]^T, so each head's block is kv_lora rows of nope values.
    w_.add_tensor({blk + "attn_k_b.weight", type, {nope, r, H},
                   [&t, H, nope, v, r, es, widen](const GgufSink& out_sink) {
                     const GgufSink sink = widen ? widening_to_f32(t.dtype, out_sink) : out_sink;
                     std::vector<std::byte> head(size_t(r * nope) * es);
                     for (int64_t h = 0; h < H; ++h) {
                       for (int64_t d = 0; d < nope; ++d) {
                         const std::byte* row = t.data.data() + size_t((h * (nope + v) + d) * r) * es;
                         for (int64_t k = 0; k < r; ++k)
                           std::memcpy(head.data() + size_t(k * nope + d) * es, row + size_t(k) * es, es);
                       }
                       sink(head);
                     }
                   }});
    // v_b[h] = kv_b[h][nope:nope+v, :], rows already contiguous.
    w_.add_tensor({blk + "attn_v_b.weight", type, {r, v, H},
                   [&t, H, nope, v, r, es, widen](const GgufSink& out_sink) {
                     const GgufSink sink = widen ? widening_to_f32(t.dtype, out_sink) : out_sink;
                     for (int64_t h = 0; h < H; ++h)
                       sink(t.data.subspan(size_t((h * (nope + v) + nope) * r) * es, size_t(v * r) * es));
                   }});
  }

 private:
  static std::vector<int64_t> reversed(const std::vector<int64_t>& s) { return {s.rbegin(), s.rend()}; }
  GgmlType out_type(const TensorView& t) const {
    const GgmlType stored = ggml_type_of(t);  // throws for non-float tensors
    return widen_ ? GgmlType::F32 : stored;
  }

  const ModelConfig& c_;
  const Checkpoint& ck_;
  GgufWriter& w_;
  bool widen_;
};

void check_exportable(const ModelConfig& c) {
  if (!c.quantization_config.is_null())
    throw Error("config.json has a quantization_config: export-gguf supports BF16, F16 and F32 checkpoints only");
  if (c.n_routed_experts <= 0) throw Error("export-gguf: the model has no routed experts (not a DeepSeek-V3 MoE)");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe_layer(l) != (l >= c.first_k_dense_replace))
      throw Error("export-gguf: llama.cpp's deepseek2 needs every layer after the leading dense ones to be MoE "
                  "(moe_layer_freq " + std::to_string(c.moe_layer_freq) + " is not supported)");
  if (c.n_shared_experts <= 0) throw Error("export-gguf: llama.cpp's deepseek2 needs a shared expert");
  if (c.tie_word_embeddings) throw Error("export-gguf: tied embeddings are not supported");
}

void add_model_metadata(const ModelConfig& c, const std::string& name, uint32_t file_type, GgufWriter& w) {
  const std::string a = "deepseek2.";
  const auto u32 = [](int64_t v) { return uint32_t(v); };
  w.add_string("general.architecture", "deepseek2");
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type);
  w.add_u32(a + "block_count", u32(c.num_hidden_layers));
  w.add_u32(a + "context_length", u32(c.max_position_embeddings));
  w.add_u32(a + "embedding_length", u32(c.hidden_size));
  w.add_u32(a + "feed_forward_length", u32(c.intermediate_size));
  w.add_u32(a + "attention.head_count", u32(c.num_attention_heads));
  // MLA runs as MQA over the shared latent: one KV "head" of kv_lora_rank + rope dims.
  w.add_u32(a + "attention.head_count_kv", 1);
  w.add_f32(a + "rope.freq_base", float(c.rope_theta));
  w.add_f32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.add_u32(a + "expert_count", u32(c.n_routed_experts));
  w.add_u32(a + "expert_used_count", u32(c.num_experts_per_tok));
  w.add_u32(a + "expert_group_count", u32(c.n_group));
  w.add_u32(a + "expert_group_used_count", u32(c.topk_group));
  w.add_u32(a + "expert_gating_func", c.scoring_func == "sigmoid" ? kGatingSigmoid : kGatingSoftmax);
  w.add_u32(a + "leading_dense_block_count", u32(c.first_k_dense_replace));
  w.add_u32(a + "vocab_size", u32(c.vocab_size));
  if (c.q_lora_rank > 0) w.add_u32(a + "attention.q_lora_rank", u32(c.q_lora_rank));
  w.add_u32(a + "attention.kv_lora_rank", u32(c.kv_lora_rank));
  w.add_u32(a + "attention.key_length", u32(c.kv_lora_rank + c.qk_rope_head_dim));
  w.add_u32(a + "attention.value_length", u32(c.kv_lora_rank));
  w.add_u32(a + "attention.key_length_mla", u32(c.qk_head_dim()));
  w.add_u32(a + "attention.value_length_mla", u32(c.v_head_dim));
  w.add_u32(a + "expert_feed_forward_length", u32(c.moe_intermediate_size));
  w.add_u32(a + "expert_shared_count", u32(c.n_shared_experts));
  w.add_f32(a + "expert_weights_scale", float(c.routed_scaling_factor));
  w.add_bool(a + "expert_weights_norm", c.norm_topk_prob);
  w.add_u32(a + "rope.dimension_count", u32(c.qk_rope_head_dim));
  if (c.rope_scaling.type == "yarn") {
    const RopeScaling& y = c.rope_scaling;
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", float(y.factor));
    w.add_u32(a + "rope.scaling.original_context_length", u32(y.original_max_position_embeddings));
    w.add_f32(a + "rope.scaling.yarn_beta_fast", float(y.beta_fast));
    w.add_f32(a + "rope.scaling.yarn_beta_slow", float(y.beta_slow));
    // llama.cpp divides this by 0.1 again for deepseek2 (its converter's historical convention).
    w.add_f32(a + "rope.scaling.yarn_log_multiplier", float(0.1 * y.mscale_all_dim));
  }
}

void add_tokenizer_metadata(const ModelConfig& c, const Tokenizer& tok, GgufWriter& w) {
  GgufVocab v = gguf_vocab_from_tokenizer(tok, c.vocab_size);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "kimi-k2");
  w.add_string_array("tokenizer.ggml.tokens", std::move(v.tokens));
  w.add_i32_array("tokenizer.ggml.token_type", std::move(v.types));
  w.add_string_array("tokenizer.ggml.merges", std::move(v.merges));
  const int64_t bos = c.bos_token_id >= 0 ? c.bos_token_id : tok.bos_id();
  const int64_t eos = c.eos_token_id >= 0 ? c.eos_token_id : tok.eos_id();
  if (bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
  if (eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
  // Kimi's tokenizer adds no BOS when encoding text.
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  if (!tok.chat_template().empty()) w.add_string("tokenizer.chat_template", tok.chat_template());
}

}  // namespace

GgufExportResult export_gguf_deepseek2(const std::filesystem::path& model_dir, const std::filesystem::path& out_path,
                                       GgufOutType out) {
  const ModelConfig c = ModelConfig::load(model_dir);
  check_exportable(c);
  const Tokenizer tok = Tokenizer::load(model_dir);
  const Checkpoint ck(model_dir);

  const TensorView& embed = ck.get(model_tensor(c, "embed_tokens.weight"), {c.vocab_size, c.hidden_size});
  const GgmlType main_type = out == GgufOutType::F32 ? GgmlType::F32 : ggml_type_of(embed);
  const uint32_t file_type =
      main_type == GgmlType::BF16 ? kFtypeBf16 : main_type == GgmlType::F16 ? kFtypeF16 : kFtypeAllF32;

  GgufWriter w;
  std::string name = std::filesystem::absolute(model_dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::absolute(model_dir).lexically_normal().parent_path().filename().string();
  add_model_metadata(c, name, file_type, w);
  add_tokenizer_metadata(c, tok, w);

  Deepseek2Exporter x(c, ck, w, out);
  const int64_t D = c.hidden_size, H = c.num_attention_heads;
  x.same("token_embd.weight", model_tensor(c, "embed_tokens.weight"), {c.vocab_size, D});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const auto hf = [&](const std::string& rest) { return layer_tensor(c, l, rest); };
    x.as_f32(blk + "attn_norm.weight", hf("input_layernorm.weight"), {D});
    if (c.q_lora_rank > 0) {
      x.same(blk + "attn_q_a.weight", hf("self_attn.q_a_proj.weight"), {c.q_lora_rank, D});
      x.as_f32(blk + "attn_q_a_norm.weight", hf("self_attn.q_a_layernorm.weight"), {c.q_lora_rank});
      x.same(blk + "attn_q_b.weight", hf("self_attn.q_b_proj.weight"), {H * c.qk_head_dim(), c.q_lora_rank});
    } else {
      x.same(blk + "attn_q.weight", hf("self_attn.q_proj.weight"), {H * c.qk_head_dim(), D});
    }
    x.same(blk + "attn_kv_a_mqa.weight", hf("self_attn.kv_a_proj_with_mqa.weight"),
           {c.kv_lora_rank + c.qk_rope_head_dim, D});
    x.as_f32(blk + "attn_kv_a_norm.weight", hf("self_attn.kv_a_layernorm.weight"), {c.kv_lora_rank});
    x.split_kv_b(l);
    x.same(blk + "attn_output.weight", hf("self_attn.o_proj.weight"), {D, H * c.v_head_dim});
    x.as_f32(blk + "ffn_norm.weight", hf("post_attention_layernorm.weight"), {D});
    if (!c.is_moe_layer(l)) {
      x.same(blk + "ffn_gate.weight", hf("mlp.gate_proj.weight"), {c.intermediate_size, D});
      x.same(blk + "ffn_up.weight", hf("mlp.up_proj.weight"), {c.intermediate_size, D});
      x.same(blk + "ffn_down.weight", hf("mlp.down_proj.weight"), {D, c.intermediate_size});
      continue;
    }
    const int64_t F = c.moe_intermediate_size, FS = c.moe_intermediate_size * c.n_shared_experts;
    x.as_f32(blk + "ffn_gate_inp.weight", hf("mlp.gate.weight"), {c.n_routed_experts, D});
    if (c.topk_method == "noaux_tc")
      x.as_f32(blk + "exp_probs_b.bias", hf("mlp.gate.e_score_correction_bias"), {c.n_routed_experts});
    x.stacked_experts(l, blk + "ffn_gate_exps.weight", "gate_proj", F, D);
    x.stacked_experts(l, blk + "ffn_up_exps.weight", "up_proj", F, D);
    x.stacked_experts(l, blk + "ffn_down_exps.weight", "down_proj", D, F);
    x.same(blk + "ffn_gate_shexp.weight", hf("mlp.shared_experts.gate_proj.weight"), {FS, D});
    x.same(blk + "ffn_up_shexp.weight", hf("mlp.shared_experts.up_proj.weight"), {FS, D});
    x.same(blk + "ffn_down_shexp.weight", hf("mlp.shared_experts.down_proj.weight"), {D, FS});
  }
  x.as_f32("output_norm.weight", model_tensor(c, "norm.weight"), {D});
  x.same("output.weight", lm_head_tensor(c), {c.vocab_size, D});

  GgufExportResult r;
  r.num_tensors = w.num_tensors();
  r.num_kv = w.num_kv();
  r.bytes = w.write(out_path);
  return r;
}

}  // namespace kimi
