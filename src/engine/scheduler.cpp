#include "engine/scheduler.h"

#include <algorithm>

#include "common/error.h"

namespace kimi {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {}

bool Scheduler::runs_before(const Request* a, const Request* b) const {
  if (config_.priority_policy && a->priority != b->priority) return a->priority < b->priority;
  return a->arrival < b->arrival;
}

void Scheduler::enqueue(Request* r) {
  // Keep the queue ordered; a preempted request goes back to where its priority/arrival puts it.
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](Request* w) { return runs_before(r, w); });
  waiting_.insert(it, r);
}

void Scheduler::add_request(std::unique_ptr<Request> r) {
  if (requests_.count(r->id)) throw Error("internal: request id '" + r->id + "' is already scheduled");
  Request* p = r.get();
  p->status = RequestStatus::Waiting;
  requests_.emplace(p->id, std::move(r));
  enqueue(p);
}

const Request* Scheduler::request(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::finish(Request& r, FinishReason reason) {
  std::erase(waiting_, &r);
  std::erase(running_, &r);
  const auto& kt = r.params.kv_transfer_params;
  if (r.remote_kv == RemoteKvState::Loading) {
    // A transfer may be writing these blocks: they return to the pool when it reports.
    orphaned_loads_[r.id] = kv_.detach(r);
    --num_loading_;
    r.remote_kv = RemoteKvState::Done;
  } else if (kt && kt->do_remote_decode && reason == FinishReason::Length) {
    // vLLM's rule: only a prefill that ran to max_tokens hands its KV to a decode instance.
    const int64_t computed = r.num_computed_tokens;
    holds_.push_back({r.id, kv_.detach(r), computed});
  } else {
    kv_.free(r);
  }
  r.status = RequestStatus::Finished;
  r.finish_reason = reason;
  if (r.sent_to_executor) finished_since_last_step_.push_back(r.id);
}

std::vector<std::string> Scheduler::finish_requests(const std::vector<std::string>& ids, FinishReason reason) {
  std::vector<std::string> found;
  for (const std::string& id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    finish(*it->second, reason);
    requests_.erase(it);
    found.push_back(id);
  }
  return found;
}

Request* Scheduler::pick_victim() const {
  // The request that would run last: lowest priority, then newest.
  return *std::max_element(running_.begin(), running_.end(),
                           [&](const Request* a, const Request* b) { return runs_before(a, b); });
}

void Scheduler::preempt(Request* r) {
  std::erase(running_, r);
  r->draft_token_ids.clear();
  kv_.free(*r);
  ++r->num_preemptions;
  ++num_preemptions_;
  enqueue(r);
  r->status = RequestStatus::Preempted;
}

int64_t Scheduler::drafts_to_verify(const Request& r, int64_t budget) const {
  if (r.draft_token_ids.empty() || r.num_tokens() - r.num_computed_tokens != 1) return 0;
  // Verifying k drafts yields up to k + 1 tokens: stay within max_tokens and the context window.
  const int64_t by_max_tokens = r.params.max_tokens - int64_t(r.output.size()) - 1;
  const int64_t by_context = config_.max_model_len - r.num_tokens() - 1;
  return std::max<int64_t>(0, std::min({int64_t(r.draft_token_ids.size()), by_max_tokens, by_context, budget - 1}));
}

int64_t Scheduler::lookahead(const Request& r, int64_t n) const {
  // Positions past max_model_len are never written, so the table never outgrows one full sequence.
  return std::clamp<int64_t>(config_.max_model_len - r.num_computed_tokens - n, 0, config_.num_lookahead_tokens);
}

ScheduledRequest Scheduler::make_scheduled(Request& r, int64_t n, int64_t num_drafts, SchedulerOutput& so) {
  if (!r.sent_to_executor) {
    so.new_requests.push_back({r.id, r.prompt, r.params, r.seed});
    r.sent_to_executor = true;
  }
  ScheduledRequest s;
  s.request_id = r.id;
  s.num_computed_tokens = r.num_computed_tokens;
  s.token_ids.reserve(size_t(n));
  for (int64_t k = 0; k < n; ++k) s.token_ids.push_back(r.token_at(r.num_computed_tokens + k));
  const auto blocks = kv_.block_ids(r.id);
  s.block_ids.assign(blocks.begin(), blocks.end());
  s.sample = r.num_computed_tokens + n == r.num_tokens();
  s.draft_token_ids.assign(r.draft_token_ids.begin(), r.draft_token_ids.begin() + num_drafts);
  so.num_scheduled_tokens += n + num_drafts;
  return s;
}

bool Scheduler::start_remote_load(Request& r) {
  const KvTransferParams& kt = *r.params.kv_transfer_params;
  KvCacheManager::PrefixHit hit = kv_.find_cached_prefix(r);
  const int64_t bs = kv_.block_size();
  // The prompt's full blocks before its last token (that token is computed here: its step gives
  // the first logits), as far as the producer holds them; a local prefix hit needs no pull.
  int64_t remote_blocks = (r.num_tokens() - 1) / bs;
  remote_blocks = std::min<int64_t>(remote_blocks, int64_t(kt.remote_block_ids.size()));
  if (kt.remote_num_tokens > 0) remote_blocks = std::min(remote_blocks, kt.remote_num_tokens / bs);
  const int64_t hit_blocks = hit.tokens() / bs;
  const int64_t ext_blocks = std::max<int64_t>(0, remote_blocks - hit_blocks);
  KvLoadJob job;
  job.request_id = r.id;
  job.remote = kt;
  if (ext_blocks > 0) {
    if (!kv_.allocate_slots(r, 0, &hit, 0, ext_blocks * bs)) return false;
    const auto table = kv_.block_ids(r.id);
    job.local_block_ids.assign(table.begin() + hit_blocks, table.begin() + hit_blocks + ext_blocks);
    job.remote_block_ids.assign(kt.remote_block_ids.begin() + hit_blocks,
                                kt.remote_block_ids.begin() + hit_blocks + ext_blocks);
  }
  r.num_cached_tokens = hit.tokens();
  prefix_queries_ += int64_t(r.prompt.size());
  prefix_hits_ += hit.tokens();
  // Even with nothing to pull, the producer must hear from us to release its blocks.
  kv_loads_.push_back(std::move(job));
  if (ext_blocks > 0) {
    std::erase(waiting_, &r);
    r.status = RequestStatus::WaitingForRemoteKvs;
    r.remote_kv = RemoteKvState::Loading;
    ++num_loading_;
  } else {
    r.remote_kv = RemoteKvState::Done;
  }
  return true;
}

bool Scheduler::on_kv_load_done(const std::string& id, bool ok, bool recompute) {
  if (auto o = orphaned_loads_.find(id); o != orphaned_loads_.end()) {
    kv_.release_blocks(o->second);
    orphaned_loads_.erase(o);
    return false;
  }
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->remote_kv != RemoteKvState::Loading) return false;
  Request& r = *it->second;
  r.remote_kv = RemoteKvState::Done;
  --num_loading_;
  if (!ok) {
    if (!recompute) return true;
    kv_.free(r);  // the external blocks hold nothing usable: compute the prompt here
    r.num_cached_tokens = 0;
    r.shares_kv = true;  // what it computes here is its own
  }
  r.status = RequestStatus::Waiting;
  enqueue(&r);
  return false;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  struct Picked {
    Request* r;
    int64_t n, drafts;
  };
  std::vector<Picked> picked;
  bool preempted = false;

  // Running requests, in priority order so that preemption takes from the back.
  std::sort(running_.begin(), running_.end(), [&](const Request* a, const Request* b) { return runs_before(a, b); });
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int64_t n = std::min(r->num_tokens() - r->num_computed_tokens, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    const int64_t drafts = drafts_to_verify(*r, budget);
    bool scheduled = true;
    while (!kv_.allocate_slots(*r, n + drafts, nullptr, lookahead(*r, n + drafts))) {
      // running_ is sorted, so the victim is the last one: never a request already picked.
      Request* victim = pick_victim();
      preempt(victim);
      preempted = true;
      if (victim == r) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;  // r left running_: index i now names the next request
    picked.push_back({r, n, drafts});
    budget -= n + drafts;
    ++i;
  }

  // Waiting requests, only when nothing had to be preempted (the cache is under pressure).
  while (!preempted && !waiting_.empty() && budget > 0 && int64_t(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    if (r->remote_kv == RemoteKvState::None && r->params.kv_transfer_params &&
        r->params.kv_transfer_params->do_remote_prefill && r->num_computed_tokens == 0) {
      if (!start_remote_load(*r)) break;  // wait for blocks to come free
      if (r->remote_kv == RemoteKvState::Loading) continue;  // it left the queue
    }
    KvCacheManager::PrefixHit hit;
    if (r->num_computed_tokens == 0) hit = kv_.find_cached_prefix(*r);
    const int64_t n = std::min(r->num_tokens() - r->num_computed_tokens - hit.tokens(), budget);
    if (!kv_.allocate_slots(*r, n, &hit, lookahead(*r, hit.tokens() + n))) break;  // wait for blocks to come free
    // First admission, not a resumed preemption nor a remote load (counted when it started).
    if (r->status == RequestStatus::Waiting && r->remote_kv == RemoteKvState::None) {
      r->num_cached_tokens = hit.tokens();
      prefix_queries_ += int64_t(r->prompt.size());
      prefix_hits_ += hit.tokens();
    }
    waiting_.pop_front();
    r->status = RequestStatus::Running;
    running_.push_back(r);
    picked.push_back({r, n, 0});
    budget -= n;
  }

  for (const Picked& p : picked) {
    out.scheduled.push_back(make_scheduled(*p.r, p.n, p.drafts, out));
    p.r->draft_token_ids.clear();  // verified now, or dropped: the next step has new ones
  }
  out.finished_request_ids = std::move(finished_since_last_step_);
  finished_since_last_step_.clear();
  return out;
}

FinishReason Scheduler::check_stop(Request& r) const {
  const int32_t t = r.output.back();
  const int64_t produced = int64_t(r.output.size());
  const SamplingParams& p = r.params;
  const bool may_stop = produced >= p.min_tokens;
  if (may_stop && !p.ignore_eos && std::count(r.eos_token_ids.begin(), r.eos_token_ids.end(), t))
    return FinishReason::Stop;
  if (may_stop && std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), t)) {
    r.stop_token = t;
    return FinishReason::Stop;
  }
  if (produced >= p.max_tokens || r.num_tokens() >= config_.max_model_len) return FinishReason::Length;
  return FinishReason::None;
}

