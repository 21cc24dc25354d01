// Disaggregated prefill over UCX on the tiny model, two engines in one process (each connector
// with its own UCX worker, 127.0.0.1 only, UCX_TLS=tcp unless the environment says otherwise):
// a producer prefills and holds the prompt's blocks, a consumer pulls them and decodes. Greedy
// outputs must equal one instance's; faults (no producer, a producer that never answers, a
// handshake mismatch) recompute or fail per kv_load_failure_policy; every block of both pools
// returns, on notification or on the hold's timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "common/rng.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "kvtransfer/kv_transfer_config.h"
#include "kvtransfer/protocol.h"
#include "kvtransfer/ucx_transport.h"
#include "kvtransfer/ucx_connector.h"
#include "test_util.h"

namespace kimi {
namespace {

using kvtransfer::KvTransferConfig;
using kvtransfer::parse_kv_transfer_config;
using kvtransfer::UcxKvConnector;
using Clock = std::chrono::steady_clock;

// A TCP listener that accepts and never speaks: a producer that hangs.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t len = sizeof sa;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

KvTransferParams to_decode_remotely() {
  KvTransferParams p;
  p.do_remote_decode = true;
  return p;
}

// Where a consumer would look for a producer's blocks.
KvTransferParams remote_at(int port, std::vector<int32_t> blocks, int64_t num_tokens) {
  KvTransferParams p;
  p.do_remote_prefill = true;
  p.remote_block_ids = std::move(blocks);
  p.remote_host = "127.0.0.1";
  p.remote_port = port;
  p.remote_request_id = std::string(1, 'x');  // not = "x": GCC 12 warns falsely there (-Wrestrict)
  p.remote_num_tokens = num_tokens;
  return p;
}

// A port nothing listens on (bound then closed).
int dead_port() {
  SilentListener l;
  return l.port();
}

class KvTransferTest : public test::TinyModelTest {
 protected:
  static void SetUpTestSuite() {
    setenv("UCX_TLS", "tcp", 0);  // loopback TCP everywhere; shm where the caller chooses it
    TinyModelTest::SetUpTestSuite();
  }

  void TearDown() override {
    for (auto& e : owned_) {
      EXPECT_FALSE(e->has_unfinished());
      EXPECT_EQ(e->kv_cache().pool().check(), "");
      EXPECT_EQ(e->kv_cache().pool().num_free(), e->kv_cache().pool().num_blocks()) << "leaked KV blocks";
    }
    owned_.clear();
  }

  static std::string role_json(const char* role, const std::string& extra = "") {
    return std::string(R"({"kv_connector":"UcxConnector","kv_role":")") + role +
           R"(","kv_ip":"127.0.0.1","kv_port":0)" + extra + "}";
  }

  static EngineConfig config(KvCacheDtype dtype, const std::string& kv_json = "", int64_t block_size = 4) {
    EngineConfig c;
    c.block_size = block_size;
    c.scheduler.max_model_len = 128;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_num_seqs = 16;
    c.kv_cache_dtype = dtype;
    c.num_kv_blocks_override = 256 / (block_size / 4);
    if (!kv_json.empty()) c.kv_connector_factory = kvtransfer::make_kv_connector_factory(parse_kv_transfer_config(kv_json));
    return c;
  }
  Engine& engine(const EngineConfig& c) {
    owned_.push_back(std::make_unique<Engine>(*model_, nullptr, c));
    return *owned_.back();
  }
  static UcxKvConnector& ucx(Engine& e) { return dynamic_cast<UcxKvConnector&>(*e.kv_connector()); }

  static std::vector<int32_t> prompt(uint64_t seed, size_t len) {
    Rng rng(seed);
    std::vector<int32_t> p(len);
    for (auto& t : p) t = int32_t(rng.next_u64() % 1024);
    return p;
  }
  static SamplingParams greedy(int64_t max_tokens) { return test::greedy(max_tokens); }

