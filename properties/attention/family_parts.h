// What the parts of the attention families share: schema.cpp (the domain,
// in_domain, case size), build.cpp (the one case builder), shrink.cpp (the
// shrinker, sub-case selection), codec.cpp (YAML) and family.cpp (names,
// stats). Not for the invariants: they use family.h.
#pragma once

#include <cstddef>
#include <string>

#include "properties/attention/family.h"

namespace kprop::attention {

// The domain's choices (schema.cpp): dtype names, mask names in MaskKind's
// order. Functions, not globals: the families register (and read their
// schema) during static initialization, before another file's globals exist.
const Choices& dtype_choices();
const Choices& mask_choices();

// The dtype named `name` (one of dtype_choices()); std::logic_error otherwise.
DType dtype_named(const std::string& name);

// Offset of row i of head h of batch b in Q (and dO), of key j of kv head h in K and V.
inline size_t q_at(const Shape& s, int b, int h, int i) {
  return ((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim;
}
inline size_t kv_at(const Shape& s, int b, int h, int j) {
  return ((size_t(b) * s.heads_kv + h) * s.nk + j) * s.dim;
}

}  // namespace kprop::attention
