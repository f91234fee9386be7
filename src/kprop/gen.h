// Generator helpers shared by families: RapidCheck generators drawn from spec
// ranges, with the upper end ramped by RapidCheck's size so early trials are
// small (cheap, readable) and later ones reach the whole domain.
#pragma once

#include <rapidcheck.h>

#include <algorithm>

#include "kprop/values.h"

namespace kprop::gen {

// The size the runner ramps up to; families scale ranges against it.
inline constexpr int kFullSize = 100;

// rc::gen::inRange itself shrinks its span with RapidCheck's size (size 0
// always gives the low end), so every draw below is made at full size and
// only `sized` ramps explicitly.
template <typename T>
rc::Gen<T> uniform(T lo, T hi_exclusive) {
  return rc::gen::resize(rc::kNominalSize, rc::gen::inRange<T>(lo, hi_exclusive));
}

// An integer in [r.lo, r.hi], the upper end scaled by the current size.
inline rc::Gen<int64_t> sized(IntRange r) {
  return rc::gen::withSize([r](int size) {
    const double frac = std::clamp(size, 0, kFullSize) / static_cast<double>(kFullSize);
    const int64_t hi = r.lo + static_cast<int64_t>((r.hi - r.lo) * frac + 0.5);
    return uniform<int64_t>(r.lo, hi + 1);
  });
}

// An integer anywhere in [r.lo, r.hi].
inline rc::Gen<int64_t> any(IntRange r) {
  return uniform<int64_t>(r.lo, r.hi + 1);
}

}  // namespace kprop::gen