  struct Result {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::None;
    std::string error;
    std::optional<KvTransferParams> kv;
  };
  // Steps e until request id finishes (at most 30 s).
  static Result run(Engine& e, const std::string& id) {
    Result r;
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < until) {
      bool done = false;
      for (RequestOutput& o : e.step()) {
        if (o.request_id != id) continue;
        r.tokens.insert(r.tokens.end(), o.token_ids.begin(), o.token_ids.end());
        if (o.finished) {
          r.finish = o.finish_reason;
          r.error = o.error;
          r.kv = o.kv_transfer_params;
          done = true;
        }
      }
      if (done) return r;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ADD_FAILURE() << "request " << id << " did not finish in 30 s";
    return r;
  }
  static KvTransferParams prefill(Engine& p, const std::string& id, const std::vector<int32_t>& tokens) {
    SamplingParams s = greedy(1);
    s.kv_transfer_params = to_decode_remotely();
    p.add_request(id, tokens, s);
    Result r = run(p, id);
    EXPECT_EQ(r.finish, FinishReason::Length);
    EXPECT_TRUE(r.kv.has_value());
    return r.kv.value_or(KvTransferParams{});
  }
  static Result decode(Engine& d, const std::string& id, const std::vector<int32_t>& tokens, const KvTransferParams& kv,
                       int64_t max_tokens) {
    SamplingParams s = greedy(max_tokens);
    s.kv_transfer_params = kv;
    d.add_request(id, tokens, s);
    return run(d, id);
  }
  // Steps e (the producer) until its pool is whole again, at most `limit`.
  static bool drains(Engine& e, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      e.step();
      if (e.kv_cache().pool().num_free() == e.kv_cache().pool().num_blocks()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  void one_p_one_d(KvCacheDtype dtype) {
    Engine& single = engine(config(dtype));
    Engine& p = engine(config(dtype, role_json("kv_producer", R"(,"engine_id":"prefill-0")")));
    Engine& d = engine(config(dtype, role_json("kv_consumer")));
    for (size_t len : {2, 3, 4, 5, 9, 17, 30}) {
      const auto tokens = prompt(len, len);
      const auto want = single.generate({tokens}, greedy(8))[0][0].token_ids;
      const std::string id = "r" + std::to_string(len);
      const KvTransferParams kv = prefill(p, id, tokens);
      EXPECT_TRUE(kv.do_remote_prefill);
      EXPECT_FALSE(kv.do_remote_decode);
      EXPECT_EQ(kv.remote_engine_id, "prefill-0");
      EXPECT_EQ(kv.remote_host, "127.0.0.1");
      EXPECT_EQ(kv.remote_port, ucx(p).port());
      EXPECT_EQ(kv.remote_num_tokens, int64_t(len));
      EXPECT_EQ(int64_t(kv.remote_block_ids.size()), (int64_t(len) + 3) / 4);  // the prompt's blocks
      EXPECT_EQ(ucx(p).held().size(), 1);
      const int64_t pulled_before = ucx(d).bytes_pulled();
      const Result got = decode(d, id, tokens, kv, 8);
      EXPECT_EQ(got.error, "");
      EXPECT_EQ(got.tokens, want) << "prompt length " << len;
      // The prompt's full blocks before its last token came over the wire.
      const int64_t pulled_blocks = (int64_t(len) - 1) / 4;
      EXPECT_EQ(ucx(d).bytes_pulled() - pulled_before, pulled_blocks * int64_t(KvStorage::bytes_per_block(model_->config(), 4, dtype)))
          << len;
      EXPECT_TRUE(drains(p, std::chrono::seconds(5))) << "the producer's blocks were not released after the pull";
    }
    EXPECT_EQ(ucx(p).held().num_expired_total(), 0);
    EXPECT_EQ(ucx(p).held().size(), 0);
    const MetricsSnapshot m = d.metrics().snapshot();
    EXPECT_EQ(int64_t(m.kv_transfer_bytes), ucx(d).bytes_pulled());
    EXPECT_EQ(m.kv_transfer_tokens, 0u + 0 + 0 + 1 * 4 + 2 * 4 + 4 * 4 + 7 * 4);  // lengths 5, 9, 17, 30
    EXPECT_EQ(m.kv_transfer_loads, 4u);
    EXPECT_EQ(m.kv_transfer_failures, 0u);
  }

  std::vector<std::unique_ptr<Engine>> owned_;
};

TEST_F(KvTransferTest, OneProducerOneConsumerGreedyEqualsOneInstanceBf16) { one_p_one_d(KvCacheDtype::BFloat16); }
TEST_F(KvTransferTest, OneProducerOneConsumerGreedyEqualsOneInstanceFp8) { one_p_one_d(KvCacheDtype::Fp8E4m3); }
TEST_F(KvTransferTest, OneProducerOneConsumerGreedyEqualsOneInstanceFloat32) { one_p_one_d(KvCacheDtype::Float32); }

TEST_F(KvTransferTest, TwoProducersTwoConsumersWithOneProducerKilled) {
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  Engine& p0 = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer", R"(,"engine_id":"p0")")));
  auto p1 = std::make_unique<Engine>(*model_, nullptr, config(KvCacheDtype::BFloat16, role_json("kv_producer", R"(,"engine_id":"p1")")));
  Engine* d[2] = {&engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer"))),
                  &engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")))};
  const int n = 8;
  std::vector<std::vector<int32_t>> prompts, want;
  std::vector<KvTransferParams> kv;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(prompt(200 + i, 9 + 3 * size_t(i)));
    want.push_back(single.generate({prompts.back()}, greedy(7))[0][0].token_ids);
    kv.push_back(prefill(i % 2 ? *p1 : p0, "q" + std::to_string(i), prompts.back()));
    EXPECT_EQ(kv.back().remote_engine_id, i % 2 ? "p1" : "p0");
  }
  // p1 dies with its blocks held: its requests are recomputed by their consumers.
  p1.reset();
  for (int i = 0; i < n; ++i) {
    SamplingParams s = greedy(7);
    s.kv_transfer_params = kv[size_t(i)];
    d[(i / 2) % 2]->add_request("q" + std::to_string(i), prompts[size_t(i)], s);
  }
  std::map<std::string, std::vector<int32_t>> got;
  int finished = 0;
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (finished < n && Clock::now() < until) {
    for (Engine* e : d)
      for (RequestOutput& o : e->step()) {
        EXPECT_EQ(o.error, "");
        auto& t = got[o.request_id];
        t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
        finished += o.finished;
      }
  }
  ASSERT_EQ(finished, n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(got["q" + std::to_string(i)], want[size_t(i)]) << i;
  // Half the loads failed (p1's) and were recomputed; p0's blocks all came back.
  EXPECT_EQ(d[0]->metrics().snapshot().kv_transfer_failures + d[1]->metrics().snapshot().kv_transfer_failures, 4u);
  EXPECT_EQ(d[0]->metrics().snapshot().kv_transfer_loads + d[1]->metrics().snapshot().kv_transfer_loads, 8u);
  EXPECT_TRUE(drains(p0, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, BlocksMoveInChunksOfAnySize) {
  // The producer sends one block per chunk, the consumer receives three per chunk: the stream is
  // cut differently on each side and the KV still lands whole.
  const int64_t block_bytes = int64_t(KvStorage::bytes_per_block(model_->config(), 4, KvCacheDtype::BFloat16));
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer", R"(,"kv_connector_extra_config":{"transfer_chunk_bytes":1})")));
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_chunk_bytes":)" +
                                                                               std::to_string(3 * block_bytes) + "}")));
  const auto tokens = prompt(11, 42);
  const auto want = single.generate({tokens}, greedy(6))[0][0].token_ids;
  EXPECT_EQ(decode(d, "a", tokens, prefill(p, "a", tokens), 6).tokens, want);
  EXPECT_EQ(ucx(d).bytes_pulled(), 10 * block_bytes);
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, ConsumerPrefixCacheHitPullsOnlyWhatIsMissing) {
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  // Only a listed producer's KV is shared through the prefix cache.
  Engine& d = engine(config(KvCacheDtype::BFloat16,
                            role_json("kv_consumer", R"(,"kv_connector_extra_config":{"trusted_producers":["127.0.0.1"]})")));
  const auto shared = prompt(7, 30);
  const auto want = single.generate({shared}, greedy(6))[0][0].token_ids;
  const int64_t block_bytes = int64_t(KvStorage::bytes_per_block(model_->config(), 4, KvCacheDtype::BFloat16));
  EXPECT_EQ(decode(d, "a", shared, prefill(p, "a", shared), 6).tokens, want);
  EXPECT_EQ(ucx(d).bytes_pulled(), 7 * block_bytes);
  // The same prompt again: all 7 full blocks are in the consumer's prefix cache; nothing is
  // pulled, but the producer still hears that it may release.
  EXPECT_EQ(decode(d, "b", shared, prefill(p, "b", shared), 6).tokens, want);
  EXPECT_EQ(ucx(d).bytes_pulled(), 7 * block_bytes);
  EXPECT_EQ(d.stats().prefix_hits, 28);
  // A prompt sharing the first 3 blocks pulls the 4 others.
  auto other = shared;
  other[13] = 5;
  const auto want_other = single.generate({other}, greedy(6))[0][0].token_ids;
  EXPECT_EQ(decode(d, "c", other, prefill(p, "c", other), 6).tokens, want_other);
  EXPECT_EQ(ucx(d).bytes_pulled(), 11 * block_bytes);
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

// A client names the producer: without a list the consumer pulls from any but shares none of that
// KV (a client's own peer could plant KV for a prompt others send); with one it refuses the rest.
TEST_F(KvTransferTest, KvFromAnUnlistedProducerStaysOutOfThePrefixCache) {
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  const auto shared = prompt(7, 30);
  const auto want = single.generate({shared}, greedy(6))[0][0].token_ids;
  const int64_t block_bytes = int64_t(KvStorage::bytes_per_block(model_->config(), 4, KvCacheDtype::BFloat16));
  EXPECT_EQ(decode(d, "a", shared, prefill(p, "a", shared), 6).tokens, want);
  EXPECT_EQ(decode(d, "b", shared, prefill(p, "b", shared), 6).tokens, want);
  EXPECT_EQ(ucx(d).bytes_pulled(), 14 * block_bytes);  // pulled twice: nothing was cached
  EXPECT_EQ(d.stats().prefix_hits, 0);
  // Its own requests still share their blocks.
  EXPECT_EQ(d.generate({shared}, greedy(6))[0][0].token_ids, want);
  EXPECT_EQ(d.generate({shared}, greedy(6))[0][0].token_ids, want);
  EXPECT_EQ(d.stats().prefix_hits, 28);
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));

  // Listed by host and port: another port of the same host is refused before anything is pulled.
  const std::string listed = "127.0.0.1:" + std::to_string(ucx(p).port());
  Engine& strict = engine(config(KvCacheDtype::BFloat16,
                                 role_json("kv_consumer", R"(,"kv_connector_extra_config":{"trusted_producers":[")" +
                                                              listed + R"("]})")));
  SamplingParams s = greedy(2);
  s.kv_transfer_params = remote_at(dead_port(), {0, 1, 2, 3, 4, 5, 6, 7}, 30);
  try {
    strict.add_request("c", shared, s);
    ADD_FAILURE() << "an unlisted producer was accepted";
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find("trusted_producers"), std::string::npos) << e.what();
  }
  EXPECT_EQ(decode(strict, "d", shared, prefill(p, "d", shared), 6).tokens, want);
  EXPECT_EQ(decode(strict, "e", shared, prefill(p, "e", shared), 6).tokens, want);
  EXPECT_EQ(ucx(strict).bytes_pulled(), 7 * block_bytes);  // the second found the first's blocks
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, OtherSequencesKeepDecodingWhileOneWaitsForItsKv) {
  SilentListener hang;
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_timeout":1.5})")));
  const auto a = prompt(1, 9), b = prompt(2, 13);
  const auto want_a = single.generate({a}, greedy(30))[0][0].token_ids;
  const auto want_b = single.generate({b}, greedy(5))[0][0].token_ids;
  d.add_request("local", a, greedy(30));
  const KvTransferParams kv = remote_at(hang.port(), {1, 2, 3, 4}, 13);
  SamplingParams s = greedy(5);
  s.kv_transfer_params = kv;
  d.add_request("remote", b, s);
  // While "remote" waits for the producer that never answers, "local" runs to its end.
  Result local = run(d, "local");
  EXPECT_EQ(local.tokens, want_a);
  EXPECT_EQ(d.scheduler().num_loading(), 1);
  // Then the transfer times out and the prompt is recomputed here (policy recompute).
  Result remote = run(d, "remote");
  EXPECT_EQ(remote.error, "");
  EXPECT_EQ(remote.tokens, want_b);
}

