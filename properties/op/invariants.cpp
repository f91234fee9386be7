// The generic invariants every declared op gets by name.
//
// Tolerance (matches_reference, rows_independent): FlashAttention's rule,
// generalized. The target may err by k × the error of the naive
// computation of the reference expression in the output's own dtype (every
// intermediate rounded: kernels/op/reference.cpp) on this very case, plus
// the floor op::floor_of (kernels/op/op.h, with its derivation):
//     |target - reference| <= k · max|naive - reference| + floor
// Elements where the naive computation is not finite but the fp64 reference
// is (an intermediate overflows the dtype, e.g. x² of a large f32 x) are not
// judged: the dtype cannot carry the computation the contract states, so no
// answer there is wrong; a case where every element is so excused is
// discarded, never passed. Except a half output whose reference lies past
// the half type's overflow threshold (65520 for f16) by more than the
// bound: the kernel's f32 value before the store is within the bound of the
// reference, so past the threshold too, and a store rounding to nearest
// gives ±inf; a kernel that saturates to ±65504 fails there.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "kprop/determinism.h"
#include "kprop/errors.h"
#include "kprop/search.h"
#include "kprop/tolerance.h"
#include "properties/op/family.h"

namespace kprop::op {
namespace {

using T = Trial<Traits>;

struct Budget {
  double bound = 0;
  size_t judged = 0;
};

double naive_error(const std::vector<double>& ref, const std::vector<double>& naive) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::isfinite(ref[i]) && std::isfinite(naive[i])) e = std::max(e, std::fabs(naive[i] - ref[i]));
  return e;
}

// An external reference's run in the case's dtype is the naive baseline:
// its code, not kprop's rounding of an expression. Where that run errs from
// the reference's own f64 run by as much as the output's largest magnitude,
// k × its error admits any answer (a NumPy reference handed bf16 bits
// computed garbage there, and a kernel returning 3x passed at an error ratio
// of 1e-38): the case says nothing and is discarded, with the numbers.
std::optional<Verdict> vacuous_baseline(const Case& c, const Result& own, const Result& naive) {
  if (!c.decl->external_reference) return std::nullopt;
  for (size_t i = 0; i < c.decl->outputs.size(); ++i) {
    double largest = 0;
    for (double r : own.outputs[i])
      if (std::isfinite(r)) largest = std::max(largest, std::fabs(r));
    const double e = naive_error(own.outputs[i], naive.outputs[i]);
    if (e > 0 && e >= largest)
      return Verdict::discard(fmt::format(
          "the external reference's {} run errs from its f64 run by {:.3g} in {}, as much as the output's "
          "largest magnitude {:.3g}: no bound (check how the reference reads {} tensors)",
          dtype_name(c.output_dtype(i)), e, c.decl->outputs[i].name, largest, dtype_name(c.dtype)));
  }
  return std::nullopt;
}

