#pragma once
// When `kimi bench serve` issues each request, as `vllm bench serve` does: at --request-rate
// inf all at time 0; otherwise gaps drawn from a gamma distribution with shape = burstiness and
// mean 1/rate (burstiness 1: exponential gaps, a Poisson process; < 1 burstier, > 1 more even,
// inf: constant gaps), accumulated and then scaled so that the last request is issued at
// exactly n/rate seconds, which takes the seed-to-seed noise out of the offered load.
#include <cstdint>
#include <vector>

#include "common/rng.h"

namespace kimi {

// Seconds after the start of the run; non-decreasing; seeded, so reproducible.
std::vector<double> arrival_times(size_t n, double request_rate, double burstiness, uint64_t seed);

// Gamma(shape, scale) by Marsaglia and Tsang (shape < 1 through the shape + 1 boost).
double sample_gamma(Rng& rng, double shape, double scale);

}  // namespace kimi
