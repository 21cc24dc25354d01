#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/mla_kernels.h"
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

namespace {

struct Dims {
  int64_t H, nope, rope, qk, v, lora, kvb_head;  // kvb_head: kv_b rows per head (nope + v)
  explicit Dims(const ModelConfig& c)
      : H(c.num_attention_heads), nope(c.qk_nope_head_dim), rope(c.qk_rope_head_dim), qk(c.qk_head_dim()),
        v(c.v_head_dim), lora(c.kv_lora_rank), kvb_head(c.qk_nope_head_dim + c.v_head_dim) {}
};

// Queries per task of the naive form: each task copies its head's keys and values out of the
// expansion once for this many queries, whose products with them are then two GEMMs (a copy of
// each key and value against 64 queries' multiply-adds with it).
constexpr int64_t kNaiveQueryBlock = 64;
// The naive form expands the context through kv_b in chunks of at most this many bytes
// ([rows, H, nope + v] f32: 1024 rows at the real 64 heads), so that a prefill chunk deep into a
// long context does not hold its whole expansion (64 KiB a row: 17 GB at 256 K rows).
constexpr int64_t kNaiveExpansionBytes = int64_t(64) << 20;

// Naive form for one sequence: expand the cached latents into per-head keys/values, a chunk of
// context rows at a time, then per (head, block of queries) two GEMMs, scores = Q K^T and
// softmax(scores) V, over the chunk's keys the block can see (causal: the block's last query sees
// start + its index + 1 keys in all). Chunks merge as partial softmaxes: per (query, head) the
// running max of its scores, the sum of exp(score - max), and in attn_out the same-weighted sum of
// values, divided by the sum at the end.
void attend_naive(const Dims& d, const AttentionWeights& w, int64_t layer, const SeqSlice& s, const float* q,
                  float scale, int64_t chunk_rows, ThreadPool& pool, float* attn_out) {
  const KvView& cache = s.kv;
  const int64_t start = cache.length;
  const int64_t ctx = start + s.n_tokens;
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, kNaiveExpansionBytes / (d.H * d.kvb_head * 4));
  const int64_t blocks = (s.n_tokens + kNaiveQueryBlock - 1) / kNaiveQueryBlock;
  std::vector<float> run_max(static_cast<size_t>(s.n_tokens * d.H), -std::numeric_limits<float>::infinity());
  std::vector<float> run_sum(static_cast<size_t>(s.n_tokens * d.H), 0.0f);
  std::fill(attn_out + s.first_row * d.H * d.v, attn_out + (s.first_row + s.n_tokens) * d.H * d.v, 0.0f);

  std::vector<float> latents, rope_keys, kv, row(static_cast<size_t>(d.lora + d.rope));
  for (int64_t c0 = 0; c0 < ctx; c0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, ctx - c0);
    // The expansion is a matmul over f32 latents: gathering the rows out of their blocks converts
    // them on the way (O(rows x lora) against the expansion's O(rows x lora x H x (nope + v))),
    // the shared rope keys with them.
    latents.resize(size_t(rows * d.lora));
    rope_keys.resize(size_t(rows * d.rope));
    for (int64_t j = 0; j < rows; ++j) {
      decode_kv_row(cache.layout, cache.row(layer, c0 + j), row.data());
      std::copy_n(row.begin(), d.lora, &latents[size_t(j * d.lora)]);
      std::copy_n(row.begin() + d.lora, d.rope, &rope_keys[size_t(j * d.rope)]);
    }
    kv.resize(size_t(rows * d.H * d.kvb_head));  // [rows, H, nope + v]
    matmul(pool, w.kv_b, latents.data(), rows, kv.data());

