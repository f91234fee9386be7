// Turns libFuzzer's bytes into values within a spec's domain. Reads past the
// end yield the range's low end, so every byte string decodes to a valid case
// and short inputs decode to small cases (the fuzzer's minimisation then
// works toward simple cases too).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kprop {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte();
  uint64_t bits(int nbytes);                 // little-endian, missing bytes read as 0
  int64_t in_range(int64_t lo, int64_t hi);  // inclusive
  double unit();                             // [0, 1], 16 bits of resolution

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kprop
