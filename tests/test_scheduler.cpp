// The scheduler and its KV cache manager without a model (as vLLM's tests/v1/core/
// test_scheduler.py): hand-made requests, schedule(), a hand-made runner output, then assertions
// on queues, token counts and blocks. Every test ends by checking the block accounting.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace kimi {
namespace {

constexpr int32_t kEos = 999;

class SchedulerTest : public ::testing::Test {
 protected:
  void make(int64_t num_blocks, int64_t block_size, int64_t budget, bool caching = true, bool priority = false,
            int64_t max_seqs = 16) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, block_size, caching);
    SchedulerConfig c;
    c.max_num_batched_tokens = budget;
    c.max_model_len = 1024;
    c.max_num_seqs = max_seqs;
    c.priority_policy = priority;
    sched_ = std::make_unique<Scheduler>(c, *kv_);
  }
  void TearDown() override {
    if (!kv_) return;
    EXPECT_EQ(kv_->pool().check(), "");
    // Whatever is still in flight holds exactly the blocks its table lists.
    int64_t held = 0;
    for (const auto& id : ids_)
      if (sched_->request(id)) held += int64_t(kv_->block_ids(id).size());
    EXPECT_LE(kv_->pool().num_blocks() - kv_->num_free_blocks(), held);
  }

  // A request whose prompt is `len` tokens starting at `first` (distinct prompts by default).
  void add(const std::string& id, int64_t len, int64_t max_tokens = 4, int32_t first = -1, int priority = 0) {
    auto r = std::make_unique<Request>();
    r->id = id;
    r->prompt.resize(size_t(len));
    std::iota(r->prompt.begin(), r->prompt.end(), first >= 0 ? first : int32_t(ids_.size() * 100));
    r->params.max_tokens = max_tokens;
    r->priority = priority;
    r->arrival = arrival_++;
    r->eos_token_ids = {kEos};
    ids_.push_back(id);
    sched_->add_request(std::move(r));
  }

  // The runner's answer: `token` (default 7) for every request that asked for a sample.
  static ModelRunnerOutput answer(const SchedulerOutput& so, std::map<std::string, int32_t> tokens = {}) {
    ModelRunnerOutput out;
    for (const ScheduledRequest& s : so.scheduled) {
      RequestRunnerOutput r;
      r.request_id = s.request_id;
      if (s.sample) r.sampled_token_ids.push_back(tokens.count(s.request_id) ? tokens[s.request_id] : 7);
      out.requests.push_back(r);
    }
    return out;
  }
  const ScheduledRequest* find(const SchedulerOutput& so, const std::string& id) {
    for (const auto& s : so.scheduled)
      if (s.request_id == id) return &s;
    return nullptr;
  }
  std::vector<EngineCoreOutput> step(std::map<std::string, int32_t> tokens = {}) {
    last_ = sched_->schedule();
    return sched_->update_from_output(last_, answer(last_, tokens));
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::string> ids_;
  uint64_t arrival_ = 0;
  SchedulerOutput last_;
};

TEST_F(SchedulerTest, AdmitsNewRequestsAndThenDecodesOneTokenEach) {
  make(64, 4, 256);
  add("a", 10);
  add("b", 5);
  SchedulerOutput so = sched_->schedule();
  ASSERT_EQ(so.scheduled.size(), 2u);
  ASSERT_EQ(so.new_requests.size(), 2u);
  EXPECT_EQ(so.new_requests[0].prompt_token_ids.size(), 10u);
  EXPECT_EQ(so.num_scheduled_tokens, 15);
  EXPECT_EQ(so.scheduled[0].token_ids.size(), 10u);
  EXPECT_EQ(so.scheduled[0].num_computed_tokens, 0);
  EXPECT_EQ(so.scheduled[0].block_ids.size(), 3u);  // 10 tokens in blocks of 4
  EXPECT_TRUE(so.scheduled[0].sample);
  auto outs = sched_->update_from_output(so, answer(so));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].new_token_ids, std::vector<int32_t>{7});

  so = sched_->schedule();
  EXPECT_TRUE(so.new_requests.empty());  // the executor knows them already
  ASSERT_EQ(so.scheduled.size(), 2u);
  EXPECT_EQ(so.scheduled[0].token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(so.scheduled[0].num_computed_tokens, 10);
  EXPECT_EQ(so.num_scheduled_tokens, 2);
  sched_->update_from_output(so, answer(so));
  EXPECT_EQ(sched_->request("a")->num_computed_tokens, 11);
  EXPECT_EQ(sched_->request("a")->output.size(), 2u);
}

