#include "kvtransfer/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace kimi::kvtransfer {

namespace {

std::string status_text(ucs_status_t s) { return ucs_status_string(s); }

sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (host.empty() || host == "0.0.0.0") {
    sa.sin_addr.s_addr = INADDR_ANY;
  } else if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res)
      throw TransferError("cannot resolve KV transfer host '" + host + "'");
    sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  return sa;
}

}  // namespace

UcxWorker::UcxWorker() {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) throw TransferError("UCX: reading its configuration failed: " + status_text(s));
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) throw TransferError("UCX: initialisation failed (check UCX_TLS): " + status_text(s));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) {
    ucp_cleanup(context_);
    throw TransferError("UCX: creating a worker failed: " + status_text(s));
  }
  if (ucp_worker_get_efd(worker_, &efd_) != UCS_OK) efd_ = -1;  // then progress_wait polls briefly
}

UcxWorker::~UcxWorker() {
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

void UcxWorker::progress_wait(std::chrono::milliseconds max_wait) {
  if (ucp_worker_progress(worker_)) return;
  if (efd_ < 0) {
    std::this_thread::sleep_for(std::min(max_wait, std::chrono::milliseconds(1)));
    return;
  }
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events arrived meanwhile
  pollfd p{efd_, POLLIN, 0};
  (void)poll(&p, 1, int(max_wait.count()));
}

std::unique_ptr<UcxEndpoint> UcxEndpoint::connect(UcxWorker& worker, const std::string& host, int port) {
  std::unique_ptr<UcxEndpoint> e(new UcxEndpoint(worker, host + ":" + std::to_string(port)));
  const sockaddr_in sa = resolve(host, port);
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  p.sockaddr.addrlen = sizeof sa;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &UcxEndpoint::on_error;
  p.err_handler.arg = e.get();
  const ucs_status_t s = ucp_ep_create(worker.handle(), &p, &e->ep_);
  if (s != UCS_OK) throw TransferError("cannot connect to the KV producer at " + e->peer_ + ": " + status_text(s));
  return e;
}

std::unique_ptr<UcxEndpoint> UcxEndpoint::accept(UcxWorker& worker, ucp_conn_request_h request) {
  std::unique_ptr<UcxEndpoint> e(new UcxEndpoint(worker, "consumer"));
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.conn_request = request;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &UcxEndpoint::on_error;
  p.err_handler.arg = e.get();
  const ucs_status_t s = ucp_ep_create(worker.handle(), &p, &e->ep_);
  if (s != UCS_OK) throw TransferError("accepting a KV consumer failed: " + status_text(s));
  return e;
}

UcxEndpoint::~UcxEndpoint() { close(failed_); }

void UcxEndpoint::on_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* e = static_cast<UcxEndpoint*>(arg);
  e->failed_ = true;
  e->error_ = status_text(status);
}

void UcxEndpoint::close(bool force) {
  if (!ep_) return;
  if (pending_recv_) {
    // Force-closing completes (cancels) the outstanding receive; free it afterwards.
    force = true;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  if (UCS_PTR_IS_PTR(req)) {
    // A graceful close waits for the peer at most a moment; then it is forced by UCX's timeout.
    const Deadline until = SteadyClock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && SteadyClock::now() < until)
      worker_.progress_wait(std::chrono::milliseconds(5));
    ucp_request_free(req);
  }
  if (pending_recv_) {
    while (ucp_request_check_status(pending_recv_) == UCS_INPROGRESS) worker_.progress_wait(std::chrono::milliseconds(1));
    ucp_request_free(pending_recv_);
    pending_recv_ = nullptr;
  }
}

void UcxEndpoint::fail(const std::string& what) {
  failed_ = true;
  close(true);
  throw TransferError(what);
}

