// Test budgets in the sanitizer build, which looks for memory errors and
// undefined behaviour: the same code paths show them at a quarter of the
// cases (each case there costs 3-10x more). Fixed either way: the same build
// always checks the same cases; the optimised build runs the full budgets
// (SpecSuite there is the verdict; CI runs it in both builds).
#pragma once

#include <algorithm>

#include "kprop/sanitizer.h"

namespace kprop::testing {

inline int sanitizer_scaled(int n) {
  return kAddressSanitizer ? std::max(1, n / 4) : n;
}

}  // namespace kprop::testing
