#pragma once
// The UCX KV connector (--kv-transfer-config kv_connector NixlConnector | UcxConnector): one
// object per engine, with a producer half and a consumer half by kv_role.
//  - Producer: a thread with its own UCX worker and a listener on kv_ip:kv_port answers HELLO,
//    PULL and RELEASE (protocol.h) for the blocks the engine handed to hold(); a hold ends when
//    pulled, released, or abort_request_timeout after it began.
//  - Consumer: a thread with its own UCX worker runs the engine's load jobs one after another:
//    connect (connections cached per producer, HELLO once each), PULL, write the blocks into the
//    job's local blocks (KvStorage::write_block), all within transfer_timeout; on failure it
//    tells the producer to release (best effort) and reports the error.
// The engine's blocks are touched only through read_block (blocks the engine holds and never
// writes) and write_block (blocks the engine does not touch until the load reports).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/kv_connector.h"
#include "format/model_config.h"
#include "kvtransfer/held_blocks.h"
#include "kvtransfer/kv_transfer_config.h"
#include "model/kv_cache.h"

namespace kimi::kvtransfer {

class UcxKvConnector final : public KvConnector {
 public:
  UcxKvConnector(KvTransferConfig config, KvStorage& storage, const ModelConfig& model);
  ~UcxKvConnector() override;

  bool is_producer() const override { return config_.producer(); }
  bool is_consumer() const override { return config_.consumer(); }
  KvLoadFailurePolicy load_failure_policy() const override { return config_.kv_load_failure_policy; }
  ProducerTrust producer_trust(const std::string& host, int64_t port) const override { return config_.trust(host, port); }
  KvTransferParams hold(const KvHoldRequest& held) override;
  std::vector<std::vector<int32_t>> take_released() override { return held_.take_released(); }
  void start_load(KvLoadJob job) override;
  std::vector<KvLoadResult> take_finished_loads() override;
  bool busy() const override;
  bool has_events() const override;
  void set_wakeup(std::function<void()> wake) override;

  const KvTransferConfig& config() const { return config_; }
  int port() const { return port_; }  // the producer's listener port (0: not a producer)
  const HeldBlocks& held() const { return held_; }
  int64_t bytes_pulled() const { return bytes_pulled_; }

 private:
  void producer_loop(std::promise<int>* ready);
  void consumer_loop();
  void wake();

  KvTransferConfig config_;
  KvStorage& storage_;
  KvBlockDesc desc_;
  uint64_t model_id_;
  HeldBlocks held_;
  std::atomic<bool> stop_{false};
  int port_ = 0;
  std::string advertised_host_;  // remote_host in the responses
  std::atomic<uint64_t> next_hold_{0};
  std::atomic<int64_t> bytes_pulled_{0};

  mutable std::mutex mu_;  // guards jobs_, finished_, loads_in_flight_
  std::condition_variable jobs_cv_;
  std::deque<KvLoadJob> jobs_;
  std::vector<KvLoadResult> finished_;
  int64_t loads_in_flight_ = 0;

  std::mutex wake_mu_;
  std::function<void()> wake_;

  std::thread producer_, consumer_;
};

// The factory EngineConfig::kv_connector_factory takes.
KvConnectorFactory make_kv_connector_factory(KvTransferConfig config);

}  // namespace kimi::kvtransfer