std::string index_text(const std::vector<int64_t>& ext, size_t flat) {
  std::vector<int64_t> idx(ext.size());
  for (size_t k = ext.size(); k-- > 0;) {
    idx[k] = static_cast<int64_t>(flat) % std::max<int64_t>(ext[k], 1);
    flat /= static_cast<size_t>(std::max<int64_t>(ext[k], 1));
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// An integer or boolean output (op.h, discrete_bound): exact, except where
// the case's rounding can carry the value across a step of round, floor,
// ceil or a comparison, by as much as it can there. `runs` 2 (two runs of
// the target, rows_independent): each may sit on its own side. Elements the
// naive computation cannot carry (not finite), those with no bound (inf), and
// those whose allowance covers every value of the dtype (want ± allowed
// reaches both ends of int_range) are not judged: no answer there could
// fail, so counting them would pass a case that checked nothing. For bool,
// that is an allowance of at least 1 (one flip): a comparison at a tie the
// case's rounding can move either way (allowance 1) admits both true and
// false; a case where every element is such a tie is discarded, not passed.
std::string compare_discrete(const Case& c, size_t out, const std::vector<double>& got,
                             const std::vector<double>& want, const std::vector<double>& ref,
                             const std::vector<double>& naive, double runs, size_t& judged,
                             std::vector<Measured>& measured, const std::string& what, double& ratio) {
  const Decl& d = *c.decl;
  const std::vector<double> e = discrete_bound(c, out, ref, naive);
  const auto [lo, hi] = int_range(c.output_dtype(out));
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = runs * e[i];
    if (!std::isfinite(naive[i]) || !std::isfinite(allowed)) continue;
    if (want[i] - allowed <= lo && want[i] + allowed >= hi) continue;  // any value passes
    ++judged;
    const double err = std::fabs(got[i] - want[i]);
    if (err <= allowed) {
      if (err > 0) ratio = std::max(ratio, error_ratio(err, allowed));
      continue;
    }
    measured = {{"got", got[i]}, {"want", want[i]}, {"error", err}, {"bound", allowed}};
    const auto& o = d.outputs[out];
    return fmt::format(
        "target.{}{} = {} but {} = {} (|error| {} > bound {:.3g}{}: the {} output must be exact, off only "
        "where "
        "the case's {} rounding could carry it across a step of round/floor/ceil or a comparison, and by at "
        "most the bound; naive = {})",
        o.name, index_text(d.extents(o.shape, c.dims), i), got[i], what, want[i], err, allowed,
        runs == 1 ? "" : fmt::format(" = {} × {:.3g}", runs, e[i]), dtype_name(c.output_dtype(out)),
        dtype_name(arithmetic_dtype(c.dtype)), naive[i]);
  }
  return "";
}

// Compares `got` with `want` elementwise under the budget of `runs` runs.
// Returns a failure message, or "" (and counts judged elements, and raises
// `ratio` to the largest |got - want| / bound seen).
std::string compare(const Case& c, size_t out, const std::vector<double>& got,
                    const std::vector<double>& want, const std::vector<double>& ref,
                    const std::vector<double>& naive, double k, double runs, size_t& judged,
                    std::vector<Measured>& measured, const std::string& what, double& ratio) {
  if (!is_float(c.output_dtype(out)))
    return compare_discrete(c, out, got, want, ref, naive, runs, judged, measured, what, ratio);
  const Decl& d = *c.decl;
  const auto& o = d.outputs[out];
  // The floor without the f64 reference's own rounding bound first: it only
  // adds, so what holds without it holds with it, and a run computes it
  // (an evaluation of the expression's bound) only for a case that needs it.
  double floor = floor_of(c, out, ref, /*rounding_bound=*/false);
  double bound = 0, worst = -1;
  size_t at = 0, judged_here = 0;
  bool mismatch = false;
  const DType dt = c.output_dtype(out);
  const double overflow = store_overflow(dt);
  bool overflowed = false;  // the mismatch is a store that had to overflow
  const auto judge = [&] {
    bound = runs * (k * naive_error(ref, naive) + floor);
    worst = -1, at = 0, judged_here = 0, mismatch = false, overflowed = false;
    double r = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(naive[i]) && std::isfinite(ref[i])) {
        if (overflow == 0 || std::fabs(ref[i]) - bound < overflow) continue;  // the dtype cannot carry it
        ++judged_here;
        // (Or the value itself: the reference as its own target, unrounded.)
        if (got[i] != std::copysign(HUGE_VAL, ref[i]) && !same_bits(got[i], want[i])) {
          at = i, mismatch = true, overflowed = true;
          break;
        }
        continue;
      }
      // A reference NaN or ±inf that the naive same-precision computation
      // does not reach (or reaches with the other sign) is rounding's choice:
      // (x - mean(x)) · inf is 0 · inf = NaN in fp64 on a constant row and
      // ±1 ulp · inf = ±inf in f32, whichever way the kernel's mean rounds;
      // (x - mean(x)) / (x - mean(x)) is 0/0 or 1. Not judged, as a finite
      // reference the naive computation overflowed is not.
      if (!std::isfinite(ref[i]) && !(std::isnan(ref[i]) ? std::isnan(naive[i]) : naive[i] == ref[i]))
        continue;
      ++judged_here;
      if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
        // A half store of a value within the bound of a reference within the
        // bound of the threshold may round to ±inf (f32's 65520 of a
        // reference 65519.997 stores inf in f16): a correct kernel's answer,
        // on either side (rows_independent compares two runs of the kernel).
        const double inf = std::copysign(HUGE_VAL, ref[i]);
        const bool may_overflow =
            overflow != 0 && std::isfinite(ref[i]) && std::fabs(ref[i]) + bound >= overflow &&
            (std::isfinite(got[i]) || got[i] == inf) && (std::isfinite(want[i]) || want[i] == inf);
        const bool same = (std::isnan(want[i]) && std::isnan(got[i])) || want[i] == got[i] || may_overflow;
        if (!same) {
          at = i, mismatch = true;
          break;
        }
        continue;
      }
      const double err = std::fabs(got[i] - want[i]);
      if (err > 0) r = std::max(r, error_ratio(err, bound));
      if (err > bound && err - bound > worst) worst = err - bound, at = i;
    }
    return r;
  };
  double own_ratio = judge();
  // Any failure (a mismatch too: whether a store had to overflow, or may
  // have, depends on the bound) is judged again under the full floor.
  if (mismatch || worst >= 0) {
    if (const double full = floor_of(c, out, ref); full > floor) floor = full, own_ratio = judge();
  }
  judged += judged_here;
  ratio = std::max(ratio, own_ratio);
  if (!mismatch && worst < 0) return "";
  const auto ext = d.extents(o.shape, c.dims);
  if (overflowed) {
    measured = {{"got", got[at]}, {"reference", ref[at]}, {"bound", bound}};
    return fmt::format(
        "target.{}{} = {} but the reference {} lies past the {} overflow threshold {} by more than the bound "
        "{:.3g}: a store rounding to nearest gives {}",
        o.name, index_text(ext, at), got[at], ref[at], dtype_name(dt), overflow, bound,
        ref[at] > 0 ? "inf" : "-inf");
  }
  measured = {
      {"got", got[at]}, {"want", want[at]}, {"error", std::fabs(got[at] - want[at])}, {"bound", bound}};
  // In f32 arithmetic under the tree assumption: say the other summation
  // contract (op.h, sequential_sums) only where it would allow this error,
  // and only where the orders differ: a term passes through n - 1 additions
  // in a running total and ceil(log2 n) in a tree, more only from n = 4 (n = 3:
  // 2 and 2), so a case whose longest sum has fewer terms (a one-term sum
  // after shrinking) has no summation order to blame. It said so for any
  // error within 16 times the bound: a bf16 scan whose carries were rounded
  // to bf16 (1.23 against 0.986) was told to declare it, which moved the
  // bound to 1.01 (a half output's store rounding dwarfs the sums' term).
  const auto sequential_bound = [&] {
    return runs * (k * naive_error(ref, naive) + floor_of(c, out, ref, true, true));
  };
  const bool near = arithmetic_dtype(dt) == DType::f32 && !d.sequential_sums && o.reference &&
                    o.reference->has_sum() && o.reference->longest_sum(inputs_map(c, false)) >= 4 &&
                    std::fabs(got[at] - want[at]) <= sequential_bound();
  return fmt::format(
      "{}.{}{} = {} but {} = {} (|error| {:.3g} > bound {:.3g} = {}{} × naive error {:.3g} + floor "
      "{:.3g}{}){}",
      "target", o.name, index_text(ext, at), got[at], what, want[at], std::fabs(got[at] - want[at]), bound,
      runs == 1 ? "" : fmt::format("{} × (", runs), k, naive_error(ref, naive), floor, runs == 1 ? "" : ")",
      near ? fmt::format(
                 "; the floor takes long sums as added pairwise or in blocks: a kernel adding one with a "
                 "single running total in another order declares op.summation: sequential, whose bound "
                 "here, {:.3g}, this error is within (declare it only if the kernel adds so)",
                 sequential_bound())
           : "");
}

