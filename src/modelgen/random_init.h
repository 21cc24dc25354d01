#pragma once
// The deterministic random weights `kimi make-model` writes: a value per tensor role (embedding,
// norm, linear, router) from a stream seeded by the tensor's name, so that a checkpoint is the
// same on every machine and its target and draft parts are reproducible independently.
#include <cstdint>
#include <span>
#include <string>

#include "common/dtype.h"
#include "model/tensor_layout.h"

namespace kimi {

// Fills `out` (t's elements in dtype: f32, bf16 or f16) from the stream named `stream` (the
// tensor's name without a form's prefix, so both forms get the same weights).
void fill_random_tensor(const TensorLayout& t, const std::string& stream, DType dtype, uint64_t seed,
                        std::span<std::byte> out);

}  // namespace kimi
