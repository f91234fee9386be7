// What the parts of the op family share: structured.cpp (index tensors and
// masks, case surgery), build.cpp (generation from the declaration),
// shrink.cpp (the shrinker, in_domain, sizes, stats), codec.cpp (YAML) and
// family.cpp (named tensors, transforms, OpFamily). Not for the invariants:
// they use family.h.
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "properties/op/family.h"

namespace kprop::op {

// Elements of a tensor of extents `shape`.
inline int64_t count(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// The shortest text that reads back to v in the dtype.
std::string number_text(double v, DType dtype);  // codec.cpp

// Calls f(line, base, stride, n) for every line of `ext` along `axis`.
template <typename F>
void for_lines(const std::vector<int64_t>& ext, size_t axis, F f) {
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= ext[k];
  for (size_t k = axis + 1; k < ext.size(); ++k) inner *= ext[k];
  const int64_t n = ext[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * inner + i, o * n * inner + i, inner, n);
}

// The causal mask of extents `ext` (the last two axes rows, cols).
std::vector<double> causal_mask(const std::vector<int64_t>& ext, bool bottom_right);
// The least valid length of a padding row of n elements.
int64_t padding_min(const ValueSpec& v, int64_t n);
// ids' exclusive bound on a case's dims.
int64_t ids_bound(const ValueSpec& v, const std::vector<int64_t>& dims);

}  // namespace kprop::op
