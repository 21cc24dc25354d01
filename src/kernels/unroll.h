#pragma once
// KIMI_UNROLL: fully unroll the loop it precedes (on the same line). A register tile is an array
// of vectors indexed by loops over rows and tokens; when GCC leaves such a loop rolled, the array
// stays in memory and every accumulation is a store (the AVX512_BF16 GEMM's 4 x 6 tile ran at
// 0.6x its unrolled speed). Only where measured: forced on every tile of the f32 and integer
// kernels it was slower (AVX2 has 16 registers; bench/results/2026-12-07-avx2-int16-w4a16.md).
#define KIMI_UNROLL _Pragma("GCC unroll 8")
