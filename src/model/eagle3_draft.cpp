#include "model/eagle3_draft.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/vec_ops.h"
#include "model/ops.h"
#include "model/weight_binder.h"

namespace kimi {

namespace {

// Typed reads of config.json with errors naming the file and the key.
struct ConfigReader {
  const nlohmann::json& j;
  std::string source;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  template <class T>
  T get(const char* key) const {
    if (!has(key)) throw Error(source + ": missing key '" + key + "'");
    return as<T>(j[key], key);
  }
  template <class T>
  T get(const char* key, T fallback) const {
    return has(key) ? as<T>(j[key], key) : fallback;
  }
  template <class T>
  T as(const nlohmann::json& v, const char* key) const {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(source + ": key '" + key + "' has the wrong type (" + v.dump() + ")");
    }
  }
};

std::string shape_str(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

}  // namespace

Eagle3Config Eagle3Config::load(const std::filesystem::path& dir, const ModelConfig& target) {
  const std::filesystem::path path = dir / "config.json";
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open the Eagle3 draft's config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
  const ConfigReader r{j, path.string()};
  Eagle3Config c;
  if (r.get<int64_t>("num_hidden_layers", 1) != 1)
    throw Error(path.string() + ": num_hidden_layers " + std::to_string(r.get<int64_t>("num_hidden_layers")) +
                "; Eagle3 drafts have one decoder layer");
  c.hidden_size = r.get<int64_t>("hidden_size");
  c.target_hidden_size = r.get<int64_t>("target_hidden_size", c.hidden_size);
  c.intermediate_size = r.get<int64_t>("intermediate_size");
  c.num_attention_heads = r.get<int64_t>("num_attention_heads");
  c.num_key_value_heads = r.get<int64_t>("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads)
    throw Error(path.string() + ": num_attention_heads must be a positive multiple of num_key_value_heads");
  c.head_dim = r.get<int64_t>("head_dim", c.hidden_size / c.num_attention_heads);
  c.vocab_size = r.get<int64_t>("vocab_size");
  c.draft_vocab_size = r.get<int64_t>("draft_vocab_size", c.vocab_size);
  c.rms_norm_eps = r.get<double>("rms_norm_eps", 1e-6);
  c.rope_theta = r.get<double>("rope_theta", 10000.0);
  c.norm_before_residual = r.get<bool>("norm_before_residual", false);
  if (r.has("rope_scaling")) {
    const nlohmann::json& rs = j["rope_scaling"];
    if (!rs.is_object()) throw Error(path.string() + ": 'rope_scaling' is not an object");
    const ConfigReader s{rs, path.string() + " rope_scaling"};
    c.rope_scaling.type = s.has("rope_type") ? s.get<std::string>("rope_type") : s.get<std::string>("type", std::string());
    if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "yarn" && c.rope_scaling.type != "default")
      throw Error(path.string() + ": rope_scaling type '" + c.rope_scaling.type + "' is not supported (yarn only)");
    if (c.rope_scaling.type == "default") c.rope_scaling.type.clear();
    c.rope_scaling.factor = s.get<double>("factor", 1.0);
    c.rope_scaling.original_max_position_embeddings = s.get<int64_t>("original_max_position_embeddings", 4096);
    c.rope_scaling.beta_fast = s.get<double>("beta_fast", 32.0);
    c.rope_scaling.beta_slow = s.get<double>("beta_slow", 1.0);
    // Without mscale keys HF Llama's YaRN scales cos/sin by 0.1 ln(factor) + 1: the same as
    // mscale 1 over mscale_all_dim 0 in the DeepSeek form our Rope implements.
    c.rope_scaling.mscale = s.get<double>("mscale", 1.0);
    c.rope_scaling.mscale_all_dim = s.get<double>("mscale_all_dim", 0.0);
  }
  const char* aux_key = "eagle_aux_hidden_state_layer_ids";
  if (r.has(aux_key)) {
    c.aux_layer_ids = r.get<std::vector<int64_t>>(aux_key);
  } else if (r.has("eagle_config") && j["eagle_config"].is_object() &&
             ConfigReader{j["eagle_config"], path.string() + " eagle_config"}.has(aux_key)) {
    c.aux_layer_ids = ConfigReader{j["eagle_config"], path.string() + " eagle_config"}.get<std::vector<int64_t>>(aux_key);
  } else {
    const int64_t L = target.num_hidden_layers;  // vLLM's default
    c.aux_layer_ids = {2, L / 2, L - 3};
  }
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.head_dim <= 0 || c.head_dim % 2 || c.head_dim > 512 ||
      c.vocab_size <= 0 || c.draft_vocab_size <= 0 || c.target_hidden_size <= 0)
    throw Error(path.string() + ": hidden_size, intermediate_size, vocab sizes must be positive and head_dim even, <= 512");
  return c;
}

