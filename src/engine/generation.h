#pragma once
// One prompt through an Engine with its tokens streamed to a callback as they are sampled, and
// the time to the first token (prefill) and after it (decode): the one generation path that
// `kimi generate`, `kimi chat` and `kimi bench latency` share with the server.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.h"

namespace kimi {

struct GenerationStats {
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated = 0;
  double prefill_seconds = 0;  // from submission to the first token
  double decode_seconds = 0;   // from the first token to the last
  // Speculative decoding during this generation: verification steps with drafts, drafts verified,
  // drafts accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  double acceptance_length() const {  // 1 + accepted / drafts; 0 without drafts
    return spec_drafts ? 1.0 + double(spec_accepted_tokens) / double(spec_drafts) : 0.0;
  }
};

// Runs `prompt` to completion alone in `engine` (which must have no other request in flight).
// on_token sees each new token; returning false aborts the request.
GenerationStats generate_stream(Engine& engine, const std::vector<int32_t>& prompt, const SamplingParams& params,
                                const std::function<bool(int32_t)>& on_token);

// An engine configuration for one sequence of up to max_len tokens: a KV cache of exactly that
// many blocks, and the whole prompt in one step.
EngineConfig single_sequence_config(int64_t max_len, bool enable_prefix_caching);

}  // namespace kimi
