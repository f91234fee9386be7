// Turns libFuzzer's bytes into values within a spec's domain. Reads past the
// end yield the range's low end, so every byte string decodes to a valid case
// and short inputs decode to small cases (the fuzzer's minimisation then
// works toward simple cases too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kprop/values.h"

namespace kprop {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }
  uint8_t byte();
  uint64_t bits(int nbytes);                 // little-endian, missing bytes read as 0
  int64_t in_range(int64_t lo, int64_t hi);  // inclusive
  int64_t in_range(IntRange r) { return in_range(r.lo, r.hi); }
  double unit();  // [0, 1], 16 bits of resolution
  double in_range(RealRange r) { return r.lo + (r.hi - r.lo) * unit(); }
  bool flag() { return (byte() & 1) != 0; }
  template <typename T>
  const T& pick(const std::vector<T>& options) {
    return options[static_cast<size_t>(in_range(0, static_cast<int64_t>(options.size()) - 1))];
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kprop