// Does some case with dim k above its least value s keep every hard
// relation once dim k alone drops to s (the slice rows_independent runs)?
// Relations are pairwise, so each one touching k bounds one other dim c:
// `k <= c` holds at s whenever it holds at the larger value, `k >= c` at the
// larger whenever at s, and `k == c` never holds at both. So a copy of dim k
// fixed at s takes over the relations bounding k from below, while dim k keeps
// those bounding it from above, at the least valid value above s (the
// weakest for them): the slice exists exactly when that assignment extends.
bool sliceable(const Decl& d, size_t k) {
  const DimDecl& dim = d.dims[k];
  const int64_t s = dim.smallest();
  int64_t n = s + 1;
  while (n <= dim.largest() && !dim.valid(n)) ++n;
  if (n > dim.largest()) return false;
  Decl e;
  e.dims = d.dims;
  e.dims.push_back(dim);
  const int copy = static_cast<int>(e.dims.size()) - 1, at = static_cast<int>(k);
  for (const auto& r : d.relations) {
    if (!r.hard() || (r.a != at && r.b != at)) {
      e.relations.push_back(r);
      continue;
    }
    if (r.op == RelOp::eq) return false;
    Relation moved = r;
    const bool below =
        r.a == at ? (r.op == RelOp::gt || r.op == RelOp::ge) : (r.op == RelOp::lt || r.op == RelOp::le);
    if (below) (r.a == at ? moved.a : moved.b) = copy;
    e.relations.push_back(moved);
  }
  std::vector<int64_t> fixed(e.dims.size(), -1);
  fixed[k] = n;
  fixed[static_cast<size_t>(copy)] = s;
  return e.extends(fixed, {});
}