    pool.parallel_for(d.H * blocks, 1, [&](int64_t b, int64_t e) {
      // This task's head: keys [m, nope | rope], values [m, v]; its queries (pre-scaled), their
      // scores, then probabilities, [n, m]; each query's max score and sum of exponentials here.
      std::vector<float> keys, values, qs, scores, out, chunk_max, chunk_sum;
      for (int64_t task = b; task < e; ++task) {
        const int64_t h = task / blocks, t0 = task % blocks * kNaiveQueryBlock;
        const int64_t n = std::min(kNaiveQueryBlock, s.n_tokens - t0);
        const int64_t m = std::min(rows, start + t0 + n - c0);  // this chunk's keys the block sees
        if (m <= 0) continue;
        keys.resize(size_t(m * d.qk));
        values.resize(size_t(m * d.v));
        for (int64_t j = 0; j < m; ++j) {
          const float* src = &kv[size_t((j * d.H + h) * d.kvb_head)];
          std::copy_n(src, d.nope, &keys[size_t(j * d.qk)]);
          std::copy_n(&rope_keys[size_t(j * d.rope)], d.rope, &keys[size_t(j * d.qk + d.nope)]);
          std::copy_n(src + d.nope, d.v, &values[size_t(j * d.v)]);
        }
        qs.resize(size_t(n * d.qk));
        for (int64_t i = 0; i < n; ++i) {
          const float* qh = q + ((s.first_row + t0 + i) * d.H + h) * d.qk;
          for (int64_t c = 0; c < d.qk; ++c) qs[size_t(i * d.qk + c)] = qh[c] * scale;
        }
        scores.resize(size_t(n * m));
        matmul_on_thread({.dtype = DType::F32, .data = keys.data(), .rows = m, .cols = d.qk}, qs.data(), n,
                         scores.data());
        chunk_max.assign(size_t(n), 0.0f);
        chunk_sum.assign(size_t(n), 0.0f);
        for (int64_t i = 0; i < n; ++i) {
          float* p = &scores[size_t(i * m)];
          const int64_t seen = std::clamp<int64_t>(start + t0 + i + 1 - c0, 0, m);  // keys up to its position
          if (seen > 0) {
            const float* best = std::max_element(p, p + seen);
            chunk_max[size_t(i)] = *best;
            softmax(p, seen);
            // softmax subtracts the same max, so the best key's exp is 1: its probability is
            // 1 / (the sum of exponentials).
            chunk_sum[size_t(i)] = 1.0f / *best;
          }
          std::fill(p + seen, p + m, 0.0f);
        }
        out.resize(size_t(n * d.v));
        matmul_untransposed({.dtype = DType::F32, .data = values.data(), .rows = m, .cols = d.v}, scores.data(), n,
                            out.data());
        for (int64_t i = 0; i < n; ++i) {
          if (chunk_sum[size_t(i)] == 0.0f) continue;  // no key of this chunk is visible to it
          float& mx = run_max[size_t((t0 + i) * d.H + h)];
          float& sum = run_sum[size_t((t0 + i) * d.H + h)];
          const float new_max = std::max(mx, chunk_max[size_t(i)]);
          const float keep = std::exp(mx - new_max), add = chunk_sum[size_t(i)] * std::exp(chunk_max[size_t(i)] - new_max);
          float* o = attn_out + ((s.first_row + t0 + i) * d.H + h) * d.v;
          for (int64_t c = 0; c < d.v; ++c) o[c] = o[c] * keep + out[size_t(i * d.v + c)] * add;
          sum = sum * keep + add;
          mx = new_max;
        }
      }
    });
  }
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t h = 0; h < d.H; ++h) {
      float* o = attn_out + ((s.first_row + t) * d.H + h) * d.v;
      const float inv = 1.0f / run_sum[size_t(t * d.H + h)];
      for (int64_t c = 0; c < d.v; ++c) o[c] *= inv;
    }
}

