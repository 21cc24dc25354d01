// `kimi generate -tp 2` (two local processes over 127.0.0.1) against one process, and the
// parallel flags that are not built yet being refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "parallel/tcp_store.h"
#include "test_util.h"

namespace kimi {
namespace {

test::CmdResult run_bounded(const std::string& args, const std::string& redirect) {
  const std::string cmd = "timeout -s KILL 120 " + std::string(KIMI_BINARY) + " " + args + " " + redirect;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

int free_port() {
  TcpStoreServer probe("127.0.0.1", 0);
  return probe.port();
}

TEST(ParallelCli, GenerateWithTwoTensorParallelRanksGivesTheTokensOfOne) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir);
  const std::string base = "generate --model " + model.string() +
                           " --prompt-ids 5,17,300,42,1000 --max-tokens 12 --ignore-eos --json --threads 1";
  const auto one = run_bounded(base, "2>/dev/null");
  ASSERT_EQ(one.status, 0) << one.out;
  const auto two = run_bounded(base + " -tp 2 --data-parallel-rpc-port " + std::to_string(free_port()), "2>&1");
  ASSERT_EQ(two.status, 0) << two.out;
  const auto tokens = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.rfind("{\"")))["tokens"].get<std::vector<int>>();
  };
  EXPECT_EQ(tokens(two.out), tokens(one.out));
  EXPECT_EQ(tokens(one.out).size(), 12u);
}

TEST(ParallelCli, FlagsNotBuiltYetAreRefused) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir);
  const std::string base = "generate --model " + model.string() + " --prompt-ids 5,17 --max-tokens 1 ";
  for (const std::string flags : {"-dp 2", "--data-parallel-size=2", "--enable-expert-parallel", "--headless",
                                  "--data-parallel-size 2 --data-parallel-start-rank 1"}) {
    const auto r = run_bounded(base + flags, "2>&1");
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.out.find("not supported yet"), std::string::npos) << flags << ": " << r.out;
  }
  const auto bad = run_bounded(base + "-tp 0", "2>&1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--tensor-parallel-size"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace kimi
