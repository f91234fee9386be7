// Test budgets in the sanitizer build, which looks for memory errors and
// undefined behaviour: the same code paths show them at a quarter of the
// cases (each case there costs 3-10x more). Fixed either way: the same build
// always checks the same cases. `ctest` in an optimised build runs the full
// budgets. CI (scripts/dev.sh test) runs the framework's tests
// (kprop_core_tests) in the sanitizer build only, at these budgets; its
// verdicts at the specs' own budgets are the optimised build's mutants.*,
// target.* and soak.* runs.
#pragma once

#include <algorithm>

#include "kprop/sanitizer.h"

namespace kprop::testing {

inline int sanitizer_scaled(int n) {
  return kAddressSanitizer ? std::max(1, n / 4) : n;
}

}  // namespace kprop::testing
