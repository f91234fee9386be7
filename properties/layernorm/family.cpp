// The layernorm family's stats; the rest of Traits is in schema.cpp
// (domain), build.cpp (builder), shrink.cpp (shrinker) and codec.cpp (YAML).
#include "properties/layernorm/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kprop::layernorm {

CaseStats Traits::stats(const Case& c) {
  const size_t D = static_cast<size_t>(c.dim);
  int constant = 0;
  double worst_cond = 0, min_spread = INFINITY, max_spread = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.rows); ++r) {
    double mean = 0, ss = 0;
    for (size_t d = 0; d < D; ++d) mean += c.x[r * D + d];
    mean /= static_cast<double>(D);
    for (size_t d = 0; d < D; ++d) ss += (c.x[r * D + d] - mean) * (c.x[r * D + d] - mean);
    const double sd = std::sqrt(ss / static_cast<double>(D));
    if (sd == 0) {
      ++constant;
      continue;
    }
    worst_cond = std::max(worst_cond, std::fabs(mean) / sd);
    min_spread = std::min(min_spread, sd);
    max_spread = std::max(max_spread, sd);
  }
  std::string rows_text;
  if (max_spread > 0)
    rows_text +=
        fmt::format(", std {:.2g}..{:.2g}, |mean|/std up to {:.2g}", min_spread, max_spread, worst_cond);
  if (constant) rows_text += fmt::format(", {} constant row{}", constant, constant == 1 ? "" : "s");
  return CaseStats{static_cast<int64_t>(c.rows) * c.dim,
                   fmt::format("{}x{} {}, eps {}{}", c.rows, c.dim, dtype_name(c.dtype),
                               value_text(eps_dtype(c.dtype), c.eps), rows_text)}
      .dim("rows", c.rows)
      .dim("dim", c.dim)
      .dim("constant rows", constant)
      .kind("dtype", dtype_name(c.dtype));
}

}  // namespace kprop::layernorm
