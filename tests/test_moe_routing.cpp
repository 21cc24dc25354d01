#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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
