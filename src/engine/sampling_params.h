#pragma once
// Per-request generation settings, with the names and defaults of vLLM's SamplingParams (and so
// of the OpenAI API fields the server maps onto them).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "engine/kv_connector.h"
#include "structured/spec.h"

namespace kimi {

// The most top logprobs a request may ask for (OpenAI's top_logprobs limit, vLLM's default
// max_logprobs).
inline constexpr int kMaxLogprobs = 20;

// A SamplingParams field out of range; param() is its name, which the API reports as the
// error's `param`.
class ParamError : public Error {
 public:
  ParamError(std::string param, const std::string& message) : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

struct SamplingParams {
  int n = 1;                        // completions per prompt, sharing the prompt's KV blocks
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // nucleus mass kept, (0, 1]
  int top_k = 0;                    // <= 0: all tokens (vLLM also accepts -1)
  float min_p = 0.0f;               // drop tokens below min_p x the top probability, [0, 1]
  std::optional<uint64_t> seed;     // per-request stream; reproducible whatever else is batched
  float presence_penalty = 0.0f;    // [-2, 2], on generated tokens
  float frequency_penalty = 0.0f;   // [-2, 2], on generated tokens
  float repetition_penalty = 1.0f;  // > 0, on prompt and generated tokens (1: off)
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;           // stop tokens/strings are suppressed until this many
  std::vector<std::string> stop;    // stop strings, matched across token boundaries
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  std::optional<int> logprobs;         // top-k logprobs per generated token (0: only the sampled one)
  std::optional<int> prompt_logprobs;  // the same for every prompt token after the first
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before sampling
  bool skip_special_tokens = true;     // in the detokenised text
  // Special tokens written into the text even with skip_special_tokens: the markers an output
  // parser reads (<think>, </think>...), so that it can split on them while other specials stay
  // hidden, as vLLM's parsers do by token id.
  std::vector<int32_t> visible_special_ids;
  // Structured output (response_format, structured_outputs): the grammar the generated text
  // must follow, compiled once per request by the model runner.
  structured::StructuredSpec structured;
  // Disaggregated prefill (vLLM's kv_transfer_params): prefill here and hold the KV for a decode
  // instance (do_remote_decode), or pull the prompt's KV from a prefill instance (do_remote_prefill).
  std::optional<KvTransferParams> kv_transfer_params;

  // Throws ParamError naming the field for values out of range (ids checked against vocab).
  void validate(int64_t vocab_size) const;
};

}  // namespace kimi
