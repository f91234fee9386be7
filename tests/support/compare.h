// Element-wise comparison of two result vectors in the kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kprop::testing {

// max_i |a_i - b_i| over the common length (NaN in either side: NaN).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace kprop::testing
