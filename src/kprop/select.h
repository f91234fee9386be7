// Subsets of a case's row-major matrices, as shrinkers take them (drop a
// token, a row, an input column, ...).
#pragma once

#include <cstddef>
#include <vector>

namespace kprop::select {

// [0, n) without [lo, hi).
inline std::vector<int> iota_except(int n, int lo, int hi) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if (i < lo || i >= hi) out.push_back(i);
  return out;
}

// Rows `keep`, in that order, of a row-major matrix whose rows hold `width`
// elements.
template <typename T>
std::vector<T> rows(const std::vector<T>& m, size_t width, const std::vector<int>& keep) {
  std::vector<T> out;
  out.reserve(keep.size() * width);
  for (int r : keep) {
    const auto from = m.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * width);
    out.insert(out.end(), from, from + static_cast<std::ptrdiff_t>(width));
  }
  return out;
}

// Columns `keep`, in that order, of every row of the same.
template <typename T>
std::vector<T> cols(const std::vector<T>& m, size_t width, const std::vector<int>& keep) {
  std::vector<T> out;
  out.reserve(width ? m.size() / width * keep.size() : 0);
  for (size_t at = 0; at + width <= m.size() && width > 0; at += width)
    for (int k : keep) out.push_back(m[at + static_cast<size_t>(k)]);
  return out;
}

}  // namespace kprop::select
