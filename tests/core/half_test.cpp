// f16 / bf16 values (src/kprop/half.h): exhaustive over every bit pattern of
// both formats, against references computed independently of the code under
// test: exact values from the bit fields with ldexp, rounding from the two
// neighbouring representable values by distance (long double holds every
// midpoint exactly), and the C ABI round trip through Tensor::of/to_doubles.
#include "kprop/half.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kprop/case_yaml.h"
#include "kprop/external.h"
#include "kprop/float_type.h"

namespace kprop::half {
namespace {

struct Fmt {
  const char* name;
  int exp_bits, man_bits;
  uint16_t (*from)(double);
  double (*to)(uint16_t);
  double (*round)(double);
  std::string (*text)(uint16_t);
  double max, min_subnormal, overflow;
  int32_t dtype;
};
const Fmt kF16{"f16",        5,        10,      f16_from_double,   f16_to_double,
               round_to_f16, f16_text, f16_max, f16_min_subnormal, f16_overflow,
               KPROP_F16};
const Fmt kBF16{"bf16",        8,         7,        bf16_from_double,   bf16_to_double,
                round_to_bf16, bf16_text, bf16_max, bf16_min_subnormal, bf16_overflow,
                KPROP_BF16};

bool is_nan_bits(const Fmt& f, uint16_t h) {
  const uint16_t exp_mask = static_cast<uint16_t>(((1u << f.exp_bits) - 1) << f.man_bits);
  return (h & exp_mask) == exp_mask && (h & ((1u << f.man_bits) - 1)) != 0;
}

// The value of a bit pattern, from its fields (the reference for to_double).
long double reference_value(const Fmt& f, uint16_t h) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int e = (h >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int man = h & ((1 << f.man_bits) - 1);
  const long double s = (h & 0x8000) ? -1.0L : 1.0L;
  if (e == (1 << f.exp_bits) - 1) return man ? std::numeric_limits<long double>::quiet_NaN() : s * HUGE_VALL;
  if (e == 0) return s * std::ldexp(static_cast<long double>(man), 1 - bias - f.man_bits);
  return s * std::ldexp(static_cast<long double>(man + (1 << f.man_bits)), e - bias - f.man_bits);
}

class Half : public ::testing::TestWithParam<const Fmt*> {};

TEST_P(Half, EveryPatternToDoubleIsExactAndRoundTrips) {
  const Fmt& f = *GetParam();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const double d = f.to(h);
    if (is_nan_bits(f, h)) {
      ASSERT_TRUE(std::isnan(d)) << f.name << " " << i;
      ASSERT_EQ(std::signbit(d), (h & 0x8000) != 0) << f.name << " " << i;
      // Back: the same NaN with the quiet bit set (payload and sign kept).
      const uint16_t quiet = static_cast<uint16_t>(1u << (f.man_bits - 1));
      ASSERT_EQ(f.from(d), h | quiet) << f.name << " " << i;
      continue;
    }
    ASSERT_EQ(static_cast<long double>(d), reference_value(f, h)) << f.name << " " << i;
    ASSERT_EQ(std::signbit(d), (h & 0x8000) != 0) << f.name << " " << i;
    ASSERT_EQ(f.from(d), h) << f.name << " " << i;  // identity, -0 and subnormals included
    ASSERT_EQ(f.round(d), d) << f.name << " " << i;
    // float in and out agree with double (every half is a float).
    const float fl = static_cast<float>(d);
    ASSERT_EQ(static_cast<double>(fl), d);
    if (f.dtype == KPROP_F16) {
      ASSERT_EQ(f16_from_float(fl), h);
      ASSERT_EQ(f16_to_float(h), fl);
    } else {
      ASSERT_EQ(bf16_from_float(fl), h);
      ASSERT_EQ(bf16_to_float(h), fl);
    }
  }
}

// Between every two adjacent finite values of the same sign: the midpoint
// goes to the one with an even mantissa, a hair either side to the nearer.
// The midpoint and the neighbours are doubles exactly (at most 12 significant
// bits), so this checks rounding by construction.
TEST_P(Half, TiesToEvenAndNearestBetweenEveryAdjacentPair) {
  const Fmt& f = *GetParam();
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t i = 0;; ++i) {
      const auto lo = static_cast<uint16_t>(sign | i), hi = static_cast<uint16_t>(sign | (i + 1));
      const double a = f.to(lo), b = f.to(hi);
      if (std::isinf(b)) break;
      const double mid = (a + b) / 2;  // exact: one more bit than the format
      ASSERT_EQ(static_cast<long double>(mid), (reference_value(f, lo) + reference_value(f, hi)) / 2);
      const uint16_t even = (lo & 1) ? hi : lo;
      ASSERT_EQ(f.from(mid), even) << f.name << " midpoint of " << i;
      ASSERT_EQ(f.from(std::nextafter(mid, a)), lo) << f.name << " below midpoint of " << i;
      ASSERT_EQ(f.from(std::nextafter(mid, b)), hi) << f.name << " above midpoint of " << i;
      // Values that round to the same neighbour from well inside the interval.
      ASSERT_EQ(f.from(a + (b - a) / 4), lo);
      ASSERT_EQ(f.from(b - (b - a) / 4), hi);
    }
  }
}

