#include "kprop/float_type.h"

#include <fmt/format.h>

#include <cfenv>
#include <cmath>
#include <cstdlib>

namespace kprop {

std::string value_text(FloatType t, double x) {
  if (std::isnan(x)) return std::signbit(x) ? "-.nan" : ".nan";  // the sign kept: a sort orders -NaN too
  if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  switch (t) {
    case FloatType::f32:
      return fmt::format("{}", static_cast<float>(x));
    case FloatType::f16:
      return half::f16_text(half::f16_from_double(x));
    case FloatType::bf16:
      return half::bf16_text(half::bf16_from_double(x));
    case FloatType::f64:
      break;
  }
  return fmt::format("{}", x);
}

double parse_value(FloatType t, const char* s, char** end) {
  if (t == FloatType::f32) return static_cast<double>(std::strtof(s, end));
  if (t == FloatType::f64) return std::strtod(s, end);
  // The decimal's neighbours among the doubles: lo <= decimal <= hi, equal
  // when the decimal is a double (glibc's strtod rounds in the current mode).
  const int mode = std::fegetround();
  std::fesetround(FE_DOWNWARD);
  const double lo = std::strtod(s, end);
  std::fesetround(FE_UPWARD);
  const double hi = std::strtod(s, nullptr);
  std::fesetround(mode);
  const double a = round_to(t, lo), b = round_to(t, hi);
  if (a == b || std::isnan(lo)) return a;
  // Rounding is monotone, so a < b are neighbours in the type and the
  // midpoint m between them (the overflow threshold past the largest finite
  // value; exact in double) lies in [lo, hi]: with no double strictly
  // between lo and hi, m is one of them, and the decimal lies strictly on
  // the other's side of m.
  const double threshold = t == FloatType::f16 ? half::f16_overflow : half::bf16_overflow;
  const double m = std::isinf(a) ? -threshold : std::isinf(b) ? threshold : a / 2 + b / 2;
  return lo == m ? b : a;
}

}  // namespace kprop
