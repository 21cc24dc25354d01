// The model's batch interface: embedding rows given in place of token embeddings, hidden states
// captured entering chosen layers, and the cache contract (a step writes its tokens' rows and
// nothing else, whether or not it asks for logits); and the runner's truncate-and-recompute path.
#include <gtest/gtest.h>

#include <cmath>

#include "common/dtype.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "model/model.h"
#include "test_util.h"

namespace kimi {
namespace {

class ModelIo : public test::TinyModelTest {
 protected:
  static std::vector<float> embedding(int32_t token) {
    const int64_t D = model_->config().hidden_size;
    const WeightMatrix& e = model_->weights().embed;
    std::vector<float> row(static_cast<size_t>(D));
    convert_to_f32(e.dtype, static_cast<const std::byte*>(e.data) + size_t(token) * size_t(D) * dtype_size(e.dtype),
                   row.data(), D);
    return row;
  }
  static float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
  }
  const std::vector<int32_t> tokens_ = {5, 17, 300, 42, 9, 77};
};

TEST_F(ModelIo, EmbeddingRowsReplaceTokenEmbeddings) {
  KvCache plain = model_->new_cache(16);
  const std::vector<float> want = forward_sequence(*model_, tokens_, plain, true);

  // Token 300's own embedding given as a row in place of a different token: the same logits.
  std::vector<int32_t> placeholder = tokens_;
  placeholder[2] = 1;
  const std::vector<int64_t> offsets = {2};
  const std::vector<float> row = embedding(300);
  KvCache c1 = model_->new_cache(16);
  ForwardBatch b;
  b.seqs.push_back({.tokens = placeholder, .kv = c1.view(), .embedding_offsets = offsets, .embedding_values = row,
                    .num_logits = int64_t(tokens_.size())});
  EXPECT_LT(max_diff(model_->forward(b).logits, want), 1e-6f);

  // Another row changes the logits from that position on, not before it.
  std::vector<float> other = row;
  for (float& v : other) v = -v;
  KvCache c2 = model_->new_cache(16);
  b.seqs[0].kv = c2.view();
  b.seqs[0].embedding_values = other;
  const std::vector<float> changed = model_->forward(b).logits;
  const size_t V = size_t(model_->config().vocab_size);
  EXPECT_LT(max_diff({changed.begin(), changed.begin() + ptrdiff_t(2 * V)}, {want.begin(), want.begin() + ptrdiff_t(2 * V)}), 1e-6f);
  EXPECT_GT(max_diff(changed, want), 1e-3f);

  b.seqs[0].embedding_values = std::span<const float>(row).first(3);
  EXPECT_NE(test::error_of([&] { model_->forward(b); }).find("embedding rows"), std::string::npos);
}

TEST_F(ModelIo, CapturesHiddenStatesEnteringLayers) {
  const int64_t L = model_->config().num_hidden_layers, D = model_->config().hidden_size;
  KvCache c = model_->new_cache(16);
  ForwardBatch b;
  b.seqs.push_back({.tokens = tokens_, .kv = c.view(), .num_logits = 1});
  b.capture_hidden_layers = {0, L};
  const ForwardResult r = model_->forward(b);
  ASSERT_EQ(r.num_tokens, int64_t(tokens_.size()));
  ASSERT_EQ(r.hidden_states.size(), size_t(2 * r.num_tokens * D));
  // Entering layer 0: the embeddings themselves.
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::vector<float> e = embedding(tokens_[t]);
    EXPECT_EQ(std::vector<float>(r.hidden_states.begin() + ptrdiff_t(t * size_t(D)),
                                 r.hidden_states.begin() + ptrdiff_t((t + 1) * size_t(D))),
              e);
  }
  // After the last layer: what the final norm and lm_head turn into the logits, so it differs
  // from the input and is the same however the tokens are batched.
  KvCache c2 = model_->new_cache(16);
  ForwardBatch split;
  split.seqs.push_back({.tokens = std::span<const int32_t>(tokens_).first(3), .kv = c2.view(), .num_logits = 0});
  split.capture_hidden_layers = {L};
  const ForwardResult first = model_->forward(split);
  EXPECT_TRUE(first.logits.empty());
  c2.set_length(3);
  split.seqs[0] = {.tokens = std::span<const int32_t>(tokens_).subspan(3), .kv = c2.view(), .num_logits = 1};
  const ForwardResult second = model_->forward(split);
  std::vector<float> joined = first.hidden_states;
  joined.insert(joined.end(), second.hidden_states.begin(), second.hidden_states.end());
  EXPECT_LT(max_diff(joined, std::vector<float>(r.hidden_states.begin() + ptrdiff_t(r.num_tokens * D), r.hidden_states.end())), 1e-5f);
  EXPECT_LT(max_diff(second.logits, r.logits), 1e-5f);  // a step without logits still wrote its rows
  b.capture_hidden_layers = {L + 1};
  EXPECT_NE(test::error_of([&] { model_->forward(b); }).find("no layer"), std::string::npos);
}

// Through the runner: a request truncated (rows released by the KV manager) and recomputed
// from there gives the same logprobs as running straight through.
TEST_F(ModelIo, TruncatedAndRecomputedGivesTheSameLogits) {
  KvCacheManager kv(32, 4, false);
  ModelRunner runner(*model_, KvCacheConfig{32, 4});
  Request r;
  r.id = "r";
  r.prompt = {5, 17, 300, 42, 9, 77, 8, 100, 101, 3, 4};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  auto run = [&](int64_t from, bool is_new) {
    SchedulerOutput so;
    if (is_new) so.new_requests.push_back({r.id, r.prompt, p, 1});
    ScheduledRequest s;
    s.request_id = r.id;
    s.num_computed_tokens = from;
    s.token_ids.assign(r.prompt.begin() + from, r.prompt.end());
    const auto ids = kv.block_ids(r.id);
    s.block_ids.assign(ids.begin(), ids.end());
    s.sample = true;
    so.scheduled.push_back(s);
    return runner.execute(so).requests.at(0);
  };
  ASSERT_TRUE(kv.allocate_slots(r, int64_t(r.prompt.size())));
  const RequestRunnerOutput straight = run(0, true);
  r.num_computed_tokens = int64_t(r.prompt.size());
  EXPECT_EQ(kv.truncate(r, 6), 6);
  EXPECT_EQ(kv.block_ids(r.id).size(), 2u);
  ASSERT_TRUE(kv.allocate_slots(r, int64_t(r.prompt.size()) - 6));
  const RequestRunnerOutput again = run(6, false);
  ASSERT_EQ(straight.logprobs.size(), 1u);
  ASSERT_EQ(again.logprobs.size(), 1u);
  EXPECT_EQ(again.sampled_token_ids, straight.sampled_token_ids);
  ASSERT_EQ(again.logprobs[0].top.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(again.logprobs[0].top[k].token, straight.logprobs[0].top[k].token);
    EXPECT_NEAR(again.logprobs[0].top[k].logprob, straight.logprobs[0].top[k].logprob, 1e-5);
  }
  kv.free(r);
}

}  // namespace
}  // namespace kimi
