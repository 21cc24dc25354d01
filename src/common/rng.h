#pragma once
// Deterministic random numbers that are the same on every platform and compiler (std::
// distributions are not), so generated checkpoints and their golden logits are reproducible.
#include <cmath>
#include <cstdint>
#include <numbers>

namespace kimi {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // splitmix64: tiny, fast, and passes BigCrush; enough for weights and sampling.
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller (one value per call; simplicity over speed).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

// Derives an independent stream from a base seed and a name (e.g. a tensor name).
inline uint64_t hash_seed(uint64_t seed, const char* name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name, seeded
  for (const char* p = name; *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return h;
}

}  // namespace kimi
