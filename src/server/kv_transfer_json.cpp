#include "server/kv_transfer_json.h"

#include <cstdint>

#include "server/api_error.h"

namespace kimi {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw ApiError(400, "'kv_transfer_params." + field + "' must be " + what, "kv_transfer_params");
}

const ojson* get(const ojson& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool flag(const ojson& j, const char* k) {
  const ojson* v = get(j, k);
  if (!v) return false;
  if (!v->is_boolean()) bad(k, "a boolean");
  return v->get<bool>();
}

std::string text(const ojson& j, const char* k) {
  const ojson* v = get(j, k);
  if (!v) return {};
  if (!v->is_string()) bad(k, "a string");
  return v->get<std::string>();
}

int64_t integer(const ojson& j, const char* k, int64_t lo, int64_t hi) {
  const ojson* v = get(j, k);
  if (!v) return 0;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    bad(k, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v->get<int64_t>();
}

}  // namespace

KvTransferParams parse_kv_transfer_params(const ojson& j) {
  if (!j.is_object()) throw ApiError(400, "'kv_transfer_params' must be an object", "kv_transfer_params");
  KvTransferParams p;
  p.do_remote_decode = flag(j, "do_remote_decode");
  p.do_remote_prefill = flag(j, "do_remote_prefill");
  p.remote_engine_id = text(j, "remote_engine_id");
  p.remote_host = text(j, "remote_host");
  p.remote_port = integer(j, "remote_port", 0, 65535);
  p.remote_request_id = text(j, "remote_request_id");
  p.remote_num_tokens = integer(j, "remote_num_tokens", 0, INT64_MAX);
  p.remote_block_size = integer(j, "remote_block_size", 0, INT32_MAX);
  p.tp_size = std::max<int64_t>(1, integer(j, "tp_size", 0, 1 << 20));
  if (const ojson* b = get(j, "remote_block_ids")) {
    if (!b->is_array()) bad("remote_block_ids", "a list of block ids");
    for (const auto& x : *b) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        bad("remote_block_ids", "a list of block ids");
      p.remote_block_ids.push_back(int32_t(x.get<int64_t>()));
    }
  }
  if (p.do_remote_decode && p.do_remote_prefill)
    throw ApiError(400, "kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true", "kv_transfer_params");
  return p;
}

ojson kv_transfer_params_json(const KvTransferParams& p) {
  return {{"do_remote_prefill", p.do_remote_prefill},
          {"do_remote_decode", p.do_remote_decode},
          {"remote_engine_id", p.remote_engine_id},
          {"remote_block_ids", p.remote_block_ids},
          {"remote_host", p.remote_host},
          {"remote_port", p.remote_port},
          {"remote_request_id", p.remote_request_id},
          {"remote_num_tokens", p.remote_num_tokens},
          {"remote_block_size", p.remote_block_size},
          {"tp_size", p.tp_size}};
}

}  // namespace kimi
