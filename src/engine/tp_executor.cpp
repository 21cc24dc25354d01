#include "engine/tp_executor.h"


#include <cstdio>
#include <cstdlib>

#include "common/error.h"
#include "engine/step_codec.h"
#include "parallel/collective_error.h"

namespace kimi {

namespace {

// The first byte of every message from rank 0.
enum Message : uint8_t { kStop = 0, kKvConfig = 1, kStep = 2, kDummy = 3 };

std::vector<std::byte> kv_message(const KvCacheConfig& kv) {
  std::vector<std::byte> m = encode_kv_config(kv);
  m.insert(m.begin(), std::byte{kKvConfig});
  return m;
}

std::shared_ptr<Communicator> group_of(Model& model) {
  auto g = model.tensor_parallel();
  if (!g || g->rank() != 0) throw Error("TensorParallelExecutor: the model must be rank 0 of a tensor-parallel group");
  return g;
}

}  // namespace

TensorParallelExecutor::TensorParallelExecutor(Model& model, const KvCacheConfig& kv,
                                               std::shared_ptr<const structured::TokenVocab> vocab)
    : group_(group_of(model)), runner_(model, kv, std::move(vocab)) {
  std::vector<std::byte> m = kv_message(kv);
  group_->broadcast_bytes(m, 0);
}

TensorParallelExecutor::~TensorParallelExecutor() {
  try {
    std::vector<std::byte> m{std::byte{kStop}};
    group_->broadcast_bytes(m, 0);
  } catch (const Error&) {
    // A worker already gone has nothing to stop.
  }
}

namespace {

[[noreturn]] void exit_lost_rank(const CollectiveError& e) {
  // A rank is gone: the shards can no longer step together, and the engine above would only
  // fail every later step. End the process with the reason (vLLM's API server also exits when
  // its engine core dies); the workers see the closed connections and end too.
  std::fprintf(stderr, "kimi: tensor-parallel group lost a rank, exiting: %s\n", e.what());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

void TensorParallelExecutor::execute_dummy() {
  std::vector<std::byte> m{std::byte{kDummy}};
  try {
    group_->broadcast_bytes(m, 0);
    runner_.execute_dummy();
  } catch (const CollectiveError& e) {
    exit_lost_rank(e);
  }
}

ModelRunnerOutput TensorParallelExecutor::execute_model(const SchedulerOutput& so) {
  for (const NewRequestData& n : so.new_requests)
    if (n.sampling_params.structured.active())
      throw Error("structured outputs are not supported with tensor parallelism yet");
  std::vector<std::byte> m = encode_step(so);
  m.insert(m.begin(), std::byte{kStep});
  try {
    group_->broadcast_bytes(m, 0);
    return runner_.execute(so);
  } catch (const CollectiveError& e) {
    exit_lost_rank(e);
  }
}

void run_tensor_parallel_worker(Model& model) {
  const auto group = model.tensor_parallel();
  if (!group || group->rank() == 0) throw Error("run_tensor_parallel_worker: not a worker rank of a TP group");
  std::unique_ptr<ModelRunner> runner;
  while (true) {
    std::vector<std::byte> m;
    group->broadcast_bytes(m, 0);
    if (m.empty()) throw Error("tensor-parallel worker: empty message from rank 0");
    const auto kind = uint8_t(m[0]);
    if (kind == kStop) return;
    if (kind == kKvConfig) {
      const KvCacheConfig kv = decode_kv_config(std::span<const std::byte>(m).subspan(1));
      runner = std::make_unique<ModelRunner>(model, kv);
      continue;
    }
    if (kind == kDummy && runner) {
      runner->execute_dummy();
      continue;
    }
    if (kind != kStep || !runner) throw Error("tensor-parallel worker: unexpected message from rank 0");
    try {
      runner->execute(decode_step(std::span<const std::byte>(m).subspan(1)));
    } catch (const CollectiveError&) {
      throw;
    } catch (const Error&) {
      // Rank 0 met the same error in the same step (a request's fault) and carries on: so do we.
    }
  }
}

}  // namespace kimi
