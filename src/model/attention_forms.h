#pragma once
// Internal to model/attention*.cpp: the two ways MLA attends over its latent cache, given the
// step's queries (after rope) and the cache rows already written. mla_attention (attention.cpp)
// owns the projections around them and picks the form per sequence.
//  - attention_naive.cpp: expand the cached latents through kv_b into per-head keys and values.
//  - attention_absorbed.cpp: attend over the latents themselves, kv_b folded into the query and
//    the output.
#include <cstdint>
#include <span>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/attention.h"
#include "model/weights.h"

namespace kimi::attention_forms {

struct Dims {
  int64_t H, nope, rope, qk, v, lora, kvb_head;  // kvb_head: kv_b rows per head (nope + v)
  explicit Dims(const ModelConfig& c)
      : H(c.num_attention_heads), nope(c.qk_nope_head_dim), rope(c.qk_rope_head_dim), qk(c.qk_head_dim()),
        v(c.v_head_dim), lora(c.kv_lora_rank), kvb_head(c.qk_nope_head_dim + c.v_head_dim) {}
};

// q: the step's queries [n_rows, H, nope | rope], rope applied; scale: the softmax's. Each writes
// its sequences' rows of attn_out [n_rows, H, v]. expansion_rows as mla_attention's.
void attend_naive(const Dims& d, const AttentionWeights& w, int64_t layer, const SeqSlice& s, const float* q,
                  float scale, int64_t expansion_rows, ThreadPool& pool, float* attn_out);
// Every sequence of `seqs` at once: three parallel regions in all, whatever their number (per 256
// queries: a decode batch of up to 256 sequences, or blocks of a prefill run absorbed).
void attend_absorbed(const Dims& d, const AttentionWeights& w, int64_t layer, std::span<const SeqSlice* const> seqs,
                     const float* q, float scale, ThreadPool& pool, float* attn_out);

}  // namespace kimi::attention_forms
