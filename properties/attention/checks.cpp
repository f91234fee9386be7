#include "properties/attention/checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <set>

#include "kprop/half.h"
#include "kprop/rng.h"
#include "kprop/tolerance.h"
#include "properties/attention/family.h"

namespace kprop::attention {

Schema policy_params() {
  return {field::k(2, field::kKDoc, 0),
          field::real("floor_ulps", 8, 0, 1e12,
                      "absolute floor, in eps(dtype) × the case's first-order error scale")};
}

std::vector<std::pair<int, int>> other_tilings(const Case& c) {
  const int nq = c.shape.nq, nk = c.shape.nk;
  const int bq = std::min(c.block_q, nq), bk = std::min(c.block_k, nk);
  std::vector<std::pair<int, int>> tiles = {{nq, nk}, {std::min(bk, nq), std::min(bq, nk)}};
  if (int64_t(nq) * nk <= 4096) tiles.push_back({1, 1});
  // A tiling whose last tiles are uneven where this one's are not (and back).
  auto uneven = [](int b, int n) { return b < n ? b + 1 : std::max(1, b - 1); };
  tiles.push_back({uneven(bq, nq), uneven(bk, nk)});
  std::vector<std::pair<int, int>> out;
  std::set<std::pair<int, int>> seen = {{bq, bk}};
  for (const auto& tile : tiles)
    if (seen.insert(tile).second) out.push_back(tile);
  return out;
}

double exact_key_shift(const Case& c, int d, double want) {
  if (!is_half(c.dtype)) return round_to(c.dtype, want);  // the policy's floor covers x + shift rounding
  const int precision = precision_bits(c.dtype);
  int finest = std::numeric_limits<int>::max();
  double most = 0;
  for (size_t i = size_t(d); i < c.k.size(); i += size_t(c.shape.dim)) {
    const double x = c.k[i];
    if (x == 0) continue;
    int e = 0;
    const double m = std::frexp(std::fabs(x), &e);  // |x| = m·2^e, m in [0.5, 1)
    finest = std::min(finest, e - 53 + std::countr_zero(uint64_t(std::ldexp(m, 53))));
    most = std::max(most, std::fabs(x));
  }
  const double rounded = round_to(c.dtype, want);
  if (finest == std::numeric_limits<int>::max()) return rounded;  // an all-zero column: x + c = c
  const double unit = std::ldexp(1.0, finest);
  const double top =
      is_half(c.dtype) ? (c.dtype == DType::f16 ? half::f16_max : half::bf16_max) / 4 : std::ldexp(1.0, 100);
  const double room = std::max(0.0, std::min(std::ldexp(1.0, finest + precision), top) - most);
  return std::copysign(std::floor(std::min(std::fabs(rounded), room) / unit) * unit, want);
}

// f32/f64: the rounding of x + shift is inside the policy's floor (its
// error scale grows with the scores). f16/bf16: a rounded key would move its
// scores by far more than the floor allows, so the shift is exact
// (exact_key_shift) and every score of a row moves by the same amount.
Case keys_shifted(const Case& c) {
  const Shape& s = c.shape;
  Case out = c;
  double sq = 0;
  for (double x : c.k) sq += x * x;
  const double sigma = std::max(1.0, std::sqrt(sq / double(c.k.size())));
  for (int b = 0; b < s.batch; ++b)
    for (int kvh = 0; kvh < s.heads_kv; ++kvh) {
      const size_t base = (size_t(b) * s.heads_kv + kvh) * s.nk * s.dim;
      for (int d = 0; d < s.dim; ++d) {
        const double want = sigma * rng::normal(0x5ee1, 1, (size_t(b) * s.heads_kv + kvh) * s.dim + d);
        const double shift = is_half(c.dtype) ? exact_key_shift(c, d, want) : want;
        for (int j = 0; j < s.nk; ++j) {
          double& x = out.k[base + size_t(j) * s.dim + d];
          x = round_to(c.dtype, x + shift);
        }
      }
    }
  return out;
}

namespace {

// Fisher-Yates over [lo, hi) with counter-based randomness (portable, unlike std::shuffle).
void shuffle(std::vector<int>& v, int lo, int hi, uint64_t stream) {
  for (int i = hi - 1; i > lo; --i) {
    const int j = lo + int(rng::hash(0xa77e, stream, uint64_t(i)) % uint64_t(i - lo + 1));
    std::swap(v[size_t(i)], v[size_t(j)]);
  }
}

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

Verdict no_permutation(const Case& c) {
  return Verdict::discard(c.mask == MaskKind::causal
                              ? "causal: no permutation keeps the mask"
                              : "one query and no two keys that may swap: nothing to permute");
}

std::optional<Permutation> permutation_of(const Case& c) {
  if (c.mask == MaskKind::causal) return std::nullopt;
  std::vector<int> keys = identity(c.shape.nk), queries = identity(c.shape.nq);
  std::set<int> cuts = {0, c.shape.nk};
  for (int len : c.key_lengths) cuts.insert(len);
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) shuffle(keys, *it, *std::next(it), 1);
  shuffle(queries, 0, c.shape.nq, 2);
  // Where the shuffles moved nothing (their draws are fixed per shape), the
  // first pair that may move is swapped: only a case with nothing to
  // permute is discarded, not one whose draw was the identity.
  if (keys == identity(c.shape.nk) && queries == identity(c.shape.nq)) {
    if (c.shape.nq >= 2) {
      std::swap(queries[0], queries[1]);
    } else {
      for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it)
        if (*std::next(it) - *it >= 2) {
          std::swap(keys[size_t(*it)], keys[size_t(*it) + 1]);
          break;
        }
      if (keys == identity(c.shape.nk)) return std::nullopt;
    }
  }
  return Permutation{permuted(c, keys, queries), keys, queries};
}

