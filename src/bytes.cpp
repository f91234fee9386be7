#include "kprop/bytes.h"

#include <algorithm>

namespace kprop {

uint8_t ByteReader::byte() {
  return pos_ < size_ ? data_[pos_++] : 0;
}

uint64_t ByteReader::bits(int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
  return v;
}

int64_t ByteReader::in_range(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  int nbytes = 1;
  while (nbytes < 8 && (span >> (8 * nbytes)) != 0) ++nbytes;
  return lo + static_cast<int64_t>(bits(nbytes) % span);
}

double ByteReader::unit() {
  return static_cast<double>(bits(2)) / 65535.0;
}

}  // namespace kprop
