// The op family's in-process implementations: the declared reference
// expressions, in fp64 (`reference`) and in the case's own precision
// (`naive`, the same-precision baseline of the dtype-aware tolerance).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "kernels/op/op.h"
#include "kprop/enum_names.h"

namespace kprop::op {

const char* dtype_name(DType dtype) {
  static constexpr const char* kNames[] = {"f32", "f64", "i32", "i64", "bool", "f16", "bf16", "i8", "u8"};
  static_assert(std::size(kNames) == size_t(kLastDType) + 1);
  return enum_name(dtype, kNames);
}

std::optional<FloatType> float_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return FloatType::f32;
    case DType::f64:
      return FloatType::f64;
    case DType::f16:
      return FloatType::f16;
    case DType::bf16:
      return FloatType::bf16;
    default:
      return std::nullopt;
  }
}

bool is_float(DType dtype) {
  return float_type(dtype).has_value();
}

bool is_half(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16;
}

double store_overflow(DType dtype) {
  return dtype == DType::f16 ? half::f16_overflow : dtype == DType::bf16 ? half::bf16_overflow : 0;
}

DType arithmetic_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

// The floating dtypes' values and constants are kprop/float_type.h's; an
// integer or boolean dtype keeps its values and has f64's range constants
// and no roundoff.
double round_to(DType dtype, double v) {
  const auto t = float_type(dtype);
  return t ? kprop::round_to(*t, v) : v;
}

// Every value rounded to dtype, the dtype's dispatch once (a store of a
// whole tensor), not per element.
static void round_all(DType dtype, std::vector<double>& values) {
  if (const auto t = float_type(dtype))
    for (double& v : values) v = kprop::round_to(*t, v);
}

double unit_roundoff(DType dtype) {
  const auto t = float_type(dtype);
  return t ? kprop::unit_roundoff(*t) : 0.0;
}

double min_normal(DType dtype) {
  return kprop::min_normal(float_type(dtype).value_or(FloatType::f64));
}

double denorm_min(DType dtype) {
  return kprop::denorm_min(float_type(dtype).value_or(FloatType::f64));
}

double max_finite(DType dtype) {
  return kprop::max_finite(float_type(dtype).value_or(FloatType::f64));
}

const char* value_kind_name(ValueKind kind) {
  static constexpr const char* kNames[] = {"normal",      "uniform",       "integer",  "large",
                                           "small",       "constant_rows", "denormal", "ids",
                                           "permutation", "causal",        "padding",  "bernoulli"};
  static_assert(std::size(kNames) == size_t(ValueKind::bernoulli) + 1);
  return enum_name(kind, kNames);
}

bool DimDecl::valid(int64_t v) const {
  if (v < lo || v > hi || v % multiple_of != 0) return false;
  if (one_of.empty()) return true;
  for (int64_t o : one_of)
    if (o == v) return true;
  return false;
}

std::vector<int64_t> DimDecl::values_below(int64_t v) const {
  std::vector<int64_t> out;
  if (!one_of.empty()) {
    for (int64_t o : one_of)
      if (o < v && valid(o)) out.push_back(o);
    std::sort(out.begin(), out.end());
    return out;
  }
  const int64_t first = (lo + multiple_of - 1) / multiple_of * multiple_of;
  for (int64_t w = first; w < v && w <= hi; w += multiple_of) out.push_back(w);
  return out;
}

// Without listing the values: a range may hold 2^24 of them.
int64_t DimDecl::largest() const {
  int64_t best = -1;
  for (int64_t o : one_of)
    if (valid(o)) best = std::max(best, o);
  if (one_of.empty() && hi / multiple_of * multiple_of >= lo) best = hi / multiple_of * multiple_of;
  if (best < 0) throw std::logic_error("op: dim " + name + " has no valid value");
  return best;
}

int64_t DimDecl::smallest() const {
  const auto below = values_below(hi + 1);
  if (below.empty()) throw std::logic_error("op: dim " + name + " has no valid value");
  return below.front();
}

