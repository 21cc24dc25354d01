#include "kvtransfer/ucx_connector.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <unistd.h>

#include "kvtransfer/protocol.h"
#include "kvtransfer/ucx_transport.h"

namespace kimi::kvtransfer {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// How long the producer gives one message's body and its answer: a healthy peer needs far
// less; a stuck one must not stall the other connections for long.
constexpr auto kProducerMessageTime = std::chrono::seconds(10);
// The best-effort RELEASE after a failed load.
constexpr auto kReleaseTime = std::chrono::seconds(1);

milliseconds to_ms(double seconds) { return milliseconds(int64_t(seconds * 1000.0)); }

}  // namespace

UcxKvConnector::UcxKvConnector(KvTransferConfig config, KvStorage& storage, const ModelConfig& model)
    : config_(std::move(config)),
      storage_(storage),
      desc_(storage.block_desc()),
      model_id_(model_identity(model)),
      held_(to_ms(config_.abort_request_timeout_s)) {
  // Listening on every address: consumers are told this machine's name instead.
  advertised_host_ = config_.kv_ip;
  if (advertised_host_ == "0.0.0.0") {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && name[0]) advertised_host_ = name;
  }
  if (config_.producer()) {
    std::promise<int> ready;
    std::future<int> port = ready.get_future();
    producer_ = std::thread([this, &ready] { producer_loop(&ready); });
    try {
      port_ = port.get();  // the listener exists, or its error is rethrown here
    } catch (...) {
      producer_.join();
      throw;
    }
  }
  if (config_.consumer()) consumer_ = std::thread([this] { consumer_loop(); });
}

UcxKvConnector::~UcxKvConnector() {
  stop_ = true;
  jobs_cv_.notify_all();
  if (producer_.joinable()) producer_.join();
  if (consumer_.joinable()) consumer_.join();
}

void UcxKvConnector::set_wakeup(std::function<void()> wake) {
  std::lock_guard lock(wake_mu_);
  wake_ = std::move(wake);
}

void UcxKvConnector::wake() {
  std::lock_guard lock(wake_mu_);
  if (wake_) wake_();
}

KvTransferParams UcxKvConnector::hold(const KvHoldRequest& h) {
  KvTransferParams p;
  p.do_remote_prefill = true;
  p.do_remote_decode = false;
  p.remote_engine_id = config_.engine_id;
  p.remote_block_ids.assign(h.block_ids.rbegin(), h.block_ids.rend());
  p.remote_host = advertised_host_;
  p.remote_port = port_;
  p.remote_request_id = config_.engine_id + "-" + h.request_id + "-" + std::to_string(next_hold_++);
  p.remote_num_tokens = h.num_tokens;
  p.remote_block_size = desc_.block_size;
  held_.add(p.remote_request_id, h.block_ids, h.num_tokens);
  return p;
}

void UcxKvConnector::start_load(KvLoadJob job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    ++loads_in_flight_;
  }
  jobs_cv_.notify_all();
}

std::vector<KvLoadResult> UcxKvConnector::take_finished_loads() {
  std::lock_guard lock(mu_);
  return std::exchange(finished_, {});
}

bool UcxKvConnector::busy() const {
  if (held_.size() > 0) return true;
  std::lock_guard lock(mu_);
  return loads_in_flight_ > 0;
}

bool UcxKvConnector::has_events() const {
  if (held_.has_released()) return true;
  std::lock_guard lock(mu_);
  return !finished_.empty();
}

// ---- producer ----

