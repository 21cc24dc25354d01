#pragma once
// Measures this machine's limits in the same run as a benchmark, so reported figures can be
// given as fractions of a roofline rather than as absolute numbers on a noisy shared machine.
#include <cstddef>

#include "common/thread_pool.h"

namespace kimi {

// STREAM-style read bandwidth (bytes/s): sums a buffer of `bytes` (much larger than the caches)
// with all pool threads, best of `repeats` passes. Reading is what decoding does with weights.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t(1) << 30, int repeats = 5);

// Peak f32 GFLOP/s of the BF16 matmul kernel on a compute-bound shape (for prefill roofline).
double measure_matmul_flops(ThreadPool& pool);

}  // namespace kimi
