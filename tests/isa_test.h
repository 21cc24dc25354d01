#pragma once
// The fixture of the kernel tests that run once per instruction set: each case skipped, by name,
// where this CPU lacks its ISA, so the same suite passes on AVX2-only and AVX-512 machines.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu_features.h"

namespace kimi::test {

class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam());
  }
  Isa isa() const { return GetParam(); }
};

// For INSTANTIATE_TEST_SUITE_P(AllIsas, Suite, test::all_isas(), test::isa_param_name).
inline auto all_isas() { return ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512); }
inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& p) { return std::string(isa_name(p.param)); }

}  // namespace kimi::test
