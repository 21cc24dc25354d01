#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/rng.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(8) << 30;
}

EngineConfig resolve(EngineConfig c, const ModelConfig& mc) {
  if (c.scheduler.max_model_len <= 0) c.scheduler.max_model_len = mc.max_position_embeddings;
  if (c.scheduler.max_model_len > mc.max_position_embeddings)
    throw Error("--max-model-len " + std::to_string(c.scheduler.max_model_len) +
                " exceeds the model's max_position_embeddings (" + std::to_string(mc.max_position_embeddings) + ")");
  if (c.block_size <= 0) throw Error("--block-size must be positive");
  if (c.scheduler.max_num_seqs <= 0) throw Error("--max-num-seqs must be positive");
  if (c.scheduler.max_num_batched_tokens <= 0) throw Error("--max-num-batched-tokens must be positive");
  if (c.kv_cache_bytes == 0) {
    if (!(c.kv_cache_memory_fraction > 0 && c.kv_cache_memory_fraction <= 1))
      throw Error("the KV cache memory fraction must be in (0, 1]");
    c.kv_cache_bytes = size_t(double(physical_memory_bytes()) * c.kv_cache_memory_fraction);
  }
  return c;
}

int64_t num_blocks_for(const EngineConfig& c, const ModelConfig& mc) {
  const size_t per_block = KvStorage::bytes_per_block(mc, c.block_size, c.kv_cache_dtype);
  const int64_t blocks = int64_t(c.kv_cache_bytes / per_block);
  const int64_t needed = (c.scheduler.max_model_len + c.block_size - 1) / c.block_size;
  if (blocks < needed)
    throw Error("the KV cache (" + std::to_string(c.kv_cache_bytes) + " bytes, " + std::to_string(blocks) +
                " blocks of " + std::to_string(c.block_size) + " tokens) cannot hold one sequence of max_model_len " +
                std::to_string(c.scheduler.max_model_len) + " tokens; lower --max-model-len or raise the KV cache memory");
  return blocks;
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, EngineConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(resolve(config, model.config())),
      kv_(num_blocks_for(config_, model.config()), config_.block_size, config_.enable_prefix_caching),
      storage_(model.config(), kv_.pool().num_blocks(), config_.block_size, config_.kv_cache_dtype),
      scheduler_(config_.scheduler, kv_),
      metrics_(config_.scheduler.max_model_len) {
  for (int64_t id : model.config().eos_token_ids) eos_ids_.push_back(int32_t(id));
  metrics_.set_kv_cache_info({config_.block_size, storage_.num_blocks(),
                              std::string(kv_cache_dtype_name(config_.kv_cache_dtype)),
                              int64_t(KvStorage::bytes_per_token(model.config(), config_.kv_cache_dtype))});
}

Engine::~Engine() = default;

void Engine::validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  const ModelConfig& c = model_.config();
  if (prompt.empty()) throw Error("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= c.vocab_size)
      throw Error("prompt token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                  std::to_string(c.vocab_size - 1) + ")");
  const int64_t len = int64_t(prompt.size());
  if (len >= max_model_len())
    throw Error("This model's maximum context length is " + std::to_string(max_model_len()) +
                " tokens. However, your request has " + std::to_string(len) +
                " input tokens. Please reduce the length of the input.");
  params.validate(c.vocab_size);
}

std::unique_ptr<Request> Engine::make_request(const std::string& id, int index, const std::vector<int32_t>& prompt,
                                              const SamplingParams& params, int priority) {
  auto r = std::make_unique<Request>();
  r->parent_id = id;
  r->index = index;
  r->id = params.n > 1 ? id + "#" + std::to_string(index) : id;
  r->prompt = prompt;
  r->params = params;
  r->priority = priority;
  r->arrival = next_arrival_++;
  // A request's own seed makes it reproducible whatever runs beside it; otherwise the engine's
  // seed and the admission order decide.
  const uint64_t seed = params.seed ? *params.seed + uint64_t(index) : hash_seed(config_.seed, r->id.c_str()) ^ r->arrival;
  r->sampler = std::make_unique<Sampler>(params, seed, eos_ids_);
  if (tokenizer_) r->detokenizer = std::make_unique<IncrementalDecoder>(*tokenizer_, params.skip_special_tokens);
  if (!params.stop.empty()) r->stop_matcher = std::make_unique<StopStringMatcher>(params.stop, params.include_stop_str_in_output);
  return r;
}

void Engine::add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params, int priority) {
  validate(prompt, params);
  for (const auto& [rid, r] : requests_)
    if (r->parent_id == id) throw Error("a request with id '" + id + "' is already running");
  // Never generate past the context window.
  params.max_tokens = std::min<int64_t>(params.max_tokens, max_model_len() - int64_t(prompt.size()));
  params.min_tokens = std::min(params.min_tokens, params.max_tokens);
  prompt_tokens_ += int64_t(prompt.size()) * params.n;
  metrics_.on_prompt_tokens(int64_t(prompt.size()) * params.n);
  for (int i = 0; i < params.n; ++i) {
    auto r = make_request(id, i, prompt, params, priority);
    Request* p = r.get();
    requests_.emplace(r->id, std::move(r));
    // With prefix caching, the other completions wait until the first has computed the prompt,
    // then find all its full blocks in the cache instead of recomputing them.
    if (i == 0 || !config_.enable_prefix_caching) admit(p);
    else parked_.push_back(p);
  }
}

