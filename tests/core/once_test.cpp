// OnceStore: what several invariants derive from one trial is computed once,
// whether it reads the case (Trial::once) or the trial itself, whose oracle
// runs are lazy and so need a non-const argument (Trial::once_with_oracles).
#include "kprop/once.h"

#include <gtest/gtest.h>

namespace {

struct Counted {
  int calls = 0;
  int value = 0;
};

int twice(const Counted& c) {
  return 2 * c.value;
}
// Reads and mutates its argument, as a trial does when it first runs its reference.
int bump(Counted& c) {
  return ++c.calls;
}

TEST(OnceStore, ComputesEachFunctionOncePerStore) {
  kprop::OnceStore store;
  Counted c{0, 21};
  EXPECT_EQ(store.get<twice>(c), 42);
  c.value = 5;  // a store serves one argument: the first value stays
  EXPECT_EQ(store.get<twice>(c), 42);
  EXPECT_EQ(store.get<bump>(c), 1);
  EXPECT_EQ(store.get<bump>(c), 1);
  EXPECT_EQ(c.calls, 1);
  kprop::OnceStore other;  // another trial's store computes its own
  EXPECT_EQ(other.get<bump>(c), 2);
}

}  // namespace
