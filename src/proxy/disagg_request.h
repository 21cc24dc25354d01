#pragma once
// The request bodies of vLLM's disaggregation flow (the NIXL connector's kv_transfer_params), as
// `kimi proxy` rewrites them: the prefill request, the KV hand-off read from the prefill's
// answer, and the decode request that carries it.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kimi::proxy {

using ojson = nlohmann::ordered_json;

// The client's request as sent to a prefill instance: no streaming, one token (max_tokens, and
// max_completion_tokens where given), no stream_options or min_tokens (they cannot hold for one
// token), and kv_transfer_params asking the instance to keep the prompt's KV for a remote decode.
ojson make_prefill_request(const ojson& request);

// The kv_transfer_params of a prefill instance's JSON answer, if it has them (an instance that
// ended the request before max_tokens, or knows no KV transfer, has none).
std::optional<ojson> kv_params_of_response(const std::string& body);

// The client's request as sent to a decode instance with the prefill's kv_transfer_params.
ojson make_decode_request(const ojson& request, const ojson& kv_transfer_params);

// A rough size of the prompt in tokens, from the body's length (as vllm-ascend's proxy estimates
// its loads), at least 1.
int64_t estimate_prompt_tokens(const std::string& body);

}  // namespace kimi::proxy
