#pragma once
// The engine's seam to a KV connector (vLLM's KVConnectorBase_V1, disaggregated prefill): the
// plain data a request carries to ask for it (kv_transfer_params, vLLM's NIXL field names), and
// the interface through which the engine hands a producer's finished blocks over for holding and
// asks a consumer's blocks to be filled from another instance. The engine thread owns the block
// pool: a connector never frees or allocates a block itself, it only reports block lists the
// engine then returns to the pool (released holds, finished loads), so all pool changes stay on
// one thread. Transports live in src/kvtransfer; the engine knows only this interface.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kimi {

class KvStorage;
struct ModelConfig;

// A request's kv_transfer_params, both ways.
//  request to a producer:  do_remote_decode = true (prefill here, hold the blocks for a decoder);
//  producer's response / request to a consumer: do_remote_prefill = true plus where the KV is.
struct KvTransferParams {
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  std::string remote_engine_id;
  std::vector<int32_t> remote_block_ids;
  std::string remote_host;
  int64_t remote_port = 0;
  std::string remote_request_id;
  int64_t remote_num_tokens = 0;  // tokens whose KV rows the producer holds (its prompt)
  int64_t remote_block_size = 0;
  int64_t tp_size = 1;
};

// What a consumer must fetch for one request: remote_block_ids[i] lands in local_block_ids[i].
// Empty block lists: nothing to fetch (a prefix-cache hit covers it), only tell the producer to
// release its blocks.
struct KvLoadJob {
  std::string request_id;  // the consumer engine's
  KvTransferParams remote;
  std::vector<int32_t> remote_block_ids;
  std::vector<int32_t> local_block_ids;
};

struct KvLoadResult {
  std::string request_id;
  bool ok = false;
  std::string error;  // when !ok: why, for the request's error or the log
  int64_t num_blocks = 0;  // the job's blocks (0: a release only)
  int64_t bytes = 0;       // received and written
};

// What a producer reports for the blocks of a finished do_remote_decode request.
struct KvHoldRequest {
  std::string request_id;
  std::vector<int32_t> block_ids;  // still held; tail first (the order to release them in)
  int64_t num_tokens = 0;          // tokens with KV rows in them (the prompt)
};

enum class KvLoadFailurePolicy { Recompute, Fail };

// What a consumer makes of the producer a request's kv_transfer_params name. The client names
// it, so a client could point a consumer at a peer of its own and plant KV for a prompt that
// others send too: only KV from a listed producer enters the prefix cache that other requests
// read. Refused: a list is configured and the producer is not on it.
enum class ProducerTrust { Refused, Unlisted, Listed };

class KvConnector {
 public:
  virtual ~KvConnector() = default;

  virtual bool is_producer() const = 0;
  virtual bool is_consumer() const = 0;
  virtual KvLoadFailurePolicy load_failure_policy() const = 0;
  virtual ProducerTrust producer_trust(const std::string& host, int64_t port) const = 0;

  // Producer: keep these blocks for a consumer to pull; returns the response's kv_transfer_params.
  virtual KvTransferParams hold(const KvHoldRequest& held) = 0;
  // Producer: block lists whose hold ended (the consumer notified, or the hold timed out); the
  // engine returns them to its pool. Thread-safe.
  virtual std::vector<std::vector<int32_t>> take_released() = 0;

  // Consumer: starts filling job.local_block_ids in the background. The engine does not touch
  // those blocks until the job's result comes back from take_finished_loads().
  virtual void start_load(KvLoadJob job) = 0;
  virtual std::vector<KvLoadResult> take_finished_loads() = 0;

  // Whether anything is held or in flight (the engine must keep polling, for timeouts).
  virtual bool busy() const = 0;
  // Whether take_released() or take_finished_loads() has something. Thread-safe.
  virtual bool has_events() const = 0;
  // Called (from the connector's threads) when an event arrives, so an idle engine loop wakes.
  virtual void set_wakeup(std::function<void()> wake) = 0;
};

// Builds the connector for an engine once its KV storage exists. The storage outlives it.
struct KvConnectorContext {
  KvStorage& storage;
  const ModelConfig& model;
};
using KvConnectorFactory = std::function<std::unique_ptr<KvConnector>(const KvConnectorContext&)>;

}  // namespace kimi
