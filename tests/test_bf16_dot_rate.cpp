// Whether VDPBF16PS is fast (kernels/bf16_dot_rate.h): the measured ratio where the CPU has
// AVX512_BF16, the KIMI_BF16_DOT override's parsing, and that an override in the environment
// (ctest's kimi_tests_bf16_dot_fast / _slow) is what the kernels are told.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/bf16_dot_rate.h"
#include "kernels/cpu_features.h"

namespace kimi {
namespace {

TEST(Bf16DotRate, RatioIsMeasuredWhereTheCpuHasAvx512Bf16) {
  const double ratio = kernels::bf16_dot_cost_ratio();
  if (!has_avx512_bf16()) {
    EXPECT_EQ(ratio, 0.0);
    EXPECT_FALSE(kernels::bf16_dot_is_fast());
    return;
  }
  // 32 products against the FMA's 16: known CPUs lie between 1.0x (Zen 4) and ~4.2x (Emerald
  // Rapids) of the FMA's time; far outside that the probe timed something else.
  EXPECT_GT(ratio, 0.3);
  EXPECT_LT(ratio, 20.0);
  EXPECT_EQ(kernels::bf16_dot_cost_ratio(), ratio) << "measured once";
  std::printf("[ bf16 dot ] VDPBF16PS %.2fx the time of VFMADD231PS: %s\n", ratio,
              kernels::bf16_dot_is_fast() ? "fast" : "slow");
}

TEST(Bf16DotRate, OverrideParses) {
  EXPECT_EQ(kernels::parse_bf16_dot_override(nullptr), std::nullopt);
  EXPECT_EQ(kernels::parse_bf16_dot_override(""), std::nullopt);
  EXPECT_EQ(kernels::parse_bf16_dot_override("fast"), std::optional<bool>(true));
  EXPECT_EQ(kernels::parse_bf16_dot_override("slow"), std::optional<bool>(false));
  EXPECT_EQ(kernels::parse_bf16_dot_override("quick"), std::nullopt);
  EXPECT_EQ(kernels::parse_bf16_dot_override("FAST"), std::nullopt);
}

TEST(Bf16DotRate, EnvironmentOverrideHolds) {
  const char* v = std::getenv(kernels::kBf16DotVariable);
  const std::optional<bool> forced = kernels::parse_bf16_dot_override(v);
  if (!forced) GTEST_SKIP() << "KIMI_BF16_DOT is not set";
  // Without AVX512_BF16 there is no bf16 kernel to force.
  EXPECT_EQ(kernels::bf16_dot_is_fast(), *forced && has_avx512_bf16());
  if (has_avx512_bf16() && !*forced) {
    EXPECT_NE(kernel_isa_summary().find("slow"), std::string::npos) << kernel_isa_summary();
  }
}

}  // namespace
}  // namespace kimi
