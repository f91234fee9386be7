// The ternary family's stats; the rest of Traits is in schema.cpp (domain),
// build.cpp (builder), shrink.cpp (shrinker) and codec.cpp (YAML).
#include "properties/ternary/family.h"

#include <fmt/format.h>

#include <algorithm>

namespace kprop::ternary {

CaseStats Traits::stats(const Case& c) {
  auto nonzero = [](const std::vector<double>& v) {
    return std::count_if(v.begin(), v.end(), [](double e) { return e != 0; });
  };
  return CaseStats{
      static_cast<int64_t>(c.x.size() + c.w.size() + c.dy.size()),
      fmt::format("tokens {}, in_features {}, out_features {} (x {}/{} nonzero, w {}/{} nonzero)", c.tokens,
                  c.in_features, c.out_features, nonzero(c.x), c.x.size(), nonzero(c.w), c.w.size())}
      .dim("tokens", c.tokens)
      .dim("in features", c.in_features)
      .dim("out features", c.out_features);
}

}  // namespace kprop::ternary
