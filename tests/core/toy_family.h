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

// The failing calls interrupts_while_shrinking has made since this was last
// set to 0: it sends SIGINT at the second. A test that relies on that resets
// it first (the binary's other tests run that mutant in the same process).
int& interrupting_mutant_calls();

}  // namespace kprop::toy
