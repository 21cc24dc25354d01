#pragma once
// The MoE block across data-parallel replicas (MoeWeights::data_parallel): the routed experts are
// spread over all tp x dp ranks, so every block moves tokens between replicas, by the exchange
// w.exchange names (model/parallel_linear.h); the shared experts run on this replica's tokens.
#include <cstdint>

#include "common/thread_pool.h"
#include "format/model_config.h"
#include "model/moe.h"

namespace kimi {

// out[n, hidden] for this replica's n tokens. A replica without tokens (n = 0, a dummy step, x
// and out null) still takes part: every rank of the run makes the same collectives in each block.
void moe_forward_data_parallel(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool,
                               float* out, MoeTiming timing);

}  // namespace kimi