void UcxKvConnector::producer_loop(std::promise<int>* ready) {
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<UcxListener> listener;
  try {
    worker = std::make_unique<UcxWorker>();
    worker->set_cancel(&stop_);
    listener = std::make_unique<UcxListener>(*worker, config_.kv_ip, int(config_.kv_port));
    ready->set_value(listener->port());
  } catch (...) {
    listener.reset();
    ready->set_exception(std::current_exception());
    return;
  }
  struct Conn {
    std::unique_ptr<UcxEndpoint> ep;
    MsgHeader header;
    bool welcomed = false;
  };
  std::vector<std::unique_ptr<Conn>> conns;
  // Sending a pull's blocks may take as long as the consumer waits for them.
  const auto send_time = std::max<SteadyClock::duration>(kProducerMessageTime, to_ms(config_.transfer_timeout_s));

  auto handle = [&](Conn& c) {
    const Deadline deadline = SteadyClock::now() + kProducerMessageTime;
    const json body = recv_body(*c.ep, c.header, deadline);
    switch (MsgType(c.header.type)) {
      case MsgType::Hello: {
        std::string error;
        if (body.value("version", 0) != kProtocolVersion) {
          error = "protocol version " + std::to_string(body.value("version", 0)) + " (this producer speaks " +
                  std::to_string(kProtocolVersion) + ")";
        } else if (body.value("model", uint64_t(0)) != model_id_) {
          error = "the models differ (the consumer's config is not this producer's)";
        } else if (const std::string want = body.value("remote_engine_id", std::string());
                   !want.empty() && want != config_.engine_id) {
          error = "this producer is engine '" + config_.engine_id + "', not remote_engine_id '" + want + "'";
        } else {
          const std::string diff = describe_mismatch(desc_, desc_from_json(body.at("desc")));
          if (!diff.empty()) error = "the KV caches differ: " + diff;
        }
        c.welcomed = error.empty();
        // A refused consumer cannot pull the load it connected for: end that hold here rather
        // than trust its RELEASE, which can be lost when it closes the connection right after.
        if (!c.welcomed && held_.release(body.value("remote_request_id", std::string()))) wake();
        send_message(*c.ep, MsgType::Welcome, {{"ok", c.welcomed}, {"error", error}, {"engine_id", config_.engine_id}},
                     deadline);
        break;
      }
      case MsgType::Pull: {
        const std::string id = body.value("remote_request_id", "");
        const auto wanted = body.value("block_ids", std::vector<int32_t>{});
        std::string error;
        std::optional<std::vector<int32_t>> blocks;
        if (!c.welcomed) error = "no accepted handshake on this connection";
        else if (!(blocks = held_.begin_pull(id)))
          error = "no KV held for remote_request_id '" + id + "' (released, timed out or unknown)";
        else if (wanted.size() > blocks->size())  // each held block once at most: no amplified sends
          error = std::to_string(wanted.size()) + " blocks asked, " + std::to_string(blocks->size()) + " held for '" + id + "'";
        else
          for (int32_t b : wanted)
            if (std::find(blocks->begin(), blocks->end(), b) == blocks->end())
              error = "block " + std::to_string(b) + " is not held for '" + id + "'";
        if (!error.empty()) {
          if (blocks) held_.release(id), wake();
          send_message(*c.ep, MsgType::Blocks, {{"ok", false}, {"error", error}}, deadline);
          break;
        }
        send_message(*c.ep, MsgType::Blocks,
                     {{"ok", true}, {"error", ""}, {"block_bytes", desc_.bytes}, {"count", wanted.size()}}, deadline);
        // The blocks go out in chunks of about transfer_chunk_bytes (read, then sent), so a long prompt
        // never needs a second copy of all its KV in memory. The hold ends whatever happens:
        // a consumer never pulls the same blocks twice.
        const size_t per_chunk = std::max<size_t>(1, size_t(config_.transfer_chunk_bytes) / size_t(desc_.bytes));
        std::vector<std::byte> chunk(std::min(per_chunk, wanted.size()) * size_t(desc_.bytes));
        const Deadline data_deadline = SteadyClock::now() + send_time;
        try {
          for (size_t first = 0; first < wanted.size(); first += per_chunk) {
            const size_t n = std::min(per_chunk, wanted.size() - first);
            for (size_t i = 0; i < n; ++i)
              storage_.read_block(wanted[first + i], std::span(chunk).subspan(i * size_t(desc_.bytes), size_t(desc_.bytes)));
            c.ep->send(std::span(chunk).first(n * size_t(desc_.bytes)), data_deadline);
          }
        } catch (...) {
          held_.release(id);
          wake();
          throw;
        }
        held_.release(id);
        wake();
        break;
      }
      case MsgType::Release:
        if (held_.release(body.value("remote_request_id", ""))) wake();
        break;
      default:
        throw TransferError("unexpected KV transfer message type " + std::to_string(c.header.type));
    }
  };

  while (!stop_) {
    worker->progress_wait(milliseconds(20));
    for (ucp_conn_request_h r : listener->take_requests()) {
      try {
        auto c = std::make_unique<Conn>();
        c->ep = UcxEndpoint::accept(*worker, r);
        conns.push_back(std::move(c));
      } catch (const TransferError& e) {
        std::fprintf(stderr, "kv transfer: %s\n", e.what());
      }
    }
    for (auto& c : conns) {
      try {
        if (!c->ep->recv_posted()) c->ep->post_recv(std::as_writable_bytes(std::span(&c->header, 1)));
        if (!c->ep->test_recv()) continue;
        handle(*c);
      } catch (const std::exception& e) {
        // A consumer that went away closes its connection: nothing to report. Anything else
        // ends that connection only.
        c->ep.reset();
      }
    }
    std::erase_if(conns, [](const auto& c) { return !c->ep; });
    if (held_.expire() > 0) wake();
  }
}

// ---- consumer ----

