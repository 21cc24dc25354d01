#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/rope.h"

namespace kimi {
namespace {

ModelConfig rope_config(bool yarn) {
  ModelConfig c;
  c.qk_rope_head_dim = 64;
  c.rope_theta = 50000.0;
  if (yarn) c.rope_scaling = {"yarn", 64.0, 4096, 32.0, 1.0, 1.0, 1.0};
  return c;
}

TEST(Rope, PlainRopeRotatesAdjacentPairsByPositionTimesFrequency) {
  const Rope rope(rope_config(false));
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.0f;
  std::vector<float> y = x;
  rope.apply(y.data(), 1, 64, 37);
  for (int i = 0; i < 32; ++i) {
    const double a = 37.0 * std::pow(50000.0, -2.0 * i / 64.0);
    EXPECT_NEAR(y[2 * i], x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a), 1e-5);
    EXPECT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(a) + x[2 * i + 1] * std::cos(a), 1e-5);
  }
}

TEST(Rope, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  const RopeScaling s = rope_config(true).rope_scaling;
  const auto w = yarn_extrapolation_weights(64, 50000.0, s);
  ASSERT_EQ(w.size(), 32u);
  // Kimi-K2.5's values: the correction range is dims [floor(8.9), ceil(19.2)] = [8, 20] of 64.
  EXPECT_DOUBLE_EQ(w[0], 1.0);
  EXPECT_DOUBLE_EQ(w[8], 1.0);
  EXPECT_DOUBLE_EQ(w[20], 0.0);
  EXPECT_DOUBLE_EQ(w[31], 0.0);
  EXPECT_NEAR(w[14], 1.0 - 6.0 / 12.0, 1e-12);
  const Rope plain(rope_config(false)), yarn(rope_config(true));
  EXPECT_DOUBLE_EQ(yarn.inv_freq()[0], plain.inv_freq()[0]);
  EXPECT_NEAR(yarn.inv_freq()[31], plain.inv_freq()[31] / 64.0, 1e-18);
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const Rope rope(rope_config(true));
  std::vector<float> q(64), k(64);
  for (int i = 0; i < 64; ++i) q[i] = std::sin(float(i)), k[i] = std::cos(float(3 * i));
  auto dot_at = [&](int64_t pq, int64_t pk) {
    std::vector<float> a = q, b = k;
    rope.apply(a.data(), 1, 64, pq);
    rope.apply(b.data(), 1, 64, pk);
    double s = 0;
    for (int i = 0; i < 64; ++i) s += double(a[i]) * b[i];
    return s;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(1007, 1000), 1e-3);
  EXPECT_NEAR(dot_at(5, 5), dot_at(0, 0), 1e-4);
}

}  // namespace
}  // namespace kimi