bool Relation::holds(int64_t va, int64_t v) const {
  const int64_t vb = scale * v + offset;
  switch (op) {
    case RelOp::lt:
      return va < vb;
    case RelOp::le:
      return va <= vb;
    case RelOp::eq:
      return va == vb;
    case RelOp::ge:
      return va >= vb;
    case RelOp::gt:
      return va > vb;
  }
  return false;
}

std::string Relation::text(const std::vector<DimDecl>& d) const {
  static const char* ops[] = {"<", "<=", "==", ">=", ">"};
  std::string rhs = d[static_cast<size_t>(b)].name;
  if (scale != 1) rhs = fmt::format("{} * {}", scale, rhs);
  if (offset != 0) rhs += fmt::format(" {} {}", offset < 0 ? '-' : '+', offset < 0 ? -offset : offset);
  return d[static_cast<size_t>(a)].name + " " + ops[static_cast<int>(op)] + " " + rhs;
}

namespace {
// Keeps the values of a's domain `x` that have a partner in b's domain `y`
// under r (first == true), or those of b's `y` with a partner in a's `x`
// (first == false); true when something was removed. Both sorted. b's side,
// scale * b + offset, grows with b (scale >= 1): an inequality needs only
// the other domain's end that is easiest to satisfy.
bool revise(const Relation& r, std::vector<int64_t>& x, const std::vector<int64_t>& y, bool first) {
  if (y.empty()) {
    const bool changed = !x.empty();
    x.clear();
    return changed;
  }
  const size_t before = x.size();
  const bool a_small = r.op == RelOp::lt || r.op == RelOp::le;  // a below b's side: a small, b large
  std::erase_if(x, [&](int64_t v) {
    if (r.op == RelOp::eq) {
      if (!first) return !std::binary_search(y.begin(), y.end(), r.scale * v + r.offset);
      const int64_t u = v - r.offset;
      return u % r.scale != 0 || !std::binary_search(y.begin(), y.end(), u / r.scale);
    }
    return first ? !r.holds(v, a_small ? y.back() : y.front()) : !r.holds(a_small ? y.front() : y.back(), v);
  });
  return x.size() != before;
}
}  // namespace

bool Decl::extends(std::vector<int64_t> fixed, const std::vector<Relation>& extra) const {
  const auto dom = consistent_domains(fixed, extra);
  for (const auto& values : dom)
    if (values.empty()) return false;
  size_t k = 0;
  while (k < fixed.size() && fixed[k] >= 0) ++k;
  if (k == fixed.size()) return true;
  for (const int64_t v : dom[k]) {
    fixed[k] = v;
    if (extends(fixed, extra)) return true;
  }
  return false;
}

std::vector<std::vector<int64_t>> Decl::consistent_domains(const std::vector<int64_t>& fixed,
                                                           const std::vector<Relation>& extra) const {
  std::vector<std::vector<int64_t>> dom(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k < fixed.size() && fixed[k] >= 0) {
      if (dims[k].valid(fixed[k])) dom[k] = {fixed[k]};
    } else {
      dom[k] = dims[k].values_below(dims[k].hi + 1);
    }
  }
  std::vector<Relation> all;
  for (const auto& r : relations)
    if (r.hard()) all.push_back(r);
  all.insert(all.end(), extra.begin(), extra.end());
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& r : all) {
      auto& x = dom[static_cast<size_t>(r.a)];
      auto& y = dom[static_cast<size_t>(r.b)];
      changed = revise(r, x, y, true) || changed;
      changed = revise(r, y, x, false) || changed;
    }
  }
  return dom;
}

std::string Decl::relations_violated(const std::vector<int64_t>& d) const {
  for (const auto& r : relations)
    if (r.hard() && !r.holds(d[static_cast<size_t>(r.a)], d[static_cast<size_t>(r.b)]))
      return fmt::format("{} does not hold ({} = {}, {} = {})", r.text(dims),
                         dims[static_cast<size_t>(r.a)].name, d[static_cast<size_t>(r.a)],
                         dims[static_cast<size_t>(r.b)].name, d[static_cast<size_t>(r.b)]);
  return "";
}

