// The softmax_topk family's stats; the rest of Traits is in schema.cpp
// (domain), build.cpp (builder), shrink.cpp (shrinker) and codec.cpp (YAML).
#include "properties/softmax_topk/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kprop::softmax_topk {

CaseStats Traits::stats(const Case& c) {
  int neg_inf = 0;
  double top = 0;
  for (double x : c.logits) {
    if (x == kNegInf)
      ++neg_inf;
    else
      top = std::max(top, std::fabs(x));
  }
  return CaseStats{
      static_cast<int64_t>(c.logits.size()) + c.k,
      fmt::format("{} x {} {}, K {}, block {}{}, max |logit| {:g}", c.rows(), c.vocab, dtype_name(c.dtype),
                  c.k, c.block, neg_inf ? fmt::format(", {} -inf", neg_inf) : "", top)}
      .dim("rows", c.rows())
      .dim("vocab", c.vocab)
      .dim("K", c.k)
      .dim("-inf logits", neg_inf)
      .kind("dtype", dtype_name(c.dtype));
}

}  // namespace kprop::softmax_topk
