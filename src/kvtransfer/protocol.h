#pragma once
// The KV transfer protocol between a consumer (decode instance) and a producer (prefill
// instance), over one UCX stream connection the consumer opens:
//   HELLO   c->s  {version, desc: the consumer's KvBlockDesc, model: identity hash,
//                 remote_request_id, remote_engine_id: of the load that opens the connection}
//   WELCOME s->c  {ok, error, engine_id}: the producer compares block size, dtype/row layout,
//                 model identity and (when given) its engine id with the consumer's; a mismatch
//                 answers ok=false with what differs and ends the hold of remote_request_id (the
//                 consumer will not pull it, and a RELEASE racing the connection's close may be lost)
//   PULL    c->s  {remote_request_id, block_ids}: only blocks held for that request are served
//   BLOCKS  s->c  {ok, error, block_bytes, count}, then (ok) count * block_bytes raw bytes in
//                 KvStorage::read_block's layout; the producer releases the hold after sending
//   RELEASE c->s  {remote_request_id}: nothing to pull (prefix hit) or giving up: release now
// Each message is a 16-byte header (magic, type, body length) and a JSON body.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "format/model_config.h"
#include "model/kv_cache.h"
#include "kvtransfer/ucx_transport.h"

namespace kimi::kvtransfer {

inline constexpr uint32_t kMagic = 0x3158564b;  // "KVX1"
inline constexpr int kProtocolVersion = 1;

enum class MsgType : uint32_t { Hello = 1, Welcome = 2, Pull = 3, Blocks = 4, Release = 5 };

struct MsgHeader {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  uint64_t length = 0;  // body bytes
};
static_assert(sizeof(MsgHeader) == 16);

void send_message(UcxEndpoint& ep, MsgType type, const nlohmann::json& body, Deadline deadline);
// Receives a header then its body; throws TransferError on a bad header or a type != expected.
nlohmann::json recv_message(UcxEndpoint& ep, MsgType expected, Deadline deadline);
// The body of a message whose header arrived already (the producer posts header receives).
nlohmann::json recv_body(UcxEndpoint& ep, const MsgHeader& h, Deadline deadline);

nlohmann::json desc_to_json(const KvBlockDesc& d);
KvBlockDesc desc_from_json(const nlohmann::json& j);
// "" when equal; otherwise what differs, in words ("block_size 16 vs 32", ...).
std::string describe_mismatch(const KvBlockDesc& mine, const KvBlockDesc& theirs);
// A hash of the model's architecture fields: equal configs, equal hashes. Different weights
// with the same config are not told apart (that would need a hash of the weights).
uint64_t model_identity(const ModelConfig& c);

}  // namespace kimi::kvtransfer