TEST_F(KvTransferTest, TransferTimeoutRecomputesOrFailsPerPolicy) {
  SilentListener hang;
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  const auto tokens = prompt(3, 21);
  const auto want = single.generate({tokens}, greedy(6))[0][0].token_ids;
  const KvTransferParams kv = remote_at(hang.port(), {0, 1, 2, 3, 4, 5}, 21);
  Engine& rec = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_timeout":0.5})")));
  const auto t0 = Clock::now();
  Result r = decode(rec, "a", tokens, kv, 6);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.tokens, want);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(rec.metrics().snapshot().kv_transfer_failures, 1u);
  Engine& fail = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer",
                                                                  R"(,"kv_load_failure_policy":"fail","kv_connector_extra_config":{"transfer_timeout":0.5})")));
  Result f = decode(fail, "b", tokens, kv, 6);
  EXPECT_EQ(f.finish, FinishReason::Abort);
  EXPECT_NE(f.error.find("timed out"), std::string::npos) << f.error;
  EXPECT_TRUE(f.tokens.empty());
}

TEST_F(KvTransferTest, UnreachableProducerRecomputesOrFails) {
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  const auto tokens = prompt(4, 14);
  const auto want = single.generate({tokens}, greedy(5))[0][0].token_ids;
  const KvTransferParams kv = remote_at(dead_port(), {0, 1, 2, 3}, 14);
  Engine& rec = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_timeout":5})")));
  Result r = decode(rec, "a", tokens, kv, 5);
  EXPECT_EQ(r.tokens, want);
  Engine& fail = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_load_failure_policy":"fail","kv_connector_extra_config":{"transfer_timeout":5})")));
  Result f = decode(fail, "b", tokens, kv, 5);
  EXPECT_EQ(f.finish, FinishReason::Abort);
  EXPECT_NE(f.error.find("loading the prompt's KV"), std::string::npos) << f.error;
}