bool AttrDecl::valid(double v) const {
  if (integer && v != std::floor(v)) return false;
  if (one_of.empty()) return v >= lo && v <= hi;
  for (double o : one_of)
    if (o == v) return true;
  return false;
}

std::string AttrDecl::values_text() const {
  if (one_of.empty()) return fmt::format("[{}, {}]{}", lo, hi, integer ? ", an integer" : "");
  std::vector<std::string> values;
  for (const double o : one_of)
    values.push_back(labels.empty() ? fmt::format("{}", o) : labels.at(static_cast<size_t>(o)));
  return fmt::format("one of {}", fmt::join(values, ", "));
}

int Decl::dim_index(const std::string& n) const {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].name == n) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Decl::extents(const std::vector<std::string>& shape,
                                   const std::vector<int64_t>& d) const {
  std::vector<int64_t> out;
  for (const auto& s : shape) {
    const int i = dim_index(s);
    out.push_back(i >= 0 ? d[static_cast<size_t>(i)] : std::stoll(s));
  }
  return out;
}

DType Case::output_dtype(size_t output) const {
  const auto& o = decl->outputs.at(output);
  return o.dtype ? *o.dtype : dtype;
}

expr::DType expr_dtype(DType dtype) {
  return dtype == DType::boolean ? expr::DType::boolean
         : is_float(dtype)       ? expr::DType::real
                                 : expr::DType::integer;
}

void put_inputs(const Case& c, expr::TensorMap& out, bool rounded) {
  const Decl& d = *c.decl;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    out.put(d.inputs[i].name,
            expr::Tensor::of(d.extents(d.inputs[i].shape, c.dims), c.inputs[i], expr_dtype(c.dtypes[i])));
  for (size_t i = 0; i < d.dims.size(); ++i)
    out.put(d.dims[i].name, expr::Tensor::scalar(static_cast<double>(c.dims[i]), expr::DType::integer));
  for (size_t i = 0; i < d.attrs.size(); ++i)
    out.put(d.attrs[i].name,
            d.attrs[i].integer ? expr::Tensor::scalar(c.attrs[i], expr::DType::integer)
                               : expr::Tensor::scalar(
                                     rounded ? round_to(arithmetic_dtype(c.dtype), c.attrs[i]) : c.attrs[i]));
}

expr::TensorMap inputs_map(const Case& c, bool rounded) {
  expr::TensorMap m;
  for (const auto& i : c.decl->inputs) m.want(i.name);
  for (const auto& i : c.decl->dims) m.want(i.name);
  for (const auto& i : c.decl->attrs) m.want(i.name);
  put_inputs(c, m, rounded);
  return m;
}

namespace {
// The arithmetic a kernel computes output `output` in: an integer or
// boolean output's is the case's (it is computed from the case's floats).
DType arithmetic_of(const Case& c, size_t output) {
  const DType dt = c.output_dtype(output);
  return arithmetic_dtype(is_float(dt) ? dt : c.dtype);
}

// u · B with steps (op.h), per element: how far the case's rounding can move
// an integer or boolean output. Empty for an external reference (no B).
std::vector<double> step_bounds(const Case& c, size_t output) {
  if (c.decl->external_reference) return {};
  const DType a = arithmetic_of(c, output);
  const double unit = unit_roundoff(a);
  std::vector<double> b =
      c.decl->outputs.at(output)
          .reference
          ->rounding_bound(
              inputs_map(c, false),
              a == DType::f64 || c.decl->sequential_sums ? expr::Summation::in_order : expr::Summation::tree,
              unit, /*steps=*/true)
          .data;
  for (double& v : b) v *= unit;
  return b;
}
}  // namespace