Eagle3Draft::Eagle3Draft(const std::filesystem::path& dir, const ModelConfig& target, int64_t num_blocks,
                         int64_t block_size, const WeightMatrix* target_embedding, KvCacheDtype kv_dtype,
                         bool bf16_activations)
    : config_(Eagle3Config::load(dir, target)),
      target_vocab_(target.vocab_size),
      rope_([&] {
        ModelConfig rc;  // the draft's rope in the form Rope reads
        rc.qk_rope_head_dim = config_.head_dim;
        rc.rope_theta = config_.rope_theta;
        rc.rope_scaling = config_.rope_scaling;
        return rc;
      }()),
      num_blocks_(num_blocks),
      block_size_(block_size),
      kv_bf16_(Eagle3Config::draft_kv_element_bytes(kv_dtype) == 2) {
  const Eagle3Config& c = config_;
  const std::string src = (dir / "config.json").string();
  if (c.target_hidden_size != target.hidden_size)
    throw Error(src + ": target_hidden_size " + std::to_string(c.target_hidden_size) + " does not match the target's hidden_size " +
                std::to_string(target.hidden_size));
  if (c.vocab_size < target.vocab_size)
    throw Error(src + ": vocab_size " + std::to_string(c.vocab_size) + " is smaller than the target's " +
                std::to_string(target.vocab_size) + " (the draft embeds target token ids)");
  if (c.aux_layer_ids.empty()) throw Error(src + ": eagle_aux_hidden_state_layer_ids is empty");
  for (int64_t id : c.aux_layer_ids)
    if (id < 0 || id > target.num_hidden_layers)
      throw Error(src + ": aux hidden state layer id " + std::to_string(id) + " outside the target's [0, " +
                  std::to_string(target.num_hidden_layers) + "]");
  if (num_blocks <= 0 || block_size <= 0) throw Error("Eagle3 draft: num_blocks and block_size must be positive");

  checkpoint_ = std::make_unique<Checkpoint>(dir);
  const Checkpoint& ck = *checkpoint_;
  const ModelConfig float_weights;  // no quantization_config: the draft is stored in float
  QuantizationRequest request;  // stored as is (float); only the activations follow the target
  request.activations = bf16_activations ? ActivationDtype::BFloat16 : ActivationDtype::Float32;
  WeightBinder bind(ck, float_weights, request);
  const int64_t H = c.hidden_size, T = c.target_hidden_size, hd = c.head_dim;
  const int64_t qd = c.num_attention_heads * hd;
  kv_dim_ = c.num_key_value_heads * hd;
  // vLLM renames the reference's midlayer.* to layers.0.*; both are published.
  const std::string p = ck.contains("layers.0.hidden_norm.weight") ? "layers.0." : "midlayer.";
  fc_ = bind.linear("fc", H, int64_t(c.aux_layer_ids.size()) * T);
  hidden_norm_ = bind.vector(p + "hidden_norm.weight", H);
  input_norm_ = bind.vector(p + "input_layernorm.weight", H);
  q_ = bind.linear(p + "self_attn.q_proj", qd, 2 * H);
  k_ = bind.linear(p + "self_attn.k_proj", kv_dim_, 2 * H);
  v_ = bind.linear(p + "self_attn.v_proj", kv_dim_, 2 * H);
  o_ = bind.linear(p + "self_attn.o_proj", H, qd);
  post_norm_ = bind.vector(p + "post_attention_layernorm.weight", H);
  gate_ = bind.linear(p + "mlp.gate_proj", c.intermediate_size, H);
  up_ = bind.linear(p + "mlp.up_proj", c.intermediate_size, H);
  down_ = bind.linear(p + "mlp.down_proj", H, c.intermediate_size);
  final_norm_ = bind.vector("norm.weight", H);
  lm_head_ = bind.linear("lm_head", c.draft_vocab_size, H);
  if (ck.contains("embed_tokens.weight")) {
    embed_ = bind.dense("embed_tokens.weight", c.vocab_size, H);
  } else {
    if (!target_embedding)
      throw Error(dir.string() + ": the draft has no embed_tokens.weight and no target embedding was given to share");
    if (target_embedding->format != WeightFormat::Dense || target_embedding->cols != H ||
        target_embedding->rows < target.vocab_size)
      throw Error(dir.string() + ": the draft has no embed_tokens.weight and the target's embedding " +
                  shape_str(target_embedding->rows, target_embedding->cols) + " cannot be shared (expected [" +
                  std::to_string(target.vocab_size) + ", " + std::to_string(H) + "], float)");
    embed_ = *target_embedding;
  }
  if (const TensorView* d2t = ck.find("d2t")) {
    if (d2t->shape != std::vector<int64_t>{c.draft_vocab_size} || (d2t->dtype != DType::I64 && d2t->dtype != DType::I32))
      throw Error(d2t->file.string() + ": tensor 'd2t' has shape " + d2t->shape_string() + " and dtype " +
                  std::string(dtype_name(d2t->dtype)) + "; expected [" + std::to_string(c.draft_vocab_size) + "] I64");
    d2t_.resize(size_t(c.draft_vocab_size));
    for (size_t i = 0; i < d2t_.size(); ++i) {
      if (d2t->dtype == DType::I64) {
        std::memcpy(&d2t_[i], d2t->data.data() + i * 8, 8);
      } else {
        int32_t v;
        std::memcpy(&v, d2t->data.data() + i * 4, 4);
        d2t_[i] = v;
      }
      const int64_t t = int64_t(i) + d2t_[i];
      if (t < 0 || t >= target.vocab_size)
        throw Error(d2t->file.string() + ": d2t maps draft id " + std::to_string(i) + " to " + std::to_string(t) +
                    ", outside the target vocabulary of " + std::to_string(target.vocab_size));
    }
  } else if (c.draft_vocab_size > target.vocab_size) {
    throw Error(src + ": draft vocabulary " + std::to_string(c.draft_vocab_size) + " exceeds the target's " +
                std::to_string(target.vocab_size) + " and there is no d2t to map it");
  }
  kv_row_bytes_ = size_t(kv_dim_) * (kv_bf16_ ? sizeof(uint16_t) : sizeof(float));
  const size_t kv_bytes = size_t(num_blocks * block_size * 2) * kv_row_bytes_;
  kv_.reset(static_cast<std::byte*>(std::calloc(std::max<size_t>(kv_bytes, 1), 1)));
  if (!kv_) throw Error("eagle3: cannot allocate the draft's KV cache (" + std::to_string(kv_bytes) + " bytes)");
}

