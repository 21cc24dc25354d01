#include "server/http/event_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kimi::http {

using Clock = std::chrono::steady_clock;

// A client connection. The epoll thread owns the parser and the phase; while a request is
// answered (Busy) the worker owns writes to the socket, and the epoll thread only reads ahead
// (pipelined bytes) and watches for a hang-up. Only the epoll thread closes the socket.
class Connection {
 public:
  explicit Connection(int socket, const ParseLimits& limits) : fd(socket), parser(limits) {}
  ~Connection() {
    if (fd >= 0) ::close(fd);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The client hung up (or a write failed): runs the hang-up hook once.
  void mark_gone() {
    std::function<void()> f;
    {
      std::lock_guard lock(mu);
      if (gone.exchange(true)) return;
      f = std::move(hook);
    }
    if (f) f();
  }

  enum class Phase { Reading, Busy, Lingering };
  const int fd;
  RequestParser parser;
  Phase phase = Phase::Reading;
  Clock::time_point deadline;
  bool request_started = false;  // the header timeout runs from a request's first byte
  bool peer_eof = false;         // the client closed its end (a request before it is still answered)
  uint32_t events = 0;           // the epoll interest now
  std::atomic<bool> gone{false};
  std::mutex mu;
  std::function<void()> hook;  // guarded by mu
};

namespace {

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Best effort from the epoll thread: small answers (errors, 100 Continue) on an idle socket.
void send_now(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) data.remove_prefix(size_t(n));
    else if (n < 0 && errno == EINTR) continue;
    else return;
  }
}

