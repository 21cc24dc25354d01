#include "engine/engine.h"

#include "engine/tp_executor.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/rng.h"
#include "spec/proposer_factory.h"
#include "structured/compile.h"

namespace kimi {

namespace {

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(8) << 30;
}

}  // namespace

size_t kv_cache_budget_bytes(const EngineConfig& c) {
  if (c.kv_cache_bytes > 0) return c.kv_cache_bytes;
  if (!(c.kv_cache_memory_fraction > 0 && c.kv_cache_memory_fraction <= 1))
    throw Error("the KV cache memory fraction must be in (0, 1]");
  return size_t(double(physical_memory_bytes()) * c.kv_cache_memory_fraction);
}

namespace {

EngineConfig resolve(EngineConfig c, const ModelConfig& mc) {
  if (c.scheduler.max_model_len <= 0) c.scheduler.max_model_len = mc.max_position_embeddings;
  if (c.scheduler.max_model_len > mc.max_position_embeddings)
    throw Error("--max-model-len " + std::to_string(c.scheduler.max_model_len) +
                " exceeds the model's max_position_embeddings (" + std::to_string(mc.max_position_embeddings) + ")");
  if (c.block_size <= 0) throw Error("--block-size must be positive");
  if (c.scheduler.max_num_seqs <= 0) throw Error("--max-num-seqs must be positive");
  if (c.scheduler.max_num_batched_tokens <= 0) throw Error("--max-num-batched-tokens must be positive");
  if (c.speculative.enabled()) {
    spec::check_against_target(c.speculative, mc);
    // A draft model writes its KV rows for the drafts past the verified tokens.
    c.scheduler.num_lookahead_tokens = c.speculative.num_speculative_tokens;
  }
  c.kv_cache_bytes = kv_cache_budget_bytes(c);
  return c;
}

// KV bytes per token: the target's, plus a draft model's own cache when one speculates.
int64_t kv_bytes_per_token(const EngineConfig& c, const ModelConfig& mc, int64_t draft_bytes_per_token) {
  return int64_t(KvStorage::bytes_per_token(mc, c.kv_cache_dtype)) + draft_bytes_per_token;
}

int64_t num_blocks_for(const EngineConfig& c, const ModelConfig& mc, int64_t draft_bytes_per_token) {
  const size_t per_block = KvStorage::bytes_per_block(mc, c.block_size, c.kv_cache_dtype) +
                           size_t(draft_bytes_per_token * c.block_size);
  const int64_t blocks = c.num_kv_blocks_override > 0 ? c.num_kv_blocks_override : int64_t(c.kv_cache_bytes / per_block);
  const int64_t needed = (c.scheduler.max_model_len + c.block_size - 1) / c.block_size;
  if (blocks < needed)
    throw Error("the KV cache (" + std::to_string(c.kv_cache_bytes) + " bytes, " + std::to_string(blocks) +
                " blocks of " + std::to_string(c.block_size) + " tokens) cannot hold one sequence of max_model_len " +
                std::to_string(c.scheduler.max_model_len) + " tokens; lower --max-model-len or raise the KV cache memory");
  return blocks;
}

SpeculationSetup make_speculation(const spec::SpeculativeConfig& c, Model& model, const KvCacheConfig& kv) {
  SpeculationSetup setup;
  if (!c.enabled()) return setup;
  setup.num_speculative_tokens = c.num_speculative_tokens;
  setup.disable_by_batch_size = c.disable_by_batch_size;
  setup.proposer = spec::make_proposer(c, model, kv.num_blocks, kv.block_size, kv.dtype);
  return setup;
}

// Whether a request's kv_transfer_params take effect. A transfer moves one sequence's prompt KV
// and skips the prompt's logits, so n > 1 and prompt logprobs (echo with logprobs) are served
// as if none came: the producer holds nothing and answers no kv_transfer_params, and the decode
// side computes the prompt itself (vLLM's proxy then sends the decode request without them).
bool kv_transfer_applies(const SamplingParams& p) {
  const auto& kt = p.kv_transfer_params;
  return kt && (kt->do_remote_decode || kt->do_remote_prefill) && p.n == 1 && !p.prompt_logprobs;
}

// In this process, or with tensor parallelism over the model's TP group (engine/tp_executor.h).
std::unique_ptr<Executor> make_executor(Model& model, const KvCacheConfig& kv,
                                        std::shared_ptr<const structured::TokenVocab> vocab,
                                        const EngineConfig& config) {
  const spec::SpeculativeConfig& speculative = config.speculative;
  if (config.lockstep && speculative.enabled())
    throw Error("speculative decoding is not supported with data parallelism yet");
  if (config.executor_factory) return config.executor_factory(kv);
  if (const auto& tp = model.tensor_parallel(); tp && tp->size() > 1) {
    if (speculative.enabled()) throw Error("speculative decoding is not supported with tensor parallelism yet");
    return std::make_unique<TensorParallelExecutor>(model, kv, std::move(vocab));
  }
  return std::make_unique<InProcessExecutor>(model, kv, std::move(vocab),
                                             make_speculation(speculative, model, kv));
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, EngineConfig config)
    : model_(model),
      config_(resolve(config, model.config())),
      draft_kv_bytes_per_token_(spec::proposer_kv_bytes_per_token(config_.speculative, model.config(), config_.kv_cache_dtype)),
      vocab_(tokenizer ? structured::TokenVocab::from_tokenizer(*tokenizer, model.config().vocab_size) : nullptr),
      kv_(num_blocks_for(config_, model.config(), draft_kv_bytes_per_token_), config_.block_size, config_.enable_prefix_caching,
          /*drop_last_hit_block=*/draft_kv_bytes_per_token_ > 0),
      scheduler_(config_.scheduler, kv_),
      executor_(make_executor(model, KvCacheConfig{kv_.pool().num_blocks(), config_.block_size, config_.kv_cache_dtype},
                              vocab_, config_)),
      metrics_(config_.scheduler.max_model_len),
      processor_(tokenizer, metrics_) {
  for (int64_t id : model.config().eos_token_ids) eos_ids_.push_back(int32_t(id));
  if (config_.kv_connector_factory) {
    // The connector reads and writes blocks of this process's KV storage; under TP every rank
    // holds its own copy, which a pull into rank 0's would leave stale.
    auto* in_process = dynamic_cast<InProcessExecutor*>(executor_.get());
    if (!in_process) throw Error("--kv-transfer-config is not supported with tensor parallelism yet");
    connector_ = config_.kv_connector_factory(KvConnectorContext{in_process->runner().kv_storage(), model.config()});
  }
  metrics_.set_kv_cache_info({config_.block_size, kv_.pool().num_blocks(),
                              std::string(kv_cache_dtype_name(config_.kv_cache_dtype)),
                              kv_bytes_per_token(config_, model.config(), draft_kv_bytes_per_token_)});
}

Engine::~Engine() {
  // The connector's threads stop first: a transfer may be reading or writing the KV storage.
  connector_.reset();
}

bool Engine::has_work() const {
  return scheduler_.has_schedulable() || !parked_.empty() || !pending_.empty() || (connector_ && connector_->has_events());
}

void Engine::set_kv_wakeup(std::function<void()> wake) {
  if (connector_) connector_->set_wakeup(std::move(wake));
}

void Engine::poll_kv_connector() {
  if (!connector_) return;
  for (const auto& blocks : connector_->take_released()) kv_.release_blocks(blocks);
  const bool recompute = connector_->load_failure_policy() == KvLoadFailurePolicy::Recompute;
  for (const KvLoadResult& res : connector_->take_finished_loads()) {
    if (res.num_blocks > 0) metrics_.on_kv_transfer(res.ok, res.bytes, res.ok ? res.num_blocks * config_.block_size : 0);
    if (!scheduler_.on_kv_load_done(res.request_id, res.ok, recompute)) continue;
    // kv_load_failure_policy "fail": the request ends with the transfer's error.
    const std::string parent = processor_.has(res.request_id) ? processor_.parent_of(res.request_id) : res.request_id;
    const size_t before = pending_.size();
    if (!abort_request(parent)) scheduler_.finish_requests({res.request_id}, FinishReason::Abort);
    for (size_t i = before; i < pending_.size(); ++i) {
      pending_[i].error = "loading the prompt's KV from the prefill instance failed: " + res.error;
      pending_[i].error_status = 502;
    }
  }
}

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
  if (const auto& kt = params.kv_transfer_params; kt && kv_transfer_applies(params)) {
    if (kt->do_remote_decode && (!connector_ || !connector_->is_producer()))
      throw ParamError("kv_transfer_params",
                       "do_remote_decode needs a server started with --kv-transfer-config and kv_role kv_producer or kv_both");
    if (kt->do_remote_prefill) {
      if (!connector_ || !connector_->is_consumer())
        throw ParamError("kv_transfer_params",
                         "do_remote_prefill needs a server started with --kv-transfer-config and kv_role kv_consumer or kv_both");
      if (kt->remote_host.empty() || kt->remote_port <= 0 || kt->remote_port > 65535)
        throw ParamError("kv_transfer_params", "do_remote_prefill needs remote_host and remote_port");
      if (connector_->producer_trust(kt->remote_host, kt->remote_port) == ProducerTrust::Refused)
        throw ParamError("kv_transfer_params", "the producer " + kt->remote_host + ":" + std::to_string(kt->remote_port) +
                                                   " is not among this server's kv_connector_extra_config.trusted_producers");
      // The held KV is that of the producer's prompt: another prompt here would read wrong rows.
      if (kt->remote_num_tokens > 0 && kt->remote_num_tokens != len)
        throw ParamError("kv_transfer_params", "kv_transfer_params.remote_num_tokens (" + std::to_string(kt->remote_num_tokens) +
                                                   ") differs from this prompt's " + std::to_string(len) +
                                                   " tokens: the prefill ran on another prompt");
    }
  }
  if (const structured::StructuredSpec& spec = params.structured; spec.active()) {
    if (!vocab_) throw ParamError(spec.param, "structured output needs a tokenizer");
    try {
      structured::compile(spec);
    } catch (const structured::GrammarError& e) {
      throw ParamError(spec.param, e.what());
    }
  }
}

