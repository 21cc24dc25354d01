// The absorbed form of MLA attention (attention_forms.h): kv_b's key half folded into the query
// (q_lat = q_nope . W_uk), scores and the probability-weighted sum taken over the cached latents
// themselves, kv_b's value half applied to that sum once per query. Three parallel regions for
// all the step's absorbed sequences together (per kQueryBlock queries):
//  1. q_lat, one head per task (each head's W_uk serves all the step's queries);
//  2. the attention proper, one task per (query, chunk of its context): every head of the query
//     over the chunk's rows, a tile of rows at a time, so that each row comes from memory once
//     and serves all heads from L1 (the heads' groups take turns on the tile), with an online
//     softmax across tiles. A context is cut into chunks only when there are fewer queries than
//     threads (decode); each chunk then leaves a partial softmax (its max, its sum of
//     exponentials, its unnormalised sum of latents), merged in region 3, as flash-decoding's
//     split-KV does. So one decode step reads each layer's cache once over all threads, where one
//     task per group of heads read it once per group;
//  3. per head: the chunks' merge, then the value up-projection for all the step's queries.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/bf16_dot.h"
#include "kernels/bf16_dot_rate.h"
#include "kernels/matmul.h"
#include "kernels/mla_kernels.h"
#include "kernels/vec_ops.h"
#include "model/attention_forms.h"

namespace kimi::attention_forms {

namespace {

// A context is cut into chunks of at least this many rows: a chunk's fixed costs (its heads'
// accumulators zeroed, stored and merged: H x lora floats each) stay small against its rows.
constexpr int64_t kMinChunkRows = 64;
// Queries taken together (all of a decode batch's up to this many): bounds q_lat and o_lat, each
// [H, queries, lora] floats (32 MiB at the real 64 heads), when a long prefill runs absorbed.
constexpr size_t kQueryBlock = 256;
// Rows a task takes at once (fewer at a cache block's end): each is loaded from memory by the
// first group of heads and from L1 by the others (16 rows of the real model's f32 cache: 36 KiB).
constexpr int64_t kTileRows = 16;

// One query of the step: its batch row, its position (it sees cache rows [0, pos]), its cache,
// and how its context is cut: `chunks` chunks of about equal size, each starting on a whole tile
// (chunk_begin); with more than one, their partial softmaxes are in slots [first_partial,
// first_partial + chunks).
struct Query {
  int64_t row = 0, pos = 0;
  const KvView* kv = nullptr;
  int64_t chunks = 1, first_partial = -1;

  // Chunk c's first row (c == chunks: the context's end): c / chunks of the context, to the
  // nearest tile, so that the threads' chunks differ by at most a tile (rounding every chunk up
  // to whole tiles left a 193-row decode as 112 + 81 rows on two threads).
  int64_t chunk_begin(int64_t c) const {
    const int64_t ctx = pos + 1;
    if (c >= chunks) return ctx;
    return (c * ctx / chunks + kTileRows / 2) / kTileRows * kTileRows;
  }
};

// Cuts every query's context so that each thread has about one chunk's worth of rows: the step's
// total rows over the threads (at least kMinChunkRows) per chunk, to the nearest whole number of
// chunks. With as many queries as threads or more, every context stays whole.
int64_t plan_chunks(std::span<Query> queries, int threads) {
  int64_t total = 0;
  for (const Query& q : queries) total += q.pos + 1;
  const int64_t target = std::max(kMinChunkRows, (total + threads - 1) / threads);
  int64_t partials = 0;
  for (Query& q : queries) {
    const int64_t ctx = q.pos + 1;
    q.chunks = std::max<int64_t>(1, (ctx + target / 2) / target);
    if (q.chunks > 1) {
      q.first_partial = partials;
      partials += q.chunks;
    }
  }
  return partials;
}

// One task's online softmax over a chunk of a query's context, every head at once: per head the
// running max of its scores, the sum of e^(score - max) and the unnormalised sum of latents at
// that max; a tile's scores (then probabilities) in between.
struct ChunkSoftmax {
  std::vector<float> p, sums, max;
  std::vector<double> total;
  // The AVX512_BF16 kernels that attend() takes with bf16 queries, looked up once, not per tile.
  const kernels::MlaScoresBf16 scores_bf16 = kernels::mla_scores_bf16();
  const kernels::MlaValuesBf16 values_bf16 = kernels::mla_values_bf16();
  explicit ChunkSoftmax(const Dims& d)
      : p(size_t(d.H * kTileRows)), sums(size_t(d.H * d.lora)), max(size_t(d.H)), total(size_t(d.H)) {}

