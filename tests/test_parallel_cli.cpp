// `kimi generate -tp 2` (two local processes over 127.0.0.1), with and without
// --enable-expert-parallel, against one process, and parallel flags that cannot work being refused.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "parallel/socket.h"
#include "parallel/tcp_store.h"
#include "parallel/world.h"
#include "test_util.h"

namespace kimi {
namespace {

int free_port() {
  TcpStoreServer probe("127.0.0.1", 0);
  return probe.port();
}

// The --json line: the last one that opens an object (a tp run's stderr comes before it).
nlohmann::json json_result(const std::string& out) {
  const size_t line = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(line == std::string::npos ? out.find('{') : line + 1));
}

// One tiny model and the tokens one process generates from it, shared by the tests that compare
// parallel runs against them.
class ParallelCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>();
    model_ = test::make_tiny_model(*dir_).string();
    const auto one = test::run_kimi(generate(), {.keep_stderr = false, .timeout_s = 120});
    ASSERT_EQ(one.status, 0) << one.out;
    EXPECT_FALSE(json_result(one.out).contains("tensor_parallel"));
    tokens_ = json_result(one.out)["tokens"].get<std::vector<int>>();
    ASSERT_EQ(tokens_.size(), 12u);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::string generate() {
    return "generate --model " + model_ + " --prompt-ids 5,17,300,42,1000 --max-tokens 12 --ignore-eos --json --threads 1";
  }
  static test::CmdResult run(const std::string& args) { return test::run_kimi(args, {.timeout_s = 120}); }

  static inline std::unique_ptr<test::TempDir> dir_;
  static inline std::string model_;
  static inline std::vector<int> tokens_;
};

TEST_F(ParallelCli, GenerateWithTwoTensorParallelRanksGivesTheTokensOfOne) {
  const auto two = run(generate() + " -tp 2 --data-parallel-rpc-port " + std::to_string(free_port()));
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_EQ(json_result(two.out)["tokens"].get<std::vector<int>>(), tokens_);
  // Rank 0 counted its collectives: all-reduces every layer, the step broadcasts.
  const auto tp = json_result(two.out)["tensor_parallel"];
  EXPECT_EQ(tp["size"], 2) << two.out;
  EXPECT_GT(tp["all_reduce"]["calls"].get<int64_t>(), 0) << two.out;
  EXPECT_GT(tp["all_reduce"]["bytes"].get<int64_t>(), 0) << two.out;
  EXPECT_GT(tp["broadcast"]["calls"].get<int64_t>(), 0) << two.out;
  EXPECT_EQ(tp["expert_parallel"], false) << two.out;
}

// --enable-expert-parallel: each of the 2 ranks holds 8 of the tiny model's 16 experts whole.
TEST_F(ParallelCli, GenerateWithExpertParallelGivesTheTokensOfOne) {
  const auto ep = run(generate() + " -tp 2 --enable-expert-parallel --data-parallel-rpc-port " + std::to_string(free_port()));
  ASSERT_EQ(ep.status, 0) << ep.out;
  EXPECT_EQ(json_result(ep.out)["tokens"].get<std::vector<int>>(), tokens_);
  const auto tp = json_result(ep.out)["tensor_parallel"];
  EXPECT_EQ(tp["size"], 2) << ep.out;
  EXPECT_EQ(tp["expert_parallel"], true) << ep.out;
  EXPECT_GT(tp["all_reduce"]["calls"].get<int64_t>(), 0) << ep.out;

  // With tp 1 the flag is accepted and changes nothing (vLLM's expert-parallel size is tp * dp).
  const auto alone = run(generate() + " --enable-expert-parallel");
  ASSERT_EQ(alone.status, 0) << alone.out;
  EXPECT_EQ(json_result(alone.out)["tokens"].get<std::vector<int>>(), tokens_);
  EXPECT_NE(alone.out.find("no effect"), std::string::npos) << alone.out;
}

