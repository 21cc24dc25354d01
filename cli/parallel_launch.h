#pragma once
// vLLM's parallelism flags for `serve` and `generate`, and the launch they imply. The run has
// tp x dp ranks; world rank d * tp + t is TP rank t of data-parallel replica d. A node runs DP
// replicas [--data-parallel-start-rank, + --data-parallel-size-local): the process the user
// started spawns the node's other ranks (itself again, with the hidden --parallel-local-rank).
// World rank 0 (the node without --headless) serves the rendezvous store at
// --data-parallel-address:--data-parallel-rpc-port and the API, and drives one engine per
// replica (engine/dp_executor.h); a replica's TP rank 0 leads it, running the steps rank 0
// sends, and its other TP ranks run the steps their leader broadcasts. --enable-expert-parallel
// deals the routed experts out whole over all tp x dp ranks (model/parallel_linear.h).
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <sys/types.h>
#include <vector>

#include "args.h"
#include "engine/async_engine.h"
#include "model/model.h"
#include "parallel/numa.h"
#include "parallel/world.h"

namespace kimi::cli {

struct ParallelArgs {
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  int data_parallel_size_local = -1;  // -1: all of them
  int data_parallel_start_rank = 0;
  std::string data_parallel_address = "127.0.0.1";
  int data_parallel_rpc_port = 29550;
  bool headless = false;
  bool enable_expert_parallel = false;
  int local_rank = 0;               // hidden: this node's process index, set on the ranks it spawns
  double parallel_timeout_s = 120;  // join and every collective
  // --all2all-backend: how MoE blocks move tokens between data-parallel replicas (vLLM's names).
  MoeExchange moe_exchange = MoeExchange::AllGatherReduceScatter;
  std::string numa = "auto";        // auto: each local rank on its own NUMA nodes when there are several; none
};

// The flags' names, to add to a subcommand's Args sets.
const std::set<std::string>& parallel_value_flags();
const std::set<std::string>& parallel_bool_flags();
// Reads and checks the flags. Expert parallelism with tp = dp = 1 is accepted and does nothing
// (as in vLLM), with a note on stderr.
ParallelArgs parse_parallel_args(const Args& a);

// This process's part in a parallel run (nothing with tp = dp = 1).
class ParallelLaunch {
 public:
  // identity: what must agree on every rank (the model's config, the flags that shape the
  // shards); a node's first process spawns its other ranks from argv first, then every rank joins.
  ParallelLaunch(const ParallelArgs& p, int argc, char** argv, const std::string& identity);
  // The node's first process: waits for the ranks it spawned (a bounded time, then kills them).
  ~ParallelLaunch();
  ParallelLaunch(const ParallelLaunch&) = delete;
  ParallelLaunch& operator=(const ParallelLaunch&) = delete;

  int world_rank() const { return world_rank_; }
  // The processes of this run on this node (tp x --data-parallel-size-local).
  int local_ranks() const { return local_ranks_; }
  // Every rank but world rank 0 runs steps it is sent (run_worker) instead of an engine.
  bool is_worker() const { return world_rank_ != 0; }
  // The model's groups (ModelOptions): its replica's TP group (null with tp = 1), and under data
  // parallelism its DP group and the group of all ranks (null with dp = 1).
  std::shared_ptr<Communicator> tensor_parallel_group() const { return tp_; }
  std::shared_ptr<Communicator> data_parallel_group() const { return dp_; }
  std::shared_ptr<Communicator> expert_group() const { return moe_; }
  // The model's options for this rank's shard.
  void configure(ModelOptions& options) const;
  // A worker's loop: a replica leader's (engine/dp_executor.h), which first reports its replica's
  // KV cache bytes (this node's budget), or a TP worker's (engine/tp_executor.h), until rank 0
  // stops it.
  void run_worker(Model& model, size_t kv_cache_bytes = 0) const;
  // World rank 0: the executors of replicas 1.. for AsyncEngine, with each one's KV cache bytes
  // (waits for their leaders to report them).
  DataParallelReplicas replicas() const;
  // This rank's traffic in its TP group so far (null with tp = 1).
  const CollectiveStats* tensor_parallel_stats() const { return tp_ ? &tp_->stats() : nullptr; }
  // --threads per rank: the given value, or this rank's CPUs under a NUMA placement, or the
  // hardware threads divided among the local ranks.
  int threads_per_rank(int requested) const;

 private:
  // --numa auto: binds this rank to its share of the NUMA nodes (parallel/numa.h), when the
  // machine has several.
  void place_on_numa_nodes();
  // The node's first process: ends this process when a spawned rank dies (killed, crashed,
  // failed to load), even while no step is running to notice it through a collective.
  void watch_children();

  ParallelArgs args_;
  int world_rank_ = 0, local_ranks_ = 1;
  std::optional<NumaPlacement> placement_;
  std::vector<pid_t> children_;
  std::vector<bool> reaped_;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
  std::unique_ptr<World> world_;
  std::shared_ptr<GlooProcessGroup> tp_, dp_, moe_;
  std::vector<std::shared_ptr<GlooProcessGroup>> links_;  // rank 0: to replicas 1..; a leader: its own
};

// What every rank of a run must agree on: the model's config.json and the shard-shaping flags
// (tp, dp, expert parallelism, quantization, the MoE exchange).
std::string parallel_identity(const std::string& model_dir, const ParallelArgs& p, const std::string& quantization);

}  // namespace kimi::cli
