#include "proxy/proxy_metrics.h"

namespace kimi::proxy {

namespace {

// A label value with the format's escapes (backslash, quote, newline).
std::string label(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

template <class F>
void per_instance(std::string& out, const char* name, const InstancePool& prefill, const InstancePool& decode, F value) {
  for (const InstancePool* pool : {&prefill, &decode})
    for (const InstanceStats& s : pool->stats())
      out += std::string(name) + "{role=\"" + role_name(pool->role()) + "\",instance=\"" + label(s.endpoint.name()) +
             "\"} " + std::to_string(value(s)) + "\n";
}

}  // namespace

std::string render_metrics(const InstancePool& prefill, const InstancePool& decode, const ProxyCounters& c) {
  std::string out;
  head(out, "kimi_proxy_instance_requests_total", "counter", "Requests sent to an instance, retries included.");
  per_instance(out, "kimi_proxy_instance_requests_total", prefill, decode, [](const InstanceStats& s) { return s.requests; });
  head(out, "kimi_proxy_instance_in_flight", "gauge", "Requests sent to an instance and not finished.");
  per_instance(out, "kimi_proxy_instance_in_flight", prefill, decode, [](const InstanceStats& s) { return s.in_flight; });
  head(out, "kimi_proxy_instance_load", "gauge",
       "The load the least-loaded choice weighs: estimated prompt tokens in prefill, requests in decode.");
  per_instance(out, "kimi_proxy_instance_load", prefill, decode, [](const InstanceStats& s) { return s.load; });
  head(out, "kimi_proxy_instance_failures_total", "counter", "Connection errors and 5xx answers of an instance.");
  per_instance(out, "kimi_proxy_instance_failures_total", prefill, decode, [](const InstanceStats& s) { return s.failures; });

  head(out, "kimi_proxy_requests_total", "counter", "Completion requests the proxy received.");
  out += "kimi_proxy_requests_total " + std::to_string(c.client_requests.load()) + "\n";
  head(out, "kimi_proxy_retries_total", "counter", "Attempts repeated after a failed one.");
  out += "kimi_proxy_retries_total{role=\"prefill\"} " + std::to_string(c.prefill_retries.load()) + "\n";
  out += "kimi_proxy_retries_total{role=\"decode\"} " + std::to_string(c.decode_retries.load()) + "\n";
  head(out, "kimi_proxy_decode_without_kv_total", "counter",
       "Requests decoded without a prefill's KV (the decode instance computed the prompt).");
  out += "kimi_proxy_decode_without_kv_total{reason=\"prefill_failed\"} " + std::to_string(c.prefill_gave_up.load()) + "\n";
  out += "kimi_proxy_decode_without_kv_total{reason=\"no_kv_transfer_params\"} " + std::to_string(c.no_kv_params.load()) +
         "\n";
  head(out, "kimi_proxy_failures_total", "counter", "Requests that failed at the proxy.");
  out += "kimi_proxy_failures_total{reason=\"no_decode_instance\"} " + std::to_string(c.decode_failed.load()) + "\n";
  out += "kimi_proxy_failures_total{reason=\"stream_broken\"} " + std::to_string(c.stream_broken.load()) + "\n";
  head(out, "kimi_proxy_client_disconnects_total", "counter", "Clients that hung up before their answer ended.");
  out += "kimi_proxy_client_disconnects_total " + std::to_string(c.client_disconnects.load()) + "\n";
  return out;
}

}  // namespace kimi::proxy
