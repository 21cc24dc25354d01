#include "text_generation.h"

#include <algorithm>
#include <chrono>

namespace kimi::cli {

GenerationStats generate_tokens(Model& model, KvCache& cache, std::vector<int32_t>& cache_tokens,
                                const std::vector<int32_t>& prompt, const SamplingParams& params,
                                const std::vector<int32_t>& stop_ids,
                                const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  GenerationStats st;
  st.prompt_tokens = prompt.size();
  // Keep the cached prefix this prompt shares (a chat's earlier turns); always recompute the
  // last prompt token so that there are logits to sample from.
  size_t keep = 0;
  while (keep < cache_tokens.size() && keep + 1 < prompt.size() && cache_tokens[keep] == prompt[keep]) ++keep;
  cache.set_length(int64_t(keep));
  cache_tokens.assign(prompt.begin(), prompt.begin() + ptrdiff_t(keep));
  st.new_prompt_tokens = prompt.size() - keep;

  Sampler sampler(params, params.seed.value_or(0), stop_ids);
  const auto t0 = Clock::now();
  std::vector<float> logits = model.forward(std::span(prompt).subspan(keep), cache);
  cache_tokens.insert(cache_tokens.end(), prompt.begin() + ptrdiff_t(keep), prompt.end());
  const auto t1 = Clock::now();
  std::vector<int32_t> out;
  while (int64_t(out.size()) < params.max_tokens && cache.length() < cache.capacity()) {
    const int32_t next = sampler.sample(logits, prompt, out).token;
    out.push_back(next);
    const bool stop = !params.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end();
    if (!on_token(next) || stop || int64_t(out.size()) == params.max_tokens) break;
    logits = model.forward({&out.back(), 1}, cache);
    cache_tokens.push_back(next);
  }
  st.generated = out.size();
  st.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  st.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

}  // namespace kimi::cli