// Is dim k a batch dim of the declaration, provably: does a slice of the
// inputs along it give the same slice of every output, whatever the values?
// Static, from the declaration alone (never from running the reference on
// a case: that would make the reference its own witness). The reference
// expression of every output with the axis independent along it
// (expr::Expression::independent_along; an output without it, a loss over
// the rows, is not compared); every input naming it once; no mask or index tensor
// whose kind ties its indices together along it (ids below it, a
// permutation along it, a causal mask's rows or columns, a padding row).
// An external reference is code kprop cannot read: never.
bool provably_independent(const Decl& d, size_t k) {
  const std::string& name = d.dims[k].name;
  if (d.external_reference) return false;
  for (const auto& o : d.outputs) {
    // An output without the axis is the batch's as a whole: never compared.
    const auto n = std::count(o.shape.begin(), o.shape.end(), name);
    if (n > 1 || (n == 1 && (!o.reference || !o.reference->independent_along(name)))) return false;
  }
  for (const auto& in : d.inputs) {
    const auto at = std::find(in.shape.begin(), in.shape.end(), name);
    if (std::count(in.shape.begin(), in.shape.end(), name) > 1) return false;
    const int axis = at == in.shape.end() ? -1 : static_cast<int>(at - in.shape.begin());
    const int last = static_cast<int>(in.shape.size()) - 1;
    for (const ValueSpec& v : in.values) {
      if (v.kind == ValueKind::ids && v.bound_dim == static_cast<int>(k)) return false;
      if (axis < 0) continue;
      if (v.kind == ValueKind::permutation && v.axis == axis) return false;
      if (v.kind == ValueKind::causal && axis >= last - 1) return false;
      if (v.kind == ValueKind::padding && axis == last) return false;
    }
  }
  return true;
}

}  // namespace

