#pragma once
// The counters of `kimi proxy` beyond those of each instance, and /metrics: all of them in the
// Prometheus text format (version 0.0.4), labelled by role and instance.
#include <atomic>
#include <cstdint>
#include <string>

#include "proxy/instance_pool.h"

namespace kimi::proxy {

struct ProxyCounters {
  std::atomic<uint64_t> client_requests{0};     // completions asked of the proxy
  std::atomic<uint64_t> prefill_retries{0};
  std::atomic<uint64_t> decode_retries{0};
  std::atomic<uint64_t> prefill_gave_up{0};     // every prefill attempt failed: the decode computed the prompt
  std::atomic<uint64_t> no_kv_params{0};        // a prefill answered without kv_transfer_params
  std::atomic<uint64_t> decode_failed{0};       // no decode instance answered: the client got an error
  std::atomic<uint64_t> stream_broken{0};       // a decode failed after its first byte reached the client
  std::atomic<uint64_t> client_disconnects{0};  // the client hung up before the answer ended
};

std::string render_metrics(const InstancePool& prefill, const InstancePool& decode, const ProxyCounters& c);

}  // namespace kimi::proxy
