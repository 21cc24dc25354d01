// Data parallelism (attention replicas, routed experts over all ranks) against one process:
// the tiny model's MoE exchange with replicas of different batch sizes and dummy steps, the
// engine's replicas in lockstep (forked ranks, 127.0.0.1), and `kimi serve -dp 2` in one command
// and as a two-"node" launch (--headless --data-parallel-start-rank 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <future>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "engine/dp_executor.h"
#include "engine/engine.h"
#include "model/model.h"
#include "parallel/tcp_store.h"
#include "parallel/world.h"
#include "greedy_trace.h"
#include "parallel_ranks.h"
#include "serve_process.h"
#include "test_util.h"

namespace kimi {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

using test::greedy_trace;
using test::load_trace;
using test::save_trace;

// Rank r of a tp x dp run (world rank d * tp + t: TP rank t of replica d) over `port`'s store:
// its replica's TP group, its DP group and the group of all ranks, as ParallelLaunch builds them.
struct DpRank {
  World world;
  ModelOptions options;
  DpRank(int rank, int port, bool expert_parallel, MoeExchange exchange = MoeExchange::AllGatherReduceScatter,
         int tp = 1, int dp = 2)
      : world(WorldOptions{.rank = rank, .size = tp * dp, .store_port = port, .serve_store = false, .timeout = 30000ms,
                           .identity = "tiny|dp"}) {
    const auto ranks = [](int first, int count, int stride) {
      std::vector<int> r;
      for (int i = 0; i < count; ++i) r.push_back(first + i * stride);
      return r;
    };
    const int replica = rank / tp, index = rank % tp;
    options.num_threads = 1;
    if (tp > 1) {
      for (int d = 0; d < dp; ++d) {  // every rank creates every group, in one order
        auto g = world.new_group("tp" + std::to_string(d), ranks(d * tp, tp, 1));
        if (d == replica) options.tensor_parallel = g;
      }
    }
    for (int t = 0; t < tp; ++t) {
      auto g = world.new_group("dp" + std::to_string(t), ranks(t, dp, tp));
      if (t == index) options.data_parallel = g;
    }
    options.expert_group = world.new_group("moe", ranks(0, tp * dp, 1));
    options.expert_parallel = expert_parallel;
    options.moe_exchange = exchange;
  }
};

const std::vector<int32_t> kLongPrompt{5, 17, 300, 42, 1000, 7, 7, 64};
const std::vector<int32_t> kShortPrompt{900, 12, 3};
constexpr int kLongSteps = 6, kShortSteps = 2;

// Replica 0 runs a longer prompt and more steps than replica 1, which then runs dummy steps
// until replica 0 is done: each must get exactly one process's logits and tokens, whatever the
// exchange (and with tp 2 inside each replica: the all-to-all's dispatch split over TP ranks).
void expect_replicas_match_one_process(bool expert_parallel, MoeExchange exchange, int tp = 1) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  test::GreedyTrace want_long, want_short;
  {  // the references, their threads gone before the ranks are forked
    Model one(model_dir, ModelOptions{.num_threads = 1});
    want_long = greedy_trace(one, kLongPrompt, kLongSteps);
    want_short = greedy_trace(one, kShortPrompt, kShortSteps);
  }
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const int world = 2 * tp;
  const auto codes = test::run_ranks(world, [&](int rank) {
    DpRank r(rank, port, expert_parallel, exchange, tp);
    Model replica(model_dir, r.options);
    const ModelConfig& c = replica.config();
    // Placement: under EP each of the `world` ranks holds E / world experts whole; without, all E
    // at 1 / world of their width.
    for (const LayerWeights& L : replica.weights().layers) {
      if (!L.moe) continue;
      const int64_t owned = expert_parallel ? c.n_routed_experts / world : c.n_routed_experts;
      const int64_t rows = expert_parallel ? c.moe_intermediate_size : c.moe_intermediate_size / world;
      if (L.moe->first_expert != (expert_parallel ? rank * owned : 0) || int64_t(L.moe->experts.size()) != owned ||
          L.moe->experts[0].gate.rows != rows || !L.moe->data_parallel || L.moe->exchange != exchange)
        return 4;
    }
    const bool first = rank / tp == 0;
    const test::GreedyTrace t = first ? greedy_trace(replica, kLongPrompt, kLongSteps) : greedy_trace(replica, kShortPrompt, kShortSteps);
    for (int i = 0; !first && i < kLongSteps - kShortSteps; ++i) replica.forward_dummy();
    save_trace(dir.path() / ("rank" + std::to_string(rank)), t);
    return 0;
  }, std::chrono::seconds(120), [&] { server.start(); });
  ASSERT_EQ(codes, std::vector<int>(size_t(world), 0));
  const auto expect_close = [](const test::GreedyTrace& got, const test::GreedyTrace& want, const std::string& which) {
    EXPECT_EQ(got.tokens, want.tokens) << which;
    ASSERT_EQ(got.logits.size(), want.logits.size()) << which;
    double worst = 0;
    for (size_t i = 0; i < want.logits.size(); ++i) worst = std::max(worst, double(std::fabs(got.logits[i] - want.logits[i])));
    // Float sums in another order (experts split over ranks, then summed): rounding only.
    EXPECT_LT(worst, 1e-3) << which;
  };
  for (int rank = 0; rank < world; ++rank)
    expect_close(load_trace(dir.path() / ("rank" + std::to_string(rank))), rank / tp == 0 ? want_long : want_short,
                 "replica " + std::to_string(rank / tp) + ", TP rank " + std::to_string(rank % tp));
}

