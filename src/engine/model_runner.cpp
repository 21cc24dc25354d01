#include "engine/model_runner.h"

#include "common/error.h"
#include "structured/compile.h"

namespace kimi {

ModelRunner::ModelRunner(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab)
    : model_(model), storage_(model.config(), kv.num_blocks, kv.block_size, kv.dtype), vocab_(std::move(vocab)) {
  for (int64_t id : model.config().eos_token_ids) eos_ids_.push_back(int32_t(id));
}

void ModelRunner::add_prompt_logprobs(RequestState& st, const ScheduledRequest& s, const float* logits,
                                      RequestRunnerOutput& out) const {
  // Row k predicts token num_computed + k + 1; the prompt's first token has no logprob (as vLLM).
  const int64_t V = model_.config().vocab_size;
  const int64_t prompt_len = int64_t(st.prompt.size());
  for (int64_t k = 0; k < int64_t(s.token_ids.size()) && s.num_computed_tokens + k + 1 < prompt_len; ++k) {
    const int64_t pos = s.num_computed_tokens + k + 1;
    if (pos < st.prompt_logprobs_done) continue;
    st.prompt_logprobs_done = pos + 1;
    const int32_t next = st.prompt[size_t(pos)];
    float lp = 0;
    auto top = top_logprobs({logits + k * V, size_t(V)}, *st.params.prompt_logprobs, &lp, next);
    top.insert(top.begin(), TokenLogprob{next, lp});  // the actual token first, then the top-k
    out.prompt_logprobs.push_back(std::move(top));
  }
}

ModelRunnerOutput ModelRunner::execute(const SchedulerOutput& so) {
  for (const std::string& id : so.finished_request_ids) states_.erase(id);
  for (const NewRequestData& n : so.new_requests) {
    RequestState st;
    st.prompt = n.prompt_token_ids;
    st.params = n.sampling_params;
    st.sampler = std::make_unique<Sampler>(n.sampling_params, n.seed, eos_ids_);
    if (const structured::StructuredSpec& spec = n.sampling_params.structured; spec.active()) {
      if (!vocab_) throw Error("structured output needs the tokenizer's vocabulary");
      // The grammar ends the text with an end token: eos, <|im_end|>, or a stop token.
      std::vector<int32_t> ends = eos_ids_;
      ends.insert(ends.end(), n.sampling_params.stop_token_ids.begin(), n.sampling_params.stop_token_ids.end());
      st.matcher = std::make_unique<structured::GrammarMatcher>(structured::compile(spec), vocab_, std::move(ends));
      st.constrained = spec.start_after_token < 0;
    }
    states_.insert_or_assign(n.request_id, std::move(st));
  }

  ModelRunnerOutput out;
  if (so.empty()) return out;
  ForwardBatch batch;
  batch.capture_hidden_layers = so.capture_hidden_layers;
  std::vector<RequestState*> states;
  std::vector<bool> want_prompt_logprobs;
  for (const ScheduledRequest& s : so.scheduled) {
    auto it = states_.find(s.request_id);
    if (it == states_.end()) throw Error("internal: the executor was never told about request '" + s.request_id + "'");
    RequestState& st = it->second;
    states.push_back(&st);
    const int64_t n = int64_t(s.token_ids.size());
    const bool prompt_lp = st.params.prompt_logprobs && s.num_computed_tokens + 1 < int64_t(st.prompt.size());
    want_prompt_logprobs.push_back(prompt_lp);
    batch.seqs.push_back({.tokens = s.token_ids,
                          .kv = storage_.view(s.block_ids, s.num_computed_tokens),
                          .embedding_offsets = s.embeddings.offsets,
                          .embedding_values = s.embeddings.values,
                          .num_logits = prompt_lp ? n : (s.sample ? 1 : 0)});
  }
  const ForwardResult fr = model_.forward(batch);

  const int64_t V = model_.config().vocab_size, D = model_.config().hidden_size;
  int64_t row = 0, token_row = 0;
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    RequestState& st = *states[i];
    RequestRunnerOutput ro;
    ro.request_id = s.request_id;
    const int64_t n = int64_t(s.token_ids.size()), rows = batch.seqs[i].num_logits;
    if (want_prompt_logprobs[i]) add_prompt_logprobs(st, s, &fr.logits[size_t(row * V)], ro);
    if (s.sample) {
      const float* last = &fr.logits[size_t((row + rows - 1) * V)];
      std::vector<float> logits(last, last + V);
      std::span<const uint64_t> allowed;
      if (st.matcher && st.constrained) allowed = st.matcher->mask();
      const SampleResult r = st.sampler->sample(logits, st.prompt, st.output, allowed);
      if (st.matcher) {
        if (st.constrained) st.matcher->accept_token(r.token);
        else if (r.token == st.params.structured.start_after_token) st.constrained = true;
      }
      st.output.push_back(r.token);
      ro.sampled_token_ids.push_back(r.token);
      if (st.params.logprobs) ro.logprobs.push_back(r);
    }
    for (size_t l = 0; l < so.capture_hidden_layers.size(); ++l) {
      const auto first = fr.hidden_states.begin() + ptrdiff_t((int64_t(l) * fr.num_tokens + token_row) * D);
      ro.hidden_states.insert(ro.hidden_states.end(), first, first + ptrdiff_t(n * D));
    }
    row += rows;
    token_row += n;
    out.requests.push_back(std::move(ro));
  }
  return out;
}

}  // namespace kimi