FwdResult permuted(const FwdResult& r, const Shape& s, const Permutation& p) {
  const size_t rows = size_t(s.batch) * s.heads_q;
  FwdResult out;
  out.o = permute_rows(r.o, rows, s.nq, size_t(s.dim), p.queries);
  out.lse = permute_rows(r.lse, rows, s.nq, 1, p.queries);
  return out;
}

BwdResult permuted(const BwdResult& r, const Shape& s, const Permutation& p) {
  const size_t q_rows = size_t(s.batch) * s.heads_q, kv_rows = size_t(s.batch) * s.heads_kv;
  BwdResult out;
  out.dq = permute_rows(r.dq, q_rows, s.nq, size_t(s.dim), p.queries);
  out.dk = permute_rows(r.dk, kv_rows, s.nk, size_t(s.dim), p.keys);
  out.dv = permute_rows(r.dv, kv_rows, s.nk, size_t(s.dim), p.keys);
  return out;
}

std::string needs_permutation(const Values& d, const Values&) {
  const Choices& masks = d.choices("masks");
  if (masks.size() == 1 && masks[0] == "causal")
    return "a mask a permutation keeps, but domain.masks is [causal]; add none, key_padding or boolean or "
           "drop "
           "the invariant";
  if (d.int_range("nq").hi < 2 && d.int_range("nk").hi < 2)
    return "two queries or keys to permute, but domain.nq and domain.nk are [1, 1]; widen one or drop the "
           "invariant";
  return "";
}

std::string needs_other_tiling(const Values& d, const Values&) {
  if (d.int_range("nq").hi < 2 && d.int_range("nk").hi < 2)
    return "a second tiling, but domain.nq and domain.nk are [1, 1]; widen one or drop the invariant";
  return "";
}

namespace {
// An f16/bf16 dtype and one of the value kinds `kinds` (`what` they make).
std::string needs_half_and_values(const Values& d, std::initializer_list<const char*> kinds, const char* what,
                                  const char* add) {
  const Choices& dtypes = d.choices("dtypes");
  const bool half = std::any_of(dtypes.begin(), dtypes.end(),
                                [](const std::string& t) { return t == "f16" || t == "bf16"; });
  if (!half)
    return fmt::format("an f16 or bf16 case, but domain.dtypes is [{}]; add one or drop the invariant",
                       join(dtypes));
  for (const std::string& v : d.choices("values"))
    for (const char* k : kinds)
      if (v == k) return "";
  return fmt::format("{}, but domain.values is [{}]; add {} or drop the invariant", what,
                     join(d.choices("values")), add);
}
}  // namespace

std::string needs_tied_half_rows(const Values& d, const Values&) {
  return needs_half_and_values(d, {"tied_scores", "constant_rows", "near_uniform", "pinned_grads"},
                               "rows whose scores tie", "tied_scores");
}

std::string needs_pinned_grads(const Values& d, const Values&) {
  return needs_half_and_values(d, {"pinned_grads"}, "rows whose dS is exact in the dtype", "pinned_grads");
}

