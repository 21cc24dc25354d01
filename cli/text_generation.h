#pragma once
// The offline generation loop shared by `kimi generate` and `kimi chat`: one sequence, its own
// contiguous KV cache, tokens streamed to a callback as they are sampled.
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace kimi::cli {

struct GenerationStats {
  size_t prompt_tokens = 0, new_prompt_tokens = 0, generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Feeds `prompt` (reusing whatever prefix of it `cache_tokens` already holds in `cache`), then
// samples until a stop id (unless ignore_eos), max_tokens, or on_token returns false. On return
// cache_tokens lists what the cache holds.
GenerationStats generate_tokens(Model& model, KvCache& cache, std::vector<int32_t>& cache_tokens,
                                const std::vector<int32_t>& prompt, const SamplingParams& params,
                                const std::vector<int32_t>& stop_ids,
                                const std::function<bool(int32_t)>& on_token);

}  // namespace kimi::cli
