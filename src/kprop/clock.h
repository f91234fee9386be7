// The runner's clock for budgets and reported times (steady: it never jumps),
// shared by the runner, the findings and the search.
#pragma once

#include <chrono>

namespace kprop {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace kprop
