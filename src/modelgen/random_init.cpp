#include "modelgen/random_init.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/rng.h"

namespace kimi {

namespace {

// Initial values chosen so that every part of the model matters to the logits: activations stay
// O(1) through the layers, norm weights differ from 1, and the router bias is large enough to
// change which experts are picked (a model where the bias is ignored gives other logits).
float init_value(const TensorLayout& t, Rng& rng) {
  const double u = 2.0 * rng.uniform() - 1.0;  // uniform in [-1, 1): no libm, bit-reproducible
  switch (t.role) {
    case TensorRole::Embedding: return float(u * std::sqrt(3.0));
    case TensorRole::Norm: return float(1.0 + 0.25 * u);
    case TensorRole::RouterBias: return float(0.25 * u);
    case TensorRole::Router: return float(u * std::sqrt(3.0) * 2.0 / std::sqrt(double(t.fan_in)));
    case TensorRole::Linear:
    case TensorRole::LmHead: return float(u * std::sqrt(3.0) / std::sqrt(double(t.fan_in)));
  }
  return 0.0f;
}

}  // namespace

void fill_random_tensor(const TensorLayout& t, const std::string& stream, DType dtype, uint64_t seed,
                        std::span<std::byte> out) {
  Rng rng(hash_seed(seed, stream.c_str()));
  const size_t n = out.size() / dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) {
    const float v = init_value(t, rng);
    switch (dtype) {
      case DType::F32: std::memcpy(out.data() + 4 * i, &v, 4); break;
      case DType::BF16: {
        const uint16_t b = f32_to_bf16(v);
        std::memcpy(out.data() + 2 * i, &b, 2);
        break;
      }
      case DType::F16: {
        const uint16_t h = f32_to_f16(v);
        std::memcpy(out.data() + 2 * i, &h, 2);
        break;
      }
      default: throw Error("make-model: unsupported dtype");
    }
  }
}

}  // namespace kimi
