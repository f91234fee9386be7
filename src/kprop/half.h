// IEEE 754 binary16 (f16) and bfloat16 (bf16) values, stored as their bit
// patterns (uint16_t), with conversions to and from float and double.
//
// Hand-rolled on purpose: GCC 12's C++20 has no std::float16_t/std::bfloat16_t
// (C++23, GCC 13), and no Debian package we may depend on provides a
// software half type (fmt and yaml-cpp know nothing of halves; Eigen's
// Eigen::half would pull a whole library in for two functions). The
// conversions are small and are checked exhaustively over all 65,536 bit
// patterns of each format in tests/core/half_test.cpp.
//
// Conventions (those of IEEE 754 and of GPU hardware conversions):
//   - to f16/bf16 rounds to nearest, ties to even, directly from the double
//     (never through float: double -> float -> half would round twice);
//     finite values at or past the overflow threshold (65520 for f16, i.e.
//     max + half an ulp; likewise for bf16) become +-inf, tiny ones round to
//     a subnormal or to a zero of the same sign;
//   - from f16/bf16 is exact (every half value is a float and a double);
//   - NaN stays NaN: the sign and the payload's top bits (as many as the
//     target holds) are kept and the quiet bit is set, as hardware does.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

namespace kprop::half {

// Largest finite values, smallest positive normal and subnormal values.
inline constexpr double f16_max = 65504.0;
inline constexpr double bf16_max = 3.3895313892515355e38;            // (2 - 2^-7) * 2^127
inline constexpr double f16_min_normal = 6.103515625e-05;            // 2^-14
inline constexpr double bf16_min_normal = 1.1754943508222875e-38;    // 2^-126
inline constexpr double f16_min_subnormal = 5.9604644775390625e-08;  // 2^-24
inline constexpr double bf16_min_subnormal = 9.183549615799121e-41;  // 2^-133
// The smallest magnitude that rounds to infinity: max + ulp(max) / 2.
inline constexpr double f16_overflow = 65520.0;
inline constexpr double bf16_overflow = 3.39617752923046e38;  // (2 - 2^-8) * 2^127

namespace detail {
// A binary format with `E` exponent bits and `M` stored mantissa bits.
template <int ExpBits, int ManBits>
struct Format {
  static constexpr int E = ExpBits;
  static constexpr int M = ManBits;
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr int emin = 1 - bias;  // exponent of the smallest normal
  static constexpr uint16_t exp_mask = static_cast<uint16_t>(((1u << E) - 1u) << M);
  static constexpr uint16_t man_mask = static_cast<uint16_t>((1u << M) - 1u);
  static constexpr uint16_t quiet = static_cast<uint16_t>(1u << (M - 1));
  static constexpr uint16_t sign = 0x8000;
};
using F16 = Format<5, 10>;
using BF16 = Format<8, 7>;

// Rounds `d` to the format, to nearest, ties to even.
template <typename F>
inline uint16_t from_double(double d) {
  constexpr int M = F::M;
  const uint64_t bits = std::bit_cast<uint64_t>(d);
  const auto sign = static_cast<uint16_t>((bits >> 48) & 0x8000u);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  const uint64_t man = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0x7FF) {
    if (man == 0) return sign | F::exp_mask;  // +-inf
    // NaN: keep the payload's top M bits, set the quiet bit.
    return sign | F::exp_mask | F::quiet | static_cast<uint16_t>(man >> (52 - M));
  }
  if (biased == 0) return sign;  // zero or a double subnormal (< 2^-1022): far below any half
  const int x = biased - 1023;   // unbiased exponent
  const uint64_t sig = man | (uint64_t{1} << 52);  // 53-bit significand, 1.m
  // Keep M fraction bits for a normal result, fewer for a subnormal one.
  const int shift = 52 - M + (x < F::emin ? F::emin - x : 0);
  uint64_t q;
  if (shift >= 55) {
    q = 0;  // sig < 2^53 <= half of 2^shift: rounds to zero either way
  } else {
    q = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t halfway = uint64_t{1} << (shift - 1);
    if ((rem > halfway || (rem == halfway && (q & 1)))) ++q;
  }
  // A normal result: q holds the hidden bit, so adding it to the exponent
  // field minus one carries a rounded-up mantissa into the exponent. A
  // subnormal result: q is the mantissa (q == 2^M is the smallest normal).
  uint64_t out = x < F::emin ? q : (static_cast<uint64_t>(x + F::bias - 1) << M) + q;
  if (out >= F::exp_mask) out = F::exp_mask;  // overflow: +-inf
  return sign | static_cast<uint16_t>(out);
}

// 2^k for k in double's normal range, built from its bits: every exponent a
// half value needs (f16 2^-24..2^5, bf16 2^-133..2^120) is one. Cheaper than
// std::ldexp, which is a libm call, in every rounding to a half type.
constexpr double pow2(int k) {
  return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52);
}

