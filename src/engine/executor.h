#pragma once
// Where the model runs (vLLM's Executor): the engine hands it each step's SchedulerOutput and
// gets a ModelRunnerOutput back, both plain data, so an implementation may run the model in this
// process (InProcessExecutor), in worker processes or on other machines without the scheduler
// noticing.
#include <memory>

#include "engine/model_runner.h"
#include "engine/scheduler_output.h"

namespace kimi {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual ModelRunnerOutput execute_model(const SchedulerOutput& so) = 0;
  // A step with nothing scheduled, run only under data parallelism (Model::forward_dummy).
  virtual void execute_dummy() = 0;
  // Checks, while idle, that the processes running the steps are still there (a replica on
  // another node); one that is gone ends the server with the reason. Nothing in-process.
  virtual void check_alive() {}
};

// The model and its KV storage in this process, run by the calling thread.
class InProcessExecutor final : public Executor {
 public:
  InProcessExecutor(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab = nullptr,
                    SpeculationSetup speculation = {})
      : runner_(model, kv, std::move(vocab), std::move(speculation)) {}
  ModelRunnerOutput execute_model(const SchedulerOutput& so) override { return runner_.execute(so); }
  void execute_dummy() override { runner_.execute_dummy(); }
  ModelRunner& runner() { return runner_; }

 private:
  ModelRunner runner_;
};

}  // namespace kimi