std::vector<double> discrete_bound(const Case& c, size_t output, const std::vector<double>& ref,
                                   const std::vector<double>& naive) {
  std::vector<double> e = step_bounds(c, output);
  e.resize(ref.size(), 0.0);
  for (size_t i = 0; i < e.size(); ++i)
    if (std::isfinite(naive[i]) && std::isfinite(ref[i])) e[i] = std::max(e[i], std::fabs(naive[i] - ref[i]));
  return e;
}

double floor_of(const Case& c, size_t output, const std::vector<double>& ref, bool rounding_bound,
                std::optional<bool> sequential_sums) {
  // An integer or boolean output: the largest finite step bound (close(k=)'s
  // floor.Y; matches_reference judges it per element, discrete_bound).
  if (!is_float(c.output_dtype(output))) {
    double worst = 0;
    if (rounding_bound)
      for (double b : step_bounds(c, output))
        if (std::isfinite(b)) worst = std::max(worst, b);
    return worst;
  }
  double m = 0;
  for (double x : ref)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  int64_t n = 2;
  for (int64_t d : c.dims) n = std::max(n, d);
  // f64 outputs: the fp64 reference is itself a same-precision computation
  // whose sequential sums err by up to (n - 1) u: that error counts too.
  const DType dt = c.output_dtype(output);
  // op.summation: sequential, a running total in an order of its own: its
  // terms pass through up to n - 1 additions, not ⌈log2 n⌉ (a reversed f32
  // sum over 3540 terms erred by 33 ulps against a tree floor of 32).
  const bool sequential = dt == DType::f64 || sequential_sums.value_or(c.decl->sequential_sums);
  const double steps =
      sequential ? 2.0 * static_cast<double>(n) : 2 * std::ceil(std::log2(static_cast<double>(n)));
  double arithmetic = (8 + steps) * unit_roundoff(arithmetic_dtype(dt)) * m;
  // f64 outputs: the same-precision baseline is the reference itself (naive
  // error 0), and m follows the output, not the terms it is made of: an
  // output that cancels (1 - 0.7 - 0.3 = 5.6e-17 in fp64) held a correct
  // kernel to the reference's own rounding. Its first-order bound u·B
  // (running error analysis, expr.h rounding_bound) follows the terms; a
  // kernel computing the same operations in another order errs by the same
  // first-order amount, so the two differ by up to 2·u·B (largest finite B
  // of the output; an inf B, a bound that does not exist there, adds nothing).
  // f32 arithmetic (f32 and half outputs): the naive baseline's error sets
  // the budget, but it can be exact by luck where the output cancels (sums
  // of integers and short decimals in index order: the shrunk cases), while
  // a correct kernel that adds the same terms as a tree (pairwise, blocked,
  // a warp's shuffles) errs by up to u·B_tree to first order, B_tree the
  // running error bound with tree sums (each term through ⌈log2 n⌉
  // additions): the dot product 4·2 - 4·(-1) + ... = -0.4 over terms of
  // size 8 erred by one f32 ulp of 8, 4.8e-7, against a floor of 4.8e-7
  // from |output| = 0.4. Twice that covers the second-order terms. Where
  // the output does not cancel, B_tree ~ (roundings along the way)·|output|,
  // about the term above; so the floor is the larger of the two, not their sum.
  if (rounding_bound && !c.decl->external_reference) {
    const auto& o = c.decl->outputs.at(output);
    const bool f64 = dt == DType::f64;
    double worst = 0;
    const double unit = unit_roundoff(arithmetic_dtype(dt));
    for (const double b :
         o.reference
             ->rounding_bound(inputs_map(c, false),
                              f64 || sequential ? expr::Summation::in_order : expr::Summation::tree, unit)
             .data)
      if (std::isfinite(b)) worst = std::max(worst, b);
    const double term = 2 * unit * worst;
    arithmetic = f64 ? arithmetic + term : std::max(arithmetic, term);
  }
  // A half output: plus its store's rounding (derivation in op.h).
  return is_half(dt) ? arithmetic + unit_roundoff(dt) * m + denorm_min(dt) / 2 : arithmetic;
}