  // Chunk c of query qi; head h's q_lat at ql + h * ql_stride, its rope query at qr + h * qk; or,
  // with qb, head h's both in bf16 at qb + h * (lora + rope) (a bf16 cache's rows, whose scores
  // and values then take the AVX512_BF16 kernels).
  void attend(const Dims& d, int64_t layer, const Query& qi, int64_t c, const float* ql, int64_t ql_stride,
              const float* qr, const uint16_t* qb, float scale) {
    constexpr int64_t T = kTileRows;
    std::fill(sums.begin(), sums.end(), 0.0f);
    std::fill(max.begin(), max.end(), -std::numeric_limits<float>::infinity());
    std::fill(total.begin(), total.end(), 0.0);
    const int64_t end = qi.chunk_begin(c + 1);
    for (int64_t j = qi.chunk_begin(c); j < end;) {
      const MlaRows m = qi.kv->rows_in_block(layer, j, std::min(end, j + T));
      for (int64_t g = 0; g < d.H; g += kMlaMaxHeads) {
        const int nh = int(std::min<int64_t>(kMlaMaxHeads, d.H - g));
        if (qb)
          scores_bf16(m, nh, qb + g * (d.lora + d.rope), d.lora + d.rope, scale, &p[size_t(g * T)], T);
        else
          mla_scores(m, nh, ql + g * ql_stride, ql_stride, qr + g * d.qk, d.qk, scale, &p[size_t(g * T)], T);
      }
      for (int64_t h = 0; h < d.H; ++h) {
        float* ph = &p[size_t(h * T)];
        const float top = *std::max_element(ph, ph + m.count);
        float& run = max[size_t(h)];
        if (top > run) {
          if (total[size_t(h)] > 0) {  // the earlier tiles' terms, rescaled to the new max
            const float f = std::exp(run - top);
            for (int64_t k = 0; k < d.lora; ++k) sums[size_t(h * d.lora + k)] *= f;
            total[size_t(h)] *= double(f);
          }
          run = top;
        }
        total[size_t(h)] += double(exp_shifted_f32(ph, m.count, run));
      }
      for (int64_t g = 0; g < d.H; g += kMlaMaxHeads) {
        const int nh = int(std::min<int64_t>(kMlaMaxHeads, d.H - g));
        if (qb)
          values_bf16(m, nh, &p[size_t(g * T)], T, &sums[size_t(g * d.lora)], d.lora);
        else
          mla_values(m, nh, &p[size_t(g * T)], T, &sums[size_t(g * d.lora)], d.lora);
      }
      j += m.count;
    }
  }

  // The whole context's result: head h's softmax-weighted latent sum at out + h * out_stride.
  void normalised(const Dims& d, float* out, int64_t out_stride) const {
    for (int64_t h = 0; h < d.H; ++h) {
      const float inv = float(1.0 / total[size_t(h)]);
      for (int64_t k = 0; k < d.lora; ++k) out[h * out_stride + k] = sums[size_t(h * d.lora + k)] * inv;
    }
  }
};

// The chunks' partial softmaxes (ChunkSoftmax's state), slot by slot: [slot, H, lora] sums,
// [slot, H] maxima and totals.
struct Partials {
  std::vector<float> sums, max;
  std::vector<double> total;
  Partials(const Dims& d, int64_t slots)
      : sums(size_t(slots * d.H * d.lora)), max(size_t(slots * d.H)), total(size_t(slots * d.H)) {}

