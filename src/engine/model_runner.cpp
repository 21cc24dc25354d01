#include "engine/model_runner.h"

#include <algorithm>

#include "common/error.h"
#include "structured/compile.h"

namespace kimi {

ModelRunner::ModelRunner(Model& model, const KvCacheConfig& kv, std::shared_ptr<const structured::TokenVocab> vocab,
                         SpeculationSetup speculation)
    : model_(model),
      storage_(model.config(), kv.num_blocks, kv.block_size, kv.dtype),
      vocab_(std::move(vocab)),
      spec_(std::move(speculation)) {
  for (int64_t id : model.config().eos_token_ids) eos_ids_.push_back(int32_t(id));
  if (spec_.proposer) proposer_layers_ = spec_.proposer->capture_layers();
}

void ModelRunner::add_prompt_logprobs(RequestState& st, const ScheduledRequest& s, const float* logits,
                                      RequestRunnerOutput& out) const {
  // Row k predicts token num_computed + k + 1; the prompt's first token has no logprob (as vLLM).
  const int64_t V = model_.config().vocab_size;
  const int64_t prompt_len = int64_t(st.prompt_len);
  for (int64_t k = 0; k < int64_t(s.token_ids.size()) && s.num_computed_tokens + k + 1 < prompt_len; ++k) {
    const int64_t pos = s.num_computed_tokens + k + 1;
    if (pos < st.prompt_logprobs_done) continue;
    st.prompt_logprobs_done = pos + 1;
    const int32_t next = st.tokens[size_t(pos)];
    float lp = 0;
    auto top = top_logprobs({logits + k * V, size_t(V)}, *st.params.prompt_logprobs, &lp, next);
    top.insert(top.begin(), TokenLogprob{next, lp});  // the actual token first, then the top-k
    out.prompt_logprobs.push_back(std::move(top));
  }
}

int64_t ModelRunner::sample(RequestState& st, const ScheduledRequest& s, const float* rows, RequestRunnerOutput& out) {
  const int64_t V = model_.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  auto emit = [&](const SampleResult& r) {
    if (st.matcher) {
      if (st.constrained) st.matcher->accept_token(r.token);
      else if (r.token == st.params.structured.start_after_token) st.constrained = true;
    }
    st.tokens.push_back(r.token);
    out.sampled_token_ids.push_back(r.token);
    if (st.params.logprobs) out.logprobs.push_back(r);
  };
  auto mask = [&]() -> std::span<const uint64_t> {
    return st.matcher && st.constrained ? st.matcher->mask() : std::span<const uint64_t>();
  };
  // Row j of the drafts' rows predicts the token after draft j-1 (row 0: after the last token).
  int64_t accepted = 0;
  for (int32_t draft : s.draft_token_ids) {
    std::copy(rows + accepted * V, rows + (accepted + 1) * V, logits.begin());
    bool ok = false;
    const SampleResult r = st.sampler->verify(logits, st.prompt(), st.output(), mask(), draft, ok);
    emit(r);
    if (!ok) return accepted;
    ++accepted;
  }
  std::copy(rows + accepted * V, rows + (accepted + 1) * V, logits.begin());
  emit(st.sampler->sample(logits, st.prompt(), st.output(), mask()));
  return accepted;
}

ModelRunnerOutput ModelRunner::execute(const SchedulerOutput& so) {
  const uint64_t begun = model_.steps_begun();
  try {
    return execute_step(so);
  } catch (const Error&) {
    if (model_.data_parallel() && !so.empty() && model_.steps_begun() == begun) model_.forward_dummy();
    throw;
  }
}

ModelRunnerOutput ModelRunner::execute_step(const SchedulerOutput& so) {
  for (const std::string& id : so.finished_request_ids) states_.erase(id);
  for (const NewRequestData& n : so.new_requests) {
    RequestState st;
    st.tokens = n.prompt_token_ids;
    st.prompt_len = n.prompt_token_ids.size();
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
  batch.capture_hidden_layers.insert(batch.capture_hidden_layers.end(), proposer_layers_.begin(), proposer_layers_.end());
  std::vector<RequestState*> states;
  std::vector<bool> want_prompt_logprobs;
  std::vector<std::vector<int32_t>> with_drafts(so.scheduled.size());  // token_ids + drafts, when there are drafts
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    auto it = states_.find(s.request_id);
    if (it == states_.end()) throw Error("internal: the executor was never told about request '" + s.request_id + "'");
    RequestState& st = it->second;
    states.push_back(&st);
    std::span<const int32_t> tokens = s.token_ids;
    if (!s.draft_token_ids.empty()) {
      if (!s.sample) throw Error("internal: drafts scheduled for a request that does not sample");
      with_drafts[i] = s.token_ids;
      with_drafts[i].insert(with_drafts[i].end(), s.draft_token_ids.begin(), s.draft_token_ids.end());
      tokens = with_drafts[i];
    }
    const int64_t n = int64_t(tokens.size()), k = int64_t(s.draft_token_ids.size());
    const bool prompt_lp = st.params.prompt_logprobs && s.num_computed_tokens + 1 < int64_t(st.prompt_len);
    want_prompt_logprobs.push_back(prompt_lp);
    batch.seqs.push_back({.tokens = tokens,
                          .kv = storage_.view(s.block_ids, s.num_computed_tokens),
                          .embedding_offsets = s.embeddings.offsets,
                          .embedding_values = s.embeddings.values,
                          .num_logits = prompt_lp ? n : (s.sample ? 1 + k : 0)});
  }
  const ForwardResult fr = model_.forward(batch);

  const int64_t V = model_.config().vocab_size, D = model_.config().hidden_size;
  std::vector<int64_t> verified(so.scheduled.size());  // positions whose KV is now final, per request
  int64_t row = 0, token_row = 0;
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    RequestState& st = *states[i];
    RequestRunnerOutput ro;
    ro.request_id = s.request_id;
    const int64_t n = int64_t(batch.seqs[i].tokens.size()), rows = batch.seqs[i].num_logits;
    if (want_prompt_logprobs[i]) add_prompt_logprobs(st, s, &fr.logits[size_t(row * V)], ro);
    verified[i] = int64_t(s.token_ids.size());
    if (s.sample) {
      const int64_t first_row = row + rows - 1 - int64_t(s.draft_token_ids.size());
      ro.num_accepted_drafts = sample(st, s, &fr.logits[size_t(first_row * V)], ro);
      verified[i] += ro.num_accepted_drafts;
    }
    for (size_t l = 0; l < so.capture_hidden_layers.size(); ++l) {
      const auto first = fr.hidden_states.begin() + ptrdiff_t((int64_t(l) * fr.num_tokens + token_row) * D);
      ro.hidden_states.insert(ro.hidden_states.end(), first, first + ptrdiff_t(n * D));
    }
    row += rows;
    token_row += n;
    out.requests.push_back(std::move(ro));
  }
  if (spec_.proposer) propose(so, fr, verified, out);
  return out;
}