// A fixed set of threads taking tasks from a bounded queue.
class TaskPool {
 public:
  TaskPool(int threads, size_t max_queued) : max_queued_(max_queued) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
  }
  ~TaskPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // False when the queue is full.
  bool submit(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      if (queue_.size() >= max_queued_) return false;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and every queued task has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct ServerState {
  ServerOptions opt;
  Server::Classify classify;
  Server::Handle handle;
  Server::ErrorResponse error_response;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<int> port{0};
  std::atomic<bool> stop{false}, closing{false};
  std::unordered_map<int, std::shared_ptr<Connection>> conns;  // epoll thread only

  std::mutex mu;  // guards done and active
  std::condition_variable idle_cv;
  std::vector<std::pair<std::shared_ptr<Connection>, bool>> done;  // answered: (connection, keep alive)
  int64_t active = 0;

  std::unique_ptr<TaskPool> control, work;

  ~ServerState() {
    for (int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
  }
  void set_events(Connection& c, uint32_t events) {
    if (c.events == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = c.fd;
    if (c.events == 0) ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev);
    else if (events == 0) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    else ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = events;
  }
  void close_conn(const std::shared_ptr<Connection>& c) {
    set_events(*c, 0);
    conns.erase(c->fd);  // the socket closes with the last reference
  }
  // Half-closes and reads what the client still sends for a while, so that our answer is not
  // destroyed by a reset (closing with unread bytes sends RST).
  void linger(const std::shared_ptr<Connection>& c) {
    ::shutdown(c->fd, SHUT_WR);
    c->phase = Connection::Phase::Lingering;
    c->deadline = Clock::now() + opt.linger;
    set_events(*c, EPOLLIN | EPOLLRDHUP);
  }
  void answer_error(const std::shared_ptr<Connection>& c, int status, const std::string& message) {
    Response r = error_response(status, message);
    send_now(c->fd, response_head(r.status, r.headers, Framing::Length, r.body.size(), false) + r.body);
    linger(c);
  }
  void start_reading(const std::shared_ptr<Connection>& c) {
    c->phase = Connection::Phase::Reading;
    c->request_started = false;
    c->deadline = Clock::now() + opt.idle_timeout;
    set_events(*c, EPOLLIN | EPOLLRDHUP);
    advance(c);
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors (retried on the next event)
      }
      if (conns.size() >= opt.max_connections) {
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_shared<Connection>(fd, opt.limits);
      conns.emplace(fd, c);
      start_reading(c);
    }
  }

  // Reads what is there; returns false when the client closed its end or the socket failed.
  bool read_into(Connection& c, size_t cap, bool discard) {
    char buf[65536];
    size_t total = 0;
    for (;;) {
      if (!discard && c.parser.buffered() >= cap) return true;
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (!discard) c.parser.feed(std::string_view(buf, size_t(n)));
        total += size_t(n);
        if (total >= (size_t(1) << 20)) return true;  // fairness: come back on the next round
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  }

  void on_event(const std::shared_ptr<Connection>& c, uint32_t events) {
    switch (c->phase) {
      case Connection::Phase::Lingering:
        if (!read_into(*c, 0, true) || (events & (EPOLLHUP | EPOLLERR))) close_conn(c);
        return;
      case Connection::Phase::Reading:
        // A client may send its request and then close its end (nc -N, some HTTP/1.0 clients):
        // a complete request is still answered, but then there is no hang-up to watch for.
        if (!read_into(*c, opt.limits.max_header_bytes + opt.limits.max_body_bytes + 65536, false) ||
            (events & (EPOLLHUP | EPOLLERR)))
          c->peer_eof = true;
        advance(c);
        if (c->peer_eof && c->phase == Connection::Phase::Reading) close_conn(c);
        return;
      case Connection::Phase::Busy: {
        // Read ahead (the next pipelined request) up to a bound, and notice a hang-up.
        const size_t cap = opt.limits.max_header_bytes + 65536;
        const bool open = read_into(*c, cap, false);
        if (!open || (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
          set_events(*c, 0);  // closed when the worker is done
          c->mark_gone();
        } else if (c->parser.buffered() >= cap) {
          set_events(*c, EPOLLRDHUP);  // stop reading; still told of a hang-up
        }
        return;
      }
    }
  }

  // Parses what a Reading connection has buffered and dispatches a complete request.
  void advance(const std::shared_ptr<Connection>& c) {
    if (c->phase != Connection::Phase::Reading) return;
    const RequestParser::Status st = c->parser.parse();
    if (c->parser.take_continue_wanted()) send_now(c->fd, "HTTP/1.1 100 Continue\r\n\r\n");
    if (st == RequestParser::Status::Error) {
      answer_error(c, c->parser.error_status(), c->parser.error_message());
      return;
    }
    const auto now = Clock::now();
    if (st == RequestParser::Status::NeedMore) {
      if (!c->parser.mid_request()) return;  // idle: the keep-alive deadline stands
      if (c->parser.in_body()) {
        c->deadline = now + opt.body_timeout;  // renewed by every read
      } else if (!c->request_started) {
        c->request_started = true;
        c->deadline = now + opt.header_timeout;  // not renewed: a slow drip cannot hold it open
      }
      return;
    }
    HttpRequest req = c->parser.take();
    c->phase = Connection::Phase::Busy;
    if (c->peer_eof) set_events(*c, 0);
    const Lane lane = classify(req);
    {
      std::lock_guard lock(mu);
      ++active;
    }
    auto task = [this, c, req = std::move(req)]() mutable {
      bool keep = false;
      {
        Exchange ex(c, std::move(req), *this);
        try {
          if (!c->gone) handle(ex);  // a client gone while queued starts nothing
        } catch (const std::exception& e) {
          if (!ex.responded()) ex.respond(error_response(500, std::string("internal error: ") + e.what()));
        }
        if (!ex.responded() && !c->gone) ex.respond(error_response(500, "internal error: no response"));
        keep = ex.keep_alive();
      }
      std::lock_guard lock(mu);
      done.emplace_back(c, keep);
      wake();
    };
    TaskPool& pool = lane == Lane::Control ? *control : *work;
    if (!pool.submit(std::move(task))) {
      {
        std::lock_guard lock(mu);
        --active;
      }
      c->phase = Connection::Phase::Reading;
      answer_error(c, 503, "the server is overloaded: too many requests are waiting");
    }
  }

  void finish_done() {
    std::vector<std::pair<std::shared_ptr<Connection>, bool>> list;
    {
      std::lock_guard lock(mu);
      list.swap(done);
      active -= int64_t(list.size());
    }
    if (!list.empty()) idle_cv.notify_all();
    for (auto& [c, keep] : list) {
      if (c->gone || c->peer_eof) close_conn(c);
      else if (!keep || stop) linger(c);
      else start_reading(c);
    }
  }

  void sweep() {
    const auto now = Clock::now();
    std::vector<std::shared_ptr<Connection>> expired;
    for (auto& [fd, c] : conns)
      if (c->phase != Connection::Phase::Busy && now >= c->deadline) expired.push_back(c);
    for (auto& c : expired) {
      if (c->phase == Connection::Phase::Reading && c->parser.mid_request())
        answer_error(c, 408, "the request was not received in time");
      else close_conn(c);
    }
  }
};

// ------------------------------------------------------------------------------------------------
Exchange::Exchange(std::shared_ptr<Connection> conn, HttpRequest request, const ServerState& server)
    : conn_(std::move(conn)), request_(std::move(request)), server_(server), keep_alive_(request_.keep_alive) {}

bool Exchange::keep_alive() const {
  return keep_alive_ && (head_sent_ || !server_.closing) && !failed_ && !client_gone();
}

std::string Exchange::head(int status, const Headers& headers, size_t content_length) {
  keep_alive_ = keep_alive();
  head_sent_ = true;
  return response_head(status, headers, framing_, content_length, keep_alive_);
}

Exchange::~Exchange() {
  if (streaming_ && !failed_) end_stream();
  // The hook (it holds the job) must not outlive this request on a kept-alive connection.
  std::lock_guard lock(conn_->mu);
  conn_->hook = nullptr;
}

bool Exchange::client_gone() const { return conn_->gone.load(); }

void Exchange::on_hangup(std::function<void()> f) {
  {
    std::lock_guard lock(conn_->mu);
    if (!conn_->gone) {
      conn_->hook = std::move(f);
      return;
    }
  }
  f();
}

bool Exchange::send_all(std::string_view data) {
  auto last_progress = Clock::now();
  while (!data.empty()) {
    if (failed_ || conn_->gone) return false;
    const ssize_t n = ::send(conn_->fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      last_progress = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Clock::now() - last_progress < server_.opt.write_timeout) {
      pollfd p{conn_->fd, POLLOUT, 0};
      ::poll(&p, 1, 100);  // short, so that a hang-up seen by the epoll thread stops us soon
      continue;
    }
    failed_ = true;  // reset, or a client that stopped reading
    conn_->mark_gone();
    return false;
  }
  return true;
}

void Exchange::respond(Response r) {
  if (responded_) return;
  responded_ = true;
  const std::string h = head(r.status, r.headers, r.body.size());
  if (request_.method == "HEAD" || r.body.size() < 16384) {
    send_all(request_.method == "HEAD" ? h : h + r.body);
  } else if (send_all(h)) {
    send_all(r.body);
  }
}

bool Exchange::start_stream(int status, const Headers& headers) {
  if (responded_) return false;
  responded_ = streaming_ = true;
  // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
  framing_ = request_.version_minor >= 1 ? Framing::Chunked : Framing::Close;
  if (framing_ == Framing::Close) keep_alive_ = false;
  return send_all(head(status, headers, 0));
}

bool Exchange::write(std::string_view data) {
  if (!streaming_ || data.empty()) return !failed_ && !conn_->gone;
  return framing_ == Framing::Chunked ? send_all(chunk(data)) : send_all(data);
}

void Exchange::end_stream() {
  if (!streaming_) return;
  streaming_ = false;
  if (framing_ == Framing::Chunked) send_all(kLastChunk);
}

// ------------------------------------------------------------------------------------------------
Server::Server(ServerOptions options, Classify classify, Handle handle, ErrorResponse error_response)
    : s_(std::make_unique<ServerState>()) {
  s_->opt = options;
  s_->classify = std::move(classify);
  s_->handle = std::move(handle);
  s_->error_response = std::move(error_response);
  s_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  s_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Server::~Server() {
  stop();
  // Workers may still hold connections; the pools finish their tasks before the sockets go.
  s_->control.reset();
  s_->work.reset();
}

int Server::port() const { return s_->port.load(); }

bool Server::bind(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res) != 0) return false;
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, s_->opt.backlog) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return false;
  set_nonblocking(fd);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  s_->listen_fd = fd;
  s_->port = bound;
  return true;
}

void Server::run() {
  ServerState& s = *s_;
  if (s.listen_fd < 0 || s.epoll_fd < 0 || s.wake_fd < 0) return;
  s.control = std::make_unique<TaskPool>(s.opt.control_threads, 65536);
  s.work = std::make_unique<TaskPool>(s.opt.work_threads, s.opt.max_queued);
  for (int fd : {s.listen_fd, s.wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  std::vector<epoll_event> events(256);
  auto last_sweep = Clock::now();
  while (!s.stop) {
    const int n = ::epoll_wait(s.epoll_fd, events.data(), int(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      const int fd = events[size_t(i)].data.fd;
      if (fd == s.listen_fd) {
        s.accept_all();
      } else if (fd == s.wake_fd) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(s.wake_fd, &v, sizeof v);
      } else {
        auto it = s.conns.find(fd);
        if (it == s.conns.end()) continue;
        const std::shared_ptr<Connection> c = it->second;  // on_event may erase the map's entry
        s.on_event(c, events[size_t(i)].events);
      }
    }
    s.finish_done();
    if (Clock::now() - last_sweep > std::chrono::milliseconds(50)) {
      s.sweep();
      last_sweep = Clock::now();
    }
  }
  // Stopping: requests still being answered lose their client; the pools finish their tasks.
  for (auto& [fd, c] : s.conns)
    if (c->phase == Connection::Phase::Busy) c->mark_gone();
  s.control.reset();
  s.work.reset();
  s.finish_done();
  s.conns.clear();
  ::close(s.listen_fd);
  s.listen_fd = -1;
}

void Server::stop() {
  s_->stop = true;
  if (s_->wake_fd >= 0) s_->wake();
}

void Server::set_closing() { s_->closing = true; }

bool Server::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(s_->mu);
  return s_->idle_cv.wait_for(lock, timeout, [&] { return s_->active == 0; });
}

}  // namespace kimi::http
