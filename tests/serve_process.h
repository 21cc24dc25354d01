#pragma once
// A `kimi serve` child process for tests (127.0.0.1, an ephemeral port read from its log, stopped
// with SIGTERM, then SIGKILL after 10 s) and the JSON calls the tests make to it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/http/client.h"

namespace kimi::test {

class ServeProcess {
 public:
  // Runs `kimi serve MODEL` with small test settings (one thread, --max-model-len 512, 32 MiB of
  // KV cache) plus `extra` flags; waits up to `start_s` for its listening line.
  ServeProcess(const std::string& model, const std::string& log, const std::vector<std::string>& extra = {},
               int start_s = 30)
      : log_(log) {
    std::vector<std::string> args{KIMI_BINARY, "serve", model, "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                                  "--max-model-len", "512", "--kv-cache-memory", "33554432"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(log.c_str(), "w", stderr);
      setenv("UCX_TLS", "tcp", 0);
      ::execv(KIMI_BINARY, argv.data());
      std::_Exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(start_s);
    while (port_ == 0 && std::chrono::steady_clock::now() < deadline) {
      const std::string text = this->log();
      const size_t p = text.find("http://127.0.0.1:");
      if (p != std::string::npos) port_ = std::atoi(text.c_str() + p + 17);
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it failed to start: see the log
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServeProcess() { stop(SIGTERM); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }
  // Waits up to `seconds` for the process to end by itself: its wait status, or nullopt.
  std::optional<int> wait_exit(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (pid_ > 0 && std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  int port() const { return port_; }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

inline nlohmann::json post(int port, const std::string& path, const nlohmann::json& body, int* status_out = nullptr,
                           const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  http::ClientRequest req;
  req.method = "POST";
  req.target = path;
  req.headers.push_back({"Content-Type", "application/json"});
  for (const auto& h : headers) req.headers.push_back(h);
  req.body = body.dump();
  int status = 0;
  std::string out;
  const auto err = http::send_request("127.0.0.1", port, req, {5, 60}, [&](int s) { status = s; },
                                      [&](std::string_view piece) {
                                        out.append(piece);
                                        return true;
                                      });
  EXPECT_EQ(err, http::ClientError::None) << http::describe(err);
  if (status_out) *status_out = status;
  else EXPECT_EQ(status, 200) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

inline std::string get(int port, const std::string& path) {
  http::ClientRequest req;
  req.target = path;
  std::string out;
  http::send_request("127.0.0.1", port, req, {5, 60}, [](int) {}, [&](std::string_view piece) {
    out.append(piece);
    return true;
  });
  return out;
}

}  // namespace kimi::test
