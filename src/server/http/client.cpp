#include "server/http/client.h"
#include "server/http/request_parser.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace kimi::http {

namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int ms(double s) { return s <= 0 ? 1 : s > 2e6 ? 2000000000 : int(s * 1000); }

bool wait_for(int fd, short events, double timeout_s) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, ms(timeout_s));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

// Connects with a time limit; -1 with `err` set on failure.
int connect_to(const std::string& host, int port, double timeout_s, ClientError& err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    err = ClientError::Resolve;
    return -1;
  }
  err = ClientError::Connection;
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_for(fd, POLLOUT, timeout_s)) {
        err = ClientError::ConnectionTimeout;
        rc = -1;
      } else {
        int so = 0;
        socklen_t len = sizeof so;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
        rc = so == 0 ? 0 : -1;
      }
    }
    if (rc != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    err = ClientError::None;
  }
  return fd;
}

}  // namespace

const char* describe(ClientError e) {
  switch (e) {
    case ClientError::None: return "no error";
    case ClientError::Resolve: return "cannot resolve the host name";
    case ClientError::Connection: return "cannot connect (is the server running on that host and port?)";
    case ClientError::ConnectionTimeout: return "connection timed out";
    case ClientError::Write: return "the connection closed while sending the request";
    case ClientError::Read: return "the connection closed or timed out while reading the response";
    case ClientError::Canceled: return "canceled";
  }
  return "unknown error";
}

bool split_host_port(const std::string& url, std::string& host, int& port) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return false;
  std::string rest = url.substr(scheme.size());
  port = 80;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
  } else {
    const size_t colon = rest.find(':');
    host = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon);
  }
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6) return false;
    for (size_t i = 1; i < rest.size(); ++i)
      if (rest[i] < '0' || rest[i] > '9') return false;
    port = std::atoi(rest.c_str() + 1);
  }
  return !host.empty() && port > 0 && port < 65536;
}

void CancelToken::cancel() {
  std::lock_guard lock(mu_);
  canceled_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool CancelToken::canceled() const {
  std::lock_guard lock(mu_);
  return canceled_;
}

// Registers a socket with a token for the life of a request, so that cancel() never touches a
// descriptor that was closed (and perhaps reused) meanwhile.
class CancelAttachment {
 public:
  CancelAttachment(CancelToken* token, int fd) : token_(token) {
    if (!token_) return;
    std::lock_guard lock(token_->mu_);
    token_->fd_ = fd;
    if (token_->canceled_) ::shutdown(fd, SHUT_RDWR);
  }
  ~CancelAttachment() {
    if (!token_) return;
    std::lock_guard lock(token_->mu_);
    token_->fd_ = -1;
  }
  CancelAttachment(const CancelAttachment&) = delete;
  CancelAttachment& operator=(const CancelAttachment&) = delete;

 private:
  CancelToken* token_;
};

const std::string* ResponseHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return &v;
  return nullptr;
}