void Engine::add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params, int priority) {
  validate(prompt, params);
  if (!kv_transfer_applies(params)) params.kv_transfer_params.reset();
  if (children_.count(id)) throw Error("a request with id '" + id + "' is already running");
  // Never generate past the context window.
  params.max_tokens = std::min<int64_t>(params.max_tokens, max_model_len() - int64_t(prompt.size()));
  params.min_tokens = std::min(params.min_tokens, params.max_tokens);
  prompt_tokens_ += int64_t(prompt.size()) * params.n;
  metrics_.on_prompt_tokens(int64_t(prompt.size()) * params.n);
  std::vector<std::string>& children = children_[id];
  for (int i = 0; i < params.n; ++i) {
    auto r = std::make_unique<Request>();
    r->id = params.n > 1 ? id + "#" + std::to_string(i) : id;
    r->prompt = prompt;
    r->params = params;
    r->priority = priority;
    r->arrival = next_arrival_++;
    r->eos_token_ids = eos_ids_;
    if (const auto& kt = params.kv_transfer_params; kt && kt->do_remote_prefill)
      r->shares_kv = connector_->producer_trust(kt->remote_host, kt->remote_port) == ProducerTrust::Listed;
    // A request's own seed makes it reproducible whatever runs beside it; otherwise the engine's
    // seed and the admission order decide.
    r->seed = params.seed ? *params.seed + uint64_t(i) : hash_seed(config_.seed, r->id.c_str()) ^ r->arrival;
    processor_.add_request(r->id, id, i, int64_t(prompt.size()), params);
    children.push_back(r->id);
    // With prefix caching, the other completions wait until the first has computed the prompt,
    // then find all its full blocks in the cache instead of recomputing them.
    if (i == 0 || !config_.enable_prefix_caching) scheduler_.add_request(std::move(r));
    else parked_.push_back(std::move(r));
  }
}

