#include "model/attention_forms.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/matmul.h"
#include "model/ops.h"

namespace kimi::attention_forms {

namespace {

// Queries per task of the naive form: each task copies its head's keys and values out of the
// expansion once for this many queries, whose products with them are then two GEMMs (a copy of
// each key and value against 64 queries' multiply-adds with it).
constexpr int64_t kNaiveQueryBlock = 64;
// The naive form expands the context through kv_b in chunks of at most this many bytes
// ([rows, H, nope + v] f32: 1024 rows at the real 64 heads), so that a prefill chunk deep into a
// long context does not hold its whole expansion (64 KiB a row: 17 GB at 256 K rows).
constexpr int64_t kNaiveExpansionBytes = int64_t(64) << 20;

}  // namespace

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
          const float keep = std::exp(mx - new_max);
          const float add = chunk_sum[size_t(i)] * std::exp(chunk_max[size_t(i)] - new_max);
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

}  // namespace kimi::attention_forms
