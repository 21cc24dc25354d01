// The serving engine on the tiny model: batching, chunked prefill, prefix caching, preemption,
// aborts, sampling reproducibility and the threaded front end. After every test the KV block
// accounting must balance: every block free (cached blocks count as free) and the pool consistent.
#include <gtest/gtest.h>

#include <thread>

#include "common/error.h"
#include "common/rng.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "test_util.h"

namespace kimi {
namespace {

class EngineTest : public test::TinyModelTest {
 protected:
  void TearDown() override {
    for (Engine* e : engines_) {
      EXPECT_FALSE(e->has_unfinished());
      EXPECT_EQ(e->kv_cache().pool().check(), "");
      EXPECT_EQ(e->kv_cache().pool().num_free(), e->kv_cache().pool().num_blocks()) << "leaked KV blocks";
    }
    engines_.clear();
    owned_.clear();
  }

  static EngineConfig config(int64_t kv_blocks = 512, int64_t batched_tokens = 256, bool caching = true) {
    EngineConfig c;
    c.block_size = 4;
    c.scheduler.max_model_len = 128;
    c.scheduler.max_num_batched_tokens = batched_tokens;
    c.scheduler.max_num_seqs = 64;
    c.kv_cache_bytes = size_t(kv_blocks) * KvStorage::bytes_per_block(model_->config(), c.block_size);
    c.enable_prefix_caching = caching;
    return c;
  }
  Engine& engine(const EngineConfig& c) {
    owned_.push_back(std::make_unique<Engine>(*model_, nullptr, c));
    engines_.push_back(owned_.back().get());
    return *owned_.back();
  }

  static std::vector<int32_t> prompt(uint64_t seed, size_t len) {
    Rng rng(seed);
    std::vector<int32_t> p(len);
    for (auto& t : p) t = int32_t(rng.next_u64() % 1024);  // ordinary tokens
    return p;
  }
  static SamplingParams greedy(int64_t max_tokens) { return test::greedy(max_tokens); }

  std::vector<std::unique_ptr<Engine>> owned_;
  std::vector<Engine*> engines_;
};

TEST_F(EngineTest, BatchedGreedyEqualsAlone) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < 8; ++i) prompts.push_back(prompt(i, 3 + 5 * i));
  Engine& batched = engine(config());
  const auto together = batched.generate(prompts, greedy(12));
  for (size_t i = 0; i < prompts.size(); ++i) {
    Engine& alone = engine(config());
    const auto single = alone.generate({prompts[i]}, greedy(12));
    EXPECT_EQ(together[i][0].token_ids, single[0][0].token_ids) << "prompt " << i;
    EXPECT_EQ(together[i][0].token_ids.size(), 12u);
    EXPECT_EQ(together[i][0].finish_reason, FinishReason::Length);
  }
}

TEST_F(EngineTest, ChunkedPrefillGivesTheSameLogits) {
  SamplingParams p = greedy(6);
  p.prompt_logprobs = 3;
  p.logprobs = 2;
  const auto long_prompt = prompt(99, 45);
  const auto whole = engine(config(512, 256)).generate({long_prompt}, p)[0][0];
  const auto chunked = engine(config(512, 7)).generate({long_prompt}, p)[0][0];
  EXPECT_EQ(whole.token_ids, chunked.token_ids);
  ASSERT_EQ(whole.prompt_logprobs.size(), long_prompt.size() - 1);
  ASSERT_EQ(chunked.prompt_logprobs.size(), whole.prompt_logprobs.size());
  for (size_t i = 0; i < whole.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(whole.prompt_logprobs[i][0].token, long_prompt[i + 1]);
    EXPECT_NEAR(whole.prompt_logprobs[i][0].logprob, chunked.prompt_logprobs[i][0].logprob, 1e-4) << i;
  }
  for (size_t i = 0; i < whole.logprobs.size(); ++i) EXPECT_NEAR(whole.logprobs[i].logprob, chunked.logprobs[i].logprob, 1e-4);
}