void Engine::release_parked() {
  for (auto it = parked_.begin(); it != parked_.end();) {
    // The leader is completion 0 of the same parent.
    const std::string& id = (*it)->id;
    const Request* leader = scheduler_.request(id.substr(0, id.rfind('#')) + "#0");
    if (leader && leader->num_computed_tokens < int64_t(leader->prompt.size())) {
      ++it;
      continue;
    }
    scheduler_.add_request(std::move(*it));
    it = parked_.erase(it);
  }
}

bool Engine::abort_request(const std::string& id) {
  auto it = children_.find(id);
  if (it == children_.end()) return false;
  for (const std::string& child : it->second) {
    std::erase_if(parked_, [&](const auto& p) { return p->id == child; });
    scheduler_.finish_requests({child}, FinishReason::Abort);
    if (processor_.has(child)) pending_.push_back(processor_.abort(child));
  }
  children_.erase(it);
  return true;
}

std::vector<RequestOutput> Engine::step() {
  poll_kv_connector();
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  release_parked();
  const int64_t preemptions_before = scheduler_.num_preemptions();
  const int64_t queries_before = scheduler_.prefix_queries(), hits_before = scheduler_.prefix_hits();
  const SchedulerOutput so = scheduler_.schedule();
  for (KvLoadJob& job : scheduler_.take_kv_loads()) connector_->start_load(std::move(job));
  if (scheduler_.num_preemptions() > preemptions_before) metrics_.on_preemption(scheduler_.num_preemptions() - preemptions_before);
  if (scheduler_.prefix_queries() > queries_before)
    metrics_.on_prefix_cache_query(scheduler_.prefix_queries() - queries_before, scheduler_.prefix_hits() - hits_before);
  metrics_.on_step(scheduler_.num_running(), scheduler_.num_waiting() + int64_t(parked_.size()), kv_.pool().usage());
  if (so.empty() && so.finished_request_ids.empty()) {
    if (config_.lockstep) executor_->execute_dummy();
    return outputs;
  }

  const ModelRunnerOutput ro = executor_->execute_model(so);
  if (so.empty() && config_.lockstep) executor_->execute_dummy();
  for (size_t i = 0; i < so.scheduled.size() && i < ro.requests.size(); ++i) {
    const int64_t k = int64_t(so.scheduled[i].draft_token_ids.size());
    if (k == 0) continue;
    const int64_t accepted = std::clamp<int64_t>(ro.requests[i].num_accepted_drafts, 0, k);
    ++spec_drafts_;
    spec_draft_tokens_ += k;
    spec_accepted_tokens_ += accepted;
    metrics_.on_spec_decode(k, accepted);
  }
  for (const EngineCoreOutput& co : scheduler_.update_from_output(so, ro)) {
    const std::string parent = processor_.parent_of(co.request_id);
    bool stopped_by_string = false;
    RequestOutput o = processor_.process(co, &stopped_by_string);
    if (stopped_by_string) scheduler_.finish_requests({co.request_id}, FinishReason::Stop);
    generation_tokens_ += int64_t(o.token_ids.size());
    if (o.finished) {
      auto c = children_.find(parent);
      if (c != children_.end()) {
        std::erase(c->second, co.request_id);
        if (c->second.empty()) children_.erase(c);
      }
    }
    if (!o.token_ids.empty() || o.finished) outputs.push_back(std::move(o));
  }
  for (const KvHoldRequest& h : scheduler_.take_holds()) {
    if (!connector_) {
      kv_.release_blocks(h.block_ids);
      continue;
    }
    KvTransferParams params = connector_->hold(h);
    for (RequestOutput& o : outputs)
      if (o.finished && o.request_id == h.request_id) o.kv_transfer_params = params;
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
  s.spec_drafts = spec_drafts_;
  s.spec_draft_tokens = spec_draft_tokens_;
  s.spec_accepted_tokens = spec_accepted_tokens_;
  return s;
}

}  // namespace kimi