// Rows start at multiples of kv_row_bytes_ in calloc'd memory, so they are aligned for their type.
void Eagle3Draft::write_kv_row(const float* src, std::byte* dst) const {
  if (!kv_bf16_) {
    std::memcpy(dst, src, kv_row_bytes_);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < kv_dim_; ++i) out[i] = f32_to_bf16(src[i]);
}

float Eagle3Draft::dot_kv(const float* a, const std::byte* row, int64_t head) const {
  const int64_t hd = config_.head_dim;
  return kv_bf16_ ? dot_bf16(a, reinterpret_cast<const uint16_t*>(row) + head * hd, hd)
                  : dot_f32(a, reinterpret_cast<const float*>(row) + head * hd, hd);
}

void Eagle3Draft::axpy_kv(float* y, float a, const std::byte* row, int64_t head) const {
  const int64_t hd = config_.head_dim;
  if (kv_bf16_)
    axpy_bf16(y, a, reinterpret_cast<const uint16_t*>(row) + head * hd, hd);
  else
    axpy_f32(y, a, reinterpret_cast<const float*>(row) + head * hd, hd);
}

// Llama's rotate_half pairs dimension i with i + hd/2 (frequency i); Rope pairs 2i with 2i+1.
// Interleaving the halves, rotating, and splitting them again gives the former with the latter's
// frequencies and YaRN scale.
void Eagle3Draft::rope_rotate_half(float* x, int64_t heads, int64_t position) const {
  const int64_t hd = config_.head_dim, half = hd / 2;
  std::vector<float> tmp(size_t(heads * hd));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      tmp[size_t(h * hd + 2 * i)] = x[h * hd + i];
      tmp[size_t(h * hd + 2 * i + 1)] = x[h * hd + i + half];
    }
  rope_.apply(tmp.data(), heads, hd, position);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      x[h * hd + i] = tmp[size_t(h * hd + 2 * i)];
      x[h * hd + i + half] = tmp[size_t(h * hd + 2 * i + 1)];
    }
}