namespace {

// Sends the request on a connected socket and reads the response.
ClientError exchange(int fd, const std::string& host, int port, const ClientRequest& req, const ClientTimeouts& t,
                     const std::function<void(const ResponseHead&)>& on_head,
                     const std::function<bool(std::string_view)>& on_body) {

  std::string out = req.method + " " + req.target + " HTTP/1.1\r\nHost: " +
                    (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port) +
                    "\r\nConnection: close\r\n";
  for (const auto& [k, v] : req.headers) out += k + ": " + v + "\r\n";
  if (!req.body.empty() || req.method == "POST") out += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  out += "\r\n";
  out += req.body;
  for (size_t off = 0; off < out.size();) {
    const ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n > 0) off += size_t(n);
    else if (n < 0 && errno == EINTR) continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, t.io_s)) return ClientError::Write;
    } else return ClientError::Write;
  }

  // Read the response: head, then a body framed by Content-Length, chunks or the close.
  std::string buf;
  bool eof = false;
  auto fill = [&]() -> bool {
    if (eof) return false;
    if (!wait_for(fd, POLLIN, t.io_s)) return false;
    char tmp[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n > 0) {
        buf.append(tmp, size_t(n));
        return true;
      }
      if (n < 0 && errno == EINTR) continue;
      eof = true;
      return false;
    }
  };
  int status = 0;
  size_t head_end;
  for (;;) {
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return ClientError::Read;
    if (buf.size() < 12 || buf.compare(0, 5, "HTTP/") != 0) return ClientError::Read;
    status = std::atoi(buf.c_str() + 9);
    if (status >= 200 || status < 100) break;
    buf.erase(0, head_end + 4);  // an interim response (100 Continue)
  }
  const std::string head = buf.substr(0, head_end + 2);
  buf.erase(0, head_end + 4);
  bool chunked = false, has_length = false;
  size_t length = 0;
  ResponseHead response_head;
  response_head.status = status;
  for (size_t p = head.find("\r\n") + 2; p < head.size();) {
    const size_t e = head.find("\r\n", p);
    const std::string line = head.substr(p, e - p);
    p = e + 2;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    response_head.headers.emplace_back(line.substr(0, colon), value);
    if (iequals(line.substr(0, colon), "Content-Length")) {
      has_length = true;
      length = size_t(std::strtoull(value.c_str(), nullptr, 10));
    } else if (iequals(line.substr(0, colon), "Transfer-Encoding")) {
      chunked = value.find("chunked") != std::string::npos;
    }
  }
  on_head(response_head);
  // Hands exactly `size` body bytes to on_body (a chunk, or a Content-Length body).
  auto read_exactly = [&](size_t size) -> ClientError {
    for (size_t left = size; left > 0;) {
      if (buf.empty() && !fill()) return ClientError::Read;
      const size_t n = std::min(left, buf.size());
      if (!on_body(std::string_view(buf.data(), n))) return ClientError::Canceled;
      buf.erase(0, n);
      left -= n;
    }
    return ClientError::None;
  };
  if (chunked) {
    for (;;) {
      size_t nl;
      while ((nl = buf.find("\r\n")) == std::string::npos)
        if (!fill()) return ClientError::Read;
      const size_t size = size_t(std::strtoull(buf.c_str(), nullptr, 16));
      buf.erase(0, nl + 2);
      if (size == 0) return ClientError::None;  // trailers are not read: the connection closes
      if (const ClientError e = read_exactly(size); e != ClientError::None) return e;
      while (buf.size() < 2)
        if (!fill()) return ClientError::Read;
      buf.erase(0, 2);
    }
  }
  if (has_length) return read_exactly(length);
  // Close-delimited (an HTTP/1.0-style server).
  for (;;) {
    if (!buf.empty() && !on_body(buf)) return ClientError::Canceled;
    buf.clear();
    if (!fill()) return eof ? ClientError::None : ClientError::Read;
  }
}

}  // namespace

ClientError send_request(const std::string& host, int port, const ClientRequest& req, const ClientTimeouts& t,
                         const std::function<void(const ResponseHead&)>& on_head,
                         const std::function<bool(std::string_view)>& on_body, CancelToken* cancel) {
  if (cancel && cancel->canceled()) return ClientError::Canceled;
  ClientError err;
  Socket sock(connect_to(host, port, t.connect_s, err));
  if (sock.get() < 0) return err;
  const CancelAttachment attached(cancel, sock.get());
  const ClientError e = exchange(sock.get(), host, port, req, t, on_head, on_body);
  // A shut-down socket reads as a closed connection: report the cancel, not a server fault.
  return e != ClientError::None && cancel && cancel->canceled() ? ClientError::Canceled : e;
}

ClientError send_request(const std::string& host, int port, const ClientRequest& req, const ClientTimeouts& t,
                         const std::function<void(int)>& on_status, const std::function<bool(std::string_view)>& on_body) {
  return send_request(
      host, port, req, t, [&](const ResponseHead& h) { on_status(h.status); }, on_body, nullptr);
}

}  // namespace kimi::http
