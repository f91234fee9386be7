#include "kprop/draw.h"

#include <stdexcept>

#include "kprop/gen.h"

namespace kprop {

// Must mirror ByteReader::in_range: as many bytes as the span needs, little-endian.
void RapidCheckDraw::put(IntRange r, int64_t value) {
  if (!record_ || r.hi <= r.lo) return;
  const uint64_t span = static_cast<uint64_t>(r.hi - r.lo) + 1;
  int nbytes = 1;
  while (nbytes < 8 && (span >> (8 * nbytes)) != 0) ++nbytes;
  const uint64_t offset = static_cast<uint64_t>(value - r.lo);
  for (int i = 0; i < nbytes; ++i) record_->push_back(static_cast<uint8_t>(offset >> (8 * i)));
}

void RapidCheckDraw::put_unit(int64_t k) {
  if (!record_) return;
  record_->push_back(static_cast<uint8_t>(k));
  record_->push_back(static_cast<uint8_t>(k >> 8));
}

int64_t BytesDraw::sized_in(int64_t lo, int64_t hi) {
  if (size_ == kFullSize || hi <= lo) return bytes_.in_range(lo, hi);
  const long double share = (size_ / 255.0L) * (size_ / 255.0L);
  return bytes_.in_range(lo, lo + static_cast<int64_t>(static_cast<long double>(hi - lo) * share));
}

int64_t Draw::allowed(const IntRange& r) {
  const int64_t n = r.count();
  if (n < 1) throw std::logic_error("kprop: drawing from " + format_value(r) + ", which allows no value");
  return n;
}

int64_t RapidCheckDraw::sized_in(int64_t lo, int64_t hi) {
  const int64_t v = *gen::sized(IntRange{lo, hi});
  put(IntRange{lo, hi}, v);
  return v;
}

int64_t RapidCheckDraw::any_in(int64_t lo, int64_t hi) {
  const int64_t v = *gen::any(IntRange{lo, hi});
  put(IntRange{lo, hi}, v);
  return v;
}

double RapidCheckDraw::any(RealRange r) {
  const int64_t k = *gen::uniform<int64_t>(0, 65536);
  put_unit(k);
  return r.lo + (r.hi - r.lo) * (static_cast<double>(k) / 65535.0);
}

bool RapidCheckDraw::chance(double p) {
  const int64_t k = *gen::uniform<int64_t>(0, 65536);
  put_unit(k);
  return static_cast<double>(k) / 65535.0 < p;
}

}  // namespace kprop
