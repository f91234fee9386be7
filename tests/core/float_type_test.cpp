// The numeric families' case dtype (src/kprop/float_type.h): YAML names,
// rounding, constants and value texts, against values computed independently (the
// standard library's float and double limits, powers of two, half.h's
// exhaustively tested conversions).
#include "kprop/float_type.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace kprop {
namespace {

constexpr FloatType kAll[] = {FloatType::f32, FloatType::f64, FloatType::f16, FloatType::bf16};

TEST(FloatType, NamesReadBack) {
  for (FloatType t : kAll) {
    FloatType back = t == FloatType::f64 ? FloatType::f32 : FloatType::f64;
    ASSERT_TRUE(parse_dtype(dtype_name(t), back)) << dtype_name(t);
    EXPECT_EQ(back, t);
  }
  EXPECT_STREQ(dtype_name(FloatType::f32), "f32");
  EXPECT_STREQ(dtype_name(FloatType::f64), "f64");
  EXPECT_STREQ(dtype_name(FloatType::f16), "f16");
  EXPECT_STREQ(dtype_name(FloatType::bf16), "bf16");
  FloatType untouched = FloatType::bf16;
  for (const char* name : {"", "F32", "fp16", "float", "i32", "bool"}) {
    EXPECT_FALSE(parse_dtype(name, untouched)) << name;
    EXPECT_EQ(untouched, FloatType::bf16);
  }
}

TEST(FloatType, HalvesComputeInF32) {
  EXPECT_FALSE(is_half(FloatType::f32));
  EXPECT_FALSE(is_half(FloatType::f64));
  EXPECT_TRUE(is_half(FloatType::f16));
  EXPECT_TRUE(is_half(FloatType::bf16));
  EXPECT_EQ(arithmetic_type(FloatType::f32), FloatType::f32);
  EXPECT_EQ(arithmetic_type(FloatType::f64), FloatType::f64);
  EXPECT_EQ(arithmetic_type(FloatType::f16), FloatType::f32);
  EXPECT_EQ(arithmetic_type(FloatType::bf16), FloatType::f32);
}

TEST(FloatType, Constants) {
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  EXPECT_EQ(unit_roundoff(FloatType::f32), F::epsilon() / 2);
  EXPECT_EQ(unit_roundoff(FloatType::f64), D::epsilon() / 2);
  EXPECT_EQ(unit_roundoff(FloatType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(FloatType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(min_normal(FloatType::f32), F::min());
  EXPECT_EQ(min_normal(FloatType::f64), D::min());
  EXPECT_EQ(min_normal(FloatType::f16), half::f16_min_normal);
  EXPECT_EQ(min_normal(FloatType::bf16), half::bf16_min_normal);
  EXPECT_EQ(denorm_min(FloatType::f32), F::denorm_min());
  EXPECT_EQ(denorm_min(FloatType::f64), D::denorm_min());
  EXPECT_EQ(denorm_min(FloatType::f16), std::ldexp(1.0, -24));
  EXPECT_EQ(denorm_min(FloatType::bf16), std::ldexp(1.0, -133));
  EXPECT_EQ(max_finite(FloatType::f32), F::max());
  EXPECT_EQ(max_finite(FloatType::f64), D::max());
  EXPECT_EQ(max_finite(FloatType::f16), 65504.0);
  EXPECT_EQ(max_finite(FloatType::bf16), half::bf16_max);
  EXPECT_EQ(precision_bits(FloatType::f32), F::digits);
  EXPECT_EQ(precision_bits(FloatType::f64), D::digits);
  EXPECT_EQ(precision_bits(FloatType::f16), 11);
  EXPECT_EQ(precision_bits(FloatType::bf16), 8);
  EXPECT_EQ(storage_bytes(FloatType::f32), int(sizeof(float)));
  EXPECT_EQ(storage_bytes(FloatType::f64), int(sizeof(double)));
  EXPECT_EQ(storage_bytes(FloatType::f16), 2);
  EXPECT_EQ(storage_bytes(FloatType::bf16), 2);
}

TEST(FloatType, RoundsToNearestEven) {
  const double x = 1 + std::ldexp(1.0, -30);  // exact in f64 only
  EXPECT_EQ(round_to(FloatType::f64, x), x);
  EXPECT_EQ(round_to(FloatType::f32, x), 1.0);
  EXPECT_EQ(round_to(FloatType::f16, x), 1.0);
  EXPECT_EQ(round_to(FloatType::bf16, x), 1.0);
  EXPECT_EQ(round_to(FloatType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(round_to(FloatType::f16, 0.1), half::round_to_f16(0.1));
  EXPECT_EQ(round_to(FloatType::bf16, 0.1), half::round_to_bf16(0.1));
  // A tie rounds to the even neighbour: 1 + 2^-11 is halfway between two f16 values.
  EXPECT_EQ(round_to(FloatType::f16, 1 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_to(FloatType::f16, 1 + 3 * std::ldexp(1.0, -11)), 1 + std::ldexp(1.0, -9));
  for (FloatType t : kAll) {
    EXPECT_TRUE(std::isnan(round_to(t, std::nan(""))));
    EXPECT_EQ(round_to(t, max_finite(t)), max_finite(t));
    EXPECT_EQ(round_to(t, denorm_min(t)), denorm_min(t));
    EXPECT_EQ(round_to(t, -min_normal(t)), -min_normal(t));
  }
}

TEST(FloatType, ValueTextReadsBack) {
  for (FloatType t : kAll)
    for (double x : {0.1, -1.0 / 3, 65504.0, 1e-7, 0.0, -0.0, 3.0}) {
      const double v = round_to(t, x);
      const std::string text = value_text(t, v);
      EXPECT_EQ(round_to(t, std::strtod(text.c_str(), nullptr)), v) << dtype_name(t) << " " << text;
      EXPECT_EQ(std::signbit(round_to(t, std::strtod(text.c_str(), nullptr))), std::signbit(v));
    }
  EXPECT_EQ(value_text(FloatType::f32, 0.1), "0.1");
  EXPECT_EQ(value_text(FloatType::f64, 0.1), "0.1");
  EXPECT_EQ(value_text(FloatType::f16, round_to(FloatType::f16, 0.1)),
            half::f16_text(half::f16_from_double(0.1)));
  for (FloatType t : kAll) {
    EXPECT_EQ(value_text(t, std::nan("")), ".nan");
    EXPECT_EQ(value_text(t, HUGE_VAL), ".inf");
    EXPECT_EQ(value_text(t, -HUGE_VAL), "-.inf");
  }
}

// parse_value rounds the decimal once. Reading it as the nearest double and
// rounding that to the half type rounded twice: a decimal just off a tie
// landed on it and went to even (1.000488281250000000001 read as 1 in f16,
// 65519.9999999999999999 as inf).
TEST(FloatType, ParseValueRoundsADecimalOnce) {
  const auto f16 = [](const char* s) { return parse_value(FloatType::f16, s, nullptr); };
  const auto bf16 = [](const char* s) { return parse_value(FloatType::bf16, s, nullptr); };
  EXPECT_EQ(f16("1.000488281250000000001"), 1.0009765625);  // above the tie 1 + 2^-11
  EXPECT_EQ(f16("1.00048828125"), 1.0);                     // the tie: to even
  EXPECT_EQ(f16("1.000488281249999999999"), 1.0);
  EXPECT_EQ(f16("65519.9999999999999999"), 65504.0);  // below the overflow threshold
  EXPECT_EQ(f16("65520"), HUGE_VAL);
  EXPECT_EQ(f16("-65519.9999999999999999"), -65504.0);
  EXPECT_EQ(f16("-65520.0000000000000001"), -HUGE_VAL);
  EXPECT_EQ(f16("2.98023223876953125e-8"), 0.0);  // 2^-25: the tie between 0 and 2^-24
  EXPECT_EQ(f16("2.980232238769531250001e-8"), 0x1p-24);
  EXPECT_EQ(bf16("1.003906250000000000001"), 1.0078125);  // above the tie 1 + 2^-8
  EXPECT_EQ(bf16("1.00390625"), 1.0);
  EXPECT_EQ(bf16("339617752923046005526922703901628039167.9"), half::bf16_max);  // below 2^128 - 2^119
  EXPECT_EQ(bf16("339617752923046005526922703901628039168"), HUGE_VAL);
  EXPECT_TRUE(std::isnan(f16("nan")));
  EXPECT_EQ(parse_value(FloatType::f32, "0.1", nullptr), static_cast<double>(0.1f));
  EXPECT_EQ(parse_value(FloatType::f64, "0.1", nullptr), 0.1);
  // strtod's end, and the caller's rounding mode left as it was.
  const char* text = "1.5x";
  char* end = nullptr;
  EXPECT_EQ(parse_value(FloatType::f16, text, &end), 1.5);
  EXPECT_EQ(end, text + 3);
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  for (FloatType t : kAll)
    for (double x : {0.1, -1.0 / 3, 65504.0, 1e-7, 0.0, -0.0, 3.0}) {
      const double v = round_to(t, x);
      EXPECT_EQ(parse_value(t, value_text(t, v).c_str(), nullptr), v) << dtype_name(t) << " " << x;
    }
}

}  // namespace
}  // namespace kprop