void UcxEndpoint::wait(void* request, Deadline deadline, const char* what, bool is_recv) {
  if (request == nullptr) return;  // completed at once
  if (UCS_PTR_IS_ERR(request)) fail(std::string(what) + " " + peer_ + " failed: " + status_text(UCS_PTR_STATUS(request)));
  for (;;) {
    size_t len = 0;
    const ucs_status_t s = is_recv ? ucp_stream_recv_request_test(request, &len) : ucp_request_check_status(request);
    if (s != UCS_INPROGRESS) {
      ucp_request_free(request);
      if (s != UCS_OK) fail(std::string(what) + " " + peer_ + " failed: " + status_text(s));
      return;
    }
    const bool cancelled = worker_.cancelled();
    if (cancelled || SteadyClock::now() >= deadline) {
      failed_ = true;
      close(true);  // completes the request with an error, so the buffer is released
      while (ucp_request_check_status(request) == UCS_INPROGRESS) worker_.progress_wait(std::chrono::milliseconds(1));
      ucp_request_free(request);
      throw TransferError(std::string(what) + " " + peer_ + (cancelled ? " cancelled: shutting down" : " timed out"));
    }
    worker_.progress_wait(std::chrono::milliseconds(2));
  }
}

void UcxEndpoint::send(std::span<const std::byte> data, Deadline deadline) {
  if (failed_ || !ep_) throw TransferError("the connection to " + peer_ + " failed: " + error_);
  ucp_request_param_t p{};
  wait(ucp_stream_send_nbx(ep_, data.data(), data.size(), &p), deadline, "sending to", false);
}

void UcxEndpoint::recv(std::span<std::byte> data, Deadline deadline) {
  if (failed_ || !ep_) throw TransferError("the connection to " + peer_ + " failed: " + error_);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_STREAM_RECV_FLAG_WAITALL;
  size_t len = 0;
  wait(ucp_stream_recv_nbx(ep_, data.data(), data.size(), &len, &p), deadline, "receiving from", true);
}

void UcxEndpoint::post_recv(std::span<std::byte> data) {
  if (failed_ || !ep_) throw TransferError("the connection to " + peer_ + " failed: " + error_);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_STREAM_RECV_FLAG_WAITALL;
  size_t len = 0;
  void* req = ucp_stream_recv_nbx(ep_, data.data(), data.size(), &len, &p);
  if (UCS_PTR_IS_ERR(req)) fail("receiving from " + peer_ + " failed: " + status_text(UCS_PTR_STATUS(req)));
  pending_recv_ = req ? req : reinterpret_cast<void*>(uintptr_t(1));  // 1: completed at once
}

bool UcxEndpoint::test_recv() {
  if (!pending_recv_) return false;
  if (pending_recv_ == reinterpret_cast<void*>(uintptr_t(1))) {
    pending_recv_ = nullptr;
    return true;
  }
  size_t len = 0;
  const ucs_status_t s = ucp_stream_recv_request_test(pending_recv_, &len);
  if (s == UCS_INPROGRESS) {
    if (failed_) fail("the connection to " + peer_ + " failed: " + error_);
    return false;
  }
  ucp_request_free(pending_recv_);
  pending_recv_ = nullptr;
  if (s != UCS_OK) fail("receiving from " + peer_ + " failed: " + status_text(s));
  return true;
}

UcxListener::UcxListener(UcxWorker& worker, const std::string& ip, int port) {
  const sockaddr_in sa = resolve(ip, port);
  ucp_listener_params_t p{};
  p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  p.sockaddr.addrlen = sizeof sa;
  p.conn_handler.cb = &UcxListener::on_conn;
  p.conn_handler.arg = this;
  ucs_status_t s = ucp_listener_create(worker.handle(), &p, &listener_);
  if (s != UCS_OK)
    throw TransferError("cannot listen for KV transfers on " + ip + ":" + std::to_string(port) + ": " + status_text(s));
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  s = ucp_listener_query(listener_, &attr);
  if (s != UCS_OK) throw TransferError("UCX: querying the listener failed: " + status_text(s));
  port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
}

UcxListener::~UcxListener() {
  for (ucp_conn_request_h r : requests_) ucp_listener_reject(listener_, r);
  ucp_listener_destroy(listener_);
}

void UcxListener::on_conn(ucp_conn_request_h request, void* arg) { static_cast<UcxListener*>(arg)->requests_.push_back(request); }

}  // namespace kimi::kvtransfer