namespace {
// Output o's reference expression on the case's inputs. Its shape was
// checked symbolically at load, where a slice's extent (`?`) is taken to
// match what it broadcasts with; on a case it can still come out otherwise,
// and an expression that cannot be evaluated on one (shapes that do not
// broadcast, an index out of range) is the spec's error, as it reads only
// the spec's inputs: one line at the expression (exit 2), never the target's.
std::vector<double> evaluated(const Case& c, const OutputDecl& o, const std::function<expr::Tensor()>& eval) {
  const auto what = [&] { return fmt::format("reference.{}: `{}`", o.name, o.reference->shown()); };
  expr::Tensor t;
  try {
    t = eval();
  } catch (const expr::EvalError& e) {
    throw SpecCaseError(o.reference_mark,
                        fmt::format("{} cannot be evaluated on this case: {}", what(), e.what()));
  }
  const std::vector<int64_t> want = c.decl->extents(o.shape, c.dims);
  if (t.shape != want)
    throw SpecCaseError(
        o.reference_mark,
        fmt::format("{} has shape {} on this case, but output {} is declared {} = {}", what(),
                    expr::shape_text(t.shape), o.name, expr::shape_text(o.shape), expr::shape_text(want)));
  return std::move(t.data);
}
}  // namespace

Result reference(const Case& c) {
  if (c.decl->external_reference) return c.decl->external_reference->call(c, true);
  const expr::TensorMap m = inputs_map(c, false);
  Result r;
  for (size_t i = 0; i < c.decl->outputs.size(); ++i) {
    const OutputDecl& o = c.decl->outputs[i];
    r.outputs.push_back(evaluated(c, o, [&] { return o.reference->evaluate(m); }));
    // An integer or boolean output's reference gives values of its dtype:
    // what a kernel stores for 2.5 or NaN is no contract the spec states.
    const DType dt = c.output_dtype(i);
    if (is_float(dt)) continue;
    const auto [lo, hi] = int_range(dt);
    const std::vector<double>& y = r.outputs.back();
    for (size_t k = 0; k < y.size(); ++k)
      if (!(y[k] == std::floor(y[k]) && y[k] >= lo && y[k] <= hi))
        throw SpecCaseError(
            o.reference_mark,
            fmt::format(
                "reference.{}: `{}` is {} at element {} on this case, not a value of the {} output {} "
                "({}): say what the kernel stores (round, clip, where)",
                o.name, o.reference->shown(), y[k], k, dtype_name(dt), o.name,
                dt == DType::boolean ? "0 or 1" : fmt::format("an integer in [{}, {}]", lo, hi)));
  }
  return r;
}

namespace {
Result naive_outputs(const Case& c, bool store) {
  const expr::TensorMap m = inputs_map(c, true);
  Result r;
  for (size_t i = 0; i < c.decl->outputs.size(); ++i) {
    // Intermediates in the arithmetic dtype (f32 for a half output), then
    // the store: rounded to the output's dtype, to nearest even.
    const DType dt = c.output_dtype(i);
    const OutputDecl& o = c.decl->outputs[i];
    std::vector<double> y = evaluated(c, o, [&] {
      return o.reference->evaluate_rounded(
          m, arithmetic_of(c, i) == DType::f32 ? FloatType::f32 : FloatType::f64);
    });
    if (is_half(dt) && store) round_all(dt, y);
    if (!is_float(dt))  // an integer or boolean output: the store to nearest (not judged where not finite)
      for (double& v : y)
        if (std::isfinite(v)) v = std::nearbyint(v);
    r.outputs.push_back(std::move(y));
  }
  return r;
}
}  // namespace

Result naive(const Case& c) {
  if (c.decl->external_reference) return c.decl->external_reference->call(c, false);
  return naive_outputs(c, true);
}

Result naive_before_store(const Case& c) {
  return naive_outputs(c, false);
}

}  // namespace kprop::op
