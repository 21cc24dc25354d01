#include "model/attention.h"

#include <vector>

#include "model/attention_forms.h"
#include "model/ops.h"

namespace kimi {

AttentionMode choose_attention_mode(const ModelConfig& c, int64_t n_new, int64_t ctx) {
  const double H = double(c.num_attention_heads), lora = double(c.kv_lora_rank);
  const double nope = double(c.qk_nope_head_dim), rope = double(c.qk_rope_head_dim), v = double(c.v_head_dim);
  const double pairs = double(n_new) * double(ctx);  // query/key pairs (upper bound: causal halves it)
  const double naive = double(ctx) * H * (nope + v) * lora + pairs * H * (nope + rope + v);
  const double absorbed = double(n_new) * H * (nope + v) * lora + pairs * H * (2 * lora + rope);
  return naive < absorbed ? AttentionMode::Naive : AttentionMode::Absorbed;
}

void mla_attention(const ModelConfig& c, const AttentionWeights& w, const Rope& rope, int64_t layer,
                   std::span<const SeqSlice> seqs, const float* x_norm, int64_t n_rows, AttentionMode mode,
                   int64_t expansion_rows, ThreadPool& pool, float* out) {
  const attention_forms::Dims d(c);
  const float eps = float(c.rms_norm_eps);

  // Queries [n_rows, H, nope | rope], and this step's cache rows (normalised latent, then the
  // rotated rope key); the two down-projections of x_norm run as one batch.
  std::vector<float> q(static_cast<size_t>(n_rows * d.H * d.qk));
  std::vector<float> kv(static_cast<size_t>(n_rows * (d.lora + d.rope)));
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(static_cast<size_t>(n_rows * c.q_lora_rank));
    const MatmulJob down[] = {{w.q_a, x_norm, n_rows, qa.data()}, {w.kv_a, x_norm, n_rows, kv.data()}};
    matmul_batch(pool, down);
    rms_norm(qa.data(), n_rows, c.q_lora_rank, c.q_lora_rank, w.q_a_norm.data(), eps);
    matmul(pool, w.q_b, qa.data(), n_rows, q.data());
  } else {
    const MatmulJob proj[] = {{w.q_proj, x_norm, n_rows, q.data()}, {w.kv_a, x_norm, n_rows, kv.data()}};
    matmul_batch(pool, proj);
  }

  for (const SeqSlice& s : seqs) {
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      const int64_t row = s.first_row + t, pos = s.kv.length + t;
      float* r = &kv[size_t(row * (d.lora + d.rope))];
      rms_norm(r, 1, d.lora, d.lora, w.kv_a_norm.data(), eps);
      rope.apply(r + d.lora, 1, d.rope, pos);
      rope.apply(&q[size_t(row * d.H * d.qk + d.nope)], d.H, d.qk, pos);
      encode_kv_row(s.kv.layout, r, s.kv.row(layer, pos));  // the one conversion of this row
    }
  }

  // The naive form runs per sequence (its expansion is the sequence's own); the absorbed form
  // takes every sequence that chose it together, so a batch of decodes shares its regions.
  std::vector<float> attn(static_cast<size_t>(n_rows * d.H * d.v));
  const float scale = float(c.softmax_scale());
  std::vector<const SeqSlice*> absorbed;
  for (const SeqSlice& s : seqs) {
    AttentionMode m = mode;
    if (m == AttentionMode::Auto) m = choose_attention_mode(c, s.n_tokens, s.kv.length + s.n_tokens);
    if (m == AttentionMode::Naive)
      attention_forms::attend_naive(d, w, layer, s, q.data(), scale, expansion_rows, pool, attn.data());
    else
      absorbed.push_back(&s);
  }
  attention_forms::attend_absorbed(d, w, layer, absorbed, q.data(), scale, pool, attn.data());
  matmul(pool, w.o, attn.data(), n_rows, out);
  w.o_reduce(out, n_rows * w.o.rows);
}

}  // namespace kimi
