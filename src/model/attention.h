#pragma once
// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Keys and values are never cached per
// head: each token stores a kv_lora_rank latent plus one shared rope key. Two equivalent ways to
// attend over that cache:
//  - naive: expand the cached latents through kv_b_proj into per-head keys and values, then
//    ordinary attention (cheap per query when many queries share the expansion: prefill);
//  - absorbed: fold kv_b_proj's key half into the query and its value half into the output, and
//    attend directly over the latents (no per-token expansion: decoding).
#include <cstdint>
#include <span>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/weights.h"

namespace kimi {

enum class AttentionMode { Auto, Naive, Absorbed };

// One sequence's new tokens in a step: rows [first_row, first_row + n_tokens) of the batch,
// at positions kv.length ... (their cache rows are written here; the caller advances length).
struct SeqSlice {
  KvView kv;
  int64_t first_row = 0;
  int64_t n_tokens = 0;
};

// Which form Auto picks for n new tokens attending over a context of length ctx: the one with
// fewer multiply-adds for this model's dimensions.
AttentionMode choose_attention_mode(const ModelConfig& c, int64_t n_new, int64_t ctx);

// x_norm: [n_rows, hidden] normalised input; out: [n_rows, hidden] attention output (o_proj
// applied). Writes each token's latent and rope key into its sequence's cache at `layer`.
// expansion_rows: context rows the naive form expands at once (<= 0: as many as fit 64 MiB).
void mla_attention(const ModelConfig& c, const AttentionWeights& w, const Rope& rope, int64_t layer,
                   std::span<const SeqSlice> seqs, const float* x_norm, int64_t n_rows, AttentionMode mode,
                   int64_t expansion_rows, ThreadPool& pool, float* out);

}  // namespace kimi
