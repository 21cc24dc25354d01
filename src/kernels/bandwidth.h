#pragma once
// Measures this machine's limits in the same run as a benchmark, so reported figures can be
// given as fractions of a roofline rather than as absolute numbers on a noisy shared machine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/thread_pool.h"

namespace kimi {

// `count` floats starting on a 64-byte line, for read probes: a line-crossing 64-byte load reads
// two lines, and from a buffer at 16 mod 64 (as malloc hands out) the AVX-512 sum read ~1.3x
// slower than the AVX2 one on Zen 5, understating what memory delivers
// (bench/results/2026-12-06-aligned-read-probe.md).
class LineAlignedFloats {
 public:
  explicit LineAlignedFloats(size_t count) : storage_(std::make_unique_for_overwrite<float[]>(count + 16)) {
    start_ = storage_.get() + (16 - reinterpret_cast<uintptr_t>(storage_.get()) / 4 % 16) % 16;
  }
  float* data() const { return start_; }

 private:
  std::unique_ptr<float[]> storage_;
  float* start_;
};

// STREAM-style read bandwidth (bytes/s): sums a buffer of `bytes` (much larger than the caches)
// with all pool threads, best of `repeats` passes. Reading is what decoding does with weights.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t(1) << 30, int repeats = 5);

// Bytes/s of reading given memory where it lives (a model's weights: page-cache pages can read
// slower than the fresh buffer above, bench/results/2026-12-06-expert-memory.md): all pool
// threads load each pass's regions once, with integer loads (any bytes), the passes in turn, each
// region's pages mapped in before its pass is timed; the bytes of all passes over their time. 0
// for no bytes. Regions larger together than the last-level cache give a memory figure.
using ReadPass = std::vector<std::span<const std::byte>>;
double measure_read_rate(ThreadPool& pool, const std::vector<ReadPass>& passes);

// Peak GFLOP/s of the BF16 matmul kernel on a compute-bound shape (for prefill roofline): with f32
// activations, or with bf16 ones (`--dtype bfloat16`: one VDPBF16PS per 32 products where the CPU
// has AVX512_BF16, 1.5-1.6x the f32 rate on Zen 5, so a bf16 prefill is set against its own kernel).
double measure_matmul_flops(ThreadPool& pool, bool bf16_activations = false);

}  // namespace kimi
