#include "kvtransfer/protocol.h"

#include <cstring>

namespace kimi::kvtransfer {

void send_message(UcxEndpoint& ep, MsgType type, const nlohmann::json& body, Deadline deadline) {
  const std::string text = body.dump();
  std::string buf(sizeof(MsgHeader) + text.size(), '\0');
  MsgHeader h;
  h.type = uint32_t(type);
  h.length = text.size();
  std::memcpy(buf.data(), &h, sizeof h);
  std::memcpy(buf.data() + sizeof h, text.data(), text.size());
  ep.send(std::as_bytes(std::span(buf)), deadline);
}

nlohmann::json recv_body(UcxEndpoint& ep, const MsgHeader& h, Deadline deadline) {
  if (h.magic != kMagic) throw TransferError("KV transfer from " + ep.peer() + ": not a kimi KV transfer peer (bad magic)");
  if (h.length > (uint64_t(1) << 26)) throw TransferError("KV transfer from " + ep.peer() + ": message too large");
  std::string text(size_t(h.length), '\0');
  if (!text.empty()) ep.recv(std::as_writable_bytes(std::span(text)), deadline);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw TransferError("KV transfer from " + ep.peer() + ": malformed message");
  }
}

nlohmann::json recv_message(UcxEndpoint& ep, MsgType expected, Deadline deadline) {
  MsgHeader h;
  ep.recv(std::as_writable_bytes(std::span(&h, 1)), deadline);
  nlohmann::json body = recv_body(ep, h, deadline);
  if (h.type != uint32_t(expected))
    throw TransferError("KV transfer from " + ep.peer() + ": unexpected message type " + std::to_string(h.type));
  return body;
}

nlohmann::json desc_to_json(const KvBlockDesc& d) {
  return {{"dtype", std::string(kv_cache_dtype_name(d.dtype))},
          {"layers", d.layers},
          {"block_size", d.block_size},
          {"row_width", d.row_width},
          {"lora", d.lora},
          {"row_bytes", d.row_bytes},
          {"scales_per_row", d.scales_per_row},
          {"bytes", d.bytes}};
}

KvBlockDesc desc_from_json(const nlohmann::json& j) {
  KvBlockDesc d;
  d.dtype = parse_kv_cache_dtype(j.at("dtype").get<std::string>());
  d.layers = j.at("layers").get<int64_t>();
  d.block_size = j.at("block_size").get<int64_t>();
  d.row_width = j.at("row_width").get<int64_t>();
  d.lora = j.at("lora").get<int64_t>();
  d.row_bytes = j.at("row_bytes").get<int64_t>();
  d.scales_per_row = j.at("scales_per_row").get<int64_t>();
  d.bytes = j.at("bytes").get<int64_t>();
  return d;
}

std::string describe_mismatch(const KvBlockDesc& mine, const KvBlockDesc& theirs) {
  std::string out;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    if (!out.empty()) out += ", ";
    out += std::string(name) + " " + a + " (producer) vs " + b + " (consumer)";
  };
  field("KV cache dtype", std::string(kv_cache_dtype_name(mine.dtype)), std::string(kv_cache_dtype_name(theirs.dtype)));
  field("block size", std::to_string(mine.block_size), std::to_string(theirs.block_size));
  field("layers", std::to_string(mine.layers), std::to_string(theirs.layers));
  field("row width", std::to_string(mine.row_width), std::to_string(theirs.row_width));
  field("latent width", std::to_string(mine.lora), std::to_string(theirs.lora));
  field("row bytes", std::to_string(mine.row_bytes), std::to_string(theirs.row_bytes));
  return out;
}

uint64_t model_identity(const ModelConfig& c) {
  const std::string s = c.architecture + "|" + c.model_type + "|" + std::to_string(c.vocab_size) + "|" +
                        std::to_string(c.hidden_size) + "|" + std::to_string(c.intermediate_size) + "|" +
                        std::to_string(c.moe_intermediate_size) + "|" + std::to_string(c.num_hidden_layers) + "|" +
                        std::to_string(c.num_attention_heads) + "|" + std::to_string(c.q_lora_rank) + "|" +
                        std::to_string(c.kv_lora_rank) + "|" + std::to_string(c.qk_nope_head_dim) + "|" +
                        std::to_string(c.qk_rope_head_dim) + "|" + std::to_string(c.v_head_dim) + "|" +
                        std::to_string(c.n_routed_experts) + "|" + std::to_string(c.n_shared_experts) + "|" +
                        std::to_string(c.first_k_dense_replace) + "|" + std::to_string(c.rope_theta) + "|" +
                        std::to_string(c.rms_norm_eps) + "|" + std::to_string(c.max_position_embeddings);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace kimi::kvtransfer
