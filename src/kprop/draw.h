// One case builder per family for every source of choices. A family that
// writes `static Case build(Draw&, const Values& domain)` gets, from the core:
//   - its RapidCheck generator (draws from RapidCheck, size-ramped),
//   - its libFuzzer decoder (draws from bytes),
//   - a case-to-bytes encoder for fuzz seed corpora (a RapidCheck-generated
//     case recorded as the exact bytes the decoder turns back into it).
// So the fuzzer reaches exactly the generator's domain, and a seed corpus
// can be made from the spec itself.
#pragma once

#include <cstdint>
#include <vector>

#include "kprop/bytes.h"
#include "kprop/values.h"

namespace kprop {

class Draw {
 public:
  virtual ~Draw() = default;
  // An integer in r whose upper end grows with RapidCheck's size (bytes: all
  // of r). A constrained r (one_of, multiple_of: IntRange) gives only its
  // allowed values: the draw picks an index into them, smallest first, so
  // the size ramp and RapidCheck's shrinking still favour small values.
  int64_t sized(const IntRange& r) {
    return r.constrained() ? r.at(sized_in(0, allowed(r) - 1)) : sized_in(r.lo, r.hi);
  }
  int64_t any(const IntRange& r) {
    return r.constrained() ? r.at(any_in(0, allowed(r) - 1)) : any_in(r.lo, r.hi);
  }
  // 16-bit resolution, identical for every source: lo + (hi - lo) * k / 65535.
  virtual double any(RealRange r) = 0;
  // True with probability p (k / 65535 < p).
  virtual bool chance(double p) = 0;

  int index(size_t n) { return static_cast<int>(any(IntRange{0, static_cast<int64_t>(n) - 1})); }
  template <typename T>
  const T& pick(const std::vector<T>& options) {
    return options[static_cast<size_t>(index(options.size()))];
  }

 protected:
  // Plain draws in [lo, hi] (inclusive), what sized/any make of every range.
  virtual int64_t sized_in(int64_t lo, int64_t hi) = 0;
  virtual int64_t any_in(int64_t lo, int64_t hi) = 0;

 private:
  static int64_t allowed(const IntRange& r);  // r.count(); throws when r allows nothing
};

// Draws from libFuzzer bytes (missing bytes read as zero: the low end).
// `size` plays RapidCheck's size: a sized draw in [lo, hi] reads from
// [lo, lo + (hi - lo)·(size/255)²], so most inputs a fuzzer makes (their
// size byte, Family::from_bytes, is anything) decode to small, cheap cases,
// and 255 reaches all of [lo, hi]. Squared, not linear: a case's cost grows
// with the product of its dims.
class BytesDraw final : public Draw {
 public:
  static constexpr uint8_t kFullSize = 255;
  explicit BytesDraw(ByteReader& bytes, uint8_t size = kFullSize) : bytes_(bytes), size_(size) {}
  using Draw::any;
  double any(RealRange r) override { return r.lo + (r.hi - r.lo) * bytes_.unit(); }
  bool chance(double p) override { return bytes_.unit() < p; }

 protected:
  int64_t sized_in(int64_t lo, int64_t hi) override;
  int64_t any_in(int64_t lo, int64_t hi) override { return bytes_.in_range(lo, hi); }

 private:
  ByteReader& bytes_;
  uint8_t size_;
};

// Draws from RapidCheck (only inside rc::gen::exec); when `record` is set,
// appends the bytes that make BytesDraw return the same values.
class RapidCheckDraw final : public Draw {
 public:
  explicit RapidCheckDraw(std::vector<uint8_t>* record = nullptr) : record_(record) {}
  using Draw::any;
  double any(RealRange r) override;
  bool chance(double p) override;

 protected:
  int64_t sized_in(int64_t lo, int64_t hi) override;
  int64_t any_in(int64_t lo, int64_t hi) override;

 private:
  void put(IntRange r, int64_t value);
  void put_unit(int64_t k);
  std::vector<uint8_t>* record_;
};

}  // namespace kprop
