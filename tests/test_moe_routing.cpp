#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/rng.h"
#include "kernels/matmul.h"
#include "model/moe.h"

namespace kimi {
namespace {

ModelConfig routing_config() {
  ModelConfig c;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_group = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  c.scoring_func = "sigmoid";
  c.topk_method = "noaux_tc";
  return c;
}

float logit_of(float p) { return std::log(p / (1 - p)); }  // inverse sigmoid

TEST(MoeRouting, BiasSelectsButDoesNotWeigh) {
  ModelConfig c = routing_config();
  c.n_group = 1;
  c.topk_group = 1;
  const std::vector<float> scores = {0.9f, 0.8f, 0.7f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
  std::vector<float> logits;
  for (float s : scores) logits.push_back(logit_of(s));
  // Without bias the two best scores win.
  Routing r = route_tokens(c, logits.data(), 1, {});
  EXPECT_EQ(std::vector<int32_t>(r.experts.begin(), r.experts.end()), (std::vector<int32_t>{0, 1}));
  // A bias on expert 7 makes it chosen, but its weight is its own unbiased score.
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0, 0.85f};
  r = route_tokens(c, logits.data(), 1, bias);
  EXPECT_EQ(r.experts[0], 7);  // 0.1 + 0.85 = 0.95 is the best choice score
  EXPECT_EQ(r.experts[1], 0);
  EXPECT_NEAR(r.weights[0], 0.1 / (0.1 + 0.9) * 2.5, 1e-5);
  EXPECT_NEAR(r.weights[1], 0.9 / (0.1 + 0.9) * 2.5, 1e-5);
}

TEST(MoeRouting, GroupsAreRankedBySumOfTheirTopTwo) {
  const ModelConfig c = routing_config();
  // Group 0 has the single best expert but a weak partner; groups 1 and 2 are better pairs.
  const std::vector<float> scores = {0.99f, 0.01f, 0.6f, 0.6f, 0.55f, 0.55f, 0.2f, 0.2f};
  std::vector<float> logits;
  for (float s : scores) logits.push_back(logit_of(s));
  const Routing r = route_tokens(c, logits.data(), 1, {});
  std::vector<int32_t> chosen(r.experts.begin(), r.experts.end());
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 3}));  // expert 0 is out with its group
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5, 1e-5);
}

TEST(MoeRouting, UnnormalisedSoftmaxRouting) {
  ModelConfig c = routing_config();
  c.scoring_func = "softmax";
  c.topk_method = "greedy";
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  std::vector<float> logits = {2, 1, 0, 0, 0, 0, 0, 3};
  const Routing r = route_tokens(c, logits.data(), 1, {});
  EXPECT_EQ(r.experts[0], 7);
  EXPECT_EQ(r.experts[1], 0);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(r.weights[0], std::exp(3.0) / z, 1e-6);
}

}  // namespace
}  // namespace kimi

namespace kimi {
namespace {

// moe_forward against the definition, token by token: shared(x) + sum_k weight_k * expert_k(x)
// with each MLP run alone. 700 tokens make the shared expert and popular experts span several
// of moe_forward's batches (256 token rows each); one token exercises the decode path.
TEST(MoeForward, BatchedExpertsEqualTheDefinitionPerToken) {
  ModelConfig c = routing_config();
  c.hidden_size = 32;
  const int64_t D = c.hidden_size, inter = 16;
  Rng rng(5);
  std::vector<std::vector<float>> store;
  const auto matrix = [&](int64_t rows, int64_t cols) {
    auto& v = store.emplace_back(size_t(rows * cols));
    for (auto& f : v) f = float(rng.normal() * 0.3);
    return WeightMatrix{DType::F32, v.data(), rows, cols};
  };
  const auto mlp = [&](int64_t in) { return MlpWeights{matrix(in, D), matrix(in, D), matrix(D, in)}; };
  store.reserve(64);
  MoeWeights w;
  w.router = matrix(c.n_routed_experts, D);
  for (int64_t e = 0; e < c.n_routed_experts; ++e) w.experts.push_back(mlp(inter));
  w.shared = mlp(2 * inter);
  ThreadPool pool(2);
  for (int64_t n : {int64_t(1), int64_t(700)}) {
    std::vector<float> x(size_t(n * D)), out(size_t(n * D));
    for (auto& f : x) f = float(rng.normal());
    moe_forward(c, w, x.data(), n, pool, out.data());
    std::vector<float> logits(size_t(n * c.n_routed_experts));
    matmul(pool, w.router, x.data(), n, logits.data());
    const Routing r = route_tokens(c, logits.data(), n, {});
    std::vector<float> want(static_cast<size_t>(D)), y(static_cast<size_t>(D));
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = &x[size_t(t * D)];
      mlp_forward(*w.shared, xt, 1, pool, want.data());
      for (int64_t k = 0; k < c.num_experts_per_tok; ++k) {
        const size_t s = size_t(t * c.num_experts_per_tok + k);
        mlp_forward(w.experts[size_t(r.experts[s])], xt, 1, pool, y.data());
        for (int64_t j = 0; j < D; ++j) want[size_t(j)] += r.weights[s] * y[size_t(j)];
      }
      for (int64_t j = 0; j < D; ++j)
        ASSERT_NEAR(out[size_t(t * D + j)], want[size_t(j)], 1e-4 * (1 + std::abs(want[size_t(j)])))
            << "n " << n << " token " << t << " dim " << j;
    }
  }
}

}  // namespace
}  // namespace kimi