// round_to_f16 / round_to_bf16 round by arithmetic on the double (half.h:
// on its bits for normal results, by adding and subtracting q·2^52 for zero
// and subnormal ones): they must agree with the bit-pattern round trip at
// every midpoint, a hair either side of it, inside every interval, and past
// the range's ends (overflow, inf and NaN take the round trip itself).
TEST_P(Half, RoundAgreesWithTheBitPatternRoundTrip) {
  const Fmt& f = *GetParam();
  const auto same = [&](double x) {
    const double want = f.to(f.from(x)), got = f.round(x);
    ASSERT_TRUE(std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want) ||
                (std::isnan(got) && std::isnan(want)))
        << f.name << " round(" << fmt::format("{}", x) << ") = " << got << ", want " << want;
  };
  for (uint32_t sign : {0u, 0x8000u})
    for (uint32_t i = 0;; ++i) {
      const auto lo = static_cast<uint16_t>(sign | i), hi = static_cast<uint16_t>(sign | (i + 1));
      const double a = f.to(lo), b = f.to(hi);
      const double mid = (a + b) / 2;
      for (double x : {a, mid, std::nextafter(mid, a), std::nextafter(mid, b), a + (b - a) / 4,
                       b - (b - a) / 4, std::nextafter(a, 0.0), std::nextafter(a, 2 * a + 1)})
        same(x);
      if (std::isinf(b)) break;
    }
  for (double x : {f.overflow, std::nextafter(f.overflow, 0.0), 1e300, std::numeric_limits<double>::max(),
                   std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min(), 0.0,
                   -0.0, std::nan(""), f.min_subnormal / 2, 1e-300})
    for (double s : {1.0, -1.0}) same(s * x);
}

TEST_P(Half, OverflowThresholdsZerosAndSubnormals) {
  const Fmt& f = *GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  const uint16_t pinf = f.from(inf), max_bits = static_cast<uint16_t>(pinf - 1);
  EXPECT_EQ(f.to(max_bits), f.max);
  EXPECT_EQ(f.overflow, f.max + (f.max - f.to(max_bits - 1)) / 2);  // max + ulp(max) / 2
  EXPECT_EQ(f.from(f.overflow), pinf);                              // a tie, to the "even" infinity
  EXPECT_EQ(f.from(std::nextafter(f.overflow, 0.0)), max_bits);
  EXPECT_EQ(f.from(-f.overflow), pinf | 0x8000);
  EXPECT_EQ(f.from(1e300), pinf);
  EXPECT_EQ(f.from(std::numeric_limits<double>::max()), pinf);
  EXPECT_EQ(f.from(0.0), 0);
  EXPECT_EQ(f.from(-0.0), 0x8000);
  EXPECT_EQ(f.to(1), f.min_subnormal);
  EXPECT_EQ(f.from(f.min_subnormal / 2), 0);                       // tie to even: zero
  EXPECT_EQ(f.from(std::nextafter(f.min_subnormal / 2, 1.0)), 1);  // just past the tie
  EXPECT_EQ(f.from(-f.min_subnormal / 2), 0x8000);                 // keeps its sign
  EXPECT_EQ(f.from(std::numeric_limits<double>::denorm_min()), 0);
  EXPECT_EQ(f.from(1.5 * f.min_subnormal), 2);  // tie between 1 and 2: even
  EXPECT_EQ(f.from(-std::numeric_limits<double>::denorm_min()), 0x8000);
  EXPECT_TRUE(std::isnan(f.round(std::nan(""))));
}