TEST_F(KvTransferTest, ProducerFreesHeldBlocksAfterTheTimeout) {
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer", R"(,"kv_connector_extra_config":{"abort_request_timeout":0.3})")));
  const KvTransferParams kv = prefill(p, "a", prompt(5, 18));
  EXPECT_EQ(kv.remote_block_ids.size(), 5u);
  EXPECT_EQ(p.stats().kv_blocks_used, 5);  // held for a consumer that never comes
  EXPECT_TRUE(p.has_kv_transfers());
  EXPECT_FALSE(drains(p, std::chrono::milliseconds(100)));
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
  EXPECT_EQ(ucx(p).held().num_expired_total(), 1);
  EXPECT_FALSE(p.has_kv_transfers());
  // A consumer arriving after the timeout finds nothing and (policy recompute) computes it all.
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  const auto want = single.generate({prompt(5, 18)}, greedy(4))[0][0].token_ids;
  Result r = decode(d, "a", prompt(5, 18), kv, 4);
  EXPECT_EQ(r.tokens, want);
  EXPECT_EQ(ucx(d).bytes_pulled(), 0);
}

TEST_F(KvTransferTest, HandshakeMismatchIsAClearErrorAndTheProducerStillReleases) {
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  Engine& d = engine(config(KvCacheDtype::Float32, role_json("kv_consumer", R"(,"kv_load_failure_policy":"fail")")));
  const auto tokens = prompt(6, 13);
  Result f = decode(d, "a", tokens, prefill(p, "a", tokens), 4);
  EXPECT_EQ(f.finish, FinishReason::Abort);
  EXPECT_NE(f.error.find("refused the handshake"), std::string::npos) << f.error;
  EXPECT_NE(f.error.find("KV cache dtype bfloat16 (producer) vs float32 (consumer)"), std::string::npos) << f.error;
  // The consumer's RELEASE frees the hold at once, long before its 120 s timeout.
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
  // A different block size is refused too.
  Engine& d8 = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_load_failure_policy":"fail")"), 8));
  Result g = decode(d8, "b", tokens, prefill(p, "b", tokens), 4);
  EXPECT_NE(g.error.find("block size 4 (producer) vs 8 (consumer)"), std::string::npos) << g.error;
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, ARefusedHandshakeEndsTheHoldItNamedWithoutARelease) {
  using namespace kvtransfer;
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  const auto tokens = prompt(6, 13);
  const KvTransferParams a = prefill(p, "a", tokens), b = prefill(p, "b", tokens);
  ASSERT_EQ(ucx(p).held().size(), 2);
  UcxWorker w;
  const Deadline deadline = SteadyClock::now() + std::chrono::seconds(10);
  const auto hello = [&](const KvStorage& kv, const KvTransferParams& params, const std::string& engine_id) {
    auto ep = UcxEndpoint::connect(w, "127.0.0.1", ucx(p).port());
    send_message(*ep,
                 MsgType::Hello,
                 {{"version", kProtocolVersion},
                  {"desc", desc_to_json(kv.block_desc())},
                  {"model", model_identity(model_->config())},
                  {"remote_request_id", params.remote_request_id},
                  {"remote_engine_id", engine_id}},
                 deadline);
    return recv_message(*ep, MsgType::Welcome, deadline);
  };
  // A different KV cache dtype: refused, and the hold of "a" ends with no RELEASE sent.
  const nlohmann::json refused = hello(KvStorage(model_->config(), 1, 4, KvCacheDtype::Float32), a, a.remote_engine_id);
  EXPECT_FALSE(refused.value("ok", true));
  EXPECT_EQ(ucx(p).held().size(), 1);
  // The wrong producer (another engine id): refused by the producer itself, "b" released.
  const nlohmann::json other = hello(KvStorage(model_->config(), 1, 4, KvCacheDtype::BFloat16), b, "someone-else");
  EXPECT_FALSE(other.value("ok", true));
  EXPECT_NE(other.value("error", std::string()).find("not remote_engine_id 'someone-else'"), std::string::npos)
      << other.dump();
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, AHostilePeerIsRefusedAndTheProducerKeepsServing) {
  using namespace kvtransfer;
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  const auto tokens = prompt(11, 13);
  const KvTransferParams kv = prefill(p, "a", tokens);
  ASSERT_EQ(kv.remote_block_ids.size(), 4u);
  UcxWorker w;
  const Deadline deadline = SteadyClock::now() + std::chrono::seconds(10);
  {  // bytes that are no header: the producer drops this connection only
    auto ep = UcxEndpoint::connect(w, "127.0.0.1", ucx(p).port());
    std::vector<std::byte> junk(256, std::byte{0x41});
    ep->send(junk, deadline);
  }
  auto ep = UcxEndpoint::connect(w, "127.0.0.1", ucx(p).port());
  // A pull before any handshake is refused and leaves the hold to its real consumer.
  const KvStorage same(model_->config(), 1, 4, KvCacheDtype::BFloat16);
  const nlohmann::json pull = {{"remote_request_id", kv.remote_request_id},
                               {"block_ids", std::vector<int32_t>(64, kv.remote_block_ids[0])}};
  send_message(*ep, MsgType::Pull, pull, deadline);
  auto b = recv_message(*ep, MsgType::Blocks, deadline);
  EXPECT_FALSE(b.value("ok", true));
  EXPECT_NE(b.value("error", std::string()).find("no accepted handshake"), std::string::npos) << b.dump();
  EXPECT_EQ(ucx(p).held().size(), 1);
  // After a good handshake: one held block asked 64 times is refused (no amplified sends), as
  // is a block the request does not hold.
  send_message(*ep, MsgType::Hello,
               {{"version", kProtocolVersion}, {"desc", desc_to_json(same.block_desc())}, {"model", model_identity(model_->config())}},
               deadline);
  ASSERT_TRUE(recv_message(*ep, MsgType::Welcome, deadline).value("ok", false));
  const KvTransferParams kv2 = prefill(p, "b", tokens);
  send_message(*ep, MsgType::Pull,
               {{"remote_request_id", kv2.remote_request_id}, {"block_ids", std::vector<int32_t>(64, kv2.remote_block_ids[0])}},
               deadline);
  b = recv_message(*ep, MsgType::Blocks, deadline);
  EXPECT_NE(b.value("error", std::string()).find("64 blocks asked, 4 held"), std::string::npos) << b.dump();
  const KvTransferParams kv3 = prefill(p, "c", tokens);
  send_message(*ep, MsgType::Pull, {{"remote_request_id", kv3.remote_request_id}, {"block_ids", {255}}}, deadline);
  b = recv_message(*ep, MsgType::Blocks, deadline);
  EXPECT_NE(b.value("error", std::string()).find("block 255 is not held"), std::string::npos) << b.dump();
  EXPECT_EQ(ucx(p).held().size(), 1);  // refused pulls end their holds; "a" is still there
  // The producer still serves the real consumer of "a".
  const Result got = decode(d, "a", tokens, kv, 4);
  EXPECT_EQ(got.error, "");
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
  EXPECT_EQ(d.metrics().snapshot().kv_transfer_loads, 1u);
  EXPECT_EQ(d.metrics().snapshot().kv_transfer_failures, 0u);
}