TEST_F(SchedulerTest, ChunkedPrefillSamplesOnlyAtTheEndOfThePrompt) {
  make(64, 4, 8);
  add("long", 20);
  add("short", 3);
  SchedulerOutput so = sched_->schedule();
  ASSERT_EQ(so.scheduled.size(), 1u);  // the whole budget went to the first chunk
  EXPECT_EQ(so.scheduled[0].token_ids.size(), 8u);
  EXPECT_FALSE(so.scheduled[0].sample);
  EXPECT_TRUE(sched_->update_from_output(so, answer(so)).empty());  // nothing sampled yet
  so = sched_->schedule();
  EXPECT_EQ(find(so, "long")->num_computed_tokens, 8);
  EXPECT_EQ(find(so, "long")->token_ids.size(), 8u);
  sched_->update_from_output(so, answer(so));
  so = sched_->schedule();
  ASSERT_NE(find(so, "long"), nullptr);
  EXPECT_EQ(find(so, "long")->token_ids.size(), 4u);
  EXPECT_TRUE(find(so, "long")->sample);
  ASSERT_NE(find(so, "short"), nullptr);  // the leftover budget admits the next one
  EXPECT_EQ(find(so, "short")->token_ids.size(), 3u);
  EXPECT_EQ(so.num_scheduled_tokens, 7);
  EXPECT_EQ(sched_->update_from_output(so, answer(so)).size(), 2u);
}

TEST_F(SchedulerTest, PreemptsTheNewestWhenBlocksRunOutAndResumesItLater) {
  make(6, 4, 64, /*caching=*/false);  // 24 token slots; no prefix cache: resumption recomputes all
  add("old", 8, 12);
  add("new", 8, 12);
  step();
  EXPECT_EQ(kv_->num_free_blocks(), 2);
  // Each decode needs a new block every 4 tokens: the newer request is preempted first.
  bool preempted = false;
  for (int i = 0; i < 12 && !preempted; ++i) {
    step();
    preempted = sched_->num_preemptions() > 0;
  }
  ASSERT_TRUE(preempted);
  const Request* victim = sched_->request("new");
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->status, RequestStatus::Preempted);
  EXPECT_EQ(victim->num_computed_tokens, 0);
  EXPECT_TRUE(kv_->block_ids("new").empty());
  const size_t outputs_before = victim->output.size();
  // "old" runs to its end; then "new" is recomputed from scratch, outputs included.
  bool resumed = false;
  for (int i = 0; i < 40 && sched_->has_unfinished(); ++i) {
    last_ = sched_->schedule();
    if (const ScheduledRequest* s = find(last_, "new"); s && s->num_computed_tokens == 0 && !resumed) {
      resumed = true;
      EXPECT_EQ(s->token_ids.size(), 8 + outputs_before);
      for (const auto& n : last_.new_requests) EXPECT_NE(n.request_id, "new");  // not new again
    }
    sched_->update_from_output(last_, answer(last_));
  }
  EXPECT_TRUE(resumed);
  EXPECT_FALSE(sched_->has_unfinished());
  EXPECT_EQ(kv_->num_free_blocks(), 6);
}

TEST_F(SchedulerTest, PrefixHitSkipsTheCachedBlocks) {
  make(32, 4, 64);
  add("first", 10, 1, 500);
  step();  // one token: finishes (max_tokens 1), its 2 full prompt blocks stay cached
  EXPECT_FALSE(sched_->has_unfinished());
  EXPECT_GE(kv_->pool().num_cached(), 2);
  add("second", 10, 1, 500);
  SchedulerOutput so = sched_->schedule();
  ASSERT_EQ(so.scheduled.size(), 1u);
  EXPECT_EQ(so.scheduled[0].num_computed_tokens, 8);
  EXPECT_EQ(so.scheduled[0].token_ids.size(), 2u);
  EXPECT_EQ(sched_->prefix_hits(), 8);
  EXPECT_EQ(sched_->prefix_queries(), 20);
  auto outs = sched_->update_from_output(so, answer(so));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].num_cached_tokens, 8);
}

TEST_F(SchedulerTest, HigherPriorityRunsFirstAndIsPreemptedLast) {
  make(64, 4, 5, true, /*priority=*/true, 1);
  add("low", 4, 4, -1, 5);
  add("high", 4, 4, -1, 0);
  SchedulerOutput so = sched_->schedule();
  ASSERT_EQ(so.scheduled.size(), 1u);  // max_num_seqs 1
  EXPECT_EQ(so.scheduled[0].request_id, "high");
  sched_->update_from_output(so, answer(so));

  make(5, 4, 64, true, /*priority=*/true);
  ids_.clear();
  add("low", 8, 12, -1, 5);
  add("high", 8, 12, -1, 0);
  for (int i = 0; i < 12 && sched_->num_preemptions() == 0; ++i) step();
  ASSERT_GT(sched_->num_preemptions(), 0);
  EXPECT_EQ(sched_->request("low")->status, RequestStatus::Preempted);
  EXPECT_EQ(sched_->request("high")->status, RequestStatus::Running);
}

