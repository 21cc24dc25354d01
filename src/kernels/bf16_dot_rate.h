#pragma once
// Whether this CPU's VDPBF16PS is fast enough for the bf16 compute-bound kernels. AVX512_BF16
// does not say: on AMD Zen 4 / 5 one VDPBF16PS (32 products) issues about as often as one f32
// FMA (16), on Intel Sapphire / Emerald Rapids it takes ~2.2 cycles against the FMA's 0.5, so
// there the AVX512_BF16 INT4 kernel is bound by it at ~70 % of the read bandwidth and the bf16
// attention core is slower than the f32 one (bench/results/2026-12-07-intel-bf16-dot-rate.md).
// The memory-bound BF16 GEMV (up to 12 tokens) keeps VDPBF16PS everywhere; the INT4 kernel, the
// BF16 GEMM and the attention core ask this. KIMI_BF16_DOT=fast or slow overrides the
// measurement (read once), so that one machine can run and time both paths.
#include <cstdint>
#include <optional>

namespace kimi::kernels {

inline constexpr const char* kBf16DotVariable = "KIMI_BF16_DOT";

// VDPBF16PS zmm's reciprocal throughput over VFMADD231PS zmm's, measured once (14 independent
// chains of each, best of 7 alternated runs of ~10-40 us); 0 where there is no AVX512_BF16.
double bf16_dot_cost_ratio();

// has_avx512_bf16() and VDPBF16PS multiplies at least as many pairs per cycle as the FMA does
// (bf16_dot_cost_ratio() <= 2), or KIMI_BF16_DOT=fast: the products it does in bf16 then cost
// less than in f32. Decided once per process.
bool bf16_dot_is_fast();

// What matmul() (matmul.cpp) still runs on VDPBF16PS where it is slow: up to this many tokens the
// AVX512_BF16 BF16 kernel's small-batch tiles: they are bound by the weights' read (Emerald Rapids, 2048 x 7168 from DRAM:
// 0.82x the f32 kernel's time at 1 token, 0.83x at 12); the GEMM beyond is bound by VDPBF16PS
// there (1.27x the f32 kernel's time at 64 tokens) and takes the f32 kernel on the rounded values.
inline constexpr int64_t kSlowBf16DotMaxTokens = 12;
// INT4 weights take the int16 kernel at every token count there: k25-int4's routed experts in
// decode on Emerald Rapids take 0.84-0.88x the AVX512_BF16 kernel's time (3 alternated pairs; the
// int16 kernel's prefetches compiled in: kernels/prefetch.h), over 12-64 tokens 0.63x.

// KIMI_BF16_DOT's value: "fast" true, "slow" false, unset or empty none; anything else is
// reported on stderr and ignored.
std::optional<bool> parse_bf16_dot_override(const char* value);

}  // namespace kimi::kernels
