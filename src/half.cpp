#include "kprop/half.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace kprop::half {

namespace {
// The shortest decimal that reads back to `v` through `round`. For each
// number of significant digits p = 1, 2, ..., the candidates are the p-digit
// decimal nearest to v and its two neighbours: the set of decimals that round
// to v is an interval around v, asymmetric at a power of two (narrower below),
// so when some p-digit decimal lies in it, one of these three does (the
// nearest on the wide side is at most one step past the nearest overall).
// The nearest that reads back wins. The text is fmt's shortest text of the
// chosen decimal's double, the format case_yaml prints f32/f64 with; it has
// no more digits than the decimal (which reads back to that double).
std::string shortest(double v, double (*round)(double)) {
  if (std::isnan(v)) return std::signbit(v) ? "-.nan" : ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  for (int p = 1; p <= 17; ++p) {
    // "d.ddde+XX": the nearest p-digit decimal, as integer digits and exponent.
    const std::string e = fmt::format("{:.{}e}", v, p - 1);
    const size_t at = e.find('e');
    std::string digits;
    for (size_t i = 0; i < at; ++i)
      if (e[i] >= '0' && e[i] <= '9') digits += e[i];
    const long long m = std::stoll(digits);
    const int exp10 = std::stoi(e.substr(at + 1)) - (p - 1);
    double best = 0;
    bool found = false;
    for (long long c : {m, m - 1, m + 1}) {
      if (c <= 0) continue;
      const double d = std::strtod(fmt::format("{}{}e{}", v < 0 ? "-" : "", c, exp10).c_str(), nullptr);
      if (round(d) != v) continue;
      if (!found || std::fabs(d - v) < std::fabs(best - v)) best = d;
      found = true;
    }
    if (found) return fmt::format("{}", best);
  }
  return fmt::format("{}", v);  // unreachable: 17 digits name every double
}
// Each of a format's 65536 texts computed once, when first asked for: a
// case of a million half values (a real model's row) was written 11-16x
// slower than in f32, every value searched digit count by digit count.
// Lock-free (a crash or hang may write a case from the watchdog thread); a
// text two threads compute at once is kept once, the other freed.
using Table = std::atomic<const std::string*>[65536];
const std::string& cached(Table& table, uint16_t h, double v, double (*round)(double)) {
  if (const std::string* known = table[h].load(std::memory_order_acquire)) return *known;
  auto* fresh = new std::string(shortest(v, round));
  const std::string* expected = nullptr;
  if (table[h].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *expected;
}
Table f16_texts{}, bf16_texts{};
}  // namespace

std::string f16_text(uint16_t h) {
  return cached(f16_texts, h, f16_to_double(h), round_to_f16);
}
std::string bf16_text(uint16_t h) {
  return cached(bf16_texts, h, bf16_to_double(h), round_to_bf16);
}

}  // namespace kprop::half