void UcxKvConnector::consumer_loop() {
  std::unique_ptr<UcxWorker> worker;
  std::string worker_error;
  try {
    worker = std::make_unique<UcxWorker>();
    worker->set_cancel(&stop_);
  } catch (const std::exception& e) {
    worker_error = e.what();
  }
  std::map<std::string, std::unique_ptr<UcxEndpoint>> conns;  // by host:port, handshake done

  auto run = [&](const KvLoadJob& job) -> KvLoadResult {
    KvLoadResult res{job.request_id, false, "", int64_t(job.local_block_ids.size()), 0};
    if (!worker) {
      res.error = worker_error;
      return res;
    }
    const std::string key = job.remote.remote_host + ":" + std::to_string(job.remote.remote_port);
    const Deadline deadline = SteadyClock::now() + to_ms(config_.transfer_timeout_s);
    UcxEndpoint* ep = nullptr;
    try {
      auto it = conns.find(key);
      if (it != conns.end() && it->second->failed()) conns.erase(it), it = conns.end();
      if (it == conns.end()) {
        auto fresh = UcxEndpoint::connect(*worker, job.remote.remote_host, int(job.remote.remote_port));
        ep = fresh.get();
        conns[key] = std::move(fresh);
        send_message(*ep, MsgType::Hello,
                     {{"version", kProtocolVersion},
                      {"desc", desc_to_json(desc_)},
                      {"model", model_id_},
                      {"remote_request_id", job.remote.remote_request_id},
                      {"remote_engine_id", job.remote.remote_engine_id}},
                     deadline);
        const json w = recv_message(*ep, MsgType::Welcome, deadline);
        if (!w.value("ok", false)) {
          throw TransferError("the KV producer at " + key + " refused the handshake: " + w.value("error", std::string()));
        }
        const std::string their_id = w.value("engine_id", std::string());
        if (!job.remote.remote_engine_id.empty() && their_id != job.remote.remote_engine_id)
          throw TransferError("the KV producer at " + key + " is engine '" + their_id + "', not remote_engine_id '" +
                              job.remote.remote_engine_id + "'");
      } else {
        ep = it->second.get();
      }
      if (job.remote_block_ids.empty()) {
        send_message(*ep, MsgType::Release, {{"remote_request_id", job.remote.remote_request_id}}, deadline);
        res.ok = true;
        return res;
      }
      send_message(*ep, MsgType::Pull,
                   {{"remote_request_id", job.remote.remote_request_id}, {"block_ids", job.remote_block_ids}}, deadline);
      const json b = recv_message(*ep, MsgType::Blocks, deadline);
      if (!b.value("ok", false)) throw TransferError("the KV producer at " + key + ": " + b.value("error", std::string()));
      if (b.value("block_bytes", int64_t(0)) != desc_.bytes || b.value("count", size_t(0)) != job.remote_block_ids.size())
        throw TransferError("the KV producer at " + key + " answered blocks of an unexpected size");
      // Received in chunks straight into the job's blocks (the stream is cut where we like).
      const size_t per_chunk = std::max<size_t>(1, size_t(config_.transfer_chunk_bytes) / size_t(desc_.bytes));
      const size_t count = job.local_block_ids.size();
      std::vector<std::byte> chunk(std::min(per_chunk, count) * size_t(desc_.bytes));
      for (size_t first = 0; first < count; first += per_chunk) {
        const size_t n = std::min(per_chunk, count - first);
        ep->recv(std::span(chunk).first(n * size_t(desc_.bytes)), deadline);
        for (size_t i = 0; i < n; ++i)
          storage_.write_block(job.local_block_ids[first + i], desc_,
                               std::span(chunk).subspan(i * size_t(desc_.bytes), size_t(desc_.bytes)));
      }
      bytes_pulled_ += int64_t(count) * desc_.bytes;
      res.bytes = int64_t(count) * desc_.bytes;
      res.ok = true;
    } catch (const std::exception& e) {
      res.error = e.what();
      // The producer must still release its hold (else it waits for its timeout): tell it, if
      // the connection still works.
      auto it = conns.find(key);
      if (it != conns.end() && !it->second->failed()) {
        try {
          send_message(*it->second, MsgType::Release, {{"remote_request_id", job.remote.remote_request_id}},
                       SteadyClock::now() + kReleaseTime);
        } catch (const std::exception&) {
        }
      }
      if (it != conns.end()) conns.erase(it);  // start afresh next time
    }
    return res;
  };

  for (;;) {
    KvLoadJob job;
    {
      std::unique_lock lock(mu_);
      jobs_cv_.wait_for(lock, milliseconds(50), [&] { return stop_ || !jobs_.empty(); });
      if (stop_) break;
      if (jobs_.empty()) {
        lock.unlock();
        if (worker) worker->progress_wait(milliseconds(0));  // keep idle connections alive
        continue;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    KvLoadResult res = run(job);
    if (!res.ok) std::fprintf(stderr, "kv transfer: request %s: %s\n", res.request_id.c_str(), res.error.c_str());
    {
      std::lock_guard lock(mu_);
      finished_.push_back(std::move(res));
      --loads_in_flight_;
    }
    wake();
  }
}

KvConnectorFactory make_kv_connector_factory(KvTransferConfig config) {
  return [config](const KvConnectorContext& ctx) -> std::unique_ptr<KvConnector> {
    return std::make_unique<UcxKvConnector>(config, ctx.storage, ctx.model);
  };
}

}  // namespace kimi::kvtransfer
