#include "engine/async_engine.h"

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

AsyncEngine::AsyncEngine(Model& model, const Tokenizer* tokenizer, EngineConfig config)
    : engine_(model, tokenizer, std::move(config)), max_model_len_(engine_.max_model_len()), thread_([this] { loop(); }) {
  // A KV connector's event (a finished load, released blocks) wakes an idle loop.
  engine_.set_kv_wakeup([this] {
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
  engine_.set_kv_wakeup(nullptr);  // mu_ and cv_ go before engine_ does
}

std::shared_ptr<RequestStream> AsyncEngine::add_request(const std::string& id, std::vector<int32_t> prompt,
                                                        SamplingParams params, int priority) {
  // validate() reads only immutable state, so it may run beside a step.
  engine_.validate(prompt, params);
  std::shared_ptr<RequestStream> stream(new RequestStream(id, params.n));
  {
    std::lock_guard lock(mu_);
    if (draining_ || stop_) throw EngineShuttingDown();
    if (streams_.count(id)) throw Error("a request with id '" + id + "' is already running");
    streams_.emplace(id, Entry{stream, params.n});
    pending_adds_.push_back({id, std::move(prompt), std::move(params), priority});
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
  return engine_.metrics().render_prometheus(model_name);  // Metrics is thread-safe
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
    const auto ready = [&] { return stop_ || !pending_adds_.empty() || !pending_aborts_.empty() || engine_.has_work(); };
    // Held blocks and transfers in flight have timeouts: look again now and then.
    if (engine_.has_kv_transfers()) cv_.wait_for(lock, std::chrono::milliseconds(100), ready);
    else cv_.wait(lock, ready);
    if (stop_) break;
    for (auto& p : pending_adds_) {
      try {
        engine_.add_request(p.id, std::move(p.prompt), std::move(p.params), p.priority);
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
    for (const auto& id : pending_aborts_) engine_.abort_request(id);
    pending_aborts_.clear();

    // The step runs without the lock so that callers can queue work meanwhile: only this thread
    // touches engine_ (validate() aside), and what is shared is published under the lock.
    lock.unlock();
    std::vector<RequestOutput> outputs;
    std::string failure;
    try {
      outputs = engine_.step();
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
        engine_.abort_request(id);
        RequestOutput o;
        o.request_id = id;
        o.finished = true;
        o.finish_reason = FinishReason::Abort;
        o.error = "internal error: " + failure;
        for (int n = streams_.at(id).open_completions; n > 0; --n) deliver(o);
      }
      (void)engine_.step();  // collects the aborts' outputs, which have no stream any more
    }
    stats_ = engine_.stats();
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