TEST_F(EngineTest, PrefixCacheHitGivesTheSameOutputAsAMiss) {
  const auto shared = prompt(7, 30);
  Engine& e = engine(config());
  const auto first = e.generate({shared}, greedy(8))[0][0];
  EXPECT_EQ(e.stats().prefix_hits, 0);
  const auto second = e.generate({shared}, greedy(8))[0][0];
  EXPECT_EQ(e.stats().prefix_hits, 28);  // 7 full blocks of 4; the last token is always computed
  EXPECT_EQ(first.token_ids, second.token_ids);
  const auto uncached = engine(config(512, 256, false)).generate({shared}, greedy(8))[0][0];
  EXPECT_EQ(first.token_ids, uncached.token_ids);
  // A prompt sharing only a prefix reuses just those blocks.
  auto other = shared;
  other[13] = 5;
  e.generate({other}, greedy(2));
  EXPECT_EQ(e.stats().prefix_hits, 28 + 12);
}

TEST_F(EngineTest, PreemptionUnderATinyBudgetCompletesEverythingTheSame) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < 6; ++i) prompts.push_back(prompt(100 + i, 10 + 3 * i));
  const auto roomy = engine(config()).generate(prompts, greedy(20));
  Engine& tight = engine(config(32));  // 32 blocks of 4 tokens: about one long sequence at a time... plus
  const auto squeezed = tight.generate(prompts, greedy(20));
  EXPECT_GT(tight.stats().preemptions, 0);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(roomy[i][0].token_ids, squeezed[i][0].token_ids) << i;
}

TEST_F(EngineTest, AbortFreesEveryBlock) {
  Engine& e = engine(config());
  e.add_request("a", prompt(1, 20), greedy(50));
  e.add_request("b", prompt(2, 9), greedy(50));
  for (int i = 0; i < 3; ++i) e.step();
  EXPECT_GT(e.stats().kv_blocks_used, 0);
  EXPECT_TRUE(e.abort_request("a"));
  EXPECT_FALSE(e.abort_request("nope"));
  bool saw_abort = false;
  for (const auto& o : e.step()) saw_abort |= o.request_id == "a" && o.finished && o.finish_reason == FinishReason::Abort;
  EXPECT_TRUE(saw_abort);
  EXPECT_TRUE(e.abort_request("b"));
  e.step();
}

TEST_F(EngineTest, SeededSamplingIsTheSameAloneOrBatched) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 10;
  p.ignore_eos = true;
  const auto q = prompt(5, 12);
  const auto alone = engine(config()).generate({q}, p)[0][0];
  Engine& e = engine(config());
  std::vector<std::vector<int32_t>> batch = {prompt(6, 7), q, prompt(8, 20)};
  const auto together = e.generate(batch, p);
  EXPECT_EQ(alone.token_ids, together[1][0].token_ids);
}

TEST_F(EngineTest, NCompletionsShareThePromptBlocks) {
  SamplingParams p;
  p.n = 3;
  p.temperature = 1.0f;
  p.seed = 9;
  p.max_tokens = 6;
  p.ignore_eos = true;
  Engine& e = engine(config());
  const auto q = prompt(11, 26);
  e.add_request("multi", q, p);
  std::vector<std::vector<int32_t>> tokens(3);
  std::vector<int64_t> cached(3);
  while (e.has_unfinished())
    for (const auto& o : e.step()) {
      tokens[size_t(o.index)].insert(tokens[size_t(o.index)].end(), o.token_ids.begin(), o.token_ids.end());
      cached[size_t(o.index)] = o.cached_tokens;
    }
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 24);
  EXPECT_EQ(cached[2], 24);
  for (const auto& t : tokens) EXPECT_EQ(t.size(), 6u);
  EXPECT_NE(tokens[0], tokens[1]);  // different seeds per completion
}