void Engine::admit(Request* r) { scheduler_.add(r); }

void Engine::release_parked() {
  std::erase_if(parked_, [&](Request* p) {
    // The leader is completion 0 of the same parent.
    const auto it = requests_.find(p->parent_id + "#0");
    const bool leader_done = it == requests_.end() || it->second->num_computed_tokens >= int64_t(it->second->prompt.size());
    if (leader_done) admit(p);
    return leader_done;
  });
}

bool Engine::abort_request(const std::string& id) {
  bool found = false;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = *it->second;
    if (r.parent_id != id) {
      ++it;
      continue;
    }
    found = true;
    std::erase(parked_, &r);
    scheduler_.remove(&r);
    finish(r, FinishReason::Abort);
    pending_.push_back(make_output(r));
    it = requests_.erase(it);
  }
  return found;
}

void Engine::finish(Request& r, FinishReason reason, std::string stop_reason) {
  r.status = RequestStatus::Finished;
  r.finish_reason = reason;
  r.stop_reason = std::move(stop_reason);
  metrics_.on_finished(finish_reason_name(reason), seconds(Clock::now() - r.arrival_time), int64_t(r.prompt.size()),
                       int64_t(r.output.size()));
}

RequestOutput Engine::make_output(Request& r) {
  RequestOutput o;
  o.request_id = r.parent_id;
  o.index = r.index;
  o.finished = r.finished();
  o.finish_reason = r.finish_reason;
  o.stop_reason = r.stop_reason;
  o.stop_token = r.stop_token;
  o.prompt_tokens = int64_t(r.prompt.size());
  o.completion_tokens = int64_t(r.output.size());
  o.cached_tokens = r.num_cached_tokens;
  if (!r.prompt_logprobs_sent && r.params.prompt_logprobs && !r.prompt_logprobs.empty()) {
    o.prompt_logprobs = std::move(r.prompt_logprobs);
    r.prompt_logprobs_sent = true;
  }
  return o;
}

