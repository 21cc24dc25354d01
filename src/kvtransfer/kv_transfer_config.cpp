#include "kvtransfer/kv_transfer_config.h"

#include <nlohmann/json.hpp>
#include <random>

#include "common/error.h"

namespace kimi::kvtransfer {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& message) { throw Error("--kv-transfer-config: " + message); }

std::string random_engine_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%08x%04x", rd(), rd() & 0xffff, (rd() & 0x0fff) | 0x4000,
                (rd() & 0x3fff) | 0x8000, rd(), rd() & 0xffff);
  return buf;
}

double seconds(const json& v, const char* key) {
  if (!v.is_number() || v.get<double>() <= 0) bad(std::string("kv_connector_extra_config.") + key + " must be a positive number of seconds");
  return v.get<double>();
}

}  // namespace

std::string_view kv_role_name(KvRole r) {
  switch (r) {
    case KvRole::Producer: return "kv_producer";
    case KvRole::Consumer: return "kv_consumer";
    case KvRole::Both: return "kv_both";
  }
  return "?";
}

KvTransferConfig parse_kv_transfer_config(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("expected a JSON object");
  KvTransferConfig c;
  bool role_given = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "kv_connector") {
      if (!v.is_string()) bad("kv_connector must be a string");
      c.kv_connector = v.get<std::string>();
      if (c.kv_connector != "NixlConnector" && c.kv_connector != "UcxConnector")
        bad("kv_connector '" + c.kv_connector + "' is not supported (accepted: NixlConnector, UcxConnector; both transfer over UCX)");
    } else if (key == "kv_role") {
      const std::string r = v.is_string() ? v.get<std::string>() : "";
      if (r == "kv_producer") c.kv_role = KvRole::Producer;
      else if (r == "kv_consumer") c.kv_role = KvRole::Consumer;
      else if (r == "kv_both") c.kv_role = KvRole::Both;
      else bad("kv_role must be kv_producer, kv_consumer or kv_both");
      role_given = true;
    } else if (key == "kv_port") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 65535) bad("kv_port must be an integer in 0..65535");
      c.kv_port = v.get<int64_t>();
    } else if (key == "kv_ip") {
      if (!v.is_string() || v.get<std::string>().empty()) bad("kv_ip must be a non-empty string");
      c.kv_ip = v.get<std::string>();
    } else if (key == "engine_id") {
      if (!v.is_null()) {
        if (!v.is_string()) bad("engine_id must be a string");
        c.engine_id = v.get<std::string>();
      }
    } else if (key == "kv_load_failure_policy") {
      const std::string p = v.is_string() ? v.get<std::string>() : "";
      if (p == "recompute") c.kv_load_failure_policy = KvLoadFailurePolicy::Recompute;
      else if (p == "fail") c.kv_load_failure_policy = KvLoadFailurePolicy::Fail;
      else bad("kv_load_failure_policy must be \"recompute\" or \"fail\"");
    } else if (key == "kv_buffer_device") {
      if (!v.is_null() && v != "cpu") bad("kv_buffer_device: only \"cpu\" (the KV cache is in host memory)");
    } else if (key == "kv_buffer_size" || key == "kv_rank" || key == "kv_parallel_size") {
      // vLLM's P2P/NCCL connectors' fields; accepted so shared configs start, unused by UCX.
      if (!v.is_null() && !v.is_number()) bad(key + " must be a number");
    } else if (key == "kv_connector_extra_config") {
      if (!v.is_object()) bad("kv_connector_extra_config must be an object");
      for (const auto& [k, x] : v.items()) {
        if (k == "abort_request_timeout") c.abort_request_timeout_s = seconds(x, "abort_request_timeout");
        else if (k == "transfer_timeout") c.transfer_timeout_s = seconds(x, "transfer_timeout");
        else if (k == "transfer_chunk_bytes") {
          if (!x.is_number_integer() || x.get<int64_t>() <= 0) bad("kv_connector_extra_config.transfer_chunk_bytes must be a positive integer");
          c.transfer_chunk_bytes = x.get<int64_t>();
        } else if (k == "backends") {
          // NIXL's backend list: UCX is the one this connector speaks.
          if (!x.is_array() || std::find(x.begin(), x.end(), json("UCX")) == x.end())
            bad("kv_connector_extra_config.backends must include \"UCX\"");
        } else if (k == "trusted_producers") {
          if (!x.is_array()) bad("kv_connector_extra_config.trusted_producers must be an array of \"host\" or \"host:port\"");
          for (const auto& h : x) {
            if (!h.is_string() || h.get<std::string>().empty() || h.get<std::string>().front() == ':')
              bad("kv_connector_extra_config.trusted_producers: each entry is a non-empty \"host\" or \"host:port\"");
            c.trusted_producers.push_back(h.get<std::string>());
          }
        } else {
          bad("unknown kv_connector_extra_config key '" + k +
              "' (accepted: abort_request_timeout, transfer_timeout, transfer_chunk_bytes, backends, trusted_producers)");
        }
      }
    } else {
      bad("unknown key '" + key +
          "' (accepted: kv_connector, kv_role, kv_port, kv_ip, engine_id, kv_connector_extra_config, "
          "kv_load_failure_policy, kv_buffer_device, kv_buffer_size, kv_rank, kv_parallel_size)");
    }
  }
  if (c.kv_connector.empty()) bad("kv_connector is required (NixlConnector or UcxConnector)");
  if (!role_given) bad("kv_role is required with a connector (kv_producer, kv_consumer or kv_both)");
  if (c.engine_id.empty()) c.engine_id = random_engine_id();
  return c;
}

ProducerTrust KvTransferConfig::trust(const std::string& host, int64_t port) const {
  if (trusted_producers.empty()) return ProducerTrust::Unlisted;
  const std::string with_port = host + ":" + std::to_string(port);
  for (const std::string& t : trusted_producers)
    if (t == host || t == with_port) return ProducerTrust::Listed;
  return ProducerTrust::Refused;
}

}  // namespace kimi::kvtransfer
