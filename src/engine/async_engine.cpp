#include "engine/async_engine.h"

#include <iterator>
#include <thread>

#include "common/error.h"

namespace kimi {

void RequestStream::push(RequestOutput o) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(o));
  }
  cv_.notify_all();
}

std::optional<RequestOutput> RequestStream::next() {
  bool timed_out = false;
  std::optional<RequestOutput> o;
  do o = next_for(std::chrono::hours(1), &timed_out);
  while (timed_out);
  return o;
}

std::optional<RequestOutput> RequestStream::next_for(std::chrono::milliseconds timeout, bool* timed_out) {
  std::unique_lock lock(mu_);
  *timed_out = false;
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || open_completions_ == 0; })) {
    *timed_out = true;
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;
  RequestOutput o = std::move(queue_.front());
  queue_.pop_front();
  if (o.finished) --open_completions_;
  return o;
}

namespace {

std::vector<std::unique_ptr<Engine>> make_engines(Model& model, const Tokenizer* tokenizer, EngineConfig config,
                                                  DataParallelReplicas replicas) {
  std::vector<std::unique_ptr<Engine>> engines;
  config.lockstep = !replicas.executors.empty();
  engines.push_back(std::make_unique<Engine>(model, tokenizer, config));
  for (size_t d = 0; d < replicas.executors.size(); ++d) {
    EngineConfig c = config;
    c.executor_factory = std::move(replicas.executors[d]);
    if (d < replicas.kv_cache_bytes.size()) c.kv_cache_bytes = replicas.kv_cache_bytes[d];
    engines.push_back(std::make_unique<Engine>(model, tokenizer, std::move(c)));
  }
  return engines;
}

}  // namespace

