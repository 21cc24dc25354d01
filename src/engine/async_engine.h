#pragma once
// The engine on its own thread (vLLM's AsyncLLM): any thread may add or abort requests and read
// their outputs as a stream while the engine thread steps all of them together. Under data
// parallelism it holds one Engine per DP replica (engine/dp_executor.h): a new request goes to
// the least loaded replica, and every round steps all replicas together, each on its own thread.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "engine/engine.h"

namespace kimi {

// add_request() while the server drains for shutdown: the client should retry elsewhere (503).
class EngineShuttingDown : public Error {
 public:
  EngineShuttingDown() : Error("the server is shutting down") {}
};

// The outputs of one request, in order; the last one has finished == true.
class RequestStream {
 public:
  // Blocks until the next output; nullopt once the final output has been taken.
  std::optional<RequestOutput> next();
  // As next(), giving up after `timeout` (then nullopt with timed_out set).
  std::optional<RequestOutput> next_for(std::chrono::milliseconds timeout, bool* timed_out);
  const std::string& id() const { return id_; }

 private:
  friend class AsyncEngine;
  explicit RequestStream(std::string id, int completions) : id_(std::move(id)), open_completions_(completions) {}
  void push(RequestOutput o);

  std::string id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  int open_completions_;  // the stream ends when all n completions have finished
};

// The replicas after the first under data parallelism: one executor factory each (DP ranks
// 1, 2, ...). Empty: one engine, no data parallelism.
struct DataParallelReplicas {
  std::vector<std::function<std::unique_ptr<Executor>(const KvCacheConfig&)>> executors;
  // Each remote replica's KV cache bytes, from its own node's RAM and flags (empty: this node's).
  std::vector<size_t> kv_cache_bytes;
};

class AsyncEngine {
 public:
  AsyncEngine(Model& model, const Tokenizer* tokenizer, EngineConfig config, DataParallelReplicas replicas = {});
  ~AsyncEngine();  // stops the thread; unfinished requests are aborted
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates at once (throwing kimi::Error for a bad request) and queues the request, on
  // `replica` when given (vLLM's X-data-parallel-rank header) or else the least loaded one.
  std::shared_ptr<RequestStream> add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                                             int priority = 0, std::optional<int> replica = std::nullopt);
  void abort_request(const std::string& id);
  EngineStats stats();
  // Requests accepted but not running yet (queued here or in the scheduler), for admission control.
  int64_t num_waiting();
  std::string render_metrics(const std::string& model_name);
  int64_t max_model_len() const { return max_model_len_; }
  // Fixed at construction; Metrics is thread-safe.
  KvCacheInfo kv_cache_info() { return engines_[0]->metrics().snapshot().kv_cache; }
  int data_parallel_size() const { return int(engines_.size()); }
  // Graceful shutdown: begin_drain() stops taking requests (add_request throws
  // EngineShuttingDown); wait_drained() waits until the in-flight ones have finished, at most
  // `timeout` (nullopt: no limit), and says whether they have; drain() is both without limit.
  void begin_drain();
  bool draining();
  bool wait_drained(std::optional<std::chrono::milliseconds> timeout);
  void drain();
  // Aborts every accepted request now; each stream ends with an output carrying `reason` as its
  // error, so that its client is answered (the drain's time limit, a second signal).
  void abort_all(const std::string& reason, int error_status = 500);

 private:
  void loop();
  void deliver(RequestOutput o);
  // The replica a new request goes to: the lowest 4 x waiting + running (vLLM's rule).
  size_t least_loaded();
  // One step of every replica (each on its own thread under DP); a replica's failure is thrown
  // after all have stepped.
  std::vector<RequestOutput> step_all();
  bool has_work() const;

  std::vector<std::unique_ptr<Engine>> engines_;  // [0]: the replica in this process
  size_t next_replica_ = 0;  // where least_loaded() starts looking (engine thread only)
  int64_t max_model_len_;
  std::mutex mu_;  // guards engines_' calls, pending_ and streams_
  std::condition_variable cv_;
  struct Pending {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
    int priority;
    std::optional<int> replica;
  };
  std::vector<Pending> pending_adds_;
  std::vector<std::string> pending_aborts_;
  struct Entry {
    std::shared_ptr<RequestStream> stream;
    int open_completions;
  };
  std::unordered_map<std::string, Entry> streams_;
  EngineStats stats_;  // as of the last step, for readers on other threads
  bool stop_ = false, draining_ = false;
  int64_t in_flight_ = 0;
  std::condition_variable drained_cv_;
  std::thread thread_;
};

}  // namespace kimi