void ModelRunner::propose(const SchedulerOutput& so, const ForwardResult& fr, const std::vector<int64_t>& verified,
                          ModelRunnerOutput& out) {
  const int64_t D = model_.config().hidden_size, bs = storage_.block_size();
  const size_t own_layers = so.capture_hidden_layers.size(), L = proposer_layers_.size();
  const bool drafting = spec_.disable_by_batch_size <= 0 || int64_t(so.scheduled.size()) <= spec_.disable_by_batch_size;
  std::vector<spec::ProposeRequest> requests(so.scheduled.size());
  std::vector<std::vector<float>> hidden(so.scheduled.size());
  int64_t token_row = 0;
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    const RequestState& st = states_.at(s.request_id);
    const int64_t n_fwd = int64_t(s.token_ids.size() + s.draft_token_ids.size()), n = verified[i];
    // The verified rows of this request in each of the proposer's layers (rejected drafts dropped):
    // with one layer (MTP) they are already contiguous in the capture; several (Eagle3) are gathered.
    spec::ProposeRequest& p = requests[i];
    auto rows_of = [&](size_t l) {
      return fr.hidden_states.begin() + ptrdiff_t((int64_t(own_layers + l) * fr.num_tokens + token_row) * D);
    };
    if (L == 1) {
      p.hidden_states = std::span<const float>(fr.hidden_states).subspan(size_t(rows_of(0) - fr.hidden_states.begin()), size_t(n * D));
    } else if (L > 1) {
      hidden[i].resize(size_t(int64_t(L) * n * D));
      for (size_t l = 0; l < L; ++l)
        std::copy(rows_of(l), rows_of(l) + ptrdiff_t(n * D), hidden[i].begin() + ptrdiff_t(int64_t(l) * n * D));
      p.hidden_states = hidden[i];
    }
    token_row += n_fwd;
    p.request_id = s.request_id;
    p.tokens = st.tokens;
    p.first_position = s.num_computed_tokens;
    p.num_positions = n;
    p.block_ids = s.block_ids;
    if (drafting && s.sample) {
      // Draft j (from 0) is written at position last + j by a draft model: keep within the table.
      const int64_t last = p.first_position + n, room = int64_t(s.block_ids.size()) * bs - last + 1;
      p.num_drafts = std::clamp<int64_t>(room, 0, spec_.num_speculative_tokens);
    }
  }
  std::vector<std::vector<int32_t>> drafts;
  spec_.proposer->propose(requests, drafts);
  for (size_t i = 0; i < requests.size() && i < drafts.size(); ++i) {
    if (int64_t(drafts[i].size()) > requests[i].num_drafts) drafts[i].resize(size_t(requests[i].num_drafts));
    out.requests[i].draft_token_ids = std::move(drafts[i]);
  }
}

}  // namespace kimi
