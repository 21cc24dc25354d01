#include "engine/dp_executor.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "engine/step_codec.h"
#include "engine/tp_executor.h"
#include "parallel/collective_error.h"

namespace kimi {

namespace {

// The first byte of every message from rank 0, and of every answer from the leader.
enum DpMessage : uint8_t { kDpStop = 0, kDpKvConfig = 1, kDpStep = 2, kDpDummy = 3, kDpPing = 4 };
enum DpAnswer : uint8_t { kDpOutput = 0, kDpFailed = 1 };

[[noreturn]] void exit_lost_replica(const CollectiveError& e) {
  // The replicas can no longer step together: end the server with the reason (as a lost TP
  // rank does); the other ranks see the closed connections and end too.
  std::fprintf(stderr, "kimi: a data-parallel replica was lost, exiting: %s\n", e.what());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

DataParallelClient::DataParallelClient(std::shared_ptr<Communicator> link, const KvCacheConfig& kv)
    : link_(std::move(link)) {
  if (!link_ || link_->size() != 2 || link_->rank() != 0) throw Error("DataParallelClient: needs rank 0 of a 2-rank link");
  std::vector<std::byte> m = encode_kv_config(kv);
  m.insert(m.begin(), std::byte{kDpKvConfig});
  link_->broadcast_bytes(m, 0);
}

DataParallelClient::~DataParallelClient() {
  try {
    std::vector<std::byte> m{std::byte{kDpStop}};
    link_->broadcast_bytes(m, 0);
  } catch (const Error&) {
    // A leader already gone has nothing to stop.
  }
}

ModelRunnerOutput DataParallelClient::execute_model(const SchedulerOutput& so) {
  std::vector<std::byte> m = encode_step(so);
  m.insert(m.begin(), std::byte{kDpStep});
  std::vector<std::byte> answer;
  try {
    link_->broadcast_bytes(m, 0);
    link_->broadcast_bytes(answer, 1);
  } catch (const CollectiveError& e) {
    exit_lost_replica(e);
  }
  if (answer.empty()) throw Error("data-parallel replica: empty answer");
  const std::span<const std::byte> body = std::span<const std::byte>(answer).subspan(1);
  if (uint8_t(answer[0]) == kDpFailed)
    throw Error(std::string(reinterpret_cast<const char*>(body.data()), body.size()));
  if (uint8_t(answer[0]) != kDpOutput) throw Error("data-parallel replica: unexpected answer");
  return decode_runner_output(body);
}

void DataParallelClient::execute_dummy() {
  std::vector<std::byte> m{std::byte{kDpDummy}};
  try {
    link_->broadcast_bytes(m, 0);
  } catch (const CollectiveError& e) {
    exit_lost_replica(e);
  }
}

void DataParallelClient::check_alive() {
  std::vector<std::byte> m{std::byte{kDpPing}}, answer;
  try {
    link_->broadcast_bytes(m, 0);
    link_->broadcast_bytes(answer, 1);
  } catch (const CollectiveError& e) {
    exit_lost_replica(e);
  }
}

size_t receive_replica_kv_cache_bytes(Communicator& link) {
  uint64_t bytes = 0;
  link.broadcast(std::as_writable_bytes(std::span<uint64_t>(&bytes, 1)), 1);
  return size_t(bytes);
}

void run_data_parallel_leader(Model& model, Communicator& link, size_t kv_cache_bytes) {
  if (link.size() != 2 || link.rank() != 1) throw Error("run_data_parallel_leader: needs rank 1 of a 2-rank link");
  uint64_t bytes = kv_cache_bytes;
  link.broadcast(std::as_writable_bytes(std::span<uint64_t>(&bytes, 1)), 1);
  std::unique_ptr<Executor> executor;
  while (true) {
    std::vector<std::byte> m;
    link.broadcast_bytes(m, 0);
    if (m.empty()) throw Error("data-parallel leader: empty message from rank 0");
    const auto kind = uint8_t(m[0]);
    if (kind == kDpStop) return;  // the TP executor's destructor stops this replica's workers
    if (kind == kDpPing) {
      std::vector<std::byte> pong{std::byte{kDpOutput}};
      link.broadcast_bytes(pong, 1);
      continue;
    }
    if (kind == kDpKvConfig) {
      if (executor) throw Error("data-parallel leader: a second KV cache message");
      const KvCacheConfig kv = decode_kv_config(std::span<const std::byte>(m).subspan(1));
      if (const auto& tp = model.tensor_parallel(); tp && tp->size() > 1)
        executor = std::make_unique<TensorParallelExecutor>(model, kv, nullptr);
      else
        executor = std::make_unique<InProcessExecutor>(model, kv);
      continue;
    }
    if (!executor) throw Error("data-parallel leader: a step before the KV cache settings");
    if (kind == kDpDummy) {
      executor->execute_dummy();
      continue;
    }
    if (kind != kDpStep) throw Error("data-parallel leader: unexpected message from rank 0");
    std::vector<std::byte> answer;
    try {
      answer = encode_runner_output(executor->execute_model(decode_step(std::span<const std::byte>(m).subspan(1))));
      answer.insert(answer.begin(), std::byte{kDpOutput});
    } catch (const CollectiveError&) {
      throw;
    } catch (const Error& e) {
      // The step's own fault (a request the model refused): rank 0's engine reports it.
      const std::string what = e.what();
      answer.assign(reinterpret_cast<const std::byte*>(what.data()),
                    reinterpret_cast<const std::byte*>(what.data()) + what.size());
      answer.insert(answer.begin(), std::byte{kDpFailed});
    }
    link.broadcast_bytes(answer, 1);
  }
}

}  // namespace kimi