TEST_F(KvTransferTest, AbortWhileLoadingReturnsTheBlocksWhenTheLoadEnds) {
  SilentListener hang;
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_timeout":0.5})")));
  const KvTransferParams kv = remote_at(hang.port(), {0, 1, 2}, 13);
  SamplingParams s = greedy(4);
  s.kv_transfer_params = kv;
  d.add_request("a", prompt(8, 13), s);
  d.step();
  EXPECT_EQ(d.stats().kv_blocks_used, 3);  // the prompt's full blocks, being written by the transfer
  EXPECT_TRUE(d.abort_request("a"));
  d.step();
  EXPECT_EQ(d.stats().kv_blocks_used, 3);  // not reused while the transfer may still write them
  EXPECT_TRUE(drains(d, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, ShutdownDoesNotWaitForATransfersDeadline) {
  SilentListener hang;
  auto d = std::make_unique<Engine>(*model_, nullptr, config(KvCacheDtype::BFloat16, role_json("kv_consumer", R"(,"kv_connector_extra_config":{"transfer_timeout":60})")));
  SamplingParams s = greedy(4);
  s.kv_transfer_params = remote_at(hang.port(), {0, 1, 2}, 13);
  d->add_request("a", prompt(8, 13), s);
  d->step();
  EXPECT_EQ(d->scheduler().num_loading(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the transfer thread is waiting on the wire
  const auto t0 = Clock::now();
  d.reset();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
}

TEST_F(KvTransferTest, RequestsWithoutAConnectorAreRefused) {
  Engine& e = engine(config(KvCacheDtype::BFloat16));
  SamplingParams s = greedy(1);
  s.kv_transfer_params = to_decode_remotely();
  EXPECT_THROW(e.add_request("a", prompt(1, 5), s), ParamError);
  s.kv_transfer_params = remote_at(1, {0}, 5);
  EXPECT_THROW(e.add_request("b", prompt(1, 5), s), ParamError);
  // A consumer refuses KV held for another prompt (here: of another length).
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  s.kv_transfer_params = remote_at(1, {0, 1}, 9);
  EXPECT_THROW(d.add_request("c", prompt(1, 8), s), ParamError);
  s.kv_transfer_params = remote_at(1, {0, 1}, 8);
  s.kv_transfer_params->remote_port = dead_port();
  s.max_tokens = 2;
  d.add_request("c", prompt(1, 8), s);  // accepted; recomputed here since nobody answers
  EXPECT_EQ(run(d, "c").tokens.size(), 2u);
}

TEST_F(KvTransferTest, SeveralSequencesOrPromptLogprobsAreServedWithoutTheTransfer) {
  // n > 1 and prompt logprobs need what a transfer skips (several sequences, the prompt's logits):
  // such requests run as if no kv_transfer_params came, on both sides, with nothing held.
  Engine& p = engine(config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  Engine& d = engine(config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  const auto tokens = prompt(7, 13);
  const KvTransferParams kv = prefill(p, "ok", tokens);  // a real hold, which the others must not pull
  SamplingParams two = greedy(1);
  two.n = 2;
  two.kv_transfer_params = to_decode_remotely();
  p.add_request("two", tokens, two);
  EXPECT_FALSE(run(p, "two").kv.has_value());
  EXPECT_EQ(ucx(p).held().size(), 1);  // only "ok"'s
  SamplingParams with_logprobs = greedy(3);
  with_logprobs.prompt_logprobs = 1;
  with_logprobs.kv_transfer_params = kv;
  d.add_request("lp", tokens, with_logprobs);
  const Result got = run(d, "lp");
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.tokens.size(), 3u);
  EXPECT_EQ(ucx(d).bytes_pulled(), 0);
  EXPECT_EQ(d.metrics().snapshot().kv_transfer_loads, 0u);
  EXPECT_EQ(decode(d, "ok", tokens, kv, 3).tokens, got.tokens);  // the same answer pulled
  EXPECT_TRUE(drains(p, std::chrono::seconds(5)));
}

TEST_F(KvTransferTest, AsyncEngineWakesForLoadsAndReleases) {
  Engine& single = engine(config(KvCacheDtype::BFloat16));
  const auto tokens = prompt(9, 22);
  const auto want = single.generate({tokens}, greedy(6))[0][0].token_ids;
  AsyncEngine p(*model_, nullptr, config(KvCacheDtype::BFloat16, role_json("kv_producer")));
  AsyncEngine d(*model_, nullptr, config(KvCacheDtype::BFloat16, role_json("kv_consumer")));
  SamplingParams s = greedy(1);
  s.kv_transfer_params = to_decode_remotely();
  auto ps = p.add_request("a", tokens, s);
  std::optional<KvTransferParams> kv;
  while (auto o = ps->next())
    if (o->finished) kv = o->kv_transfer_params;
  ASSERT_TRUE(kv.has_value());
  EXPECT_GT(p.stats().kv_blocks_used, 0);
  s = greedy(6);
  s.kv_transfer_params = kv;
  auto ds = d.add_request("a", tokens, s);
  std::vector<int32_t> got;
  while (auto o = ds->next()) got.insert(got.end(), o->token_ids.begin(), o->token_ids.end());
  EXPECT_EQ(got, want);
  // The producer's loop wakes on the release and frees the blocks without any new request.
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (p.stats().kv_blocks_used > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(p.stats().kv_blocks_used, 0);
}

TEST(KvTransferConfigTest, ParsesVllmFieldsAndRejectsUnknownOnes) {
  const auto c = parse_kv_transfer_config(
      R"({"kv_connector":"NixlConnector","kv_role":"kv_both","kv_port":14579,"engine_id":"e1","kv_buffer_device":"cpu",)"
      R"("kv_load_failure_policy":"fail","kv_connector_extra_config":{"abort_request_timeout":7,"transfer_timeout":2,"backends":["UCX"]}})");
  EXPECT_EQ(c.kv_role, kvtransfer::KvRole::Both);
  EXPECT_EQ(c.kv_port, 14579);
  EXPECT_EQ(c.engine_id, "e1");
  EXPECT_EQ(c.kv_load_failure_policy, KvLoadFailurePolicy::Fail);
  EXPECT_EQ(c.abort_request_timeout_s, 7);
  EXPECT_EQ(c.transfer_timeout_s, 2);
  EXPECT_EQ(parse_kv_transfer_config(R"({"kv_connector":"UcxConnector","kv_role":"kv_both","kv_connector_extra_config":{"transfer_chunk_bytes":4096}})")
                .transfer_chunk_bytes,
            4096);
  const auto d = parse_kv_transfer_config(R"({"kv_connector":"UcxConnector","kv_role":"kv_consumer"})");
  EXPECT_EQ(d.kv_load_failure_policy, KvLoadFailurePolicy::Recompute);
  EXPECT_FALSE(d.engine_id.empty());
  EXPECT_EQ(d.abort_request_timeout_s, 120);
  auto error = [](const std::string& json) {
    try {
      parse_kv_transfer_config(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"kv_both","kv_prot":1})").find("unknown key 'kv_prot'"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"MooncakeConnector","kv_role":"kv_both"})").find("'MooncakeConnector' is not supported"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector"})").find("kv_role is required"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"retry"})").find("recompute"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"kv_both","kv_connector_extra_config":{"x":1}})").find("unknown kv_connector_extra_config key 'x'"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"leader"})").find("kv_role must be"), std::string::npos);
  EXPECT_NE(error("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"trusted_producers":"h"}})").find("trusted_producers must be an array"), std::string::npos);
  EXPECT_NE(error(R"({"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"trusted_producers":[""]}})").find("each entry"), std::string::npos);
  const auto t = parse_kv_transfer_config(
      R"({"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"trusted_producers":["10.0.0.1","10.0.0.2:7000"]}})");
  EXPECT_EQ(t.trust("10.0.0.1", 5), ProducerTrust::Listed);
  EXPECT_EQ(t.trust("10.0.0.2", 7000), ProducerTrust::Listed);
  EXPECT_EQ(t.trust("10.0.0.2", 7001), ProducerTrust::Refused);
  EXPECT_EQ(t.trust("10.0.0.3", 7000), ProducerTrust::Refused);
  EXPECT_EQ(d.trust("anything", 1), ProducerTrust::Unlisted);
}

}  // namespace
}  // namespace kimi