// NaN payloads: the top bits of a double's payload survive, the quiet bit is set.
TEST_P(Half, NanPayloadTopBitsKept) {
  const Fmt& f = *GetParam();
  const int drop = 52 - f.man_bits;
  for (uint64_t payload : {uint64_t{1}, uint64_t{3}, uint64_t{0x15}, (uint64_t{1} << (f.man_bits - 1)) - 1}) {
    for (uint64_t sign : {uint64_t{0}, uint64_t{1} << 63}) {
      // A signalling NaN whose payload sits in the top bits (below the quiet bit).
      const double d = std::bit_cast<double>(sign | (uint64_t{0x7FF} << 52) | (payload << drop) | 0x1234);
      ASSERT_TRUE(std::isnan(d));
      const uint16_t h = f.from(d);
      ASSERT_TRUE(is_nan_bits(f, h));
      EXPECT_EQ(h & ((1u << f.man_bits) - 1), payload | (1u << (f.man_bits - 1))) << f.name;
      EXPECT_EQ((h & 0x8000) != 0, sign != 0);
      // Back to double: the payload at the top of the double's mantissa.
      const uint64_t back = std::bit_cast<uint64_t>(f.to(h));
      EXPECT_EQ((back >> drop) & ((uint64_t{1} << f.man_bits) - 1), payload | (1u << (f.man_bits - 1)));
    }
  }
  // A payload only in the low bits still gives a NaN, never an infinity.
  EXPECT_TRUE(is_nan_bits(f, f.from(std::bit_cast<double>((uint64_t{0x7FF} << 52) | 1))));
}

// Significant digits of a decimal text ("-1.250e+03" -> 3, "10000" -> 1).
int digits(const std::string& s) {
  std::string d;
  for (char c : s) {
    if (c == 'e') break;
    if (c >= '0' && c <= '9') d += c;
  }
  const size_t first = d.find_first_not_of('0');
  return first == std::string::npos ? 0 : static_cast<int>(d.find_last_not_of('0') - first + 1);
}

// Every finite value's shortest text reads back (strtod, then round) to the
// same value and has no more significant digits than the float's shortest
// text ("10000" for bf16 9984: one digit); the special
// values follow case_yaml (".nan", "-.nan" with the sign bit set, ".inf", "-.inf", "-0").
TEST_P(Half, ShortestTextReadsBackForEveryPattern) {
  const Fmt& f = *GetParam();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const double d = f.to(h);
    const std::string s = f.text(h);
    if (std::isnan(d)) {
      ASSERT_EQ(s, std::signbit(d) ? "-.nan" : ".nan");
      continue;
    }
    if (std::isinf(d)) {
      ASSERT_EQ(s, d > 0 ? ".inf" : "-.inf");
      continue;
    }
    char* end = nullptr;
    const double back = std::strtod(s.c_str(), &end);
    ASSERT_EQ(*end, '\0') << s;
    ASSERT_EQ(f.from(back), h) << f.name << " " << i << " text " << s;
    ASSERT_LE(digits(s), digits(fmt::format("{}", static_cast<float>(d)))) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Half, ::testing::Values(&kF16, &kBF16),
                         [](const auto& info) { return std::string(info.param->name); });

TEST(HalfText, KnownShortestTexts) {
  EXPECT_EQ(f16_text(f16_from_double(0.1)), "0.1");  // 0.0999755859375
  EXPECT_EQ(f16_text(f16_from_double(65504)), "65500");
  EXPECT_EQ(f16_text(f16_from_double(-65504)), "-65500");
  EXPECT_EQ(f16_text(1), "6e-08");  // 2^-24 = 5.96e-08
  EXPECT_EQ(f16_text(f16_from_double(1.0)), "1");
  EXPECT_EQ(f16_text(f16_from_double(1.0 / 3)), "0.3333");
  EXPECT_EQ(f16_text(0x8000), "-0");
  EXPECT_EQ(f16_text(0), "0");
  EXPECT_EQ(bf16_text(bf16_from_double(0.1)), "0.1");
  EXPECT_EQ(bf16_text(bf16_from_double(1.0 / 3)), "0.334");  // 0.333984375: 0.333 is too far
  EXPECT_EQ(bf16_text(bf16_from_double(bf16_max)), "3.39e+38");
  EXPECT_EQ(bf16_text(0x7FC0), ".nan");
  EXPECT_EQ(bf16_text(0xFF80), "-.inf");
}

// The shrinkers' measure of a value's simplicity: the digits of the text the
// case prints it as, in its float type.
TEST(SignificantDigits, OfTheShortestTextInTheType) {
  EXPECT_EQ(case_yaml::significant_digits(0, FloatType::f64), 0);
  EXPECT_EQ(case_yaml::significant_digits(std::nan(""), FloatType::f32), 0);
  EXPECT_EQ(case_yaml::significant_digits(10000, FloatType::f64), 1);
  EXPECT_EQ(case_yaml::significant_digits(-1.25e-7, FloatType::f64), 3);
  EXPECT_EQ(case_yaml::significant_digits(0.1, FloatType::f32), 1);
  EXPECT_EQ(case_yaml::significant_digits(0.1, FloatType::f64), 1);
  EXPECT_EQ(case_yaml::significant_digits(1.0 / 3, FloatType::f64), 16);
  EXPECT_EQ(case_yaml::significant_digits(1.0 / 3, FloatType::f16), 4);   // "0.3333"
  EXPECT_EQ(case_yaml::significant_digits(1.0 / 3, FloatType::bf16), 3);  // "0.334"
  EXPECT_EQ(case_yaml::significant_digits(65504, FloatType::f16), 3);     // "65500"
}