RequestOutput Engine::process_token(Request& r, const float* logits_row) {
  const int64_t V = model_.config().vocab_size;
  std::vector<float> row(logits_row, logits_row + V);
  const SampleResult s = r.sampler->sample(row, r.prompt, r.output);
  r.output.push_back(s.token);
  ++generation_tokens_;
  metrics_.on_generation_tokens(1);
  const auto now = Clock::now();
  if (!r.first_token_time) {
    r.first_token_time = now;
    metrics_.on_first_token(seconds(now - r.arrival_time));
  } else {
    metrics_.on_token(seconds(now - *r.last_token_time));
  }
  r.last_token_time = now;

  RequestOutput o;
  o.token_ids.push_back(s.token);
  if (r.params.logprobs) o.logprobs.push_back(s);
  const int64_t produced = int64_t(r.output.size());
  const bool may_stop = produced >= r.params.min_tokens;

  FinishReason reason = FinishReason::None;
  std::string stop_reason;
  if (may_stop && !r.params.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), s.token) != eos_ids_.end()) {
    reason = FinishReason::Stop;
  } else if (may_stop && std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(), s.token) !=
                             r.params.stop_token_ids.end()) {
    reason = FinishReason::Stop;
    r.stop_token = s.token;
  }
  // The token that stopped generation is not part of the text (as in vLLM), unless asked for.
  const bool show_token = reason == FinishReason::None || r.params.include_stop_str_in_output;
  std::string text = r.detokenizer && show_token ? r.detokenizer->push(s.token) : std::string();
  bool stopped_by_string = false;
  // Stop strings are only looked for once min_tokens are out (as in vLLM).
  if (r.stop_matcher && may_stop && reason == FinishReason::None) {
    auto m = r.stop_matcher->push(text);
    text = std::move(m.emit);
    if (m.stopped) {
      reason = FinishReason::Stop;
      stop_reason = m.matched;
      stopped_by_string = true;
    }
  }
  if (reason == FinishReason::None && (produced >= r.params.max_tokens || r.num_tokens() >= max_model_len()))
    reason = FinishReason::Length;
  if (reason != FinishReason::None) {
    // Release what was held back for possible completion (stop-string prefixes, UTF-8 tails),
    // unless a stop string cut the text off.
    if (!stopped_by_string) {
      if (r.stop_matcher) text += r.stop_matcher->flush();
      if (r.detokenizer) text += r.detokenizer->flush();
    }
    finish(r, reason, stop_reason);
  }
  RequestOutput base = make_output(r);
  base.token_ids = std::move(o.token_ids);
  base.logprobs = std::move(o.logprobs);
  base.text = std::move(text);
  return base;
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  release_parked();
  const int64_t preemptions_before = scheduler_.num_preemptions();
  const int64_t queries_before = scheduler_.prefix_queries(), hits_before = scheduler_.prefix_hits();
  const SchedulerOutput so = scheduler_.schedule();
  for (int64_t i = preemptions_before; i < scheduler_.num_preemptions(); ++i) metrics_.on_preemption();
  if (scheduler_.prefix_queries() > queries_before)
    metrics_.on_prefix_cache_query(scheduler_.prefix_queries() - queries_before, scheduler_.prefix_hits() - hits_before);
  metrics_.on_step(scheduler_.num_running(), scheduler_.num_waiting() + int64_t(parked_.size()), kv_.pool().usage());
  if (so.empty()) return outputs;

  // One forward pass over every scheduled chunk.
  std::vector<std::vector<int32_t>> tokens(so.chunks.size());
  std::vector<SequenceInput> inputs;
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    Request& r = *so.chunks[i].request;
    for (int64_t k = 0; k < so.chunks[i].num_new_tokens; ++k) tokens[i].push_back(r.token_at(r.num_computed_tokens + k));
    const bool want_prompt_logprobs = r.params.prompt_logprobs && r.num_computed_tokens < int64_t(r.prompt.size());
    inputs.push_back({tokens[i], storage_.view(r.block_table, r.num_computed_tokens), want_prompt_logprobs});
  }
  const std::vector<float> logits = model_.forward(inputs);

  const int64_t V = model_.config().vocab_size;
  size_t row = 0;
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    Request& r = *so.chunks[i].request;
    const int64_t n = so.chunks[i].num_new_tokens;
    const int64_t first = r.num_computed_tokens;
    const size_t rows = inputs[i].all_logits ? size_t(n) : 1;
    if (inputs[i].all_logits) {
      // Row k predicts token first + k + 1; the prompt's first token has no logprob (as in vLLM).
      for (int64_t k = 0; k < n && first + k + 1 < int64_t(r.prompt.size()); ++k) {
        const int32_t next = r.prompt[size_t(first + k + 1)];
        float lp = 0;
        auto top = top_logprobs({&logits[(row + size_t(k)) * size_t(V)], size_t(V)}, *r.params.prompt_logprobs, &lp, next);
        top.insert(top.begin(), TokenLogprob{next, lp});  // the actual token first, then the top-k
        r.prompt_logprobs.push_back(std::move(top));
      }
    }
    r.num_computed_tokens += n;
    kv_.cache_full_blocks(r);
    if (r.num_computed_tokens == r.num_tokens()) {
      outputs.push_back(process_token(r, &logits[(row + rows - 1) * size_t(V)]));
      if (r.finished()) {
        scheduler_.remove(&r);
        requests_.erase(r.id);
      }
    }
    row += rows;
  }
  return outputs;
}

std::vector<std::vector<Completion>> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                      const SamplingParams& params) {
  std::vector<std::vector<Completion>> results(prompts.size(), std::vector<Completion>(size_t(params.n)));
  const std::string prefix = "generate-" + std::to_string(next_arrival_) + "-";
  for (size_t i = 0; i < prompts.size(); ++i) add_request(prefix + std::to_string(i), prompts[i], params);
  while (has_unfinished()) {
    for (RequestOutput& o : step()) {
      if (o.request_id.rfind(prefix, 0) != 0) continue;
      Completion& c = results[std::stoul(o.request_id.substr(prefix.size()))][size_t(o.index)];
      c.token_ids.insert(c.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
      c.text += o.text;
      for (auto& lp : o.logprobs) c.logprobs.push_back(std::move(lp));
      if (!o.prompt_logprobs.empty()) c.prompt_logprobs = std::move(o.prompt_logprobs);
      if (o.finished) c.finish_reason = o.finish_reason;
    }
  }
  return results;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting() + int64_t(parked_.size());
  s.kv_blocks_total = kv_.pool().num_blocks();
  s.kv_blocks_used = kv_.pool().num_blocks() - kv_.pool().num_free();
  s.kv_blocks_cached = kv_.pool().num_cached();
  s.preemptions = scheduler_.num_preemptions();
  s.prefix_queries = scheduler_.prefix_queries();
  s.prefix_hits = scheduler_.prefix_hits();
  s.prompt_tokens = prompt_tokens_;
  s.generation_tokens = generation_tokens_;
  return s;
}

}  // namespace kimi
