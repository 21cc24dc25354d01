#pragma once
// What every kernel assumes streams from memory rather than cache: a matrix of at least this
// many bytes. A decode over one reads it as few long sequential streams (short rows one at a
// time, prefetched across row ends), which from cache costs more than the multi-row tiles' shared
// loads: the rule is a guess the kernels cannot check (a model whose weights fit the last-level
// cache pays it), made in one place.
#include <cstdint>

namespace kimi::kernels {

constexpr int64_t kStreamedMatrixBytes = int64_t(1) << 20;

}  // namespace kimi::kernels