Eagle3Output Eagle3Draft::forward(ThreadPool& pool, std::span<const Eagle3Sequence> seqs) {
  const Eagle3Config& c = config_;
  const int64_t H = c.hidden_size, F = int64_t(c.aux_layer_ids.size()) * c.target_hidden_size;
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, qd = nh * hd, group = nh / c.num_key_value_heads;
  struct Row {
    size_t seq;
    int64_t position;
    int32_t block;
    int64_t offset;
  };
  std::vector<Row> rows;
  std::vector<size_t> first_row(seqs.size() + 1, 0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Eagle3Sequence& q = seqs[s];
    const int64_t n = int64_t(q.tokens.size());
    if (n == 0) throw Error("Eagle3 draft forward: a sequence without tokens");
    const int64_t width = q.from_draft_hidden ? H : F;
    if (int64_t(q.hidden.size()) != n * width)
      throw Error("Eagle3 draft forward: " + std::to_string(q.hidden.size()) + " hidden values for " + std::to_string(n) +
                  " rows of " + std::to_string(width));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = q.first_position + i;
      if (q.tokens[size_t(i)] < 0 || q.tokens[size_t(i)] >= target_vocab_)
        throw Error("Eagle3 draft forward: token id " + std::to_string(q.tokens[size_t(i)]) + " out of range");
      if (pos < 0 || pos / block_size_ >= int64_t(q.block_ids.size()))
        throw Error("Eagle3 draft forward: position " + std::to_string(pos) + " outside the block table (" +
                    std::to_string(q.block_ids.size()) + " blocks of " + std::to_string(block_size_) + ")");
      const int32_t b = q.block_ids[size_t(pos / block_size_)];
      if (b < 0 || b >= num_blocks_) throw Error("Eagle3 draft forward: block id " + std::to_string(b) + " out of range");
      rows.push_back({s, pos, b, pos % block_size_});
    }
    first_row[s + 1] = rows.size();
  }
  const int64_t N = int64_t(rows.size());

  // The hidden input of every row: fc(captures), or the previous chain step's output.
  // (All sequences' capture rows go through fc in one product.)
  std::vector<float> hidden(size_t(N * H));
  std::vector<float> feats;
  std::vector<size_t> feat_rows;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].from_draft_hidden) {
      std::copy(seqs[s].hidden.begin(), seqs[s].hidden.end(), &hidden[first_row[s] * size_t(H)]);
    } else {
      feats.insert(feats.end(), seqs[s].hidden.begin(), seqs[s].hidden.end());
      for (size_t r = first_row[s]; r < first_row[s + 1]; ++r) feat_rows.push_back(r);
    }
  }
  if (!feat_rows.empty()) {
    std::vector<float> projected(feat_rows.size() * size_t(H));
    matmul(pool, fc_, feats.data(), int64_t(feat_rows.size()), projected.data());
    for (size_t i = 0; i < feat_rows.size(); ++i)
      std::copy_n(&projected[i * size_t(H)], H, &hidden[feat_rows[i] * size_t(H)]);
  }
  // Attention input: [input_layernorm(embed(token)), hidden_norm(hidden)] (embedding first).
  std::vector<float> x(size_t(N * 2 * H));
  const size_t row_bytes = size_t(H) * dtype_size(embed_.dtype);
  for (int64_t r = 0; r < N; ++r) {
    const Row& row = rows[size_t(r)];
    const int32_t tok = seqs[row.seq].tokens[size_t(row.position - seqs[row.seq].first_position)];
    convert_to_f32(embed_.dtype, static_cast<const std::byte*>(embed_.data) + size_t(tok) * row_bytes, &x[size_t(r * 2 * H)], H);
    std::copy_n(&hidden[size_t(r * H)], H, &x[size_t(r * 2 * H + H)]);
  }
  const float eps = float(c.rms_norm_eps);
  rms_norm(x.data(), N, H, 2 * H, input_norm_.data(), eps);
  rms_norm(x.data() + H, N, H, 2 * H, hidden_norm_.data(), eps);

  // Every row's K and V go into the cache; everything after them only for each sequence's last
  // row. With one decoder layer the other rows' outputs feed nothing (the chain continues from the
  // last row, and later rows read only their K and V), so a step that catches up on k + 1 verified
  // positions costs about a one-row step plus k rows of K and V, not k + 1 whole rows.
  const int64_t S = int64_t(seqs.size());
  std::vector<float> xl(size_t(S * 2 * H)), hl(size_t(S * H));
  for (int64_t s = 0; s < S; ++s) {
    const size_t last = first_row[size_t(s) + 1] - 1;
    std::copy_n(&x[last * size_t(2 * H)], 2 * H, &xl[size_t(s * 2 * H)]);
    std::copy_n(&hidden[last * size_t(H)], H, &hl[size_t(s * H)]);
  }
  std::vector<float> q(size_t(S * qd)), k(size_t(N * kv_dim_)), v(size_t(N * kv_dim_));
  const MatmulJob qkv[] = {{q_, xl.data(), S, q.data()}, {k_, x.data(), N, k.data()}, {v_, x.data(), N, v.data()}};
  matmul_batch(pool, qkv);
  for (int64_t r = 0; r < N; ++r) {
    const Row& row = rows[size_t(r)];
    rope_rotate_half(&k[size_t(r * kv_dim_)], c.num_key_value_heads, row.position);
    write_kv_row(&k[size_t(r * kv_dim_)], k_row(row.block, row.offset));
    write_kv_row(&v[size_t(r * kv_dim_)], v_row(row.block, row.offset));
  }
  for (int64_t s = 0; s < S; ++s) rope_rotate_half(&q[size_t(s * qd)], nh, rows[first_row[size_t(s) + 1] - 1].position);

  // Causal attention of each sequence's last row and head over its rows [0, position] in the storage.
  std::vector<float> attn(size_t(S * qd), 0.0f);
  const float scale = 1.0f / std::sqrt(float(hd));
  pool.parallel_for(S * nh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t s = job / nh, h = job % nh, kvh = h / group;
      const Row& row = rows[first_row[size_t(s) + 1] - 1];
      const Eagle3Sequence& sq = seqs[row.seq];
      const float* qh = &q[size_t(s * qd + h * hd)];
      scores.resize(size_t(row.position + 1));
      for (int64_t j = 0; j <= row.position; ++j) {
        const int32_t b = sq.block_ids[size_t(j / block_size_)];
        scores[size_t(j)] = dot_kv(qh, k_row(b, j % block_size_), kvh) * scale;
      }
      softmax(scores.data(), row.position + 1);
      float* out = &attn[size_t(s * qd + h * hd)];
      for (int64_t j = 0; j <= row.position; ++j) {
        const int32_t b = sq.block_ids[size_t(j / block_size_)];
        axpy_kv(out, scores[size_t(j)], v_row(b, j % block_size_), kvh);
      }
    }
  });

  // Residual: the un-normalised hidden (or, with norm_before_residual, its hidden_norm).
  std::vector<float> h(size_t(S * H));
  matmul(pool, o_, attn.data(), S, h.data());
  if (c.norm_before_residual) {
    std::vector<float> normed(size_t(S * H));
    rms_norm_to(hl.data(), normed.data(), S, H, hidden_norm_.data(), eps);
    for (size_t i = 0; i < h.size(); ++i) h[i] += normed[i];
  } else {
    for (size_t i = 0; i < h.size(); ++i) h[i] += hl[i];
  }
  std::vector<float> g(size_t(S * H)), gate(size_t(S * c.intermediate_size)), up(gate.size()), down(size_t(S * H));
  rms_norm_to(h.data(), g.data(), S, H, post_norm_.data(), eps);
  const MatmulJob mlp[] = {{gate_, g.data(), S, gate.data()}, {up_, g.data(), S, up.data()}};
  matmul_batch(pool, mlp);
  silu_mul(gate.data(), up.data(), int64_t(gate.size()));
  matmul(pool, down_, gate.data(), S, down.data());
  for (size_t i = 0; i < h.size(); ++i) h[i] += down[i];

  // The last row of each sequence: its pre-norm hidden and its logits in target ids.
  const int64_t DV = c.draft_vocab_size;
  Eagle3Output out;
  out.hidden = std::move(h);
  std::vector<float> normed(out.hidden.size()), dl(size_t(S * DV));
  rms_norm_to(out.hidden.data(), normed.data(), S, H, final_norm_.data(), eps);
  matmul(pool, lm_head_, normed.data(), S, dl.data());
  out.logits.assign(size_t(S * target_vocab_), -std::numeric_limits<float>::infinity());
  out.argmax.resize(size_t(S));
  for (int64_t s = 0; s < S; ++s) {
    const float* row = &dl[size_t(s * DV)];
    float* dst = &out.logits[size_t(s * target_vocab_)];
    int64_t best = 0;
    for (int64_t i = 0; i < DV; ++i) {
      const int64_t t = d2t_.empty() ? i : i + d2t_[size_t(i)];
      dst[t] = row[i];
      if (row[i] > row[best]) best = i;
    }
    out.argmax[size_t(s)] = int32_t(d2t_.empty() ? best : best + d2t_[size_t(best)]);
  }
  return out;
}

}  // namespace kimi
