// Lookups shared by family tests: a registered family with its typed side,
// and an implementation's index by name (a test fails if either is absent).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kprop/family.h"

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

}  // namespace kprop::testing
