#include "kernels/bf16_dot_rate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/cpu_features.h"

namespace kimi::kernels {

namespace {

using Clock = std::chrono::steady_clock;

// The two loops are inline assembly, not intrinsics, so that every build (-O0, sanitizers) times
// the instructions themselves in registers, and this file needs no AVX-512 compiler flags (only
// zmm0-15, which the compiler knows as xmm0-15): 14 chains cover either instruction's latency.
#define KIMI_OP(op, k) op " %%zmm14, %%zmm15, %%zmm" #k "\n\t"
#define KIMI_REP14(op)                                                                                            \
  KIMI_OP(op, 0) KIMI_OP(op, 1) KIMI_OP(op, 2) KIMI_OP(op, 3) KIMI_OP(op, 4) KIMI_OP(op, 5) KIMI_OP(op, 6)       \
  KIMI_OP(op, 7) KIMI_OP(op, 8) KIMI_OP(op, 9) KIMI_OP(op, 10) KIMI_OP(op, 11) KIMI_OP(op, 12) KIMI_OP(op, 13)
#define KIMI_ZMM_CLOBBERS                                                                                  \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
      "xmm13", "xmm14", "xmm15"

#if defined(__x86_64__)
constexpr long kIterations = 4096;  // x 14 instructions: ~40 us of VDPBF16PS on the slow CPUs, ~10 of FMA

// Seconds for kIterations x 14 of the instruction, all registers zeroed first (no denormal or
// NaN operands); the loop is in the assembly so that nothing else runs between the blocks.
template <bool kDot>
double time_loop() {
  const auto t0 = Clock::now();
  long left = kIterations;
#define KIMI_ZERO(k) "vpxord %%zmm" #k ", %%zmm" #k ", %%zmm" #k "\n\t"
#define KIMI_LOOP(op)                                                                                      \
  KIMI_ZERO(0) KIMI_ZERO(1) KIMI_ZERO(2) KIMI_ZERO(3) KIMI_ZERO(4) KIMI_ZERO(5) KIMI_ZERO(6) KIMI_ZERO(7)   \
  KIMI_ZERO(8) KIMI_ZERO(9) KIMI_ZERO(10) KIMI_ZERO(11) KIMI_ZERO(12) KIMI_ZERO(13) KIMI_ZERO(14)          \
  KIMI_ZERO(15) "1:\n\t" KIMI_REP14(op) "dec %0\n\tjnz 1b\n\tvzeroupper"
  if constexpr (kDot)
    asm volatile(KIMI_LOOP("vdpbf16ps") : "+r"(left) : : "cc", KIMI_ZMM_CLOBBERS);
  else
    asm volatile(KIMI_LOOP("vfmadd231ps") : "+r"(left) : : "cc", KIMI_ZMM_CLOBBERS);
#undef KIMI_LOOP
#undef KIMI_ZERO
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

#endif

double measure_ratio() {
#if defined(__x86_64__)
  if (!has_avx512_bf16()) return 0.0;
  double dot = 1e30, fma = 1e30;
  // Alternated and the best of each kept: a preemption or a frequency step spoils single runs.
  for (int rep = 0; rep < 7; ++rep) {
    dot = std::min(dot, time_loop<true>());
    fma = std::min(fma, time_loop<false>());
  }
  return fma > 0 ? dot / fma : 0.0;
#else
  return 0.0;
#endif
}

#undef KIMI_OP
#undef KIMI_REP14
#undef KIMI_ZMM_CLOBBERS

}  // namespace

double bf16_dot_cost_ratio() {
  static const double ratio = measure_ratio();
  return ratio;
}

bool bf16_dot_is_fast() {
  static const bool fast = [] {
    if (!has_avx512_bf16()) return false;
    const std::optional<bool> forced = parse_bf16_dot_override(std::getenv(kBf16DotVariable));
    return forced ? *forced : bf16_dot_cost_ratio() <= 2.0;
  }();
  return fast;
}

std::optional<bool> parse_bf16_dot_override(const char* value) {
  if (!value || !*value) return std::nullopt;
  const std::string_view v(value);
  if (v == "fast") return true;
  if (v == "slow") return false;
  std::fprintf(stderr, "kimi: ignoring %s=%s (expected fast or slow)\n", kBf16DotVariable, value);
  return std::nullopt;
}

}  // namespace kimi::kernels