AsyncEngine::AsyncEngine(Model& model, const Tokenizer* tokenizer, EngineConfig config, DataParallelReplicas replicas)
    : engines_(make_engines(model, tokenizer, std::move(config), std::move(replicas))),
      max_model_len_(engines_[0]->max_model_len()),
      thread_([this] { loop(); }) {
  // A KV connector's event (a finished load, released blocks) wakes an idle loop.
  engines_[0]->set_kv_wakeup([this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  engines_[0]->set_kv_wakeup(nullptr);  // mu_ and cv_ go before the engines do
}

std::shared_ptr<RequestStream> AsyncEngine::add_request(const std::string& id, std::vector<int32_t> prompt,
                                                        SamplingParams params, int priority, std::optional<int> replica) {
  // validate() reads only immutable state, so it may run beside a step.
  engines_[0]->validate(prompt, params);
  if (replica && (*replica < 0 || *replica >= int(engines_.size())))
    throw Error("data-parallel rank " + std::to_string(*replica) + " is out of range [0, " +
                std::to_string(engines_.size()) + ")");
  if (engines_.size() > 1 && params.structured.active())
    throw Error("structured outputs are not supported with data parallelism yet");
  std::shared_ptr<RequestStream> stream(new RequestStream(id, params.n));
  {
    std::lock_guard lock(mu_);
    if (draining_ || stop_) throw EngineShuttingDown();
    if (streams_.count(id)) throw Error("a request with id '" + id + "' is already running");
    streams_.emplace(id, Entry{stream, params.n});
    pending_adds_.push_back({id, std::move(prompt), std::move(params), priority, replica});
  }
  cv_.notify_all();
  return stream;
}

void AsyncEngine::abort_request(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    pending_aborts_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats AsyncEngine::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

int64_t AsyncEngine::num_waiting() {
  std::lock_guard lock(mu_);
  return std::max<int64_t>(0, int64_t(streams_.size()) - stats_.running);
}

std::string AsyncEngine::render_metrics(const std::string& model_name) {
  // Metrics is thread-safe; under DP each replica's series carry an engine label.
  std::vector<const Metrics*> all;
  for (const auto& e : engines_) all.push_back(&e->metrics());
  return render_prometheus(all, model_name);
}

size_t AsyncEngine::least_loaded() {
  // Ties go round-robin, so that requests arriving one at a time spread over idle replicas.
  const size_t n = engines_.size(), first = next_replica_++ % n;
  size_t best = first;
  int64_t best_load = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t d = (first + i) % n;
    const Scheduler& s = engines_[d]->scheduler();
    const int64_t load = 4 * s.num_waiting() + s.num_running();
    if (i == 0 || load < best_load) best = d, best_load = load;
  }
  return best;
}

bool AsyncEngine::has_work() const {
  for (const auto& e : engines_)
    if (e->has_work()) return true;
  return false;
}

std::vector<RequestOutput> AsyncEngine::step_all() {
  if (engines_.size() == 1) return engines_[0]->step();
  // The replicas' steps meet in their MoE exchanges, so they run at once: replica 0's forward
  // here, the others' clients waiting on their links.
  std::vector<std::vector<RequestOutput>> outputs(engines_.size());
  std::vector<std::string> failures(engines_.size());
  const auto step = [&](size_t d) {
    try {
      outputs[d] = engines_[d]->step();
    } catch (const std::exception& e) {
      failures[d] = e.what();
    }
  };
  std::vector<std::thread> others;
  for (size_t d = 1; d < engines_.size(); ++d) others.emplace_back(step, d);
  step(0);
  for (std::thread& t : others) t.join();
  std::vector<RequestOutput> all;
  for (auto& o : outputs) std::move(o.begin(), o.end(), std::back_inserter(all));
  for (size_t d = 0; d < engines_.size(); ++d)
    if (!failures[d].empty())
      throw Error(engines_.size() > 1 ? "data-parallel replica " + std::to_string(d) + ": " + failures[d] : failures[d]);
  return all;
}

void AsyncEngine::begin_drain() {
  std::lock_guard lock(mu_);
  draining_ = true;
}

bool AsyncEngine::draining() {
  std::lock_guard lock(mu_);
  return draining_;
}

bool AsyncEngine::wait_drained(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock lock(mu_);
  if (!timeout) {
    drained_cv_.wait(lock, [&] { return streams_.empty(); });
    return true;
  }
  return drained_cv_.wait_for(lock, *timeout, [&] { return streams_.empty(); });
}

void AsyncEngine::drain() {
  begin_drain();
  wait_drained(std::nullopt);
}

void AsyncEngine::abort_all(const std::string& reason, int error_status) {
  {
    std::lock_guard lock(mu_);
    std::vector<std::string> ids;
    for (const auto& [id, e] : streams_) ids.push_back(id);
    for (const auto& id : ids) {
      // The engine thread aborts it at its next round (after any pending add of the same id);
      // the stream ends here, and the engine's own final output for it finds no stream.
      pending_aborts_.push_back(id);
      RequestOutput o;
      o.request_id = id;
      o.finished = true;
      o.finish_reason = FinishReason::Abort;
      o.error = reason;
      o.error_status = error_status;
      for (int n = streams_.at(id).open_completions; n > 0; --n) deliver(o);
    }
  }
  cv_.notify_all();
}

void AsyncEngine::deliver(RequestOutput o) {
  auto it = streams_.find(o.request_id);
  if (it == streams_.end()) return;
  Entry& e = it->second;
  const bool done = o.finished && --e.open_completions == 0;
  e.stream->push(std::move(o));
  if (done) {
    streams_.erase(it);
    if (streams_.empty()) drained_cv_.notify_all();
  }
}

void AsyncEngine::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    const auto ready = [&] { return stop_ || !pending_adds_.empty() || !pending_aborts_.empty() || has_work(); };
    // Held blocks and transfers in flight have timeouts: look again now and then. Other
    // replicas' processes are checked every second while idle.
    if (engines_[0]->has_kv_transfers()) cv_.wait_for(lock, std::chrono::milliseconds(100), ready);
    else if (engines_.size() > 1) {
      if (!cv_.wait_for(lock, std::chrono::seconds(1), ready)) {
        lock.unlock();  // a round trip: callers may queue work meanwhile
        for (size_t d = 1; d < engines_.size(); ++d) engines_[d]->check_alive();
        lock.lock();
        continue;
      }
    } else
      cv_.wait(lock, ready);
    if (stop_) break;
    for (auto& p : pending_adds_) {
      try {
        const size_t d = p.replica ? size_t(*p.replica) : least_loaded();
        engines_[d]->add_request(p.id, std::move(p.prompt), std::move(p.params), p.priority);
      } catch (const Error& e) {  // validated already; kept so that a stream never hangs
        RequestOutput o;
        o.request_id = p.id;
        o.finished = true;
        o.finish_reason = FinishReason::Abort;
        o.error = e.what();
        for (int i = 0; i < p.params.n; ++i) o.index = i, deliver(o);
      }
    }
    pending_adds_.clear();
    for (const auto& id : pending_aborts_)  // only the replica that has it finds it
      for (auto& e : engines_) e->abort_request(id);
    pending_aborts_.clear();

    // The step runs without the lock so that callers can queue work meanwhile: only this thread
    // touches the engines (validate() aside), and what is shared is published under the lock.
    lock.unlock();
    std::vector<RequestOutput> outputs;
    std::string failure;
    try {
      outputs = step_all();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    for (RequestOutput& o : outputs) deliver(std::move(o));
    if (!failure.empty()) {
      // A failed step must not leave clients waiting: end every request with the error.
      std::vector<std::string> ids;
      for (const auto& [id, e] : streams_) ids.push_back(id);
      for (const auto& id : ids) {
        for (auto& e : engines_) e->abort_request(id);
        RequestOutput o;
        o.request_id = id;
        o.finished = true;
        o.finish_reason = FinishReason::Abort;
        o.error = "internal error: " + failure;
        for (int n = streams_.at(id).open_completions; n > 0; --n) deliver(o);
      }
      try {
        (void)step_all();  // collects the aborts' outputs, which have no stream any more
      } catch (const std::exception&) {
        // Reported above already; the requests are ended.
      }
    }
    stats_ = EngineStats{};
    for (const auto& e : engines_) stats_ += e->stats();
  }
  // Shutting down: end every open stream.
  std::vector<std::string> ids;
  for (const auto& [id, e] : streams_) ids.push_back(id);
  for (const auto& id : ids) {
    RequestOutput o;
    o.request_id = id;
    o.finished = true;
    o.finish_reason = FinishReason::Abort;
    o.error = "the engine stopped";
    for (int n = streams_.at(id).open_completions; n > 0; --n) deliver(o);
  }
}

}  // namespace kimi