std::vector<EngineCoreOutput> Scheduler::update_from_output(const SchedulerOutput& so, const ModelRunnerOutput& out) {
  if (out.requests.size() != so.scheduled.size())
    throw Error("internal: the executor answered " + std::to_string(out.requests.size()) + " of " +
                std::to_string(so.scheduled.size()) + " scheduled requests");
  std::vector<EngineCoreOutput> outputs;
  for (size_t i = 0; i < so.scheduled.size(); ++i) {
    const ScheduledRequest& s = so.scheduled[i];
    const RequestRunnerOutput& ro = out.requests[i];
    auto it = requests_.find(s.request_id);
    if (it == requests_.end() || ro.request_id != s.request_id) continue;  // ended meanwhile
    Request& r = *it->second;
    // The scheduled tokens and the accepted drafts have final KV rows; rejected drafts' rows are
    // past num_computed_tokens, to be overwritten.
    const int64_t accepted = std::clamp<int64_t>(ro.num_accepted_drafts, 0, int64_t(s.draft_token_ids.size()));
    r.num_computed_tokens = s.num_computed_tokens + int64_t(s.token_ids.size()) + accepted;
    kv_.cache_blocks(r, r.num_computed_tokens);
    r.draft_token_ids = ro.draft_token_ids;

    EngineCoreOutput o;
    o.request_id = r.id;
    o.num_cached_tokens = r.num_cached_tokens;
    o.prompt_logprobs = ro.prompt_logprobs;
    for (size_t k = 0; k < ro.sampled_token_ids.size() && !o.finished(); ++k) {
      r.output.push_back(ro.sampled_token_ids[k]);
      o.new_token_ids.push_back(ro.sampled_token_ids[k]);
      if (k < ro.logprobs.size()) o.logprobs.push_back(ro.logprobs[k]);
      o.finish_reason = check_stop(r);
    }
    o.stop_token = r.stop_token;
    if (o.new_token_ids.empty() && o.prompt_logprobs.empty()) continue;
    if (o.finished()) {
      finish(r, o.finish_reason);
      requests_.erase(it);
    }
    outputs.push_back(std::move(o));
  }
  return outputs;
}

}  // namespace kimi
