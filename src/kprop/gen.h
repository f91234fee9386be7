// Generator helpers shared by families: RapidCheck generators drawn from spec
// ranges, with the upper end ramped by RapidCheck's size so early trials are
// small (cheap, readable) and later ones reach the whole domain.
#pragma once

#include <algorithm>
#include <rapidcheck.h>

#include "kprop/values.h"

namespace kprop::gen {

// The size the runner ramps up to; families scale ranges against it.
inline constexpr int kFullSize = 100;

// An integer in [r.lo, r.hi], the upper end scaled by the current size.
inline rc::Gen<int64_t> sized(IntRange r) {
  return rc::gen::withSize([r](int size) {
    const double frac = std::clamp(size, 0, kFullSize) / static_cast<double>(kFullSize);
    const int64_t hi = r.lo + static_cast<int64_t>((r.hi - r.lo) * frac + 0.5);
    return rc::gen::inRange<int64_t>(r.lo, hi + 1);
  });
}

// An integer anywhere in [r.lo, r.hi].
inline rc::Gen<int64_t> any(IntRange r) { return rc::gen::inRange<int64_t>(r.lo, r.hi + 1); }

// A real in [r.lo, r.hi], uniform.
inline rc::Gen<double> any(RealRange r) {
  return rc::gen::map(rc::gen::inRange<int64_t>(0, 1 << 20), [r](int64_t k) {
    return r.lo + (r.hi - r.lo) * (static_cast<double>(k) / (1 << 20));
  });
}

// True with probability p.
inline rc::Gen<bool> chance(double p) {
  return rc::gen::map(rc::gen::inRange(0, 1 << 16),
                      [p](int k) { return k < p * (1 << 16); });
}

}  // namespace kprop::gen
