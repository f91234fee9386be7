// Lookups shared by family tests: a registered family with its typed side,
// and an implementation's index by name (a test fails if either is absent).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kprop/family.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace kprop::testing {

template <typename Traits>
const FamilyDef<Traits>& registered_family(const char* name) {
  const auto* f = dynamic_cast<const FamilyDef<Traits>*>(Registry::instance().find(name));
  EXPECT_NE(f, nullptr) << "family " << name << " is not registered";
  return *f;
}

inline size_t implementation_index(const Family& family, const std::string& name) {
  const auto& impls = family.implementations();
  const auto it = std::find_if(impls.begin(), impls.end(), [&](const ImplInfo& i) { return i.name == name; });
  EXPECT_NE(it, impls.end()) << "no implementation " << name << " in " << family.name();
  return static_cast<size_t>(it - impls.begin());
}

// A `cuda` implementation is registered as an optimized target on device cuda.
inline void expect_registered_on_cuda(const Family& family, size_t index) {
  const ImplInfo& info = family.implementations()[index];
  EXPECT_EQ(info.device, "cuda");
  EXPECT_EQ(info.kind, ImplKind::optimized);
}

// Without a device (or built without CUDA) a spec run on the `cuda` target
// is skipped at once, every invariant not run: never passed, never failed.
inline void expect_cuda_run_skipped(const std::string& spec_path) {
  RunOptions o;
  o.target = "cuda";
  o.seed = 1;
  o.write_corpus = false;
  const RunReport r = run_spec(load_spec(spec_path), o);
  EXPECT_EQ(r.status, RunStatus::skipped);
#if KPROP_HAVE_CUDA
  EXPECT_EQ(r.detail, "skipped: no CUDA device");
#else
  EXPECT_EQ(r.detail, "skipped: built without CUDA");
#endif
  for (const auto& inv : r.invariants) EXPECT_EQ(inv.status, InvariantStatus::not_run) << inv.name;
}

}  // namespace kprop::testing