// Absorbed form for one sequence: attend over the latents themselves.
void attend_absorbed(const Dims& d, const AttentionWeights& w, int64_t layer, const SeqSlice& s, const float* q,
                     float scale, ThreadPool& pool, float* attn_out) {
  const KvView& cache = s.kv;
  const int64_t start = cache.length;
  const int64_t ctx = start + s.n_tokens;
  // Attention output in latent space, head-major so each head's value projection is one matmul.
  std::vector<float> o_lat(static_cast<size_t>(d.H * s.n_tokens * d.lora));
  // A task takes a group of one token's heads, which share every cache row: each row, once
  // loaded and widened from its dtype, serves the whole group from registers, so the cache is
  // streamed once per group instead of once per head (it is far larger than L2 at long
  // contexts). Groups stay small enough that every thread gets one.
  const int64_t group = std::clamp<int64_t>(s.n_tokens * d.H / int64_t(pool.size()), 1,
                                            std::min<int64_t>(d.H, kMlaMaxHeads));
  const int64_t groups_per_token = (d.H + group - 1) / group;
  pool.parallel_for(s.n_tokens * groups_per_token, 1, [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(group * ctx)), q_lat(static_cast<size_t>(group * d.lora));
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / groups_per_token, h0 = task % groups_per_token * group;
      const int nh = int(std::min(group, d.H - h0));
      const int64_t row = s.first_row + t, pos = start + t;
      const float* q0 = q + (row * d.H + h0) * d.qk;  // head h0 + g at q0 + g * qk
      // q_lat = q_nope . W_uk[h]: the key up-projection moved onto the query.
      for (int64_t g = 0; g < nh; ++g)
        matmul_untransposed(w.kv_b.row_slice((h0 + g) * d.kvb_head, d.nope), q0 + g * d.qk, 1,
                            &q_lat[size_t(g * d.lora)]);
      // The group's heads against every row in one pass per block (kernels/mla_kernels.h).
      for (int64_t j0 = 0; j0 <= pos;) {
        const MlaRows m = cache.rows_in_block(layer, j0, pos + 1);
        mla_scores(m, nh, q_lat.data(), d.lora, q0 + d.nope, d.qk, scale, &scores[size_t(j0)], ctx);
        j0 += m.count;
      }
      float* o0 = &o_lat[size_t((h0 * s.n_tokens + t) * d.lora)];  // head h0 + g at o0 + g * o_stride
      const int64_t o_stride = s.n_tokens * d.lora;
      for (int64_t g = 0; g < nh; ++g) {
        softmax(&scores[size_t(g * ctx)], pos + 1);
        std::fill(o0 + g * o_stride, o0 + g * o_stride + d.lora, 0.0f);
      }
      for (int64_t j0 = 0; j0 <= pos;) {
        const MlaRows m = cache.rows_in_block(layer, j0, pos + 1);
        mla_values(m, nh, &scores[size_t(j0)], ctx, o0, o_stride);
        j0 += m.count;
      }
    }
  });
  // out[t, h] = W_uv[h] . o_lat[h, t]: the value up-projection applied once per query, not per
  // key; all heads' products in one batch (one thread dispatch, not one per head).
  std::vector<float> oh(static_cast<size_t>(d.H * s.n_tokens * d.v));
  std::vector<MatmulJob> jobs;
  jobs.reserve(size_t(d.H));
  for (int64_t h = 0; h < d.H; ++h)
    jobs.push_back({w.kv_b.row_slice(h * d.kvb_head + d.nope, d.v), &o_lat[size_t(h * s.n_tokens * d.lora)],
                    s.n_tokens, &oh[size_t(h * s.n_tokens * d.v)]});
  matmul_batch(pool, jobs);
  for (int64_t h = 0; h < d.H; ++h)
    for (int64_t t = 0; t < s.n_tokens; ++t)
      std::memcpy(attn_out + ((s.first_row + t) * d.H + h) * d.v, &oh[size_t((h * s.n_tokens + t) * d.v)],
                  size_t(d.v) * 4);
}

}  // namespace

void mla_attention(const ModelConfig& c, const AttentionWeights& w, const Rope& rope, int64_t layer,
                   std::span<const SeqSlice> seqs, const float* x_norm, int64_t n_rows, AttentionMode mode,
                   int64_t expansion_rows, ThreadPool& pool, float* out) {
  const Dims d(c);
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

  std::vector<float> attn(static_cast<size_t>(n_rows * d.H * d.v));
  const float scale = float(c.softmax_scale());
  for (const SeqSlice& s : seqs) {
    AttentionMode m = mode;
    if (m == AttentionMode::Auto) m = choose_attention_mode(c, s.n_tokens, s.kv.length + s.n_tokens);
    if (m == AttentionMode::Naive) attend_naive(d, w, layer, s, q.data(), scale, expansion_rows, pool, attn.data());
    else attend_absorbed(d, w, layer, s, q.data(), scale, pool, attn.data());
  }
  matmul(pool, w.o, attn.data(), n_rows, out);
  w.o_reduce(out, n_rows * w.o.rows);
}

}  // namespace kimi
