// Metamorphic transforms of an attention case (Family::transforms()): changes
// whose effect on O, LSE and the gradients follows from the contract, so a
// spec can state the relation as an expression, e.g.
//   transform: permute_keys
//   expect: close(transformed.target.o, target.o, k=2)
// Each transform's randomness comes from `seed` (a hash of the case), and
// what it drew is published as "transform.*" tensors.
#include <algorithm>
#include <numeric>

#include "kprop/rng.h"
#include "properties/attention/checks.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {

using XT = expr::DType;
using expr::Tensor;

// The case's mask as an explicit boolean [B, Nq, Nk] (any kind), so rows or
// columns can be permuted with the tensors.
std::vector<uint8_t> explicit_mask(const Case& c) {
  const Shape& s = c.shape;
  std::vector<uint8_t> m(size_t(s.batch) * s.nq * s.nk);
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.nq; ++i)
      for (int j = 0; j < s.nk; ++j) m[(size_t(b) * s.nq + i) * s.nk + j] = visible(c, b, i, j) ? 1 : 0;
  return m;
}

void put_perm(expr::TensorMap& out, const char* name, const std::vector<int>& perm) {
  if (out.wanted(name)) out.put(name, Tensor::ints({static_cast<int64_t>(perm.size())}, perm, XT::integer));
}

}  // namespace

template <bool Backward>
const std::vector<TransformInfo>& CaseTraits<Backward>::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"permute_keys",
       "reorders the keys with their values (and the mask's columns, as a boolean mask): O, LSE, dQ "
       "unchanged; "
       "dK, dV permuted the same way",
       {},
       {{"transform.key_perm", {"Nk"}, XT::integer, "key j of the transformed case is key key_perm[j]"}}},
      {"permute_queries",
       "reorders the queries with their dO rows (and the mask's rows): O, LSE, D, dQ permuted the same way; "
       "dK, dV unchanged",
       {},
       {{"transform.query_perm",
         {"Nq"},
         XT::integer,
         "query i of the transformed case is query query_perm[i]"}}},
      {"shift_keys",
       "adds one vector c to every key (rounded to the dtype): the scores of a row move by the same "
       "scale·q·c, "
       "so O, dQ, dK, dV are unchanged and LSE grows by scale·q·c",
       {field::real("magnitude", 1, 0, 1e6, "entries of c are uniform in [-magnitude, magnitude]")},
       {{"transform.shift", {"D"}, XT::real, "the vector c added to every key"}}},
      {"retile",
       "redraws the tile sizes Bq, Bk in [1, max(Nq, Nk) + 1]: every output unchanged up to rounding",
       {},
       {}},
  };
  return infos;
}

template <bool Backward>
Case CaseTraits<Backward>::transform(const std::string& name, const Case& c, const Values& params,
                                     uint64_t seed, expr::TensorMap& out) {
  const Shape& s = c.shape;
  Case t = c;
  if (name == "permute_keys") {
    const std::vector<int> perm = rng::permutation(size_t(s.nk), seed, 1);
    const std::vector<uint8_t> m = explicit_mask(c);
    t.mask = MaskKind::boolean;
    t.key_lengths.clear();
    t.allowed.assign(m.size(), 0);
    for (size_t row = 0; row < size_t(s.batch) * s.nq; ++row)
      for (int j = 0; j < s.nk; ++j) t.allowed[row * s.nk + j] = m[row * s.nk + perm[size_t(j)]];
    const size_t heads = size_t(s.batch) * s.heads_kv;
    t.k = permute_rows(c.k, heads, s.nk, size_t(s.dim), perm);
    t.v = permute_rows(c.v, heads, s.nk, size_t(s.dim), perm);
    put_perm(out, "transform.key_perm", perm);
  } else if (name == "permute_queries") {
    const std::vector<int> perm = rng::permutation(size_t(s.nq), seed, 2);
    const std::vector<uint8_t> m = explicit_mask(c);
    t.mask = MaskKind::boolean;
    t.key_lengths.clear();
    t.allowed = permute_rows(m, size_t(s.batch), s.nq, size_t(s.nk), perm);
    const size_t heads = size_t(s.batch) * s.heads_q;
    t.q = permute_rows(c.q, heads, s.nq, size_t(s.dim), perm);
    if (!c.d_out.empty()) t.d_out = permute_rows(c.d_out, heads, s.nq, size_t(s.dim), perm);
    put_perm(out, "transform.query_perm", perm);
  } else if (name == "shift_keys") {
    const double magnitude = params.real("magnitude");
    std::vector<double> shift(static_cast<size_t>(s.dim));
    for (int d = 0; d < s.dim; ++d)
      shift[size_t(d)] = exact_key_shift(c, d, magnitude * (2 * rng::uniform(seed, 3, uint64_t(d)) - 1));
    for (size_t i = 0; i < t.k.size(); ++i) t.k[i] = round_to(c.dtype, c.k[i] + shift[i % size_t(s.dim)]);
    if (out.wanted("transform.shift")) out.put("transform.shift", Tensor::of({s.dim}, shift));
  } else if (name == "retile") {
    const auto most = static_cast<uint64_t>(std::max(s.nq, s.nk) + 1);
    t.block_q = 1 + static_cast<int>(rng::hash(seed, 4, 0) % most);
    t.block_k = 1 + static_cast<int>(rng::hash(seed, 4, 1) % most);
  }
  return t;
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template const std::vector<TransformInfo>& CaseTraits<false>::transforms();
template Case CaseTraits<false>::transform(const std::string&, const Case&, const Values&, uint64_t,
                                           expr::TensorMap&);
template const std::vector<TransformInfo>& CaseTraits<true>::transforms();
template Case CaseTraits<true>::transform(const std::string&, const Case&, const Values&, uint64_t,
                                          expr::TensorMap&);

}  // namespace kprop::attention
