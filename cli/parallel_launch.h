#pragma once
// vLLM's parallelism flags for `serve` and `generate`, and the launch they imply: with
// --tensor-parallel-size N > 1 the process the user started becomes rank 0, spawns ranks
// 1..N-1 of this node (itself again, with the hidden --tensor-parallel-rank), serves the
// rendezvous store and drives the engine; the other ranks load their shard and run the steps
// rank 0 broadcasts. --enable-expert-parallel partitions the routed experts over those same
// ranks (model/parallel_linear.h). Flags that are parsed but not implemented yet (data
// parallelism, --headless) are refused with a clear error rather than silently ignored.
#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <string>
#include <sys/types.h>
#include <vector>

#include "args.h"
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
  int tensor_parallel_rank = 0;     // hidden: set by rank 0 on the ranks it spawns
  double parallel_timeout_s = 120;  // join and every collective
};

// The flags' names, to add to a subcommand's Args sets.
const std::set<std::string>& parallel_value_flags();
const std::set<std::string>& parallel_bool_flags();
// Reads and checks the flags; "not supported yet" for dp > 1 and --headless. Expert parallelism
// with tp 1 is accepted and does nothing (as in vLLM with tp = dp = 1), with a note on stderr.
ParallelArgs parse_parallel_args(const Args& a);

// This process's part in a parallel run (nothing with tp = 1).
class ParallelLaunch {
 public:
  // identity: what must agree on every rank (the model's config, the flags that shape the
  // shards); rank 0 spawns the local ranks from argv first, then every rank joins.
  ParallelLaunch(const ParallelArgs& p, int argc, char** argv, const std::string& identity);
  // Rank 0: waits for the spawned ranks (a bounded time, then kills them).
  ~ParallelLaunch();
  ParallelLaunch(const ParallelLaunch&) = delete;
  ParallelLaunch& operator=(const ParallelLaunch&) = delete;

  bool is_worker() const { return args_.tensor_parallel_rank != 0; }
  std::shared_ptr<Communicator> tensor_parallel_group() const { return tp_; }
  // This rank's traffic in the TP group so far (null with tp = 1).
  const CollectiveStats* tensor_parallel_stats() const { return tp_ ? &tp_->stats() : nullptr; }
  // --threads per rank: the given value, or the hardware threads divided among the local ranks.
  int threads_per_rank(int requested) const;

 private:
  // Rank 0: ends this process when a spawned rank dies (killed, crashed, failed to load), even
  // while no step is running to notice it through a collective.
  void watch_children();

  ParallelArgs args_;
  std::vector<pid_t> children_;
  std::vector<bool> reaped_;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
  std::unique_ptr<World> world_;
  std::shared_ptr<GlooProcessGroup> tp_;
};

// What every rank of a run must agree on: the model's config.json and the shard-shaping flags
// (tp, dp, expert parallelism, quantization).
std::string parallel_identity(const std::string& model_dir, const ParallelArgs& p, const std::string& quantization);

}  // namespace kimi::cli
