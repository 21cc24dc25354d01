#pragma once
// kv_transfer_params on the OpenAI bodies (vLLM's extension for disaggregated prefill): read from
// a /v1/completions or /v1/chat/completions request, written into the response of a prefill that
// holds its KV for a decode instance. Field names as vLLM's NIXL connector uses them, so a proxy
// written for vLLM passes them through unchanged; unknown fields (other connectors' extras) are
// ignored, null counts as absent.
#include "engine/kv_connector.h"
#include "server/json_body.h"

namespace kimi {

// Throws ApiError(400, ..., "kv_transfer_params") for a field of the wrong type.
KvTransferParams parse_kv_transfer_params(const ojson& j);
ojson kv_transfer_params_json(const KvTransferParams& p);

}  // namespace kimi
