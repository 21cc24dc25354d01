#pragma once
// Tensor parallelism across processes (vLLM's multiprocessing executor): rank 0 runs the
// engine and, each step, broadcasts the plain-data SchedulerOutput over the TP group; every
// rank then runs the same forward on its shard of the weights (the row-parallel layers' all-
// reduces meet inside it) with its own copy of the paged KV cache. Rank 0's samples are the
// answer; the workers' are dropped. A rank that dies makes the others' next collective fail
// with kimi::Error within the group's timeout.
#include <memory>

#include "engine/executor.h"
#include "parallel/communicator.h"

namespace kimi {

class TensorParallelExecutor final : public Executor {
 public:
  // model: rank 0's shard, loaded with the same group (ModelOptions::tensor_parallel).
  TensorParallelExecutor(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab);
  // Tells the workers to stop (best effort: they may be gone already).
  ~TensorParallelExecutor() override;
  ModelRunnerOutput execute_model(const SchedulerOutput& so) override;
  void execute_dummy() override;

 private:
  std::shared_ptr<Communicator> group_;
  ModelRunner runner_;
};

// The loop of a worker rank (rank != 0 of the group): waits for rank 0's KV cache settings, then
// runs every step it is sent until told to stop. Throws kimi::Error when rank 0 goes away.
void run_tensor_parallel_worker(Model& model);

}  // namespace kimi
