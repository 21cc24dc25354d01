#include <gtest/gtest.h>

#include "engine/sampler.h"

namespace kimi {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};

TEST(Sampler, TemperatureZeroIsGreedy) {
  Sampler s({0.0f, 0, 1.0f, 7});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(kLogits), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  Sampler a({1.0f, 0, 1.0f, 42}), b({1.0f, 0, 1.0f, 42}), c({1.0f, 0, 1.0f, 43});
  std::vector<int32_t> xa, xb, xc;
  for (int i = 0; i < 50; ++i) xa.push_back(a.sample(kLogits)), xb.push_back(b.sample(kLogits)), xc.push_back(c.sample(kLogits));
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Sampler, TopKAndTopPTruncate) {
  Sampler k2({5.0f, 2, 1.0f, 1});
  Sampler p({1.0f, 0, 0.3f, 1});  // token 1 alone holds more than 30% of the mass
  for (int i = 0; i < 200; ++i) {
    const int32_t t = k2.sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 3) << t;
    EXPECT_EQ(p.sample(kLogits), 1);
  }
}

TEST(Sampler, FollowsTheDistribution) {
  Sampler s({1.0f, 0, 1.0f, 3});
  std::vector<int> counts(kLogits.size());
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[size_t(s.sample(kLogits))]++;
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (size_t i = 0; i < kLogits.size(); ++i) EXPECT_NEAR(counts[i] / double(n), std::exp(kLogits[i]) / z, 0.02) << i;
}

}  // namespace
}  // namespace kimi