TEST(DataParallel, ReplicasWithExpertParallelismMatchOneProcess) {
  expect_replicas_match_one_process(true, MoeExchange::AllGatherReduceScatter);
}
TEST(DataParallel, ReplicasWithExpertsSlicedMatchOneProcess) {
  expect_replicas_match_one_process(false, MoeExchange::AllGatherReduceScatter);
}
TEST(DataParallel, NaiveExchangeMatchesOneProcess) { expect_replicas_match_one_process(true, MoeExchange::Naive); }
TEST(DataParallel, AllToAllExchangeMatchesOneProcess) { expect_replicas_match_one_process(true, MoeExchange::AllToAll); }
TEST(DataParallel, AllToAllWithExpertsSlicedMatchesOneProcess) {
  expect_replicas_match_one_process(false, MoeExchange::AllToAll);
}
// tp 2 x dp 2 (4 processes): TP inside each replica, the all-to-all's dispatch shared by a
// replica's TP ranks and its results returned to both.
TEST(DataParallel, TensorAndDataParallelAllToAllMatchesOneProcess) {
  expect_replicas_match_one_process(true, MoeExchange::AllToAll, /*tp=*/2);
}
TEST(DataParallel, TensorAndDataParallelReduceScatterMatchesOneProcess) {
  expect_replicas_match_one_process(true, MoeExchange::AllGatherReduceScatter, /*tp=*/2);
}

