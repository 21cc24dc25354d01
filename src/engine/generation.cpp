#include "engine/generation.h"

#include <chrono>

#include "common/error.h"

namespace kimi {

GenerationStats generate_stream(Engine& engine, const std::vector<int32_t>& prompt, const SamplingParams& params,
                                const std::function<bool(int32_t)>& on_token) {
  if (engine.has_unfinished()) throw Error("generate_stream: the engine is busy");
  GenerationStats st;
  st.prompt_tokens = int64_t(prompt.size());
  const std::string id = "generate";
  const EngineStats before = engine.stats();
  const auto t0 = Clock::now();
  engine.add_request(id, prompt, params);
  Clock::time_point t1 = t0;
  bool aborted = false;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      if (o.request_id != id) continue;
      if (st.generated == 0 && !o.token_ids.empty()) {
        t1 = Clock::now();
        st.cached_prompt_tokens = o.cached_tokens;
      }
      for (int32_t t : o.token_ids) {
        ++st.generated;
        if (!aborted && !on_token(t)) aborted = engine.abort_request(id);
        if (aborted) break;
      }
    }
  }
  const auto t2 = Clock::now();
  st.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  st.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  const EngineStats after = engine.stats();
  st.spec_drafts = after.spec_drafts - before.spec_drafts;
  st.spec_draft_tokens = after.spec_draft_tokens - before.spec_draft_tokens;
  st.spec_accepted_tokens = after.spec_accepted_tokens - before.spec_accepted_tokens;
  return st;
}

EngineConfig single_sequence_config(int64_t max_len, bool enable_prefix_caching) {
  EngineConfig c;
  c.scheduler.max_model_len = max_len;
  c.scheduler.max_num_seqs = 1;
  c.scheduler.max_num_batched_tokens = max_len;
  c.num_kv_blocks_override = (max_len + c.block_size - 1) / c.block_size;
  c.enable_prefix_caching = enable_prefix_caching;
  return c;
}

}  // namespace kimi
