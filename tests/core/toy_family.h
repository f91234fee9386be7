// A toy family for framework tests: sums of small integer lists. Its mutants
// have known minimal counterexamples, so shrinking can be tested exactly.
#pragma once

#include "kprop/family.h"

namespace kprop::toy {

struct Case {
  std::vector<int> xs;
  bool operator==(const Case&) const = default;
};
struct Result {
  long sum = 0;
};

struct Traits {
  KPROP_FAMILY_TRAITS(toy::Case, toy::Result, "toy.sum", "sum of a list (framework tests)");
};

}  // namespace kprop::toy
