#include "engine/output_processor.h"

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer, Metrics& metrics)
    : tokenizer_(tokenizer), metrics_(metrics) {}

OutputProcessor::~OutputProcessor() = default;

void OutputProcessor::add_request(const std::string& engine_id, const std::string& parent_id, int index,
                                  int64_t prompt_tokens, const SamplingParams& params) {
  State st;
  st.parent_id = parent_id;
  st.index = index;
  st.prompt_tokens = prompt_tokens;
  st.params = params;
  if (tokenizer_)
    st.detokenizer = std::make_unique<IncrementalDecoder>(*tokenizer_, params.skip_special_tokens, params.visible_special_ids);
  if (!params.stop.empty()) st.stop_matcher = std::make_unique<StopStringMatcher>(params.stop, params.include_stop_str_in_output);
  states_.insert_or_assign(engine_id, std::move(st));
}

RequestOutput OutputProcessor::finish(const std::string& engine_id, State& st, RequestOutput o) {
  o.finished = true;
  metrics_.on_finished(finish_reason_name(o.finish_reason), seconds(Clock::now() - st.arrival), st.prompt_tokens,
                       st.completion_tokens);
  states_.erase(engine_id);
  return o;
}

RequestOutput OutputProcessor::process(const EngineCoreOutput& core, bool* stopped_by_string) {
  *stopped_by_string = false;
  State& st = states_.at(core.request_id);
  RequestOutput o;
  o.request_id = st.parent_id;
  o.index = st.index;
  o.prompt_tokens = st.prompt_tokens;
  o.cached_tokens = core.num_cached_tokens;
  o.stop_token = core.stop_token;
  st.prompt_logprobs.insert(st.prompt_logprobs.end(), core.prompt_logprobs.begin(), core.prompt_logprobs.end());
  if (core.new_token_ids.empty()) return o;  // a prefill chunk: nothing to report yet
  o.prompt_logprobs = std::move(st.prompt_logprobs);
  st.prompt_logprobs.clear();

  FinishReason reason = FinishReason::None;
  const SamplingParams& p = st.params;
  for (size_t k = 0; k < core.new_token_ids.size() && reason == FinishReason::None; ++k) {
    const int32_t token = core.new_token_ids[k];
    const auto now = Clock::now();
    if (!st.last_token_time) metrics_.on_first_token(seconds(now - st.arrival));
    else metrics_.on_token(seconds(now - *st.last_token_time));
    st.last_token_time = now;
    ++st.completion_tokens;
    metrics_.on_generation_tokens(1);
    o.token_ids.push_back(token);
    if (k < core.logprobs.size()) o.logprobs.push_back(core.logprobs[k]);

    if (k + 1 == core.new_token_ids.size()) reason = core.finish_reason;
    // The token that stopped generation is not part of the text (as in vLLM), unless asked for.
    const bool show_token = reason != FinishReason::Stop || p.include_stop_str_in_output;
    std::string text = st.detokenizer && show_token ? st.detokenizer->push(token) : std::string();
    // Stop strings are only looked for once min_tokens are out (as in vLLM).
    if (st.stop_matcher && st.completion_tokens >= p.min_tokens && reason == FinishReason::None) {
      auto m = st.stop_matcher->push(text);
      text = std::move(m.emit);
      if (m.stopped) {
        reason = FinishReason::Stop;
        o.stop_reason = m.matched;
        o.stop_token = -1;
        *stopped_by_string = true;
      }
    }
    o.text += text;
  }
  o.completion_tokens = st.completion_tokens;
  o.finish_reason = reason;
  if (reason == FinishReason::None) return o;
  // Release what was held back for possible completion (stop-string prefixes, UTF-8 tails),
  // unless a stop string cut the text off.
  if (!*stopped_by_string) {
    if (st.stop_matcher) o.text += st.stop_matcher->flush();
    if (st.detokenizer) o.text += st.detokenizer->flush();
  }
  return finish(core.request_id, st, std::move(o));
}

RequestOutput OutputProcessor::abort(const std::string& engine_id) {
  State& st = states_.at(engine_id);
  RequestOutput o;
  o.request_id = st.parent_id;
  o.index = st.index;
  o.prompt_tokens = st.prompt_tokens;
  o.completion_tokens = st.completion_tokens;
  o.finish_reason = FinishReason::Abort;
  return finish(engine_id, st, std::move(o));
}

}  // namespace kimi
