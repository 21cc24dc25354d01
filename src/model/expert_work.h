#pragma once
// An MoE step's expert work as plain items (an MLP, the token rows it runs on, their gates) and
// the loop that runs them in batches: shared by the block on one replica (model/moe.cpp) and the
// exchanges across data-parallel replicas (model/moe_data_parallel.cpp).
#include <cstdint>
#include <functional>
#include <vector>

#include "common/thread_pool.h"
#include "model/moe.h"

namespace kimi::moe_detail {

// One MLP's share of a step: its tokens (rows of the input) and the gate applied to its outputs.
// An item holds at most kSlotsPerBatch tokens (a long prefill splits an expert's tokens over
// several), which bounds the buffers of run_expert_work.
constexpr int64_t kSlotsPerBatch = 256;
struct ExpertWork {
  const MlpWeights* mlp;
  std::vector<int64_t> tokens;
  std::vector<float> gates;
};

void add_expert_work(std::vector<ExpertWork>& work, const MlpWeights& mlp, int64_t token, float gate);

// The selected experts this rank holds (all, or its range under expert parallelism), each with
// its tokens, grouped so that an expert's weights are read once per step whatever the batch.
void add_routed_expert_work(std::vector<ExpertWork>& work, const MoeWeights& w, const Routing& r, int64_t n, int64_t E,
                            int64_t K);

// out[token] += gate * mlp(x[token]) for every item, out already zeroed. The items run in
// batches: one matmul_batch for the gate and up products of a batch's items and one for their
// down products, so a decode step pays two thread dispatches for its experts instead of three
// per expert. A batch holds up to kSlotsPerBatch token rows.
void run_expert_work(const std::vector<ExpertWork>& work, const float* x, int64_t D, ThreadPool& pool, float* out,
                     const std::function<bool(const MlpWeights*)>& is_shared, MoeTiming timing);

}  // namespace kimi::moe_detail