// Several prompts of different lengths (the longer ones prefilled in chunks), greedy.
const std::vector<std::vector<int32_t>> kPrompts{
    {5, 17, 300, 42, 1000, 7, 7, 64, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
    {3, 1, 4, 1, 5},
    {900, 800, 700, 600, 500, 400, 300, 200, 100, 50, 25, 12, 6},
    {2, 7, 1, 8, 2, 8},
    {11, 22, 33}};

EngineConfig small_engine_config() {
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 4;
  ec.scheduler.max_num_batched_tokens = 8;
  ec.scheduler.max_model_len = 256;
  ec.num_kv_blocks_override = 64;
  return ec;
}

// Through the engines: rank 0's AsyncEngine holds replica 0 and a client of replica 1, whose
// leader runs the steps it is sent; requests go to the least loaded replica.
TEST(DataParallel, EngineReplicasGiveTheTokensOfOneEngine) {
  test::TempDir dir;
  const auto model_dir = test::make_tiny_model(dir);
  std::vector<std::vector<int32_t>> want;
  {
    Model one(model_dir, ModelOptions{.num_threads = 1});
    Engine engine(one, nullptr, small_engine_config());
    for (const auto& c : engine.generate(kPrompts, test::greedy(6))) want.push_back(c.at(0).token_ids);
  }
  TcpStoreServer server("127.0.0.1", 0, /*start=*/false);
  const int port = server.port();
  const auto codes = test::run_ranks(2, [&](int rank) {
    DpRank r(rank, port, /*expert_parallel=*/true);
    Model replica(model_dir, r.options);
    auto link = r.world.new_group("link1", {0, 1});
    if (rank == 1) {
      run_data_parallel_leader(replica, *link, /*kv_cache_bytes=*/12345678);
      return 0;
    }
    int bad = 0;
    {
      DataParallelReplicas others;
      others.kv_cache_bytes.push_back(receive_replica_kv_cache_bytes(*link));
      if (others.kv_cache_bytes[0] != 12345678) return 6;
      others.executors.push_back(
          [link](const KvCacheConfig& kv) -> std::unique_ptr<Executor> { return std::make_unique<DataParallelClient>(link, kv); });
      AsyncEngine engine(replica, nullptr, small_engine_config(), std::move(others));
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (size_t i = 0; i < kPrompts.size(); ++i)
        streams.push_back(engine.add_request("r" + std::to_string(i), kPrompts[i], test::greedy(6)));
      for (size_t i = 0; i < streams.size(); ++i) {
        std::vector<int32_t> got;
        while (auto o = streams[i]->next()) got.insert(got.end(), o->token_ids.begin(), o->token_ids.end());
        if (got != want[i]) {
          std::fprintf(stderr, "prompt %zu: other tokens than one engine's\n", i);
          bad = 3;
        }
      }
      // Both replicas served some, each labelled in /metrics.
      const std::string metrics = engine.render_metrics("m");
      for (const char* label : {"engine=\"0\"", "engine=\"1\""})
        if (metrics.find(std::string("kimi:prompt_tokens_total{model_name=\"m\",") + label + "} 0") != std::string::npos ||
            metrics.find(label) == std::string::npos) {
          std::fprintf(stderr, "replica %s served nothing:\n%s\n", label, metrics.c_str());
          bad = 5;
        }
    }
    return bad;
  }, std::chrono::seconds(120), [&] { server.start(); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

int free_port() {
  TcpStoreServer probe("127.0.0.1", 0);
  return probe.port();
}

// Greedy completions of the prompts, sent at once so that both replicas work together.
std::vector<std::string> completions(int port) {
  std::vector<std::future<json>> answers;
  for (const auto& p : kPrompts)
    answers.push_back(std::async(std::launch::async, [port, p] {
      return test::post(port, "/v1/completions",
                        {{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
    }));
  std::vector<std::string> texts;
  for (auto& a : answers) {
    const json j = a.get();
    texts.push_back(j.is_object() && j.contains("choices") ? j["choices"][0].value("text", "") : "<no answer>");
  }
  return texts;
}

// Requests replica `engine` has finished at max_tokens, from /metrics.
int64_t finished_on(int port, int engine) {
  const std::string metrics = test::get(port, "/metrics");
  std::istringstream lines(metrics);
  const std::string label = "engine=\"" + std::to_string(engine) + "\"";
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("kimi:request_success_total{") && line.find(label) != std::string::npos &&
        line.find("finished_reason=\"length\"") != std::string::npos)
      return std::stoll(line.substr(line.rfind(' ') + 1));
  ADD_FAILURE() << "no request_success_total series for " << label << " in\n" << metrics;
  return -1;
}

// Replica `engine`'s KV cache blocks, from /metrics.
int64_t kv_blocks_of(int port, int engine) {
  const std::string metrics = test::get(port, "/metrics");
  std::istringstream lines(metrics);
  const std::string label = "engine=\"" + std::to_string(engine) + "\"", key = "num_gpu_blocks=\"";
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("kimi:cache_config_info{") && line.find(label) != std::string::npos &&
        line.find(key) != std::string::npos)
      return std::stoll(line.substr(line.find(key) + key.size()));
  ADD_FAILURE() << "no cache_config_info for " << label << " in\n" << metrics;
  return -1;
}

// vLLM's X-data-parallel-rank header pins requests to a replica (without it, requests sent one
// at a time spread over the idle replicas); a rank out of range or not a number is a 400.
void expect_header_pins_replica(int port) {
  const int64_t before0 = finished_on(port, 0), before1 = finished_on(port, 1);
  const json body{{"prompt", kPrompts[1]}, {"max_tokens", 2}, {"ignore_eos", true}};
  for (int i = 0; i < 3; ++i) test::post(port, "/v1/completions", body, nullptr, {{"X-data-parallel-rank", "1"}});
  test::post(port, "/v1/completions", body, nullptr, {{"x-data-parallel-rank", "1"}});  // any case
  EXPECT_EQ(finished_on(port, 1) - before1, 4);
  EXPECT_EQ(finished_on(port, 0) - before0, 0);
  for (const char* bad : {"2", "-1", "one", "1x"}) {
    int status = 0;
    const json err = test::post(port, "/v1/completions", body, &status, {{"X-data-parallel-rank", bad}});
    EXPECT_EQ(status, 400) << "X-data-parallel-rank: '" << bad << "': " << err.dump();
  }
}

// `kimi serve -dp 2 --enable-expert-parallel` (one command, two processes), then the same run as
// two "nodes": each must answer exactly as one process does.
TEST(DataParallelServe, OneCommandAndTwoNodesAnswerAsOneProcess) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir).string();
  std::vector<std::string> want;
  {
    test::ServeProcess single(model, (dir.path() / "single.log").string());
    ASSERT_GT(single.port(), 0) << single.log();
    want = completions(single.port());
  }
  ASSERT_EQ(want.size(), kPrompts.size());
  {
    test::ServeProcess dp(model, (dir.path() / "dp.log").string(),
                          {"-dp", "2", "--enable-expert-parallel", "--data-parallel-rpc-port", std::to_string(free_port())},
                          120);
    ASSERT_GT(dp.port(), 0) << dp.log();
    EXPECT_NE(dp.log().find("data parallel: 2 replicas"), std::string::npos) << dp.log();
    EXPECT_EQ(completions(dp.port()), want) << dp.log();
    const std::string metrics = test::get(dp.port(), "/metrics");
    EXPECT_NE(metrics.find("engine=\"1\""), std::string::npos) << metrics;
    expect_header_pins_replica(dp.port());
  }
  {
    const std::string store = std::to_string(free_port());
    // Node 1 first: it waits for node 0's store (the order a cluster's nodes start in is arbitrary).
    // Node 1's KV cache is its own: half node 0's (the ServeProcess default, 32 MiB).
    test::ServeProcess node1(model, (dir.path() / "node1.log").string(),
                             {"-dp", "2", "--data-parallel-size-local", "1", "--data-parallel-start-rank", "1",
                              "--headless", "--data-parallel-rpc-port", store, "--kv-cache-memory", "16777216"},
                             0);
    test::ServeProcess node0(model, (dir.path() / "node0.log").string(),
                             {"-dp", "2", "--data-parallel-size-local", "1", "--data-parallel-rpc-port", store}, 120);
    ASSERT_GT(node0.port(), 0) << node0.log() << "\nnode 1:\n" << node1.log();
    EXPECT_EQ(completions(node0.port()), want) << node0.log() << "\nnode 1:\n" << node1.log();
    const int64_t blocks0 = kv_blocks_of(node0.port(), 0), blocks1 = kv_blocks_of(node0.port(), 1);
    EXPECT_GT(blocks1, 0);
    EXPECT_EQ(blocks1 * 2, blocks0) << "replica 1's KV cache is sized by node 0's budget, not its own node's";
  }
}

// A replica's node dies while the server is idle: the API server notices within seconds (no
// process of its own watches the other node), says so and exits non-zero.
TEST(DataParallelServe, ServerExitsWhenAnotherNodesReplicaDies) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir).string();
  const std::string store = std::to_string(free_port());
  test::ServeProcess node1(model, (dir.path() / "node1.log").string(),
                           {"-dp", "2", "--data-parallel-size-local", "1", "--data-parallel-start-rank", "1", "--headless",
                            "--data-parallel-rpc-port", store},
                           0);
  test::ServeProcess node0(model, (dir.path() / "node0.log").string(),
                           {"-dp", "2", "--data-parallel-size-local", "1", "--data-parallel-rpc-port", store}, 120);
  ASSERT_GT(node0.port(), 0) << node0.log() << "\nnode 1:\n" << node1.log();
  node1.stop(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<int> status = node0.wait_exit(20);
  ASSERT_TRUE(status.has_value()) << "still serving 20 s after the other node died:\n" << node0.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << node0.log();
  EXPECT_NE(node0.log().find("a data-parallel replica was lost"), std::string::npos) << node0.log();
  EXPECT_LT(test::seconds_since(t0), 5.0) << node0.log();
}

}  // namespace
}  // namespace kimi