TEST(HalfTruncate, Bf16TruncationRoundsTowardZero) {
  // 1 + 2^-7 (an ulp of bf16 at 1) * 0.75: nearest-even goes up, truncation down.
  const float x = 1.0f + 0.75f * 0.0078125f;
  EXPECT_EQ(bf16_from_float(x), 0x3F81);
  EXPECT_EQ(bf16_truncate(x), 0x3F80);
  EXPECT_EQ(bf16_truncate(-x), 0xBF80);
  EXPECT_EQ(bf16_truncate(std::numeric_limits<float>::max()), 0x7F7F);  // no overflow
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_truncate(std::bit_cast<float>(0x7F800001u)))));
  // On exact bf16 values the two agree.
  for (uint32_t i = 0; i < 0x7F80; ++i) {
    const float v = bf16_to_float(static_cast<uint16_t>(i));
    ASSERT_EQ(bf16_truncate(v), i);
  }
}

// rounding_margin: the distance to the nearest point where rounding to the
// type changes, i.e. to the midpoints around round_to(t, x).
TEST(RoundingMargin, DistanceToTheNearestMidpoint) {
  using kprop::FloatType;
  using kprop::rounding_margin;
  // bf16 at 1: the gap below is 2^-8, above 2^-7; midpoints 1 - 2^-9 and 1 + 2^-8.
  EXPECT_EQ(rounding_margin(FloatType::bf16, 1.0), 0x1.0p-9);
  EXPECT_EQ(rounding_margin(FloatType::bf16, 1 + 0x1.0p-9), 0x1.0p-9);
  EXPECT_EQ(rounding_margin(FloatType::bf16, 1 + 0x1.0p-8), 0);  // a tie
  EXPECT_EQ(rounding_margin(FloatType::bf16, -(1 + 0x1.0p-9)), 0x1.0p-9);
  EXPECT_EQ(rounding_margin(FloatType::f16, 1 + 0x1.0p-12), 0x1.0p-12);
  // Zero: the midpoints are +-denorm_min / 2.
  EXPECT_EQ(rounding_margin(FloatType::f16, 0.0), 0x1.0p-25);
  EXPECT_EQ(rounding_margin(FloatType::f16, 0x1.0p-26), 0x1.0p-26);
  // The largest finite f16, 65504: above it the overflow threshold 65520.
  EXPECT_EQ(rounding_margin(FloatType::f16, 65510.0), 10);
  EXPECT_EQ(rounding_margin(FloatType::f16, 65520.0), 0);
  EXPECT_EQ(rounding_margin(FloatType::f32, 1.0), 0x1.0p-25);
  EXPECT_EQ(rounding_margin(FloatType::f64, 1.0), HUGE_VAL);
}

// The C ABI: Tensor::of rounds into f16/bf16 and to_doubles gives back the
// exact values, NaN, +-0, subnormals and the max finite value included.
TEST_P(Half, AbiTensorRoundTrip) {
  const Fmt& f = *GetParam();
  std::vector<double> values;
  for (uint32_t i = 0; i < 65536; ++i) values.push_back(f.to(static_cast<uint16_t>(i)));
  const auto t = external::Tensor::of("x", f.dtype, {256, 256}, values);
  ASSERT_EQ(t.bytes.size(), 2u * 65536u);
  const std::vector<double> back = t.to_doubles();
  ASSERT_EQ(back.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      ASSERT_TRUE(std::isnan(back[i])) << i;
    } else {
      ASSERT_EQ(back[i], values[i]) << i;
      ASSERT_EQ(std::signbit(back[i]), std::signbit(values[i])) << i;
    }
    uint16_t stored;
    std::memcpy(&stored, t.bytes.data() + 2 * i, 2);
    ASSERT_EQ(stored, f.from(values[i])) << i;  // the bytes are the pattern (quiet NaNs)
  }
  // Values in between round to nearest even on the way in.
  const std::vector<double> odd{f.overflow, -f.max, f.min_subnormal / 2, 1.0 / 3, -0.0};
  const auto u = external::Tensor::of("y", f.dtype, {5}, odd);
  const std::vector<double> r = u.to_doubles();
  EXPECT_TRUE(std::isinf(r[0]));
  EXPECT_EQ(r[1], -f.max);
  EXPECT_EQ(r[2], 0.0);
  EXPECT_EQ(r[3], f.round(1.0 / 3));
  EXPECT_TRUE(std::signbit(r[4]));
}

}  // namespace
}  // namespace kprop::half