// The ranks' identity includes the flag: a worker rank started with --enable-expert-parallel
// refuses to join a rank 0 that runs without it (here the test stands in for rank 0, publishing
// the identity `kimi generate -tp 2` has without the flag), naming both.
TEST_F(ParallelCli, RanksThatDisagreeOnExpertParallelismFailClearly) {
  std::ifstream f(std::filesystem::path(model_) / "config.json", std::ios::binary);
  std::stringstream config;
  config << f.rdbuf();
  TcpStoreServer store("127.0.0.1", 0);
  const std::string rank0 = "config " + parallel_fingerprint(config.str()) + " tp=2 dp=1 ep=0 quantization=";
  TcpStore("127.0.0.1", store.port(), std::chrono::seconds(10))
      .prefixed("identity/")
      .set("0", std::vector<char>(rank0.begin(), rank0.end()));
  const auto worker = run("generate --model " + model_ +
                                      " --prompt-ids 5,17 --max-tokens 1 --threads 1 -tp 2 --parallel-local-rank=1"
                                      " --enable-expert-parallel --parallel-timeout 10 --data-parallel-rpc-port " +
                                      std::to_string(store.port()));
  EXPECT_NE(worker.status, 0) << worker.out;
  EXPECT_NE(worker.out.find("different model or parallel flags"), std::string::npos) << worker.out;
  EXPECT_NE(worker.out.find("ep=0"), std::string::npos) << worker.out;
  EXPECT_NE(worker.out.find("ep=1"), std::string::npos) << worker.out;
}

TEST_F(ParallelCli, ParallelFlagsThatCannotWorkAreRefused) {
  const std::string base = "generate --model " + model_ + " --prompt-ids 5,17 --max-tokens 1 ";
  const std::pair<std::string, std::string> cases[] = {
      {"-dp 2", "--data-parallel-size > 1 is for serve"},
      {"--headless --data-parallel-size 2", "--headless needs --data-parallel-start-rank >= 1"},
      {"--data-parallel-size 2 --data-parallel-start-rank 1", "add --headless"},
      {"--data-parallel-size 2 --data-parallel-size-local 3", "--data-parallel-size-local must be between"},
      {"--data-parallel-size 2 --data-parallel-start-rank 1 --data-parallel-size-local 2 --headless", "exceed"}};
  for (const auto& [flags, why] : cases) {
    const auto r = run(base + flags);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.out.find(why), std::string::npos) << flags << ": " << r.out;
  }
  const auto bad = run(base + "-tp 0");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--tensor-parallel-size"), std::string::npos) << bad.out;
}

// `kimi serve -tp 2`, its worker rank killed: the server reports the lost rank and exits non-zero
// in bounded time, without waiting for a request to notice.
TEST_F(ParallelCli, ServerExitsWhenAWorkerRankIsKilled) {
  test::TempDir dir;
  const int port = free_port(), rpc = free_port();
  const auto log = dir.path() / "serve.log";
  std::fflush(nullptr);
  const pid_t server = fork();
  if (server == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    if (!f || dup2(fileno(stderr), 1) < 0) _exit(126);
    const std::string ports[] = {std::to_string(port), std::to_string(rpc)};
    execl(KIMI_BINARY, KIMI_BINARY, "serve", model_.c_str(), "-tp", "2", "--port", ports[0].c_str(),
          "--data-parallel-rpc-port", ports[1].c_str(), "--threads", "1", "--kv-cache-memory", "16000000", "--max-model-len", "512",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(server, 0);
  // Ready once the HTTP port accepts (the ranks have joined and loaded by then).
  bool up = false;
  int early = 0;
  for (const auto until = net::Clock::now() + std::chrono::seconds(60); !up && net::Clock::now() < until;) {
    if (waitpid(server, &early, WNOHANG) == server) break;  // it failed to start: see the log
    try {
      net::Socket::connect("127.0.0.1", port, net::Clock::now() + std::chrono::milliseconds(200));
      up = true;
    } catch (const Error&) {
    }
  }
  const auto slurp = [&] {
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  if (!up) {
    kill(server, SIGKILL);
    waitpid(server, nullptr, WNOHANG);
    FAIL() << "server did not come up:\n" << slurp();
  }
  std::ifstream children("/proc/" + std::to_string(server) + "/task/" + std::to_string(server) + "/children");
  pid_t worker = 0;
  children >> worker;
  ASSERT_GT(worker, 0) << "no worker rank under the server";
  kill(worker, SIGKILL);

  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(server, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
      kill(server, SIGKILL);
      waitpid(server, nullptr, 0);
      FAIL() << "server still running 20 s after its worker rank died:\n" << slurp();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << slurp();
  EXPECT_NE(slurp().find("tensor-parallel rank 1"), std::string::npos) << slurp();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

}  // namespace
}  // namespace kimi
