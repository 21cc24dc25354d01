#include "parallel/tcp_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "common/error.h"

namespace kimi {

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kCheck = 3 };

// A request's strings are small (keys, Gloo's addresses, identity strings); anything larger is a
// stray connection speaking another protocol.
constexpr uint32_t kMaxField = 64u << 20;
constexpr uint32_t kMaxFields = 1u << 16;

// One step of the server must not block on a slow or broken client for long.
constexpr auto kServerIoTimeout = std::chrono::seconds(5);

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

uint32_t read_u32(net::Socket& s, net::Clock::time_point deadline, bool* eof = nullptr) {
  unsigned char b[4];
  if (!s.read_exact(b, 4, deadline)) {
    if (eof) {
      *eof = true;
      return 0;
    }
    throw Error("connection closed");
  }
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

std::string read_field(net::Socket& s, net::Clock::time_point deadline) {
  const uint32_t n = read_u32(s, deadline);
  if (n > kMaxField) throw Error("rendezvous store: oversized field");
  std::string v(n, '\0');
  if (n > 0 && !s.read_exact(v.data(), n, deadline)) throw Error("connection closed");
  return v;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port, bool start)
    : listener_(net::Socket::listen(host, port)), port_(listener_.local_port()) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  if (start) this->start();
}

void TcpStoreServer::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char c = 0;
  [[maybe_unused]] ssize_t ignored = ::write(wake_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() {
  std::map<std::string, std::string> data;
  std::vector<net::Socket> clients;
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    for (const auto& c : clients) fds.push_back({c.fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) clients.emplace_back(fd);
    }
    std::vector<bool> drop(clients.size(), false);
    for (size_t i = 0; i + 2 < fds.size(); ++i) {
      if (!fds[i + 2].revents) continue;
      net::Socket& s = clients[i];
      try {
        const auto deadline = net::Clock::now() + kServerIoTimeout;
        uint8_t op = 0;
        if (!s.read_exact(&op, 1, deadline)) {
          drop[i] = true;
          continue;
        }
        std::string reply;
        if (op == kSet) {
          std::string key = read_field(s, deadline);
          data[std::move(key)] = read_field(s, deadline);
          reply.push_back(1);
        } else if (op == kGet) {
          const auto it = data.find(read_field(s, deadline));
          reply.push_back(it != data.end() ? 1 : 0);
          const std::string& v = it != data.end() ? it->second : std::string();
          put_u32(reply, uint32_t(v.size()));
          reply += v;
        } else if (op == kCheck) {
          const uint32_t n = read_u32(s, deadline);
          if (n > kMaxFields) throw Error("too many keys");
          bool all = true;
          for (uint32_t k = 0; k < n; ++k) all = data.count(read_field(s, deadline)) > 0 && all;
          reply.push_back(all ? 1 : 0);
        } else {
          throw Error("unknown request");
        }
        s.write_all(reply.data(), reply.size(), deadline);
      } catch (const std::exception&) {  // kimi::Error, and bad_alloc for a field the memory lacks
        drop[i] = true;  // a broken client only loses its own connection; an escape would end the process
      }
    }
    for (size_t i = clients.size(); i-- > 0;)
      if (drop[i]) clients.erase(clients.begin() + ptrdiff_t(i));
  }
}

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : conn_(std::make_shared<Connection>()), timeout_(timeout) {
  conn_->socket = net::Socket::connect(host, port, net::Clock::now() + timeout);
  conn_->where = host + ":" + std::to_string(port);
}

TcpStore TcpStore::prefixed(const std::string& prefix) const { return TcpStore(conn_, prefix_ + prefix, timeout_); }

uint8_t TcpStore::request(uint8_t op, const std::vector<std::string>& fields, std::vector<char>* value) {
  std::string msg(1, char(op));
  if (op == kCheck) put_u32(msg, uint32_t(fields.size()));
  for (const auto& f : fields) {
    put_u32(msg, uint32_t(f.size()));
    msg += f;
  }
  std::lock_guard lock(conn_->mu);
  // A live server answers at once; the deadline only bounds a dead or wedged one.
  const auto deadline = net::Clock::now() + std::max<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5));
  try {
    conn_->socket.write_all(msg.data(), msg.size(), deadline);
    uint8_t status = 0;
    if (!conn_->socket.read_exact(&status, 1, deadline)) throw Error("connection closed");
    if (op == kGet) {
      const std::string v = read_field(conn_->socket, deadline);
      if (value) value->assign(v.begin(), v.end());
    }
    return status;
  } catch (const Error& e) {
    throw Error("rendezvous store at " + conn_->where + ": " + e.what() + " (did rank 0 exit?)");
  }
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  request(kSet, {prefix_ + key, std::string(data.begin(), data.end())}, nullptr);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return request(kCheck, full, nullptr) != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = net::Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (net::Clock::now() >= deadline) {
      std::string missing;
      for (const auto& k : keys)
        if (!check({k})) missing += (missing.empty() ? "" : ", ") + prefix_ + k;
      throw Error("rendezvous: timed out after " + std::to_string(timeout.count()) + " ms waiting for " + missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::vector<char> v;
  if (!request(kGet, {prefix_ + key}, &v)) throw Error("rendezvous: key " + prefix_ + key + " vanished");
  return v;
}

}  // namespace kimi
