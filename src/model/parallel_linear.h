#pragma once
// Tensor parallelism as layer types (DeepSeek-V3's ColumnParallelLinear / RowParallelLinear):
// a column-parallel linear keeps this rank's share of the output rows (a row slice of the
// mapped weight, read in place); a row-parallel one keeps this rank's share of the input
// columns, and its partial outputs are summed over the group by the RowParallelReduce that the
// owning layer (attention's o_proj, a dense MLP, a whole MoE block) holds. With no group every
// piece is the identity, so the forward pass is the same code at any TP size.
//
// Expert parallelism within the TP group (vLLM's --enable-expert-parallel, its default "linear"
// placement): the routed experts are not sliced but dealt out whole, rank r owning experts
// [r * E / N, (r + 1) * E / N). Hidden states are replicated after every all-reduce, so each
// rank routes every token itself, runs the selected experts it owns, and the MoE block's one
// all-reduce sums all ranks' routed outputs with the (still sliced) shared expert's.
//
// Under data parallelism (vLLM's DP attention with EP or TP MoE) the routed experts are spread
// over all tp x dp ranks instead (whole with expert_parallel, sliced without): each MoE block
// gathers the DP replicas' tokens, runs its experts on all of them, sums the routed outputs over
// every rank and keeps its own rows; attention, dense layers and shared experts stay per replica.
// How the tokens travel is MoeExchange (vLLM's --all2all-backend).
#include <cstdint>
#include <string>

#include "format/model_config.h"
#include "kernels/matmul.h"
#include "model/weight_binder.h"
#include "parallel/communicator.h"

namespace kimi {

// How an MoE block moves tokens between data-parallel replicas (vLLM's --all2all-backend):
// - Naive: all-gather every replica's tokens, all-reduce the routed outputs of the whole gathered
//   batch over all ranks, keep this replica's rows.
// - AllGatherReduceScatter (vLLM's default): the same gather, then a reduce-scatter as one
//   all-to-all: rank (replica r, TP rank t) receives from every other rank only its partial sums
//   of slice t of replica r's rows, and the replica's TP ranks then share their slices.
// - AllToAll: no gather; each rank routes its share of its replica's tokens (token i: TP rank
//   i % tp) and sends a token's row only to the ranks that hold one of its experts, with its
//   gates; they return their experts' weighted sum to it (a count exchange and two all-to-alls),
//   and the replica's TP ranks then share their tokens' sums.
// Per MoE block and rank, B tokens per replica, rows of D floats, N = tp x dp ranks, ring
// all-gathers and all-reduce: naive sends (dp - 1) B + 2 (N - 1) / N dp B rows in 2 (dp - 1) +
// 2 (N - 1) rounds; allgather_reducescatter (dp - 1) B + (N - 1) B / tp + (tp - 1) B / tp rows in
// 2 (dp - 1) + 2 rounds (one fewer with tp 1); alltoallv about 2 R B / tp + (tp - 1) B / tp rows
// (R: the ranks a token's experts are on) in 4 rounds (3 with tp 1).
enum class MoeExchange { Naive, AllGatherReduceScatter, AllToAll };
MoeExchange parse_moe_exchange(const std::string& name);  // naive | allgather_reducescatter | alltoallv
const char* moe_exchange_name(MoeExchange e);

// The routed experts a rank holds: [first, first + count).
struct ExpertRange {
  int64_t first = 0, count = 0;
};

struct TensorParallel {
  Communicator* group = nullptr;  // not owned; nullptr: a single rank
  bool expert_parallel = false;   // routed experts partitioned over the group instead of sliced
  // Data parallelism (both null without it): the ranks with this TP index in every DP replica,
  // in DP-rank order, and all tp x dp ranks, which share the routed experts.
  Communicator* data_parallel = nullptr;
  Communicator* moe_group = nullptr;
  MoeExchange exchange = MoeExchange::AllGatherReduceScatter;
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  // Whether MoE blocks exchange tokens across DP replicas.
  bool moe_data_parallel() const { return data_parallel && data_parallel->size() > 1 && moe_group; }
  // The ranks the routed experts are spread over: all tp x dp ranks under data parallelism,
  // otherwise the TP group.
  TensorParallel routed_experts() const {
    return moe_data_parallel() ? TensorParallel{.group = moe_group, .expert_parallel = expert_parallel}
                               : TensorParallel{.group = group, .expert_parallel = expert_parallel};
  }
  // Throws kimi::Error unless heads and MLP / expert widths divide evenly over the ranks (under
  // expert parallelism: the expert count, and the shared experts' width, instead of the routed
  // experts' width).
  void check(const ModelConfig& c) const;
  // The routed experts this rank binds and runs, of those spread over this group: all of them
  // unless expert_parallel (call on routed_experts()).
  ExpertRange experts(const ModelConfig& c) const;
  // How a routed expert's matrices are split: like the rest under plain TP, whole under EP.
  TensorParallel routed_expert_split() const { return expert_parallel ? TensorParallel{} : *this; }
  // The config this rank's attention runs with: num_attention_heads / size() heads.
  ModelConfig attention_shard(const ModelConfig& c) const;
};

// Rows [rank * rows / size, ...) in units of `unit` rows (one head's rows for q_b / kv_b).
WeightMatrix column_parallel(const WeightMatrix& w, const TensorParallel& tp, int64_t unit = 1);
// Columns [rank * cols / size, ...), copied (the kernels want contiguous rows) into `owned`.
// Integer formats keep whole quantization groups; a split inside a group is refused.
WeightMatrix row_parallel(const WeightMatrix& w, const TensorParallel& tp, OwnedWeightBuffers& owned);

// Sums a row-parallel layer's partial outputs over the group (nothing alone).
struct RowParallelReduce {
  Communicator* group = nullptr;
  void operator()(float* y, int64_t count) const {
    if (group && group->size() > 1) group->all_reduce_sum({y, size_t(count)});
  }
};

}  // namespace kimi
