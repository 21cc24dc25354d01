#pragma once
// Data parallelism across processes (vLLM's DP with attention replicas): rank 0's front end keeps
// one Engine (scheduler, block table, metrics) per DP replica. Replica 0 runs in rank 0's own
// process; for every other replica d the engine's executor is a DataParallelClient, which sends
// each step's plain-data SchedulerOutput to that replica's leader process (world rank d * tp)
// over a two-rank link and gets its ModelRunnerOutput back. The leader runs the step on its
// replica (its own KV cache; under TP, broadcast to its TP workers as rank 0 does). All replicas
// step together, a replica without work running a dummy step, because every MoE block exchanges
// tokens across them (model/moe.h).
#include <memory>

#include "engine/executor.h"
#include "parallel/communicator.h"

namespace kimi {

class DataParallelClient final : public Executor {
 public:
  // link: a group of 2, this process rank 0, the replica's leader rank 1. Sends the KV cache's
  // settings first (the leader builds its runner with them).
  DataParallelClient(std::shared_ptr<Communicator> link, const KvCacheConfig& kv);
  // Tells the leader to stop (best effort: it may be gone already).
  ~DataParallelClient() override;
  ModelRunnerOutput execute_model(const SchedulerOutput& so) override;
  void execute_dummy() override;
  // A round trip to the leader: a replica that died while idle (on another node, where no
  // process of ours watches it) is noticed here rather than at the next request.
  void check_alive() override;

 private:
  std::shared_ptr<Communicator> link_;
};

// The loop of a replica's leader (DP rank > 0, TP rank 0): first tells rank 0 the KV cache bytes
// its node gives it (kv_cache_bytes: its own RAM and flags), then builds its executor when rank 0
// sends the KV settings (the TP executor over `model`'s TP group, or the model in this process),
// runs every step it is sent and answers with the output (or the step's error) until told to
// stop. Throws kimi::Error when rank 0 goes away.
void run_data_parallel_leader(Model& model, Communicator& link, size_t kv_cache_bytes);
// Rank 0's side of the first message: the replica's KV cache bytes, which its engine (on rank 0)
// sizes the replica's block table by.
size_t receive_replica_kv_cache_bytes(Communicator& link);

}  // namespace kimi
