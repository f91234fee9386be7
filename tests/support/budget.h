// Test budgets in the sanitizer build. The suite runs twice in CI: the
// optimised build checks verdicts at full budget; the ASan+UBSan build looks
// for memory errors and undefined behaviour, which the same code paths show
// at a quarter of the cases (each case there costs 3-10x more). Fixed either
// way: the same build always checks the same cases.
#pragma once

#include <algorithm>

#include "kprop/sanitizer.h"

namespace kprop::testing {

inline int sanitizer_scaled(int n) {
  return kAddressSanitizer ? std::max(1, n / 4) : n;
}

}  // namespace kprop::testing
