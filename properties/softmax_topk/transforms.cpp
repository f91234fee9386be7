// Metamorphic transforms of a softmax_topk case (Family::transforms()).
// Randomness comes from `seed` (a hash of the case); what a transform drew is
// published as "transform.*".
//
// add_constant: every finite logit of row r plus c_r, a multiple of the
//   finest ulp among the row's finite logits that keeps every x + c below 2^p
//   times that ulp (p = 24 or 53), so the shifted logits are exact: the exact
//   ranking (ties included) is unchanged, so the indices are equal, and the
//   exact probabilities are equal; the computed ones differ by rounding only
//   (close(k=) sums the baseline errors of both cases).
// permute_row: one permutation π of the vocabulary, applied to every row:
//   logit j of the transformed row is logit π[j] of the original. The
//   multiset of logits is unchanged, so the sequence of logits at the top-k
//   slots is unchanged exactly and the probabilities up to rounding (the
//   normaliser is summed in another order). Indices map through π
//   (π[transformed index] = original index) wherever the slot's logit is
//   unique in its row. Tie rule of the contract: equal logits are ordered by
//   ascending index, and the permutation reorders indices, so within a run
//   of equal logits (-inf included) the mapped indices may differ from the
//   original's, in order and, where the run crosses slot K, in which of
//   them are kept; each run is still in ascending index order in both.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {
namespace {

using XT = expr::DType;
using expr::Tensor;

// An exact shift of about `want` for row `row` (see add_constant above).
double exact_shift(const Case& c, int row, double want) {
  const int p = precision_bits(c.dtype);
  int g = std::numeric_limits<int>::max();
  double m = 0;
  for (int i = 0; i < c.vocab; ++i) {
    const double x = c.logits[static_cast<size_t>(row) * c.vocab + i];
    if (!std::isfinite(x) || x == 0) continue;
    g = std::min(g, lowest_bit(x));
    m = std::max(m, std::fabs(x));
  }
  // Cap at 2^100 (f32 overflows at 2^128; f64 logits of the domain stay far
  // below); f16 at 2^14 (it overflows at 65520).
  const double cap = std::ldexp(1.0, c.dtype == DType::f16 ? 14 : 100);
  if (g == std::numeric_limits<int>::max()) {  // only zeros and -inf: x + c = c
    const double w = std::min(std::fabs(want), cap);
    return std::copysign(round_to(c.dtype, w), want);
  }
  const double unit = std::ldexp(1.0, g);
  // No room (a row whose values span more than p bits of the finest ulp,
  // common at bf16's 8): no exact shift but 0; a negative room would have
  // given an inexact one.
  const double top = c.dtype == DType::f16 ? 65504.0 - m : cap;  // f16: x + c stays finite
  const double room = std::max(0.0, std::min({std::ldexp(1.0, g + p) - m, cap, top}));
  return std::copysign(std::floor(std::min(std::fabs(want), room) / unit) * unit, want);
}

}  // namespace

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"add_constant",
       "adds an exact constant c_r to every finite logit of row r: indices unchanged, probabilities "
       "unchanged up to rounding",
       {field::real("magnitude", 1, 0, 1e30,
                    "|c_r| is about magnitude × U(0.5, 1) × (1 + max|finite logit|), snapped so x + c is "
                    "exact")},
       {{"transform.shift", {"R"}, XT::real, "the constant c_r added to row r"}}},
      {"permute_row",
       "permutes the vocabulary of every row by one π: logits at the top-k slots unchanged, probabilities "
       "unchanged up to rounding, π[new index] = old index where the slot's logit is unique in its row "
       "(equal logits go by ascending index, so ties may map to other tied indices)",
       {},
       {{"transform.perm",
         {"V"},
         XT::integer,
         "logit j of a transformed row is logit perm[j] of the original row (never the identity)"},
        transform_applies_info("V = 1 (no permutation moves a logit)")}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                       expr::TensorMap& out) {
  Case t = c;
  const size_t V = static_cast<size_t>(c.vocab);
  if (name == "add_constant") {
    const double magnitude = params.real("magnitude");
    std::vector<double> shift(static_cast<size_t>(c.rows()));
    for (int row = 0; row < c.rows(); ++row) {
      const auto r = static_cast<size_t>(row);
      double m = 0;
      for (size_t i = 0; i < V; ++i)
        if (std::isfinite(c.logits[r * V + i])) m = std::max(m, std::fabs(c.logits[r * V + i]));
      const double sign = rng::hash(seed, 1, r) % 2 ? 1.0 : -1.0;
      const double s =
          exact_shift(c, row, sign * magnitude * (0.5 + 0.5 * rng::uniform(seed, 2, r)) * (1 + m));
      for (size_t i = 0; i < V; ++i)
        if (std::isfinite(c.logits[r * V + i])) t.logits[r * V + i] = c.logits[r * V + i] + s;
      shift[r] = s;
    }
    if (out.wanted("transform.shift")) out.put("transform.shift", Tensor::of({c.rows()}, std::move(shift)));
  } else if (name == "permute_row") {
    const std::vector<int> perm = rng::moving_permutation(V, seed, 3);
    for (size_t r = 0; r < static_cast<size_t>(c.rows()); ++r)
      for (size_t j = 0; j < V; ++j) t.logits[r * V + j] = c.logits[r * V + static_cast<size_t>(perm[j])];
    if (out.wanted("transform.perm")) out.put("transform.perm", Tensor::ints({c.vocab}, perm));
    put_transform_applies(out, V >= 2);
  }
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("softmax_topk transform " + name + " made an invalid case: " + why);
  return t;
}

}  // namespace kprop::softmax_topk
