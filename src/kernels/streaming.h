#pragma once
// What every kernel assumes streams from memory rather than cache, and how far ahead a streamed
// decode prefetches. A matrix of at least kStreamedMatrixBytes is streamed: a decode over one reads
// it as few long sequential streams (short rows one at a time, prefetched across row ends), which
// from cache costs more than the multi-row tiles' shared loads. The rule is a guess the kernels
// cannot check (a model whose weights fit the last-level cache pays it), made in one place.
#include <cstdint>

#include "kernels/matmul.h"

namespace kimi::kernels {

constexpr int64_t kStreamedMatrixBytes = int64_t(1) << 20;

// Whether a decode over w streams it (its bytes as stored: weights, scales, zero points).
inline bool is_streamed(const WeightMatrix& w) { return int64_t(w.bytes()) >= kStreamedMatrixBytes; }

// How far ahead of its position a one-row-at-a-time stream over an integer-format matrix (the INT4
// and INT8 kernels) prefetches, across row ends: rows of 1-3.5 KiB taken four at a time are four
// short streams, which even a loop that only loads them reads at 0.5-0.75x the rate on Zen 5
// (bench/results/2026-12-06-int4-one-row-stream.md). 8 and 16 KiB, prefetches into L1 or L3, and
// a second prefetch per 4 KiB page further ahead measured no better for the INT4 kernel
// (bench/results/2026-12-06-expert-memory.md).
constexpr int64_t kStreamAheadBytes = 4096;

// The row that stream's prefetch reaches from the start of a row of row_bytes: the row whose
// scales a one-row tile prefetches (kept in a separate array, they are a second, short stream).
constexpr int64_t stream_ahead_rows(int64_t row_bytes) {
  return kStreamAheadBytes / (row_bytes > 0 ? row_bytes : 1) + 1;
}

// As how many runs side by side, each its own stream, a thread reads its rows of a streamed
// one-token product of the int16 INT4 kernel (quant_generic.h: in_runs; QuantInput::stream_runs):
// 2 on Intel, where one stream a core read ~21 GB/s against the BF16 GEMV's 27-30 and two took
// 0.84-0.91x the time over a decode's routed experts (Emerald Rapids,
// bench/results/2026-12-08-int16-stream-and-vbmi.md); 1 elsewhere: on Zen 5 one sequential stream
// was the fastest way to load INT4 rows, four long streams a core read 0.55-0.6x its rate
// (bench/results/2026-12-06-int4-one-row-stream.md), and two were not measured there.
int int4_stream_runs();

}  // namespace kimi::kernels
