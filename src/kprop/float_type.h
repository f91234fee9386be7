// The floating-point types a kernel case is stored in (a case's `dtype`:
// f32, f64, f16, bf16), their names in YAML, rounding to them and their
// constants. One type for every numeric family (attention, layernorm,
// softmax_topk, kvcache; the op family's tensor types, which add integers
// and booleans, map their floating ones onto it).
//
// Self-contained like half.h (which it builds on): kernels include it
// without depending on the framework; all inline but value_text and
// parse_value (src/float_type.cpp, like half.h's texts in src/half.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kprop/enum_names.h"
#include "kprop/half.h"

namespace kprop {

enum class FloatType { f32, f64, f16, bf16 };

// "f32", "f64", "f16", "bf16": the names in specs and case YAML.
inline const char* dtype_name(FloatType t) {
  static constexpr const char* kNames[] = {"f32", "f64", "f16", "bf16"};
  static_assert(std::size(kNames) == size_t(FloatType::bf16) + 1);
  return enum_name(t, kNames);
}

// The type named `name`; false if none.
inline bool parse_dtype(const std::string& name, FloatType& out) {
  for (FloatType t : {FloatType::f32, FloatType::f64, FloatType::f16, FloatType::bf16})
    if (name == dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// f16 or bf16: storage only, the arithmetic is f32 (as on GPUs).
inline bool is_half(FloatType t) {
  return t == FloatType::f16 || t == FloatType::bf16;
}

// The precision a kernel computes a `t` value in: f32 for the halves, the
// type itself otherwise.
inline FloatType arithmetic_type(FloatType t) {
  return is_half(t) ? FloatType::f32 : t;
}

// Significand bits, the implicit one included: 24 (f32), 53 (f64), 11
// (f16), 8 (bf16); the unit roundoff is 2^-precision.
inline int precision_bits(FloatType t) {
  static constexpr int kBits[] = {24, 53, 11, 8};  // in FloatType's order
  static_assert(std::size(kBits) == size_t(FloatType::bf16) + 1);
  return kBits[static_cast<size_t>(t)];
}

// Bytes per stored element: 4 (f32), 8 (f64), 2 (f16, bf16).
inline int storage_bytes(FloatType t) {
  return t == FloatType::f64 ? 8 : t == FloatType::f32 ? 4 : 2;
}

// The nearest value of the type to x (round to nearest, ties to even; f64: x).
inline double round_to(FloatType t, double x) {
  switch (t) {
    case FloatType::f32:
      return static_cast<double>(static_cast<float>(x));
    case FloatType::f64:
      return x;
    case FloatType::f16:
      return half::round_to_f16(x);
    case FloatType::bf16:
      return half::round_to_bf16(x);
  }
  return x;
}

// Unit roundoff: 2^-24 (f32), 2^-53 (f64), 2^-11 (f16), 2^-8 (bf16).
inline double unit_roundoff(FloatType t) {
  return 1.0 / static_cast<double>(uint64_t{1} << precision_bits(t));
}

// The smallest positive normal: 2^-126 (f32, bf16), 2^-1022 (f64), 2^-14 (f16).
inline double min_normal(FloatType t) {
  static constexpr double kMin[] = {0x1.0p-126, 0x1.0p-1022, 0x1.0p-14, 0x1.0p-126};  // in FloatType's order
  static_assert(std::size(kMin) == size_t(FloatType::bf16) + 1);
  return kMin[static_cast<size_t>(t)];
}

// The smallest positive subnormal: 2^-149 (f32), 2^-1074 (f64), 2^-24 (f16), 2^-133 (bf16).
inline double denorm_min(FloatType t) {
  static constexpr double kMin[] = {0x1.0p-149, 0x1.0p-1074, half::f16_min_subnormal,
                                    half::bf16_min_subnormal};  // in FloatType's order
  static_assert(std::size(kMin) == size_t(FloatType::bf16) + 1);
  return kMin[static_cast<size_t>(t)];
}

// The largest finite value: FLT_MAX, DBL_MAX, 65504 (f16), (2 - 2^-7) 2^127 (bf16).
inline double max_finite(FloatType t) {
  static constexpr double kMax[] = {static_cast<double>(std::numeric_limits<float>::max()),
                                    std::numeric_limits<double>::max(), half::f16_max,
                                    half::bf16_max};  // in FloatType's order
  static_assert(std::size(kMax) == size_t(FloatType::bf16) + 1);
  return kMax[static_cast<size_t>(t)];
}

// The neighbour of round_to(t, |x|) (which must be finite) one step away
// from zero (dir = +1) or toward it (dir = -1; from a zero, -denorm_min):
// bit pattern +- 1 for f16, bf16 and f32, std::nextafter for f64.
inline double neighbour_abs(FloatType t, double x, int dir) {
  const double a = round_to(t, std::fabs(x));
  if (dir < 0 && a == 0) return -denorm_min(t);
  switch (t) {
    case FloatType::f32:
      return static_cast<double>(std::nextafter(static_cast<float>(a), dir > 0 ? HUGE_VALF : 0.0f));
    case FloatType::f16:
      return half::f16_to_double(static_cast<uint16_t>(half::f16_from_double(a) + dir));
    case FloatType::bf16:
      return half::bf16_to_double(static_cast<uint16_t>(half::bf16_from_double(a) + dir));
    case FloatType::f64:
      break;
  }
  return std::nextafter(a, dir > 0 ? HUGE_VAL : 0.0);
}

// How far x is from the nearest point at which round_to(t, .) changes its
// value: the midpoints between r = round_to(t, x) and r's two neighbours in
// the type (0 for x at a tie or past the largest finite value; +inf for
// f64, where nothing rounds). Any value within this distance of x rounds to
// r: an element whose exact value is farther from a midpoint than its
// computation's error bound has one correct stored value (attention's
// o_rounded_to_nearest). Midpoints of half or f32 values are exact in double.
inline double rounding_margin(FloatType t, double x) {
  if (t == FloatType::f64) return HUGE_VAL;
  const double a = std::fabs(x), r = round_to(t, a);
  if (!std::isfinite(r)) return 0;
  const double down = neighbour_abs(t, r, -1);
  double up = neighbour_abs(t, r, +1);
  if (std::isinf(up)) up = r + (r - down);  // past the largest finite value: the overflow threshold
  return std::min(a - (down + r) / 2, (r + up) / 2 - a);
}

// The exponent of v's lowest set bit (v = odd × 2^result; v finite and
// nonzero): v lies on the grid of 2^result, and v + c does too for every
// multiple c of it (the families' exact shift transforms).
inline int lowest_bit(double v) {
  int e;
  double f = std::fabs(std::frexp(v, &e));  // v = f 2^e, 0.5 <= f < 1
  int bits = 0;
  while (f != std::floor(f)) f *= 2, ++bits;
  return e - bits;
}

// The shortest text that reads back to x in the type (read as a double,
// then rounded to it): fmt's shortest text of the float (f32) or double
// (f64), half.h's f16_text / bf16_text; a non-finite value as YAML writes
// it (".nan", ".inf", "-.inf").
std::string value_text(FloatType t, double x);

// The decimal text s (strtod's syntax; *end as strtod sets it) rounded once,
// to nearest even, to the type: what value_text's inverse must do for any
// decimal, not only the ones it writes. f32 and f64: strtof, strtod. The
// halves: not round_to of strtod's double, which rounds twice (a decimal
// just above an f16 tie lands on the tie and rounds to even, so
// 1.000488281250000000001 read as 1 and 65519.9999999999999999 as inf).
double parse_value(FloatType t, const char* s, char** end);

}  // namespace kprop