  void store(int64_t slot, const ChunkSoftmax& cs) {
    std::copy(cs.sums.begin(), cs.sums.end(), sums.begin() + ptrdiff_t(slot) * ptrdiff_t(cs.sums.size()));
    std::copy(cs.max.begin(), cs.max.end(), max.begin() + ptrdiff_t(slot) * ptrdiff_t(cs.max.size()));
    std::copy(cs.total.begin(), cs.total.end(), total.begin() + ptrdiff_t(slot) * ptrdiff_t(cs.total.size()));
  }
  // Head h of query qi, its chunks' sums rescaled to their common max and normalised: out[lora].
  void merge(const Dims& d, const Query& qi, int64_t h, float* out) const {
    const auto at = [&](int64_t c) { return size_t((qi.first_partial + c) * d.H + h); };
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < qi.chunks; ++c) top = std::max(top, max[at(c)]);
    double all = 0;
    for (int64_t c = 0; c < qi.chunks; ++c) all += total[at(c)] * std::exp(double(max[at(c)] - top));
    std::fill(out, out + d.lora, 0.0f);
    for (int64_t c = 0; c < qi.chunks; ++c) {
      const float f = float(std::exp(double(max[at(c)] - top)) / all);
      const float* src = &sums[at(c) * size_t(d.lora)];
      for (int64_t k = 0; k < d.lora; ++k) out[k] += src[k] * f;
    }
  }
};

// Whether the scores take bf16 queries and the values bf16 probabilities (ChunkSoftmax::attend):
// every query's cache holds bf16 rows, the model rounds its linears' activations to bf16 too
// (o_proj's, as all of them), and the CPU has the AVX512_BF16 kernels with a fast VDPBF16PS. 64
// heads x [16 x 576] from L2, one thread: a tile 0.57-0.62x the time in f32 on Zen 5 (bench_kernels'
// BM_MlaTiles), the real shapes' attention phase at a 4 K context 0.73-0.80x; on Emerald Rapids,
// whose VDPBF16PS issues at a quarter of the FMA's rate (kernels/bf16_dot_rate.h), 1.34x the time,
// so there the core stays f32. The naive form keeps f32 (README, --dtype).
bool bf16_attention(const AttentionWeights& w, std::span<const Query> queries) {
  if (w.o.act_quant != ActivationQuant::Bf16 || !kernels::mla_scores_bf16() || !kernels::bf16_dot_is_fast())
    return false;
  for (const Query& qi : queries)
    if (qi.kv->layout.dtype != KvCacheDtype::BFloat16) return false;
  return true;
}

// The three regions for one block of queries.
void attend_block(const Dims& d, const AttentionWeights& w, int64_t layer, std::span<Query> queries, const float* q,
                  float scale, ThreadPool& pool, float* attn_out) {
  const int64_t n = int64_t(queries.size());
  const int64_t partials = plan_chunks(queries, pool.size());
  std::vector<std::pair<int64_t, int64_t>> tasks;  // (query, chunk)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < queries[size_t(i)].chunks; ++c) tasks.emplace_back(i, c);

  // 1. q_lat[h, i] = q_nope[i, h] . W_uk[h]: the key up-projection moved onto the query. Where
  // bf16_attention, each head's q_lat and rope query are also rounded into qb [n, H, lora + rope].
  const int64_t lat_head = n * d.lora;  // q_lat and o_lat are head-major: [H, n, lora]
  std::vector<float> q_lat(size_t(d.H * lat_head));
  const int64_t width = d.lora + d.rope;
  std::vector<uint16_t> qb(bf16_attention(w, queries) ? size_t(n * d.H * width) : 0);
  pool.parallel_for(d.H, 1, [&](int64_t b, int64_t e) {
    std::vector<float> nope(size_t(n * d.nope));
    for (int64_t h = b; h < e; ++h) {
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(q + (queries[size_t(i)].row * d.H + h) * d.qk, d.nope, &nope[size_t(i * d.nope)]);
      matmul_untransposed(w.kv_b.row_slice(h * d.kvb_head, d.nope), nope.data(), n, &q_lat[size_t(h * lat_head)]);
      if (qb.empty()) continue;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t* dst = &qb[size_t((i * d.H + h) * width)];
        kernels::round_to_bf16(&q_lat[size_t(h * lat_head + i * d.lora)], d.lora, dst);
        kernels::round_to_bf16(q + (queries[size_t(i)].row * d.H + h) * d.qk + d.nope, d.rope, dst + d.lora);
      }
    }
  });

  // 2. Per task, every head's softmax-weighted sum of latents over the task's rows.
  std::vector<float> o_lat(size_t(d.H * lat_head));
  Partials parts(d, partials);
  pool.parallel_for(int64_t(tasks.size()), 1, [&](int64_t b, int64_t e) {
    ChunkSoftmax cs(d);
    for (int64_t t = b; t < e; ++t) {
      const auto [i, c] = tasks[size_t(t)];
      const Query& qi = queries[size_t(i)];
      cs.attend(d, layer, qi, c, &q_lat[size_t(i * d.lora)], lat_head, q + qi.row * d.H * d.qk + d.nope,
                qb.empty() ? nullptr : &qb[size_t(i * d.H * width)], scale);
      if (qi.chunks == 1) {
        cs.normalised(d, &o_lat[size_t(i * d.lora)], lat_head);
      } else {
        parts.store(qi.first_partial + c, cs);
      }
    }
  });

  // 3. Per head: the chunks merged at their common max, then out[i, h] = W_uv[h] . o_lat[h, i]
  // for all queries in one product (f32 activations: a product on this thread alone).
  pool.parallel_for(d.H, 1, [&](int64_t b, int64_t e) {
    std::vector<float> out(size_t(n * d.v));
    for (int64_t h = b; h < e; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const Query& qi = queries[size_t(i)];
        if (qi.chunks > 1) parts.merge(d, qi, h, &o_lat[size_t(h * lat_head + i * d.lora)]);
      }
      WeightMatrix uv = w.kv_b.row_slice(h * d.kvb_head + d.nope, d.v);
      uv.act_quant = ActivationQuant::None;
      matmul_on_thread(uv, &o_lat[size_t(h * lat_head)], n, out.data());
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(attn_out + (queries[size_t(i)].row * d.H + h) * d.v, &out[size_t(i * d.v)], size_t(d.v) * 4);
    }
  });
}

}  // namespace

void attend_absorbed(const Dims& d, const AttentionWeights& w, int64_t layer, std::span<const SeqSlice* const> seqs,
                     const float* q, float scale, ThreadPool& pool, float* attn_out) {
  std::vector<Query> queries;
  for (const SeqSlice* s : seqs)
    for (int64_t t = 0; t < s->n_tokens; ++t) queries.push_back({s->first_row + t, s->kv.length + t, &s->kv});
  const std::span<Query> all(queries);
  for (size_t b = 0; b < all.size(); b += kQueryBlock)
    attend_block(d, w, layer, all.subspan(b, std::min(all.size() - b, kQueryBlock)), q, scale, pool, attn_out);
}

}  // namespace kimi::attention_forms
