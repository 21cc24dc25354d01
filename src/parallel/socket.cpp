#include "parallel/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace kimi::net {

namespace {

std::string errno_text() { return std::strerror(errno); }

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<int64_t>(left, 1 << 30));
}

// Resolves host (a name or a numeric address) to IPv4/IPv6 socket addresses.
struct AddrInfo {
  addrinfo* list = nullptr;
  AddrInfo(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (passive) hints.ai_flags = AI_PASSIVE;
    const std::string service = std::to_string(port);
    const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0) throw Error("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
};

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket Socket::listen(const std::string& host, int port) {
  AddrInfo ai(host, port, true);
  std::string last = "no address";
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 128) == 0) return s;
    last = errno_text();
  }
  throw Error("cannot listen on " + host + ":" + std::to_string(port) + ": " + last);
}

Socket Socket::connect(const std::string& host, int port, Clock::time_point deadline) {
  std::string last = "timed out";
  while (true) {
    AddrInfo ai(host, port, false);
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) continue;
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return s;
      }
      last = errno_text();
    }
    if (Clock::now() >= deadline)
      throw Error("cannot reach the rendezvous store at " + host + ":" + std::to_string(port) + " (" + last +
                  "): is rank 0 running with the same --data-parallel-address and --data-parallel-rpc-port?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Socket::local_port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw Error("getsockname: " + errno_text());
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

bool Socket::read_exact(void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    pollfd pfd{fd_, POLLIN, 0};
    const int ms = remaining_ms(deadline);
    const int rc = ::poll(&pfd, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw Error("poll: " + errno_text());
    if (rc == 0) throw Error("timed out waiting for the peer");
    const ssize_t got = ::recv(fd_, p + done, n - done, 0);
    if (got == 0) {
      if (done == 0) return false;
      throw Error("connection closed in the middle of a message");
    }
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error("connection lost: " + errno_text());
    }
    done += size_t(got);
  }
  return true;
}

void Socket::write_all(const void* buf, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < n) {
    pollfd pfd{fd_, POLLOUT, 0};
    const int rc = ::poll(&pfd, 1, remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw Error("poll: " + errno_text());
    if (rc == 0) throw Error("timed out sending to the peer");
    const ssize_t put = ::send(fd_, p + done, n - done, MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error("connection lost: " + errno_text());
    }
    done += size_t(put);
  }
}

}  // namespace kimi::net
