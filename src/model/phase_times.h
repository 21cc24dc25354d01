#pragma once
// Optional per-phase wall-clock accounting of forward steps, for `kimi bench latency --breakdown`:
// a plain struct of accumulators that Model::forward fills while one is attached (off by default;
// off, each phase costs one null test). Time outside the named phases (embedding lookup, norms,
// residual adds) is forward_seconds minus their sum. With the model's pool attached and its region
// timing on, each phase's time is also split: the part outside the pool's parallel regions (one
// thread working while the others wait) is what keeps a step from scaling with the threads.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"

namespace kimi {

enum class Phase : int { Attention, Router, RoutedExperts, SharedExpert, DenseMlp, LmHead };
inline constexpr int kNumPhases = 6;
const char* phase_name(Phase p);

struct PhaseTimes {
  // seconds[layer][phase], summed over steps; row num_hidden_layers holds the final norm + lm_head.
  std::vector<std::array<double, kNumPhases>> seconds;
  // The same rows: the part of each phase's time outside `pool`'s parallel regions (all of it
  // when the pool's region timing is off, or no pool is attached).
  std::vector<std::array<double, kNumPhases>> serial_seconds;
  const ThreadPool* pool = nullptr;  // the forward's pool (Model::set_phase_times attaches it)
  double forward_seconds = 0;  // whole forward() calls, summed
  int64_t steps = 0;           // forward() calls
  int64_t tokens = 0;          // tokens those calls ran, all sequences
  int64_t logit_rows = 0;      // rows of logits they returned

  void reset(int64_t num_layers) {
    seconds.assign(size_t(num_layers + 1), {});
    serial_seconds.assign(size_t(num_layers + 1), {});
    forward_seconds = 0;
    steps = 0;
    tokens = 0;
    logit_rows = 0;
  }
  double phase_total(Phase p) const {
    double s = 0;
    for (const auto& row : seconds) s += row[size_t(p)];
    return s;
  }
  double named_total() const {
    double s = 0;
    for (int p = 0; p < kNumPhases; ++p) s += phase_total(Phase(p));
    return s;
  }
  double named_serial_total() const {
    double s = 0;
    for (const auto& row : serial_seconds)
      for (double v : row) s += v;
    return s;
  }
};

// Adds the lifetime of the scope to times->seconds[row][phase], and the part of it outside the
// pool's parallel regions to serial_seconds; does nothing when times is null. Scopes do not nest,
// and run on the thread that starts the pool's regions (whose wall time it then reads).
class PhaseScope {
 public:
  PhaseScope(PhaseTimes* times, int64_t row, Phase phase) : times_(times), row_(row), phase_(phase) {
    if (!times_) return;
    start_ = std::chrono::steady_clock::now();
    if (times_->pool) region_start_ = times_->pool->region_times().wall_seconds;
  }
  ~PhaseScope() {
    if (!times_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double in_regions = times_->pool ? times_->pool->region_times().wall_seconds - region_start_ : 0.0;
    times_->seconds[size_t(row_)][size_t(phase_)] += s;
    times_->serial_seconds[size_t(row_)][size_t(phase_)] += std::max(0.0, s - in_regions);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimes* times_;
  int64_t row_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_{};
  double region_start_ = 0;
};

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Attention: return "attention";
    case Phase::Router: return "router";
    case Phase::RoutedExperts: return "routed experts";
    case Phase::SharedExpert: return "shared expert";
    case Phase::DenseMlp: return "dense MLP";
    case Phase::LmHead: return "lm_head";
  }
  return "?";
}

}  // namespace kimi