TEST_F(EngineTest, LimitsAndStops) {
  Engine& e = engine(config());
  EXPECT_THROW(e.add_request("long", prompt(1, 128), greedy(1)), Error);  // max_model_len 128
  EXPECT_THROW(e.add_request("empty", {}, greedy(1)), Error);
  EXPECT_THROW(e.add_request("oov", {1, 99999}, greedy(1)), Error);
  // Generation stops at the context window even with a larger max_tokens.
  const auto capped = e.generate({prompt(2, 120)}, greedy(100))[0][0];
  EXPECT_EQ(capped.token_ids.size(), 8u);
  EXPECT_EQ(capped.finish_reason, FinishReason::Length);
  // A stop token ends generation once min_tokens are out.
  const auto free_run = e.generate({prompt(3, 5)}, greedy(10))[0][0];
  SamplingParams p = greedy(10);
  p.stop_token_ids = {free_run.token_ids[2]};
  const auto stopped = e.generate({prompt(3, 5)}, p)[0][0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::Stop);
  EXPECT_LE(stopped.token_ids.size(), 3u);
  EXPECT_EQ(stopped.token_ids.back(), free_run.token_ids[2]);
}

TEST_F(EngineTest, TwoHundredRandomRequestsLeakNothing) {
  Engine& e = engine(config(96, 64));
  Rng rng(2024);
  int added = 0, finished = 0;
  std::set<std::string> aborted;
  while (added < 200 || e.has_unfinished()) {
    for (int k = 0; k < 3 && added < 200; ++k, ++added) {
      SamplingParams p;
      p.temperature = float(rng.uniform());
      p.top_k = int(rng.next_u64() % 50);
      p.seed = rng.next_u64();
      p.max_tokens = 1 + int64_t(rng.next_u64() % 24);
      p.n = 1 + int(rng.next_u64() % 2);
      e.add_request(std::string("r").append(std::to_string(added)), prompt(rng.next_u64(), 1 + rng.next_u64() % 60), p,
                    int(rng.next_u64() % 3));
    }
    if (rng.uniform() < 0.05 && added > 0) {
      const std::string victim = "r" + std::to_string(rng.next_u64() % uint64_t(added));
      if (e.abort_request(victim)) aborted.insert(victim);
    }
    for (const auto& o : e.step()) finished += o.finished;
  }
  EXPECT_GE(finished, 200);
  EXPECT_EQ(e.stats().running, 0);
  EXPECT_EQ(e.stats().waiting, 0);
}

TEST_F(EngineTest, AsyncEngineServesConcurrentClients) {
  AsyncEngine ae(*model_, nullptr, config());
  std::vector<std::thread> clients;
  std::atomic<int> complete{0};
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      auto stream = ae.add_request("c" + std::to_string(c), prompt(uint64_t(c), 5 + size_t(c)), greedy(5));
      int tokens = 0;
      bool done = false;
      while (auto o = stream->next()) {
        tokens += int(o->token_ids.size());
        done = o->finished;
      }
      if (done && tokens == 5) ++complete;
    });
  // One more that is aborted while it runs.
  auto doomed = ae.add_request("doomed", prompt(77, 10), greedy(100));
  ae.abort_request("doomed");
  FinishReason last = FinishReason::None;
  while (auto o = doomed->next()) last = o->finish_reason;
  for (auto& t : clients) t.join();
  EXPECT_EQ(complete.load(), 8);
  EXPECT_TRUE(last == FinishReason::Abort || last == FinishReason::Length);
  EXPECT_THROW(ae.add_request("bad", {}, greedy(1)), Error);
  ae.drain();
  EXPECT_EQ(ae.stats().running, 0);
  EXPECT_NE(ae.render_metrics("tiny").find("kimi:generation_tokens_total"), std::string::npos);
}

}  // namespace
}  // namespace kimi
