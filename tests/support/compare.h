// Element-wise comparison of two result vectors in the kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kprop::testing {

// max_i |a_i - b_i|; NaN when the lengths differ (a short or empty output
// fails the comparison) or either side has a NaN.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::nan("");
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace kprop::testing
