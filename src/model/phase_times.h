#pragma once
// Optional per-phase wall-clock accounting of forward steps, for `kimi bench latency --breakdown`:
// a plain struct of accumulators that Model::forward fills while one is attached (off by default;
// off, each phase costs one null test). Time outside the named phases (embedding lookup, norms,
// residual adds) is forward_seconds minus their sum.
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace kimi {

enum class Phase : int { Attention, Router, RoutedExperts, SharedExpert, DenseMlp, LmHead };
inline constexpr int kNumPhases = 6;
const char* phase_name(Phase p);

struct PhaseTimes {
  // seconds[layer][phase], summed over steps; row num_hidden_layers holds the final norm + lm_head.
  std::vector<std::array<double, kNumPhases>> seconds;
  double forward_seconds = 0;  // whole forward() calls, summed
  int64_t steps = 0;           // forward() calls
  int64_t tokens = 0;          // tokens those calls ran, all sequences
  int64_t logit_rows = 0;      // rows of logits they returned

  void reset(int64_t num_layers) {
    seconds.assign(size_t(num_layers + 1), {});
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
};

// Adds the lifetime of the scope to times->seconds[row][phase]; does nothing when times is null.
class PhaseScope {
 public:
  PhaseScope(PhaseTimes* times, int64_t row, Phase phase) : times_(times), row_(row), phase_(phase) {
    if (times_) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseScope() {
    if (times_)
      times_->seconds[size_t(row_)][size_t(phase_)] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimes* times_;
  int64_t row_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_{};
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
