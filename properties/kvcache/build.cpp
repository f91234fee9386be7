// The kvcache family's one case builder.
#include <algorithm>
#include <cmath>
#include <vector>

#include "properties/kvcache/family_parts.h"

namespace kprop::kvcache {

namespace {

// A size-ramped draw that starts a quarter of the way up the range: the
// smallest cases (one token, no decode) exercise nothing, and the shrinker,
// not the ramp, is what makes counterexamples small. The two draws are
// sequenced (a draw in each of max's arguments would be drawn in the order
// the compiler picks: g++ and clang differ, and so would their cases).
int64_t ramped(Draw& draw, IntRange r) {
  const int64_t floor = draw.any(r.upto(r.lo + (r.hi - r.lo + 2) / 4));
  return std::max(draw.sized(r), floor);
}

}  // namespace

Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  const double edge = domain.real("edge_rate");
  c.kv_heads = static_cast<int>(ramped(draw, domain.int_range("kv_heads")));
  c.group = static_cast<int>(draw.any(domain.int_range("group")));
  c.head_dim = static_cast<int>(ramped(draw, domain.int_range("head_dim")));
  const int batch = static_cast<int>(ramped(draw, domain.int_range("batch")));
  for (int b = 0; b < batch; ++b) {
    Sequence s;
    s.prompt = draw.chance(edge) ? 1 : static_cast<int>(ramped(draw, domain.int_range("prompt_len")));
    s.decode = draw.chance(edge) ? 0 : static_cast<int>(ramped(draw, domain.int_range("decode_steps")));
    s.arrive = draw.chance(edge) ? 0 : static_cast<int>(ramped(draw, domain.int_range("arrival")));
    s.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
    c.seqs.push_back(s);
  }
  const IntRange pages = domain.int_range("page_size");
  c.page_size = static_cast<int>(draw.any(pages));
  if (draw.chance(domain.real("divisor_rate"))) {  // a page size dividing a prompt or a full length
    const Sequence& s = c.seqs[static_cast<size_t>(draw.index(c.seqs.size()))];
    const int len = draw.chance(0.5) ? s.prompt : s.tokens();
    std::vector<int> divisors;
    for (int d = static_cast<int>(pages.lo); d <= std::min<int64_t>(pages.hi, len); ++d)
      if (len % d == 0 && pages.allows(d)) divisors.push_back(d);
    if (!divisors.empty()) c.page_size = divisors[static_cast<size_t>(draw.index(divisors.size()))];
  }
  c.chunk = draw.chance(edge) ? 1 : static_cast<int>(draw.any(domain.int_range("chunk")));
  const Choices& poisons = domain.choices("poison");
  c.poison = poisons[static_cast<size_t>(draw.index(poisons.size()))] == "nan" ? Poison::nan : Poison::huge;
  // Log-uniform: a range from soft (0.25) to sharp (256) attention draws
  // each factor of two as often, so most cases are neither one-hot nor flat.
  const RealRange q = domain.real_range("q_scale");
  c.q_scale = std::max(1.0 / 64, tidy(q.lo * std::pow(q.hi / q.lo, draw.any(RealRange{0, 1}))));
  c.k_spread = std::max(1.0, tidy(draw.any(domain.real_range("k_spread"))));
  c.v_spread = std::max(1.0, tidy(draw.any(domain.real_range("v_spread"))));
  c.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  // The dtype, drawn last among the case's fields so that a spec drawing f64
  // only draws the cases it drew before dtypes existed.
  const Choices& dtypes = domain.choices("dtypes");
  c.dtype =
      dtype_named(dtypes.size() == 1 ? dtypes[0] : dtypes[static_cast<size_t>(draw.index(dtypes.size()))]);
  // Exact int8 rounding ties (f64 cases, the int8 cache's): the domain's
  // rate, not a draw, so every other field is drawn as before the key.
  if (c.dtype == DType::f64) c.int8_ties = domain.real("int8_ties");
  // Exact ties of the dtype (f16/bf16 cases' K/V), likewise the domain's rate.
  if (is_half(c.dtype)) c.store_ties = domain.real("store_ties");
  // The pool: what the schedule needs plus spares, in an order drawn here
  // (identity, reversed or shuffled), which is the free list's initial order.
  const int n = blocks_needed(c) + static_cast<int>(draw.any(domain.int_range("spare_blocks")));
  for (int i = 0; i < n; ++i) c.pool.push_back(i);
  const int64_t order = draw.any(IntRange{0, 4});
  if (order == 1) std::reverse(c.pool.begin(), c.pool.end());
  if (order >= 2)
    for (int i = n - 1; i > 0; --i)
      std::swap(c.pool[static_cast<size_t>(i)], c.pool[static_cast<size_t>(draw.any(IntRange{0, i}))]);
  // Every score far below zero (Case::negative_scores), in a fraction of
  // the cases: random queries and keys put the largest score of a row below
  // -745 (where exp underflows in f64) almost never, so a softmax whose
  // running max starts at 0 (mutant max_init_zero) survived whole runs.
  // Drawn last, so every other field is drawn as before; the chance negated
  // so that a fuzz input's missing bytes (chance is true at 0) leave it off.
  c.negative_scores = !draw.chance(1 - domain.real("negative_scores"));
  return c;
}

}  // namespace kprop::kvcache