void register_invariants(OpFamily& f) {
  const Decl& decl = f.decl();

  f.invariant({"matches_reference",
               "every output within k × the naive same-precision error of the reference expression + a floor "
               "(elements the dtype cannot carry are not judged)",
               {field::k(2, "multiple of the naive same-precision error allowed")}},
              [](T& t, const Values& p) {
                const Case& c = t.input();
                const Result& got = t.target();
                const Result& ref = t.reference();
                // The naive error, which sets the bound, against the spec's own
                // reference (Trial::own_reference): another oracle's difference
                // from the spec's reference is no rounding.
                const Result& own = t.own_reference();
                const Result& naive = t.once<op::naive>();
                if (auto v = vacuous_baseline(c, own, naive)) return *v;
                size_t judged = 0;
                double ratio = 0;
                std::vector<Measured> per_output;  // kprop/search.h: each output's ratio
                for (size_t i = 0; i < c.decl->outputs.size(); ++i) {
                  std::vector<Measured> m;
                  double ratio_here = 0;
                  const std::string why =
                      compare(c, i, got.outputs[i], ref.outputs[i], own.outputs[i], naive.outputs[i],
                              p.real("k"), 1, judged, m, "reference", ratio_here);
                  if (!why.empty()) return Verdict::fail(why, m);
                  ratio = std::max(ratio, ratio_here);
                  per_output.push_back({kErrorRatioOf + c.decl->outputs[i].name, ratio_here});
                }
                if (judged == 0) {
                  bool discrete = false;
                  for (size_t i = 0; i < c.decl->outputs.size(); ++i)
                    discrete = discrete || !is_float(c.output_dtype(i));
                  return Verdict::discard(
                      discrete
                          ? "no element is judged: the naive computation overflows, or (an integer or bool "
                            "output) the case's rounding admits any value (a bool at a tie either way), on "
                            "every element"
                          : "the naive computation overflows on every element");
                }
                per_output.insert(per_output.begin(), {kErrorRatio, ratio});
                return Verdict::pass(std::move(per_output));
              })
      .reading({"*"});

  f.invariant(
       {"finite_outputs",
        "the target is finite wherever the reference and the naive computation are (a half output within "
        "k × the naive error + the floor of its overflow threshold may store ±inf)",
        {field::k(2, "as matches_reference's k: the bound near a half output's overflow threshold")}},
       [](T& t, const Values& p) {
         const Case& c = t.input();
         const Result& got = t.target();
         const Result& ref = t.reference();
         const Result& naive = t.once<op::naive>();
         size_t judged = 0;
         for (size_t i = 0; i < c.decl->outputs.size(); ++i) {
           // A half output's element within matches_reference's bound (k ×
           // the naive error + the floor, both against the family's own
           // reference, as there) of the overflow threshold may store as
           // ±inf: the bound, computed once per output when an element needs it.
           const double overflow = store_overflow(c.output_dtype(i));
           std::optional<double> bound;
           for (size_t k = 0; k < got.outputs[i].size(); ++k) {
             const double r = ref.outputs[i][k], g = got.outputs[i][k];
             if (!std::isfinite(r) || !std::isfinite(naive.outputs[i][k])) continue;
             ++judged;
             if (!std::isfinite(g) && overflow != 0) {
               const std::vector<double>& own = t.own_reference().outputs[i];
               if (!bound) bound = p.real("k") * naive_error(own, naive.outputs[i]) + floor_of(c, i, own);
               if (g == std::copysign(HUGE_VAL, own[k]) && std::fabs(own[k]) + *bound >= overflow) continue;
             }
             if (!std::isfinite(g))
               return Verdict::fail(
                   fmt::format("target.{}{} = {} where the reference is {}", c.decl->outputs[i].name,
                               index_text(c.decl->extents(c.decl->outputs[i].shape, c.dims), k),
                               got.outputs[i][k], ref.outputs[i][k]));
           }
         }
         if (judged == 0) return Verdict::discard("no element has a finite reference");
         return Verdict::pass();
       })
      .reading({"*"});

  // A half output is f32 arithmetic rounded once, to nearest, at the store
  // (the contract floor_of derives the half floor from). matches_reference
  // bounds every element by one number from the whole tensor (its largest
  // magnitude and naive error): an element far below the largest may be off
  // by a half-ulp of the largest, so a store that truncates, rounds twice
  // (half(half(e) · half(1 / l))), or keeps an intermediate in half passed
  // (a review's softmax and cumsum kernels, every seed 1-5), as did a bf16
  // copy that flushed values below 2^-7 to 0. Here each element stands on
  // its own: the kernel's f32 value v before the store errs from the fp64
  // reference r by at most
  //     E = max((256 + steps) · u · |r|, 2 · u · B, 2 · |n - r_spec|, 2^-126)
  // u = 2^-24 (f32 arithmetic), each term derived below (n: the expression
  // in f32 before the store; r_spec: the spec's own reference)
  // where steps = 2 · ceil(log2 n) (2 · n under op.summation: sequential)
  // and B is the expression's first-order rounding bound at this element
  // (tree sums, or in order), each addition taken as rounding at its
  // operands' size, u·(|a| + |b|), not its result's: a kernel may associate
  // the same additions otherwise (log_softmax as x - (m + log s) rounds
  // m + log s at |m|, where the expression's (x - m) - log s rounds nothing
  // that large: a correct f32 kernel's y ≈ 0 was off by u·|m|, a review).
  // That is floor_of's f32 term with |r| for the
  // tensor's largest magnitude (reordered steps err relative to the element;
  // where the element cancels, B carries its terms' rounding), but 256 ulps
  // where floor_of takes 8: an exp evaluated as exp2(a · log2 e) (CUDA's
  // __expf, FlashAttention's exp2 of scaled logits) rounds its argument, a
  // relative error of |a| · log2(e) · u in the result, up to 128 u over f32's
  // normal range (|a| < 88.7), which no rounding bound of the expression
  // carries; a few ulps more for the other steps and functions (rsqrt, tanh,
  // erf within a few ulps). 256 u is still 1/32 of an f16 ulp (2^-11 =
  // 2^13 u; 1/256 of bf16's): a store off round-to-nearest by more came from
  // another rounding, except within 2^-16 of a midpoint, where the range
  // below holds both neighbours. Where the expression in f32 itself lands
  // farther from r (an intermediate overflows or underflows: swiglu's
  // gate / (1 + exp(-gate)) at gate = -90 is -0 in f32, the reference
  // -7.4e-38), E is twice that distance (matches_reference's k = 2 of the
  // naive error, per element, before the store: the stored naive value's
  // error holds the store's own rounding, twice which admits any
  // neighbour). And at least 2^-126, f32's least normal: a GPU kernel
  // built with -ftz flushes an f32 result below it to 0, which matters only
  // to a bf16 output (f16's least subnormal is 2^-24) below about 2^-118.
  // A store rounding v to nearest gives a value between
  // round(r - E) and round(r + E), round to nearest even in the output's
  // type (±inf past its overflow threshold, as a store gives); anything
  // else came from another rounding. Elements whose reference or naive
  // value is not finite are not judged (matches_reference's rule), nor are
  // those whose B does not exist (inf). Needs the reference as expressions
  // (B); an external reference's outputs have none.
  static constexpr double kF32MinNormal = 0x1p-126;
  f.invariant(
       {"rounded_to_nearest",
        "each f16/bf16 output element is the store's rounding to nearest of a value within the f32 "
        "arithmetic's bound of the reference at that element (max((256 + 2 ceil(log2 n)) u |reference|, "
        "2 u B, 2 |naive before the store - reference|, 2^-126)): a store that truncates or rounds twice, "
        "or an intermediate kept in half precision, fails where matches_reference's tensor-wide budget lets "
        "it pass",
        {},
        [d = &decl](const Values&, const Values&) -> std::string {
          if (d->external_reference)
            return "the reference as expressions (op.reference is a program here: no per-element rounding "
                   "bound); drop the invariant";
          const bool half_case =
              std::any_of(d->case_dtypes.begin(), d->case_dtypes.end(), [](DType t) { return is_half(t); });
          for (const auto& o : d->outputs)
            if (o.reference && (o.dtype ? is_half(*o.dtype) : half_case)) return "";
          return "an f16 or bf16 output (an output's dtype, or the case's dtypes, listing f16 or bf16); none "
                 "here: drop the invariant";
        }},
       [](T& t, const Values&) {
         const Case& c = t.input();
         const Decl& d = *c.decl;
         const Result& got = t.target();
         const Result& ref = t.reference();
         // The naive error against the spec's own reference, as
         // matches_reference takes it: another oracle's difference from the
         // spec's expression is no rounding (an oracle returning 0 widened
         // the range to the whole answer).
         const Result& own = t.own_reference();
         const Result& naive = t.once<op::naive_before_store>();
         size_t judged = 0;
         bool half_output = false;
         for (size_t i = 0; i < d.outputs.size(); ++i) {
           const DType dt = c.output_dtype(i);
           const auto& o = d.outputs[i];
           if (!is_half(dt) || !o.reference) continue;
           half_output = true;
           const FloatType store = *float_type(dt);
           const double u = unit_roundoff(arithmetic_dtype(dt));
           int64_t n = 2;
           for (int64_t e : c.dims) n = std::max(n, e);
           const double steps = d.sequential_sums ? 2.0 * static_cast<double>(n)
                                                  : 2 * std::ceil(std::log2(static_cast<double>(n)));
           const std::vector<double> b =
               o.reference
                   ->rounding_bound(inputs_map(c, false),
                                    d.sequential_sums ? expr::Summation::in_order : expr::Summation::tree, u,
                                    /*steps=*/false, /*reassociated=*/true)
                   .data;
           const auto& r = ref.outputs[i];
           const auto& spec_r = own.outputs[i];
           for (size_t k = 0; k < r.size(); ++k) {
             const double bk = b.size() == r.size() ? b[k] : b.empty() ? 0 : b[0];
             if (!std::isfinite(r[k]) || !std::isfinite(naive.outputs[i][k]) || !std::isfinite(bk)) continue;
             const double e = std::max({(256 + steps) * u * std::fabs(r[k]), 2 * u * bk,
                                        2 * std::fabs(naive.outputs[i][k] - spec_r[k]), kF32MinNormal});
             const double lo = round_to(store, r[k] - e), hi = round_to(store, r[k] + e);
             ++judged;
             // A value the half type does not hold came from no store: an
             // in-process implementation (the spec's reference as the
             // target) hands over its f64 value, which kprop stores, to
             // nearest. A plugin or worker's value is already a half one.
             const double g = round_to(store, got.outputs[i][k]);
             if (g >= lo && g <= hi) continue;
             return Verdict::fail(
                 fmt::format(
                     "target.{}{} = {} but the reference is {}: a {} store rounding to nearest gives "
                     "{} from every f32 value within {:.3g} of it (the f32 arithmetic's bound at "
                     "this element: max((256 + {:g}) u |reference|, 2 u B, 2 |naive - reference|, 2^-126), u "
                     "= 2^-24, B = "
                     "{:.3g}, naive = {}, its f32 value); "
                     "a truncating store, a second rounding or an intermediate kept in {} lands "
                     "elsewhere",
                     o.name, index_text(d.extents(o.shape, c.dims), k), g, r[k], dtype_name(dt),
                     lo == hi ? fmt::format("{}", lo) : fmt::format("a value in [{}, {}]", lo, hi), e, steps,
                     bk, naive.outputs[i][k], dtype_name(dt)),
                 {{"got", g}, {"reference", r[k]}, {"lo", lo}, {"hi", hi}, {"bound", e}});
           }
         }
         if (!half_output)
           return Verdict::discard(
               "no f16 or bf16 output on this case (an f32 or f64 output stores in the "
               "arithmetic's own type)");
         if (judged == 0) return Verdict::discard("no element has a finite reference, naive value and bound");
         return Verdict::pass();
       })
      .reading({"*"});

  f.invariant(
       {"deterministic",
        "two runs of the target on the same case are bitwise equal (any NaN equal to any NaN: IEEE 754 "
        "leaves "
        "a NaN result's sign and payload unspecified)",
        {}},
       [](T& t, const Values&) {
         if (!t.target_info().deterministic)
           return Verdict::not_applicable("the target declares itself non-deterministic");
         const Result& a = t.target();
         const Result b = t.run_target(t.input());
         for (size_t i = 0; i < a.outputs.size(); ++i)
           for (size_t k = 0; k < a.outputs[i].size(); ++k)
             if (!detail::same_run_value(a.outputs[i][k], b.outputs[i][k]))
               return Verdict::fail(fmt::format(
                   "target.{}{} is {} on one run and {} on the next", t.input().decl->outputs[i].name,
                   index_text(t.input().decl->extents(t.input().decl->outputs[i].shape, t.input().dims), k),
                   a.outputs[i][k], b.outputs[i][k]));
         return Verdict::pass();
       })
      .reading({"*"});

  std::vector<std::string> dim_names;
  for (const auto& dd : decl.dims) dim_names.push_back(dd.name);
  // The default batch dim: the first output's first axis (or the first
  // dim), where provably independent; none otherwise, and rows_independent
  // is then in no default list (a spec names its batch dims).
  Choices batch_default;
  std::string candidate;
  if (!decl.outputs.empty() && !decl.outputs[0].shape.empty() &&
      decl.dim_index(decl.outputs[0].shape[0]) >= 0)
    candidate = decl.outputs[0].shape[0];
  else if (!dim_names.empty())
    candidate = dim_names[0];
  if (!candidate.empty() && provably_independent(decl, static_cast<size_t>(decl.dim_index(candidate))))
    batch_default.push_back(candidate);
  if (!dim_names.empty()) {
    InvariantInfo info{
        "rows_independent",
        "a slice along a batch dim computed alone equals the same slice of the batch (within twice the "
        "matches_reference budget), in every output with that axis: no leak across rows, no wrong stride",
        {field::choices("batch_dims", batch_default, dim_names, "dims along which outputs are independent"),
         field::k(2, "multiple of the naive same-precision error allowed per run")},
        [d = &decl](const Values&, const Values& p) -> std::string {
          if (p.choices("batch_dims").empty())
            return "batch_dims: the dims along which the outputs are independent (none could be established "
                   "from the reference: no axis of the first output that every output's expression keeps "
                   "apart, free of masks and index tensors along it)";
          for (const auto& b : p.choices("batch_dims")) {
            const DimDecl& dim = d->dims[static_cast<size_t>(d->dim_index(b))];
            if (dim.smallest() == dim.largest())
              return fmt::format("dim {} to take more than one value; it is fixed at {}", b, dim.smallest());
            bool in_output = false;
            for (const auto& o : d->outputs)
              in_output = in_output || std::find(o.shape.begin(), o.shape.end(), b) != o.shape.end();
            if (!in_output) return fmt::format("an output with an axis {}; none has", b);
            if (!sliceable(*d, static_cast<size_t>(d->dim_index(b))))
              return fmt::format(
                  "a slice along {} the relations allow; no case keeps them with {} alone at its least "
                  "value, {}",
                  b, b, dim.smallest());
          }
          return "";
        }};
    f.invariant(std::move(info), [](T& t, const Values& p) {
       const Case& c = t.input();
       const Decl& d = *c.decl;
       const Result& batch = t.target();
       bool observed = false;
       double ratio = 0;
       std::string ruled_out;
       for (const auto& b : p.choices("batch_dims")) {
         const size_t k = static_cast<size_t>(d.dim_index(b));
         const int64_t n = c.dims[k], s = d.dims[k].smallest();
         if (n <= s) continue;
         // The last s indices alone: a wrong stride or offset shows at the tail.
         std::vector<int64_t> keep(static_cast<size_t>(s));
         for (int64_t j = 0; j < s; ++j) keep[static_cast<size_t>(j)] = n - s + j;
         std::string changed;
         const Case sub = keep_indices(c, k, keep, &changed);
         // A mask or index tensor that the slice leaves no tensor of its kind
         // (a padding row cut after its prefix, an id pointing at a row cut
         // off) made valid again is another case than the slice: not observed.
         if (!changed.empty()) {
           ruled_out = fmt::format("the slice along {} is no case of the op as cut: {}", b, changed);
           continue;
         }
         // A slice the relations rule out (Nq alone under Nk >= Nq, say) is
         // no case of the op: that dim is not observed on this case.
         if (std::string why = d.relations_violated(sub.dims); !why.empty()) {
           ruled_out = fmt::format("the slice with {} = {} is no case of the op: {}", b, s, why);
           continue;
         }
         const Result alone = t.run_target(sub);
         const Result ref = op::reference(sub), naive = op::naive(sub);
         size_t judged = 0;  // over every output with the axis
         for (size_t i = 0; i < d.outputs.size(); ++i) {
           const auto& o = d.outputs[i];
           // An output without the axis (a loss reduced over the rows) is
           // the batch's as a whole: no slice of it is the slice's own.
           if (std::find(o.shape.begin(), o.shape.end(), b) == o.shape.end()) continue;
           const std::vector<double> slice =
               gather(batch.outputs[i], d.extents(o.shape, c.dims), o.shape, b, keep);
           std::vector<Measured> m;
           const std::string why =
               compare(sub, i, alone.outputs[i], slice, ref.outputs[i], naive.outputs[i], p.real("k"), 2,
                       judged, m, fmt::format("the same slice in the batch ({} = {})", b, n), ratio);
           if (!why.empty()) {
             // The spec's own reference on the same case, as the target was
             // checked: where it breaks the slice too, `b` is no batch dim of
             // the op (a scan or a sum along it) and the spec is wrong, not
             // the kernel (exit 2, as any spec error found on a case).
             const Result whole = op::reference(c);
             std::vector<Measured> own_m;
             size_t own_judged = 0;
             double own_ratio = 0;
             std::string own =
                 compare(sub, i, ref.outputs[i],
                         gather(whole.outputs[i], d.extents(o.shape, c.dims), o.shape, b, keep),
                         ref.outputs[i], naive.outputs[i], p.real("k"), 2, own_judged, own_m,
                         fmt::format("the same slice of its value on the batch ({} = {})", b, n), own_ratio);
             if (!own.empty()) {
               if (own.rfind("target.", 0) == 0) own.replace(0, 6, "reference");
               throw SpecCaseError(
                   Mark{o.reference_mark.file},
                   fmt::format("batch_dims {}: the reference itself is not independent along {}: {} computed "
                               "alone ({} = {}, the last of {}): {}; {} is no batch dim of this op (a sum or "
                               "scan along it?): drop it from rows_independent's batch_dims",
                               b, b, o.name, b, s, n, own, b));
             }
             return Verdict::fail(
                 fmt::format("{} computed alone ({} = {}, the last of {}): {}", o.name, b, s, n, why), m);
           }
         }
         // A slice where no element is judged (the naive computation
         // overflows on every one, or an integer or bool output's bound
         // admits any value on every one) compared nothing: not observed.
         if (judged == 0) {
           ruled_out = fmt::format(
               "no element of the slice along {} is judged: the naive computation overflows, or (an integer "
               "or bool output) the case's rounding admits any value, on every element",
               b);
           continue;
         }
         observed = true;
       }
       if (!observed)
         return Verdict::discard(ruled_out.empty() ? "every batch dim is at its smallest: nothing to slice"
                                                   : ruled_out);
       return Verdict::pass({{kErrorRatio, ratio}});
     }).reading({"*"});
  }
}

}  // namespace kprop::op
