#include "proxy/disagg_request.h"

#include "common/error.h"
#include "server/json_body.h"

namespace kimi::proxy {

ojson make_prefill_request(const ojson& request) {
  ojson p = request;
  p["stream"] = false;
  p.erase("stream_options");
  p.erase("min_tokens");
  p["max_tokens"] = 1;
  if (p.contains("max_completion_tokens")) p["max_completion_tokens"] = 1;
  p["kv_transfer_params"] = {{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
                             {"remote_block_ids", nullptr}, {"remote_host", nullptr},  {"remote_port", nullptr}};
  return p;
}

std::optional<ojson> kv_params_of_response(const std::string& body) {
  ojson j;
  try {
    j = parse_json_body(body);  // nesting bounded, as for requests
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find("kv_transfer_params");
  if (it == j.end() || !it->is_object()) return std::nullopt;
  return *it;
}

ojson make_decode_request(const ojson& request, const ojson& kv_transfer_params) {
  ojson d = request;
  d["kv_transfer_params"] = kv_transfer_params;
  return d;
}

int64_t estimate_prompt_tokens(const std::string& body) { return int64_t(body.size() / 4) + 1; }

}  // namespace kimi::proxy
