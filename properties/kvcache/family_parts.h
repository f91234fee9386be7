// What the parts of the kvcache family share: schema.cpp (the domain,
// in_domain, case size), build.cpp (the one case builder), codec.cpp (YAML)
// and family.cpp (names, stats). Not for the invariants: they use family.h.
#pragma once

#include <cmath>
#include <string>

#include "properties/kvcache/family.h"

namespace kprop::kvcache {

// The dtype names of the domain's choices and of a case's YAML (family.cpp).
// A function, not a global: the families register (and read their schema)
// during static initialization, before another file's globals exist.
const Choices& dtype_choices();

// The dtype named `name` (one of dtype_choices()); std::logic_error otherwise.
DType dtype_named(const std::string& name);

// Reals in cases are multiples of 1/64 so the YAML stays short.
inline double tidy(double x) {
  return std::round(x * 64) / 64;
}

inline const char* poison_name(Poison p) {
  return p == Poison::nan ? "nan" : "huge";
}

}  // namespace kprop::kvcache
