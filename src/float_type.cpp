#include "kprop/float_type.h"

#include <fmt/format.h>

#include <cmath>

namespace kprop {

std::string value_text(FloatType t, double x) {
  if (std::isnan(x)) return ".nan";
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

}  // namespace kprop
