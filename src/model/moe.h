#pragma once
// The feed-forward blocks: the dense SwiGLU MLP of the first layers, and the DeepSeek-V3 mixture
// of experts (sigmoid router, e_score_correction_bias for expert *selection* only, grouped top-k,
// renormalised weights times routed_scaling_factor, plus always-on shared experts). Every rank
// routes every token with the full router; which experts it then runs is the weights' data.
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/phase_times.h"
#include "model/weights.h"

namespace kimi {

// out[n, hidden] = down(silu(gate(x)) * up(x)).
void mlp_forward(const MlpWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out);

struct Routing {
  std::vector<int32_t> experts;  // [n, top_k]
  std::vector<float> weights;    // [n, top_k], the gate values applied to the expert outputs
};

// Routes n tokens given their router logits [n, n_routed_experts].
Routing route_tokens(const ModelConfig& c, const float* router_logits, int64_t n, const std::vector<float>& bias);

// Where moe_forward adds its router / routed-expert / shared-expert times (model/phase_times.h).
// With times set, the shared expert runs in a batch of its own so that its time is separable
// (one more pair of thread dispatches per step than without).
struct MoeTiming {
  PhaseTimes* times = nullptr;
  int64_t layer = 0;
};

// out[n, hidden] = sum_k weight_k * expert_k(x) + shared(x), the sum over the TP group (w.reduce)
// included. Under expert parallelism (w.first_expert, model/parallel_linear.h) this rank adds
// only the selected experts it holds; the all-reduce brings in the others'.
// Under data parallelism (w.data_parallel) the block first gathers the other DP replicas' tokens
// and every rank of the run must call it for each step (model/parallel_linear.h).
void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out,
                 MoeTiming timing = {});

// A data-parallel replica's part of a step in which it has no tokens (nothing without DP).
void moe_dummy_forward(const ModelConfig& c, const MoeWeights& w, ThreadPool& pool);

}  // namespace kimi