template <typename F>
inline double to_double(uint16_t h) {
  constexpr int E = F::E, M = F::M;
  const double s = (h & F::sign) ? -1.0 : 1.0;
  const int e = (h & F::exp_mask) >> M;
  const auto man = static_cast<uint16_t>(h & F::man_mask);
  if (e == (1 << E) - 1) {
    if (man == 0) return s * HUGE_VAL;
    // NaN: the payload moves to the double's top mantissa bits, quiet bit set.
    const uint64_t bits = (static_cast<uint64_t>(h & F::sign) << 48) | (uint64_t{0x7FF} << 52) |
                          (uint64_t{1} << 51) | (uint64_t{man} << (52 - M));
    return std::bit_cast<double>(bits);
  }
  if (e == 0) return s * static_cast<double>(man) * pow2(F::emin - M);  // exact
  return s * static_cast<double>(man | (1u << M)) * pow2(e - F::bias - M);
}
}  // namespace detail

// ---------------------------------------------------------------- f16
inline uint16_t f16_from_double(double d) {
  return detail::from_double<detail::F16>(d);
}
inline uint16_t f16_from_float(float f) {
  return f16_from_double(f);
}  // float -> double is exact
inline double f16_to_double(uint16_t h) {
  return detail::to_double<detail::F16>(h);
}
inline float f16_to_float(uint16_t h) {
  return static_cast<float>(f16_to_double(h));
}  // exact

// ---------------------------------------------------------------- bf16
inline uint16_t bf16_from_double(double d) {
  return detail::from_double<detail::BF16>(d);
}
inline uint16_t bf16_from_float(float f) {
  return bf16_from_double(f);
}
inline double bf16_to_double(uint16_t h) {
  return detail::to_double<detail::BF16>(h);
}
inline float bf16_to_float(uint16_t h) {  // exact: a bf16 is the top half of a float
  if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) h |= detail::BF16::quiet;
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}
// The f32 -> bf16 conversion by truncation (the low 16 bits dropped, i.e.
// rounding toward zero) that some kernels use instead of round-to-nearest-
// even: a precision mutant's conversion. A NaN stays NaN (truncating a NaN
// whose payload is in the low bits only would give an infinity).
inline uint16_t bf16_truncate(float f) {
  if (std::isnan(f)) return bf16_from_float(f);
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

// The f32 -> bf16 conversion (bits + 0x8000) >> 16: round to nearest with
// ties away from zero (the fast conversion without round-to-nearest-even's
// lowest-bit term), which some kernels use: a precision mutant's
// conversion, one bf16 ulp off exactly where the f32 value is a tie. A NaN
// stays NaN; the carry takes values past bf16's largest to an infinity.
inline uint16_t bf16_round_half_away(float f) {
  if (std::isnan(f)) return bf16_from_float(f);
  return static_cast<uint16_t>((std::bit_cast<uint32_t>(f) + 0x8000u) >> 16);
}

namespace detail {
// The nearest value of the format to `d` (ties to even), as a double, by
// arithmetic on d instead of a round trip through the bit pattern. The
// kernels round every stored element of an f16/bf16 case, so this is their
// hot path; tests/core/half_test.cpp checks it agrees with the round trip.
//   - |d| below the smallest normal (zero and subnormal results): the result
//     is a multiple of the smallest subnormal q, and C = q·2^52 has ulp q, so
//     (|d| + C) − C is |d| rounded to a multiple of q by the FPU's own
//     round-to-nearest-even (the subtraction is exact); the sign is d's.
//   - a normal, finite result, |d| in [min normal, overflow): rounding keeps
//     M of d's 52 fraction bits: add half an ulp of the result less one bit,
//     plus the kept lowest bit (so a tie goes to the even neighbour), and
//     clear the dropped bits; a carry out of the fraction raises the
//     exponent, as it should.
//   - overflow, inf and NaN take the round trip.
template <typename F>
inline double round_via(double d, double overflow) {
  constexpr double min_normal = pow2(F::emin), carry = pow2(F::emin - F::M + 52);
  const double a = std::fabs(d);
  if (a < min_normal) return std::copysign((a + carry) - carry, d);
  if (a < overflow) {
    constexpr int drop = 52 - F::M;
    uint64_t u = std::bit_cast<uint64_t>(d);
    u += ((uint64_t{1} << (drop - 1)) - 1) + ((u >> drop) & 1);
    return std::bit_cast<double>(u & ~((uint64_t{1} << drop) - 1));
  }
  return to_double<F>(from_double<F>(d));  // +-inf past the overflow threshold, NaN
}
}  // namespace detail

// The nearest f16 / bf16 value to `d` (ties to even), as a double.
inline double round_to_f16(double d) {
  return detail::round_via<detail::F16>(d, f16_overflow);
}
inline double round_to_bf16(double d) {
  return detail::round_via<detail::BF16>(d, bf16_overflow);
}

// The shortest decimal text that reads back (as a double, then round_to_f16 /
// round_to_bf16) to the same value, in case_yaml's conventions: ".nan",
// ".inf", "-.inf", "-0", otherwise fmt's shortest text of the decimal's
// double ("0.1", "65500", "6e-08"). NaN payloads are not kept (".nan").
std::string f16_text(uint16_t h);
std::string bf16_text(uint16_t h);

}  // namespace kprop::half
