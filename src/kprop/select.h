// Subsets of a case's row-major matrices, as shrinkers take them (drop a
// token, a row, an input column, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
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

// Runs of the n elements a shrinker may edit at once, boldest first: m > 0
// the first m of them (n, n/2, n/4, ... 2), m < 0 the last -m (n/2 ... 2).
// Halving the run that still fails reaches a failure that needs k of n
// elements in O(log n) accepted steps per halving, where one element at a
// time took a step per element (single edits are the shrinker's last pass).
inline std::vector<int64_t> halving_runs(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t m = n; m >= 2; m /= 2) out.push_back(m);
  for (int64_t m = n / 2; m >= 2; m /= 2) out.push_back(-m);
  return out;
}

// Strided subsets a shrinker may keep, the rest edited away: every element
// whose index is `residue` modulo `stride`. A SIMD kernel's bug lives in one
// lane (a 16-bit lane that holds every 16th product wraps), so its failure
// needs the elements of one residue class: keeping half of them (stride 2),
// then a quarter (the residue's half of that), ... reaches the lane in
// log2(lanes) accepted steps, where prefix and suffix runs cut into every
// lane at once and single edits took a step per element of the other lanes.
struct Stride {
  int64_t stride, residue;
};

// Strides 2, 4, ... up to max_stride (and below n), each residue in turn.
inline std::vector<Stride> strided_keeps(int64_t n, int64_t max_stride = 64) {
  std::vector<Stride> out;
  for (int64_t s = 2; s <= max_stride && s < n; s *= 2)
    for (int64_t r = 0; r < s; ++r) out.push_back({s, r});
  return out;
}

// Applies `edit` to every element of [begin, end) that `pick` takes and
// whose index is not keep.residue modulo keep.stride.
template <typename It, typename Pick, typename Edit>
void edit_outside(It begin, It end, Stride keep, Pick pick, Edit edit) {
  for (int64_t i = 0; begin != end; ++begin, ++i)
    if (i % keep.stride != keep.residue && pick(*begin)) edit(*begin);
}

// Applies `edit` to the first m elements of [begin, end) that `pick` takes
// (m > 0), or to the last -m (m < 0).
template <typename It, typename Pick, typename Edit>
void edit_run(It begin, It end, int64_t m, Pick pick, Edit edit) {
  auto apply = [&](auto first, auto last, int64_t left) {
    for (; first != last && left > 0; ++first)
      if (pick(*first)) edit(*first), --left;
  };
  if (m > 0) apply(begin, end, m);
  if (m < 0) apply(std::make_reverse_iterator(end), std::make_reverse_iterator(begin), -m);
}

}  // namespace kprop::select