TEST_F(SchedulerTest, AbortFreesBlocksAndTellsTheExecutor) {
  make(16, 4, 64);
  add("a", 9);
  add("b", 9);
  step();
  EXPECT_EQ(kv_->num_free_blocks(), 16 - 6);
  EXPECT_EQ(sched_->finish_requests({"a", "nope"}, FinishReason::Abort), std::vector<std::string>{"a"});
  EXPECT_EQ(sched_->request("a"), nullptr);
  EXPECT_EQ(kv_->num_free_blocks(), 16 - 3);
  SchedulerOutput so = sched_->schedule();
  EXPECT_EQ(so.finished_request_ids, std::vector<std::string>{"a"});
  ASSERT_EQ(so.scheduled.size(), 1u);
  sched_->update_from_output(so, answer(so));
  EXPECT_TRUE(sched_->schedule().finished_request_ids.empty());  // told once
  // A request aborted before it ever ran was never sent: the executor is not told about it.
  add("c", 3);
  sched_->finish_requests({"c"}, FinishReason::Abort);
  EXPECT_TRUE(sched_->schedule().finished_request_ids.empty());
}

TEST_F(SchedulerTest, TokenStopsEosStopIdsMinTokensAndMaxTokens) {
  make(64, 4, 64);
  add("eos", 3, 10);
  step({{"eos", kEos}});
  EXPECT_EQ(sched_->request("eos"), nullptr);  // finished at once

  add("ids", 3, 10);
  auto r = std::make_unique<Request>();
  r->id = "min";
  r->prompt = {1, 2, 3};
  r->params.max_tokens = 10;
  r->params.min_tokens = 2;
  r->eos_token_ids = {kEos};
  ids_.push_back("min");
  sched_->add_request(std::move(r));
  // stop_token_ids of "ids": set through its params.
  const_cast<Request*>(sched_->request("ids"))->params.stop_token_ids = {42};
  auto outs = step({{"ids", 42}, {"min", kEos}});
  ASSERT_EQ(outs.size(), 2u);
  for (const auto& o : outs) {
    if (o.request_id == "ids") {
      EXPECT_EQ(o.finish_reason, FinishReason::Stop);
      EXPECT_EQ(o.stop_token, 42);
    } else {
      EXPECT_EQ(o.finish_reason, FinishReason::None);  // min_tokens holds EOS back
    }
  }
  outs = step({{"min", kEos}});
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::Stop);

  add("len", 3, 2);
  step();
  outs = step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::Length);
  EXPECT_FALSE(sched_->has_unfinished());
  EXPECT_EQ(kv_->num_free_blocks(), 64);
}

// The KV cache manager on its own.
class KvCacheManagerTest : public SchedulerTest {
 protected:
  Request req(const std::string& id, int64_t len, int32_t first = 0) {
    Request r;
    r.id = id;
    r.prompt.resize(size_t(len));
    std::iota(r.prompt.begin(), r.prompt.end(), first);
    return r;
  }
};

TEST_F(KvCacheManagerTest, ADraftModelsCacheGivesUpTheLastHitBlock) {
  for (const bool drop : {false, true}) {
    kv_ = std::make_unique<KvCacheManager>(16, 4, true, drop);
    Request r = req("r", 13, 300);
    ASSERT_TRUE(kv_->allocate_slots(r, 13));
    r.num_computed_tokens = 13;
    kv_->cache_blocks(r, 13);
    Request again = req("again", 14, 300);
    const auto hit = kv_->find_cached_prefix(again);
    EXPECT_EQ(hit.tokens(), drop ? 8 : 12) << drop;  // 3 full blocks cached
    ASSERT_TRUE(kv_->allocate_slots(again, 14 - hit.tokens(), &hit));
    EXPECT_EQ(again.num_computed_tokens, hit.tokens());
    kv_->free(r);
    kv_->free(again);
    EXPECT_EQ(kv_->num_free_blocks(), 16);
  }
}

