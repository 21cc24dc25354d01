#pragma once
// `kimi serve --kv-transfer-config JSON`: vLLM's KVTransferConfig fields (vllm/config/kv_transfer.py)
// parsed and checked at start-up, so a deployment written for vLLM's NIXL connector starts here
// unchanged. Unknown keys, roles, connectors and policies are start-up errors naming what is accepted.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv_connector.h"

namespace kimi::kvtransfer {

enum class KvRole { Producer, Consumer, Both };

struct KvTransferConfig {
  std::string kv_connector;  // "NixlConnector" or "UcxConnector": both are this UCX connector
  KvRole kv_role = KvRole::Both;
  std::string kv_ip = "127.0.0.1";  // the producer's listener address, also sent to consumers
  int64_t kv_port = 0;              // the producer's listener port; 0: any free one
  std::string engine_id;            // a random one when unset
  KvLoadFailurePolicy kv_load_failure_policy = KvLoadFailurePolicy::Recompute;
  // kv_connector_extra_config:
  double abort_request_timeout_s = 120;  // a producer frees held blocks nobody pulled by then
  double transfer_timeout_s = 30;        // a consumer gives up a load (connect + pull) after this
  int64_t transfer_chunk_bytes = int64_t(16) << 20;  // blocks move in chunks of about this size
  // trusted_producers (ours, not vLLM's): "host" or "host:port" entries. Empty: a consumer pulls
  // from any producer a request names but keeps that KV out of its prefix cache; set: it pulls
  // only from these, and shares what it pulled.
  std::vector<std::string> trusted_producers;

  bool producer() const { return kv_role != KvRole::Consumer; }
  bool consumer() const { return kv_role != KvRole::Producer; }
  ProducerTrust trust(const std::string& host, int64_t port) const;
};

// Throws kimi::Error with a message naming the bad field.
KvTransferConfig parse_kv_transfer_config(std::string_view json);
std::string_view kv_role_name(KvRole r);

}  // namespace kimi::kvtransfer
