// The rendezvous store, joining a world, and Gloo collectives across processes (127.0.0.1).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>

#include "common/error.h"
#include "parallel/tcp_store.h"
#include "parallel/world.h"
#include "parallel_ranks.h"
#include "test_util.h"

namespace kimi {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }

using test::seconds_since;

TEST(ParallelStore, SetGetWaitAndPrefixes) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore a("127.0.0.1", server.port(), 2000ms);
  TcpStore b("127.0.0.1", server.port(), 2000ms);
  a.set("k", bytes("value one"));
  EXPECT_EQ(text(b.get("k")), "value one");
  b.set("k", bytes(""));  // overwritten, and empty values are values
  EXPECT_EQ(text(a.get("k")), "");
  b.wait({"k"});
  EXPECT_TRUE(a.check({"k"}));
  EXPECT_FALSE(a.check({"k", "absent"}));

  TcpStore pa = a.prefixed("g1/"), pb = b.prefixed("g2/");
  pa.set("rank_0", bytes("A"));
  pb.set("rank_0", bytes("B"));
  EXPECT_EQ(text(a.get("g1/rank_0")), "A");
  EXPECT_EQ(text(b.prefixed("g2/").get("rank_0")), "B");

  // A key set later by another client ends a wait that is already under way.
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    TcpStore c("127.0.0.1", server.port(), 2000ms);
    c.set("late", bytes("x"));
  });
  a.wait({"late"}, 2000ms);
  late.join();
  EXPECT_EQ(text(a.get("late")), "x");
}

TEST(ParallelStore, WaitAndGetTimeOutNamingTheKey) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port(), 300ms);
  auto t0 = Clock::now();
  try {
    s.wait({"never"}, 200ms);
    FAIL() << "wait returned for a key nobody set";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(t0), 0.19);
  EXPECT_LT(seconds_since(t0), 3.0);
  t0 = Clock::now();
  EXPECT_THROW(s.get("never"), Error);  // get waits the store's timeout
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(ParallelStore, NoServerIsAnErrorAfterTheTimeout) {
  int port = 0;
  {
    TcpStoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  const auto t0 = Clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, 300ms), Error);
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(ParallelStore, ServerGoneIsAnErrorNotAHang) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server->port(), 500ms);
  s.set("a", bytes("1"));
  server.reset();
  const auto t0 = Clock::now();
  EXPECT_THROW(s.set("b", bytes("2")), Error);
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(ParallelWorld, RankThatNeverJoinsIsAnErrorWithinTheTimeout) {
  WorldOptions o{.rank = 0, .size = 2, .store_port = 0, .timeout = 500ms, .identity = "m"};
  // Port 0 cannot be shared with other ranks, but rank 1 never comes anyway.
  const auto t0 = Clock::now();
  try {
    World w(o);
    FAIL() << "joined a world of 2 alone";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 of 2 did not join"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST(ParallelWorld, CollectivesAcrossTwoProcesses) {
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);  // served by the test, so the children can share its port
  const int port = server.port();
  const auto codes = test::run_ranks(2, [&](int rank) {
    World w(WorldOptions{.rank = rank, .size = 2, .store_port = port, .serve_store = false, .timeout = 20000ms,
                         .identity = "tiny|tp=2"});
    GlooProcessGroup& g = w.world();
    if (g.rank() != rank || g.size() != 2) return 2;
    // All-reduce: element i is (rank + 1) * i on each rank, so the sum is 3i; enough elements
    // that Gloo splits the ring into several segments.
    std::vector<float> v(300000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(rank + 1) * float(i % 1000);
    g.all_reduce_sum(v);
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != 3.0f * float(i % 1000)) return 3;
    // All-gather in rank order.
    const int32_t mine[2] = {rank * 10, rank * 10 + 1};
    int32_t all[4] = {};
    g.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
    if (all[0] != 0 || all[1] != 1 || all[2] != 10 || all[3] != 11) return 4;
    // A message only the root knows the size of.
    std::vector<std::byte> msg;
    if (rank == 1) msg = {std::byte{7}, std::byte{8}, std::byte{9}};
    g.broadcast_bytes(msg, 1);
    if (msg.size() != 3 || msg[2] != std::byte{9}) return 5;
    // All-to-all with uneven pieces: rank 0 sends 1 byte to itself and 3 to rank 1; rank 1 sends
    // nothing to rank 0 and 2 bytes to itself.
    {
      const std::vector<int64_t> send = rank == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{0, 2};
      const std::vector<int64_t> recv = rank == 0 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{3, 2};
      std::vector<std::byte> in, out(size_t(recv[0] + recv[1]));
      for (int64_t i = 0; i < send[0] + send[1]; ++i) in.push_back(std::byte(rank * 100 + i));
      g.all_to_all(in, send, out, recv);
      const std::vector<std::byte> want = rank == 0 ? std::vector<std::byte>{std::byte{0}}
                                                    : std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3},
                                                                             std::byte{100}, std::byte{101}};
      if (out != want) return 8;
      // Nothing to send at all on either side still completes.
      std::vector<std::byte> empty;
      const std::vector<int64_t> zeros{0, 0};
      g.all_to_all(empty, zeros, empty, zeros);
    }
    // A sub-group holding both ranks, then one holding rank 1 alone.
    auto tp = w.new_group("tp0", {0, 1});
    std::vector<float> one{float(rank)};
    tp->all_reduce_sum(one);
    if (one[0] != 1.0f) return 6;
    auto solo = w.new_group("solo", {1});
    if ((rank == 1) != bool(solo)) return 7;
    g.barrier();
    return 0;
  }, std::chrono::seconds(60), [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(ParallelWorld, MismatchedFlagsAreAClearErrorOnEveryRank) {
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const auto t0 = Clock::now();
  const auto codes = test::run_ranks(2, [&](int rank) {
    try {
      World w(WorldOptions{.rank = rank, .size = 2, .store_port = port, .serve_store = false, .timeout = 10000ms,
                           .identity = rank == 0 ? "tiny|tp=2" : "tiny|tp=4"});
      return 1;
    } catch (const Error& e) {
      return std::string(e.what()).find("different model or parallel flags") != std::string::npos ? 0 : 2;
    }
  }, std::chrono::seconds(60), [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  EXPECT_LT(seconds_since(t0), 8.0);  // found at once, not after the timeout
}

TEST(ParallelWorld, KilledRankIsReportedWithinBoundedTime) {
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const auto codes = test::run_ranks(2, [&](int rank) {
    World w(WorldOptions{.rank = rank, .size = 2, .store_port = port, .serve_store = false, .timeout = 3000ms,
                         .identity = "m"});
    // A write to the dead rank's closed connection must come back as an error, not kill this
    // rank with SIGPIPE (exit 141 under load, when the write wins the race with the read).
    struct sigaction pipe_action {};
    if (sigaction(SIGPIPE, nullptr, &pipe_action) != 0 || pipe_action.sa_handler != SIG_IGN) return 9;
    std::vector<float> v(16, 1.0f);
    w.world().all_reduce_sum(v);
    if (rank == 1) raise(SIGKILL);  // dies between two collectives
    const auto t0 = Clock::now();
    try {
      for (int i = 0; i < 3; ++i) w.world().all_reduce_sum(v);
      return 1;
    } catch (const Error& e) {
      std::fprintf(stderr, "rank 0 reports: %s (after %.2f s)\n", e.what(), seconds_since(t0));
      return seconds_since(t0) < 10.0 ? 0 : 2;
    }
  }, std::chrono::seconds(30), [&] { server.start(); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

}  // namespace
}  // namespace kimi