TEST_F(KvCacheManagerTest, LookaheadReservesRoomForDrafts) {
  make(16, 4, 64);
  Request r = req("r", 6);
  ASSERT_TRUE(kv_->allocate_slots(r, 6, nullptr, /*num_lookahead_tokens=*/3));
  EXPECT_EQ(kv_->block_ids("r").size(), 3u);  // 9 slots in blocks of 4
  EXPECT_EQ(r.num_computed_tokens, 0);
  r.num_computed_tokens = 6;
  ASSERT_TRUE(kv_->allocate_slots(r, 1, nullptr, 3));  // 10 slots: still 3 blocks
  EXPECT_EQ(kv_->block_ids("r").size(), 3u);
  EXPECT_FALSE(kv_->allocate_slots(r, 1, nullptr, 60));  // too many: nothing changes
  EXPECT_EQ(kv_->block_ids("r").size(), 3u);
  kv_->free(r);
  EXPECT_EQ(kv_->num_free_blocks(), 16);
}

TEST_F(KvCacheManagerTest, TruncateReleasesTheTailAndForgetsRewrittenBlocks) {
  make(16, 4, 64);
  Request r = req("r", 20, 300);
  ASSERT_TRUE(kv_->allocate_slots(r, 20));
  r.num_computed_tokens = 20;
  kv_->cache_blocks(r, 20);
  EXPECT_EQ(kv_->pool().num_cached(), 5);
  EXPECT_EQ(kv_->truncate(r, 10), 10);
  EXPECT_EQ(kv_->block_ids("r").size(), 3u);
  EXPECT_EQ(kv_->num_free_blocks(), 13);
  // Blocks 0-1 keep their registration; block 2 (tokens 8..11) will be rewritten from token
  // 10 on, and the released blocks 3-4 are forgotten too.
  EXPECT_EQ(kv_->pool().num_cached(), 2);
  Request again = req("again", 20, 300);
  EXPECT_EQ(kv_->find_cached_prefix(again).tokens(), 8);
  // A cut inside a block that another request shares cannot rewrite it: whole blocks are kept.
  ASSERT_TRUE(kv_->allocate_slots(again, 12, nullptr));
  Request shared = req("shared", 20, 300);
  auto hit = kv_->find_cached_prefix(shared);
  ASSERT_EQ(hit.tokens(), 8);
  ASSERT_TRUE(kv_->allocate_slots(shared, 1, &hit));
  EXPECT_EQ(shared.num_computed_tokens, 8);
  EXPECT_EQ(kv_->truncate(shared, 6), 4);  // block 1 is held by r too
  EXPECT_EQ(kv_->block_ids("shared").size(), 1u);
  kv_->free(r);
  kv_->free(again);
  kv_->free(shared);
  EXPECT_EQ(kv_->num_free_blocks(), 16);
}

TEST_F(KvCacheManagerTest, TruncatedAndRecomputedTokensAreCachedAgain) {
  make(16, 4, 64);
  Request r = req("r", 12);
  ASSERT_TRUE(kv_->allocate_slots(r, 12));
  r.num_computed_tokens = 12;
  kv_->truncate(r, 5);
  r.prompt[6] = 77;  // different tokens from position 5 on
  ASSERT_TRUE(kv_->allocate_slots(r, 7));
  r.num_computed_tokens = 12;
  kv_->cache_blocks(r, 12);
  Request probe = req("probe", 13);
  probe.prompt[6] = 77;
  EXPECT_EQ(kv_->find_cached_prefix(probe).tokens(), 12);  // the new content, not the old
  Request old = req("old", 13);
  EXPECT_EQ(kv_->find_cached_prefix(old).tokens(), 4);
  kv_->free(r);
}

TEST_F(KvCacheManagerTest, ExternalTokensGetBlocksButAreCachedOnlyWhenFinal) {
  make(16, 4, 64);
  Request r = req("r", 13);
  // 12 tokens whose KV another instance sends, and the last one to compute here.
  ASSERT_TRUE(kv_->allocate_slots(r, 1, nullptr, 0, /*num_external_computed_tokens=*/12));
  EXPECT_EQ(r.num_computed_tokens, 12);
  EXPECT_EQ(kv_->block_ids("r").size(), 4u);
  kv_->cache_blocks(r, 0);  // the transfer has not landed: nothing is final
  EXPECT_EQ(kv_->pool().num_cached(), 0);
  kv_->cache_blocks(r, 12);
  EXPECT_EQ(kv_->pool().num_cached(), 3);
  EXPECT_FALSE(kv_->allocate_slots(r, 1, nullptr, 0, 100));
  kv_->free(r);
  EXPECT_EQ(kv_->num_free_blocks(), 16);
}

}  // namespace
}  // namespace kimi