std::optional<TiedRow> tied_row(const Case& c, int b, int h, int i, const std::vector<int>& keys) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c);
  const double* q = &c.q[((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim];
  const int kvh = h / s.group();
  double dot0 = 0, abs_max = 0;
  for (size_t a = 0; a < keys.size(); ++a) {
    const double* k = &c.k[((size_t(b) * s.heads_kv + kvh) * s.nk + keys[a]) * s.dim];
    double dot = 0, abs_dot = 0;
    for (int d = 0; d < s.dim; ++d) dot += q[d] * k[d], abs_dot += std::fabs(q[d] * k[d]);
    if (a == 0) dot0 = dot;
    if (dot != dot0) return std::nullopt;
    abs_max = std::max(abs_max, abs_dot);
  }
  return TiedRow{double(keys.size()), double(s.dim), std::fabs(scale * dot0), std::fabs(scale) * abs_max};
}

TiedRow::Bounds TiedRow::bounds(double u) const {
  Bounds r;
  r.delta = gamma_n(dim, 2 * u) * abs_dot + u * score;
  r.eps = 2 * r.delta + 2 * u * (score + 2 * r.delta + 1) + 4 * u;
  r.theta = 2 * (n + 2) * r.eps + gamma_n(2 * n, 2 * u) + 4 * u;
  return r;
}

std::optional<Verdict> pinned_store_unobservable(const ImplInfo& target, DType dtype, const char* output) {
  if (target.kind == ImplKind::reference)
    return Verdict::not_applicable(fmt::format("the reference keeps {} in fp64 whatever the dtype", output));
  if (!is_half(dtype))
    return Verdict::discard(
        fmt::format("an {} case stores {} in its own arithmetic's type", dtype_name(dtype), output));
  return std::nullopt;
}

std::optional<Verdict> pinned_store_failure(DType dtype, double stored, double exact, double bound,
                                            PinnedElement described) {
  const double want = round_to(dtype, exact), margin = rounding_margin(dtype, exact);
  std::vector<Measured>& measured = described.measured;
  measured.insert(measured.begin(), {{"value", stored}, {"expected", want}, {"exact", exact}});
  return Verdict::fail(fmt::format("{} = {}, but {}: {} within ±{:.3g} before the store, {:.3g} from a {} "
                                   "rounding boundary; rounded to nearest, it is stored as {}",
                                   described.element, value_text(dtype, stored), described.why, exact, bound,
                                   margin, dtype_name(dtype), value_text(dtype, want)),
                       std::move(measured));
}

void visible_keys(const Case& c, int b, int i, std::vector<int>& keys) {
  keys.clear();
  for (int j = 0; j < c.shape.nk; ++j)
    if (visible(c, b, i, j)) keys.push_back(j);
}

std::string needs_masked_rows(const Values& d, const Values&) {
  for (const std::string& m : d.choices("masks")) {
    if (m == "key_padding") return "";  // a key length of 0 is always drawable
    if (m == "boolean" && (d.real("empty_row_rate") > 0 || d.real_range("mask_density").lo < 1)) return "";
    if (m == "causal" && d.int_range("nq").hi > d.int_range("nk").lo)
      return "";  // Nq > Nk: rows above the diagonal
  }
  const auto& masks = d.choices("masks");
  if (std::find(masks.begin(), masks.end(), "boolean") != masks.end())
    return "fully masked rows, but domain.masks' boolean masks are drawn with empty_row_rate 0 and "
           "mask_density [1, 1]; raise empty_row_rate, lower mask_density, add key_padding or drop the "
           "invariant";
  return fmt::format(
      "fully masked rows, but domain.masks is [{}]; add key_padding or boolean or drop the "
      "invariant",
      join(masks));
}

Schema workspace_params() {
  return {field::real("tile_factor", 4, 0, 1e9,
                      "budget = tile_factor × sizeof(dtype) × (Bq·Bk + (Bq + Bk)·D + Nq + Nk)")};
}

Verdict check_workspace(const Case& c, const ImplInfo& target, size_t peak, const Values& params) {
  if (target.kind == ImplKind::reference)
    return Verdict::not_applicable("the reference materializes Nq×Nk by design");
  if (target.kind == ImplKind::external)
    return Verdict::not_applicable("a kernel built elsewhere does not allocate from kprop's Workspace");
  const Shape& s = c.shape;
  const double elem = c.dtype == DType::f64 ? 8 : 4;  // the CPU kernels' scratch is f32 for f16/bf16 cases
  const double bq = std::min(c.block_q, s.nq), bk = std::min(c.block_k, s.nk);
  const double budget = params.real("tile_factor") * elem * (bq * bk + (bq + bk) * s.dim + s.nq + s.nk);
  const double full = elem * s.nq * s.nk;
  if (peak == 0)
    return Verdict::fail("the target took no scratch from its Workspace, so its memory is not measured",
                         {{"peak_bytes", 0}});
  if (double(peak) > budget)
    return Verdict::fail(
        fmt::format("peak workspace {} bytes exceeds the tile budget {:.0f} bytes (one Nq×Nk "
                    "matrix is {:.0f} bytes)",
                    peak, budget, full),
        {{"peak_bytes", double(peak)}, {"budget_bytes", budget}, {"nq_nk_bytes", full}});
  return Verdict::pass();
}

std::vector<std::pair<int, int>> fully_masked_rows(const Case& c) {
  std::vector<std::pair<int, int>> rows;
  for (int b = 0; b < c.shape.batch; ++b)
    for (int i = 0; i < c.shape.nq; ++i)
      if (row_fully_masked(c, b, i)) rows.push_back({b, i});
  return rows;
}

}  // namespace kprop::attention