namespace kimi {
namespace {

// The connectors alone on Kimi-K2.5's KV shape (61 layers, 512 + 64 per row, bf16, blocks of 16):
// the pulled blocks are byte-identical to the producer's, and the loopback bandwidth is printed
// (UCX_TLS as set; tcp by default here).
TEST(KvTransferConnector, RealKvShapeArrivesByteExactOverLoopback) {
  setenv("UCX_TLS", "tcp", 0);
  ModelConfig mc;
  mc.num_hidden_layers = 61;
  mc.kv_lora_rank = 512;
  mc.qk_rope_head_dim = 64;
  const int64_t blocks = 24, block_size = 16;
  KvStorage src(mc, blocks, block_size, KvCacheDtype::BFloat16), dst(mc, blocks, block_size, KvCacheDtype::BFloat16);
  const KvBlockDesc desc = src.block_desc();
  Rng rng(5);
  std::vector<std::byte> buf(size_t(desc.bytes));
  for (int32_t b = 0; b < blocks; ++b) {
    for (auto& x : buf) x = std::byte(rng.next_u64());
    src.write_block(b, desc, buf);
    std::fill(buf.begin(), buf.end(), std::byte{0});
    dst.write_block(b, desc, buf);
  }
  UcxKvConnector producer(parse_kv_transfer_config(R"({"kv_connector":"UcxConnector","kv_role":"kv_producer"})"), src, mc);
  UcxKvConnector consumer(parse_kv_transfer_config(R"({"kv_connector":"UcxConnector","kv_role":"kv_consumer"})"), dst, mc);
  // Producer blocks 0..15 (tail first, as the engine hands them over) go to consumer blocks 23..8.
  KvHoldRequest h{"r", {}, 16 * block_size};
  for (int32_t b = 15; b >= 0; --b) h.block_ids.push_back(b);
  const KvTransferParams kv = producer.hold(h);
  KvLoadJob job{"r", kv, kv.remote_block_ids, {}};
  for (int32_t b = 0; b < 16; ++b) job.local_block_ids.push_back(23 - b);
  const auto t0 = std::chrono::steady_clock::now();
  consumer.start_load(job);
  std::vector<KvLoadResult> done;
  while (done.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    done = consumer.take_finished_loads();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].ok) << done[0].error;
  EXPECT_EQ(done[0].bytes, 16 * desc.bytes);
  for (int32_t b = 0; b < 16; ++b) EXPECT_EQ(dst.read_block(23 - b), src.read_block(b)) << b;
  for (int32_t b = 0; b < 8; ++b) EXPECT_EQ(dst.read_block(b), std::vector<std::byte>(size_t(desc.bytes))) << "untouched block " << b;
  std::printf("pulled %lld blocks (%.1f MiB, %lld bytes per token) in %.1f ms: %.0f MiB/s (UCX_TLS=%s)\n", 16LL,
              double(16 * desc.bytes) / (1 << 20), (long long)(desc.bytes / block_size), s * 1e3,
              double(16 * desc.bytes) / (1 << 20) / s, std::getenv("UCX_TLS"));
  // The pull released the hold.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<std::vector<int32_t>> released;
  while (released.empty() && std::chrono::steady_clock::now() < until) released = producer.take_released();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], h.block_ids);
}

}  // namespace
}  // namespace kimi
