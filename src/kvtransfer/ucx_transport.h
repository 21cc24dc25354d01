#pragma once
// The UCX pieces the KV connector uses (ucp, Debian's libucx-dev): a context and worker owned by
// one thread, a listener on the producer, and connected endpoints that exchange framed messages.
//
// Why UCX's stream API (byte streams per endpoint over a client-server sockaddr connection):
// the transfer is a pull of a few large, contiguous block buffers per request, answered on the
// connection the consumer opened. Streams need no tag bookkeeping to route a reply to its
// asker (the producer answers on the endpoint a request came in on), and they run on every
// transport UCX_TLS may choose (tcp, shared memory, RDMA) without the software emulation RMA
// needs where a transport has no remote reads. The cost is one copy on each side
// (KvStorage::read_block / write_block around the wire); an RMA get straight between the two
// registered storages is the upgrade when RDMA is the target.
//
// Every blocking call takes a deadline and fails with TransferError rather than hang; after a
// failure the endpoint is closed at once (forced), so no UCX request still points into a
// caller's buffer when the call returns.
#include <poll.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kimi::kvtransfer {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

class TransferError : public Error {
 public:
  using Error::Error;
};

// A ucp context and one worker with a wakeup fd; single-threaded (the owning thread only).
class UcxWorker {
 public:
  UcxWorker();  // honours UCX_TLS and the other UCX_* variables
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  // A flag that, once true, makes every blocking call on this worker's endpoints fail at once
  // (shutdown must not wait for a transfer's deadline). It must outlive the worker.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }
  bool cancelled() const { return cancel_ && cancel_->load(); }
  // Progresses; when idle, sleeps on the wakeup fd at most max_wait.
  void progress_wait(std::chrono::milliseconds max_wait);

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  const std::atomic<bool>* cancel_ = nullptr;
};

// One connection: framed reads and writes with deadlines.
class UcxEndpoint {
 public:
  // Starts connecting (completes lazily, on the first send or receive).
  static std::unique_ptr<UcxEndpoint> connect(UcxWorker& worker, const std::string& host, int port);
  static std::unique_ptr<UcxEndpoint> accept(UcxWorker& worker, ucp_conn_request_h request);
  ~UcxEndpoint();
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  void send(std::span<const std::byte> data, Deadline deadline);
  void recv(std::span<std::byte> data, Deadline deadline);
  // A receive that completes in the background (the producer waits on many connections):
  // post it, then test() it until it says done. Throws TransferError on failure.
  void post_recv(std::span<std::byte> data);
  bool test_recv();
  bool recv_posted() const { return pending_recv_ != nullptr; }

  bool failed() const { return failed_; }
  const std::string& peer() const { return peer_; }

 private:
  UcxEndpoint(UcxWorker& worker, std::string peer) : worker_(worker), peer_(std::move(peer)) {}
  static void on_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  [[noreturn]] void fail(const std::string& what);
  void close(bool force);
  // Waits for a request to complete; frees it. Fails (and closes) on error or at the deadline.
  void wait(void* request, Deadline deadline, const char* what, bool is_recv);

  UcxWorker& worker_;
  std::string peer_;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;
  std::string error_;
  void* pending_recv_ = nullptr;
  size_t pending_len_ = 0;
};

// The producer's listener: connection requests are taken from the worker's progress.
class UcxListener {
 public:
  UcxListener(UcxWorker& worker, const std::string& ip, int port);  // port 0: any
  ~UcxListener();
  UcxListener(const UcxListener&) = delete;
  UcxListener& operator=(const UcxListener&) = delete;
  int port() const { return port_; }
  std::vector<ucp_conn_request_h> take_requests() { return std::exchange(requests_, {}); }

 private:
  static void on_conn(ucp_conn_request_h request, void* arg);
  ucp_listener_h listener_ = nullptr;
  int port_ = 0;
  std::vector<ucp_conn_request_h> requests_;
};

}  // namespace kimi::kvtransfer
