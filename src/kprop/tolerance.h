// The tolerance policy for comparing an implementation against the fp64
// reference (docs/DESIGN.md, "Tolerance policy"; after FlashAttention's
// tests): the target's error may be at most k × the error of a naive
// computation in the target's own precision, plus an absolute floor. NaN and
// ±inf must match exactly.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

namespace kprop {

struct ToleranceReport {
  bool ok = true;
  size_t worst_index = 0;
  double target_error = 0;    // max |target - reference|
  double baseline_error = 0;  // max |naive - reference|
  double allowed = 0;         // k * baseline_error + floor
  std::string message;        // why not ok
};

// `target` and `naive` have the reference's length. `k` defaults to 2.
ToleranceReport compare_with_baseline(std::span<const double> reference, std::span<const double> target,
                                      std::span<const double> naive, double k, double abs_floor);

// Plain |a - b| <= atol + rtol·|b| elementwise, non-finite values equal.
ToleranceReport compare_close(std::span<const double> reference, std::span<const double> target, double atol,
                              double rtol);

// True when a and b are both NaN, equal infinities, or finite.
inline bool same_nonfinite(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return true;
}

}  // namespace kprop
