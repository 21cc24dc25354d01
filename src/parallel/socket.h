#pragma once
// Owns a TCP socket descriptor, with the few blocking operations the rendezvous store needs
// (connect with retries until a deadline, listen, exact-length reads and writes that give up at
// a deadline). Failures are kimi::Error naming the peer.
#include <chrono>
#include <cstdint>
#include <string>

namespace kimi::net {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

  // Listens on host:port (port 0: any free port; see local_port()).
  static Socket listen(const std::string& host, int port);
  // Connects, retrying refused connections (the server may not be up yet) until the deadline.
  static Socket connect(const std::string& host, int port, Clock::time_point deadline);
  int local_port() const;

  // false on a clean end of stream before the first byte; throws on errors, a stream cut short
  // or the deadline.
  bool read_exact(void* buf, size_t n, Clock::time_point deadline);
  void write_all(const void* buf, size_t n, Clock::time_point deadline);

 private:
  int fd_ = -1;
};

}  // namespace kimi::net
