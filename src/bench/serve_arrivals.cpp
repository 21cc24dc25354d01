#include "bench/serve_arrivals.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace kimi {

double sample_gamma(Rng& rng, double shape, double scale) {
  if (shape < 1.0) {
    const double u = 1.0 - rng.uniform();  // (0, 1]
    return sample_gamma(rng, shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

std::vector<double> arrival_times(size_t n, double request_rate, double burstiness, uint64_t seed) {
  if (!(request_rate > 0)) throw Error("--request-rate must be positive (or inf)");
  if (!(burstiness > 0)) throw Error("--burstiness must be positive");
  std::vector<double> t(n, 0.0);
  if (std::isinf(request_rate) || n == 0) return t;
  Rng rng(seed);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += std::isinf(burstiness) ? 1.0 / request_rate : sample_gamma(rng, burstiness, 1.0 / (request_rate * burstiness));
    t[i] = sum;
  }
  if (sum > 0) {
    const double scale = double(n) / request_rate / sum;
    for (double& x : t) x *= scale;
  }
  return t;
}

}  // namespace kimi
