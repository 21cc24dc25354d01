#pragma once
// The rendezvous key-value store the ranks meet through (the role of PyTorch's TCPStore): rank 0
// serves it at --data-parallel-address:--data-parallel-rpc-port, every rank (rank 0 included)
// is a client. The client implements Gloo's rendezvous::Store, so Gloo exchanges its transport
// addresses through it. Every wait has a timeout: a rank that never publishes its key makes the
// others fail with an error naming the key, not hang.
//
// Wire format (ours): a request is op (u8), then length-prefixed (u32 LE) strings; SET key value
// -> u8 1; GET key -> u8 found, value; CHECK n keys -> u8 all present.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "parallel/socket.h"

namespace kimi {

// Serves the store on a background thread until destroyed.
class TcpStoreServer {
 public:
  // Listens at once (port 0: any free port); serves from start(), called here unless `start` is
  // false (a test that forks its ranks starts the thread after the last fork: a thread that
  // allocates while the process forks can leave the child's allocator locked).
  TcpStoreServer(const std::string& host, int port, bool start = true);
  void start();
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }

 private:
  void serve();

  net::Socket listener_;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends serve()
  std::thread thread_;
};

class TcpStore final : public gloo::rendezvous::Store {
 public:
  // Connects (retrying until `timeout`: rank 0 may start later than the others). `timeout` is
  // also what wait() without one and get() allow.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout);

  // A view of the same store whose keys all start with prefix (one per process group, so that
  // Gloo's per-rank keys of different groups do not collide). Shares the connection.
  TcpStore prefixed(const std::string& prefix) const;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key (up to the timeout), then returns its value.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // Whether every key is present now (no waiting).
  bool check(const std::vector<std::string>& keys);

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Connection {
    std::mutex mu;
    net::Socket socket;
    std::string where;
  };
  TcpStore(std::shared_ptr<Connection> conn, std::string prefix, std::chrono::milliseconds timeout)
      : conn_(std::move(conn)), prefix_(std::move(prefix)), timeout_(timeout) {}
  // Sends one request and reads the reply's status byte (and value, for GET).
  uint8_t request(uint8_t op, const std::vector<std::string>& fields, std::vector<char>* value);

  std::shared_ptr<Connection> conn_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace kimi
