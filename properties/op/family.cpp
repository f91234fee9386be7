// The op family: named tensors, metamorphic transforms and OpFamily itself
// (the declaration's tensor names and transform parameters, registration).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "kprop/rng.h"
#include "properties/op/family_parts.h"

namespace kprop::op {

// ---------------------------------------------------------------- named tensors
expr::TensorInfos Traits::tensor_infos() {
  return {};
}

// floor.Y: op::floor_of (kernels/op/op.h, its derivation).
void Traits::tensors(const Case& c, const Result* target, const Result* reference, expr::TensorMap& out) {
  const Decl& d = *c.decl;
  put_inputs(c, out, false);
  out.put("unit_roundoff", expr::Tensor::scalar(unit_roundoff(arithmetic_dtype(c.dtype))));
  out.put("store_roundoff", expr::Tensor::scalar(unit_roundoff(c.dtype)));
  std::optional<Result> naive_res;
  // The reference's results: the trial's, or computed here when it gave none
  // (shared: floor.Y's full value may be computed from it later).
  std::shared_ptr<const Result> ref_own;
  auto ref = [&]() -> const Result& {
    if (reference) return *reference;
    if (!ref_own) ref_own = std::make_shared<const Result>(op::reference(c));
    return *ref_own;
  };
  const bool want_naive = out.wants_prefix("naive.");
  // From the trial's store when the map has one: the naive evaluation runs
  // once per trial, however many invariants and expressions read it.
  const Result* naive_of = nullptr;
  if (want_naive) {
    if (OnceStore* once = out.once_store())
      naive_of = &once->get<op::naive>(c);
    else
      naive_of = &naive_res.emplace(op::naive(c));
  }
  for (size_t i = 0; i < d.outputs.size(); ++i) {
    const auto& o = d.outputs[i];
    const auto ext = d.extents(o.shape, c.dims);
    const expr::DType et = expr_dtype(c.output_dtype(i));  // real, or an integer / boolean output's
    if (target && out.wanted("target." + o.name))
      out.put("target." + o.name, expr::Tensor::of(ext, target->outputs[i], et));
    if (out.wanted("reference." + o.name))
      out.put("reference." + o.name, expr::Tensor::of(ext, ref().outputs[i], et));
    if (want_naive && out.wanted("naive." + o.name))
      out.put("naive." + o.name, expr::Tensor::of(ext, naive_of->outputs[i], et));
    // Without the reference's rounding bound (an evaluation of its running
    // error bound, the costly part) as floor.Y's lower bound: close(k=)
    // computes the full floor only for a case that fails under it.
    // The map is the trial's: c and *reference live as long.
    if (out.wanted("floor." + o.name)) {
      const double lower = op::floor_of(c, i, ref().outputs[i], /*rounding_bound=*/false);
      out.put_with_lower_bound("floor." + o.name, expr::Tensor::scalar(lower), [&c, i, reference, ref_own] {
        return expr::Tensor::scalar(op::floor_of(c, i, (reference ? *reference : *ref_own).outputs[i]));
      });
    }
    if (out.wanted("overflow." + o.name)) {
      const double overflow = store_overflow(c.output_dtype(i));
      out.put("overflow." + o.name, expr::Tensor::scalar(overflow > 0 ? overflow : HUGE_VAL));
    }
  }
}

// ---------------------------------------------------------------- transforms
namespace {

// Is v × f (v a value of dtype t, f finite) exactly a finite value of t?
// Each factor's significand, in [0.5, 1), multiplies with an exact residual
// (fma: no underflow at that exponent), so the product's significand is
// exact in double iff that residual is 0; the exponents then move it
// without loss iff moving it back restores it (no overflow, no bits shifted
// out below double's least subnormal), and t holds it iff rounding to t
// keeps it.
bool exact_product(double v, double f, DType t) {
  if (!std::isfinite(v) || v == 0 || f == 0) return true;  // inf, NaN and ±0 scale exactly (or not at all)
  int ev = 0, ef = 0;
  const double mv = std::frexp(v, &ev), mf = std::frexp(f, &ef);
  const double m = mv * mf;
  if (std::fma(mv, mf, -m) != 0) return false;
  const double p = std::ldexp(m, ev + ef);
  return std::isfinite(p) && std::ldexp(p, -(ev + ef)) == m && round_to(t, p) == p;
}

}  // namespace

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> list = [] {
    const std::vector<expr::TensorInfo> applies = {{"transform.applies", {}, expr::DType::boolean, ""}};
    std::vector<TransformInfo> l = {{"scale", "", {}, applies}, {"shift", "", {}, applies}};
    for (size_t k = 0; k < kMaxDims; ++k) {
      l.push_back({fmt::format("permute_dim{}", k),
                   "",
                   {},
                   {{"transform.perm", {}, expr::DType::integer, ""},
                    {"transform.applies", {}, expr::DType::boolean, ""}}});
      l.push_back({fmt::format("slice_dim{}", k),
                   "",
                   {},
                   {{"transform.index", {}, expr::DType::integer, ""},
                    {"transform.applies", {}, expr::DType::boolean, ""}}});
    }
    return l;
  }();
  return list;
}

Case Traits::transform(const std::string& name, const Case& c, const Values& params, uint64_t seed,
                       expr::TensorMap& out) {
  const Decl& d = *c.decl;
  Case s = c;
  if (name == "scale" || name == "shift") {
    // A finite value the transform moves past the dtype's range (an f16 40000
    // doubled) is no case the relation speaks of: transform.applies = false,
    // and the check is discarded, not failed on the inf it made. Nor is a
    // scaled case where some product is not exact in its dtype (a subnormal
    // halved loses its last bit even by 0.5; any factor but a power of two
    // rounds most values): `scale` relations state exact multiples.
    bool applies = true;
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      if (!is_float(c.dtypes[i])) continue;
      const double f = params.real(d.inputs[i].name);
      for (double& v : s.inputs[i]) {
        const double moved = round_to(c.dtypes[i], name == "scale" ? v * f : v + f);
        if (std::isfinite(v) && !std::isfinite(moved)) applies = false;
        if (name == "scale" && applies && !exact_product(v, f, c.dtypes[i])) applies = false;
        v = moved;
      }
    }
    put_transform_applies(out, applies);
    return s;
  }
  if (name.rfind("slice_dim", 0) == 0) {
    // A contiguous run [a, a + m) along dim k, m drawn among the smaller
    // values the dim and the hard relations allow (none: the whole dim, and
    // transform.applies = false, so the check is discarded; so it is where
    // the run of a mask or index tensor is none of its kind, as below).
    const size_t k = static_cast<size_t>(std::stoul(name.substr(std::string("slice_dim").size())));
    const int64_t n = c.dims[k];
    std::vector<int64_t> sizes;
    for (const int64_t m : d.dims[k].values_below(n)) {
      std::vector<int64_t> dims = c.dims;
      dims[k] = m;
      if (d.relations_violated(dims).empty()) sizes.push_back(m);
    }
    const int64_t m = sizes.empty() ? n : sizes[rng::hash(seed, 11, 0) % sizes.size()];
    const int64_t a = static_cast<int64_t>(rng::hash(seed, 11, 1) % static_cast<uint64_t>(n - m + 1));
    std::vector<int64_t> keep(static_cast<size_t>(m));
    std::iota(keep.begin(), keep.end(), a);
    std::string changed;
    s = keep_indices(c, k, keep, &changed);
    out.put("transform.index", expr::Tensor::ints({m}, keep));
    put_transform_applies(out, m < n && changed.empty());
    return s;
  }
  // A permutation that moves something; with the dim at 1 there is none,
  // and transform.applies = false discards the check (it passed before,
  // comparing the case with itself). So it does where a mask, permuted, is
  // no mask of its kind (a causal mask along its rows, a padding row no
  // longer a prefix): the case made valid again would be another case, no
  // permutation of this one.
  const size_t k = static_cast<size_t>(std::stoul(name.substr(std::string("permute_dim").size())));
  const int64_t n = c.dims[k];
  const std::vector<int> drawn = rng::moving_permutation(static_cast<size_t>(n), seed, 7);
  const std::vector<int64_t> perm(drawn.begin(), drawn.end());
  std::string changed;
  s = keep_indices(c, k, perm, &changed);
  out.put("transform.perm", expr::Tensor::ints({n}, perm));
  put_transform_applies(out, n >= 2 && changed.empty());
  return s;
}

// ---------------------------------------------------------------- the family
// --domain over an op takes `dtypes`, each dim (op.dims' grammar) and each attr.
std::vector<std::pair<std::string, std::string>> OpFamily::domain_lines(const Values&) const {
  std::vector<std::string> names;
  for (DType t : decl_->case_dtypes) names.push_back(dtype_name(t));
  std::vector<std::pair<std::string, std::string>> lines = {
      {"dtypes", fmt::format("[{}]", fmt::join(names, ", "))}};
  for (const DimDecl& d : decl_->dims) {
    std::string v = d.one_of.empty() ? fmt::format("[{}, {}]", d.lo, d.hi)
                                     : fmt::format("{{one_of: [{}]}}", fmt::join(d.one_of, ", "));
    if (d.multiple_of > 1) v = fmt::format("{{range: [{}, {}], multiple_of: {}}}", d.lo, d.hi, d.multiple_of);
    lines.push_back({d.name, v});
  }
  for (const AttrDecl& a : decl_->attrs) {
    std::vector<std::string> values;
    for (const double o : a.one_of)
      values.push_back(a.labels.empty() ? fmt::format("{}", o) : a.labels.at(static_cast<size_t>(o)));
    lines.push_back({a.name, a.one_of.empty() ? fmt::format("[{}, {}]", a.lo, a.hi)
                                              : fmt::format("{{one_of: [{}]}}", fmt::join(values, ", "))});
  }
  return lines;
}

std::vector<std::string> OpFamily::domain_rules() const {
  std::vector<std::string> rules;
  for (const Relation& r : decl_->relations)
    rules.push_back(r.hard() ? r.text(decl_->dims)
                             : fmt::format("{} in {:g}% of draws", r.text(decl_->dims), 100 * r.rate));
  return rules;
}

std::string OpFamily::reference_shown(const std::string& name) const {
  if (name == "reference" && decl_->external_reference)
    if (std::string program = decl_->external_reference->name(); !program.empty()) return program;
  return name;
}

OpFamily::OpFamily(std::shared_ptr<const Decl> decl) : decl_(std::move(decl)) {
  const Decl& d = *decl_;
  infos_ = d.reference_infos;
  infos_.push_back(
      {"unit_roundoff",
       {},
       expr::DType::real,
       "unit roundoff u of the case's arithmetic: 2^-53 for f64 cases, 2^-24 for f32, f16 and bf16 "
       "(a half stores, f32 computes)"});
  infos_.push_back({"store_roundoff",
                    {},
                    expr::DType::real,
                    "unit roundoff of the case's dtype, where outputs are stored: 2^-11 for f16, 2^-8 for "
                    "bf16, unit_roundoff otherwise (a half store's rounding: store_roundoff * abs(y))"});
  for (const auto& o : d.outputs) {
    // An integer or boolean output reads as its kind (fixed: its dtype is declared).
    const expr::DType et = o.dtype ? expr_dtype(*o.dtype) : expr::DType::real;
    infos_.push_back({"target." + o.name, o.shape, et, "output " + o.name + " of the target"});
    infos_.push_back({"reference." + o.name, o.shape, et, "the reference expression in fp64"});
    infos_.push_back(
        {"naive." + o.name, o.shape, et,
         "the reference expression with every intermediate rounded to the output's dtype (f32 for a "
         "half output, then rounded to the half at the store)"});
    infos_.push_back(
        {"floor." + o.name,
         {},
         expr::DType::real,
         "(8 + 2 ceil(log2 n)) × u(dtype) × max|reference." + o.name +
             "|, n the largest dim and at least 2 (8 + 2n for f64 outputs, plus 2u × the reference's own "
             "first-order rounding bound; for f16/bf16 outputs "
             "u = 2^-24 plus u_store × "
             "max|reference." +
             o.name + "| + denorm_min/2); close(k=) adds it"});
    infos_.push_back(
        {"overflow." + o.name,
         {},
         expr::DType::real,
         "the magnitude from which a store of " + o.name +
             " rounding to nearest gives ±inf: 65520 for an f16 output, 2^128 - 2^119 for bf16, inf "
             "otherwise; close(k=) requires ±inf where the reference lies past it by more than the budget"});
  }
  Schema scale, shift;
  for (const auto& in : d.inputs) {
    if (!in.floating()) continue;
    scale.push_back(field::real(in.name, 1.0, -1e300, 1e300, "factor applied to input " + in.name));
    shift.push_back(field::real(in.name, 0.0, -1e300, 1e300, "offset added to input " + in.name));
  }
  transforms_.push_back(
      {"scale",
       "every input times its factor (rounded to its dtype)",
       scale,
       {transform_applies_info("some input's product is not exact in its dtype (rounded, a subnormal's bits "
                               "lost, past the dtype's range)")}});
  transforms_.push_back({"shift",
                         "every input plus its offset (rounded to its dtype)",
                         shift,
                         {transform_applies_info("a finite input would leave its dtype's range")}});
  for (const auto& dim : d.dims) {  // in the order of Traits::transforms()
    // A dim that never exceeds 1 has nothing to permute; one with no valid
    // extent below its largest, nothing to slice (the run's dims: this
    // family's declaration, --domain's included).
    const auto permutable = [dim](const Values&) {
      return dim.largest() >= 2
                 ? std::string()
                 : fmt::format("dim {} to reach 2 (it is at most {}: no permutation moves anything)",
                               dim.name, dim.largest());
    };
    const auto sliceable = [dim](const Values&) {
      for (int64_t v = dim.lo; v < dim.largest(); ++v)
        if (dim.valid(v)) return std::string();
      return fmt::format("dim {} to take a valid extent below its largest, {} (a slice keeps fewer indices)",
                         dim.name, dim.largest());
    };
    transforms_.push_back({"permute_" + dim.name,
                           "a random permutation (never the identity) along every axis named " + dim.name,
                           {},
                           {{"transform.perm", {dim.name}, expr::DType::integer, "the permutation drawn"},
                            transform_applies_info(
                                "the dim is 1 (no permutation moves anything), or a mask permuted is no mask "
                                "of its kind (a causal mask, a padding row no longer a prefix)")},
                           {},
                           permutable});
    transforms_.push_back(
        {"slice_" + dim.name,
         "a random contiguous run of indices along every axis named " + dim.name +
             " (a smaller valid extent; the whole dim when the relations allow none)",
         {},
         {{"transform.index", {dim.name}, expr::DType::integer, "the indices kept, ascending"},
          transform_applies_info("no smaller extent is valid, or the run of a mask or index tensor is none "
                                 "of its kind (a padding row no prefix, an id pointing outside the run)")},
         {dim.name},
         sliceable});
  }
  reference("the declared reference expressions, in fp64", op::reference);
  optimized("naive",
            "the reference expressions with every intermediate rounded to the output's dtype (f32 for a "
            "half output, stored rounded to nearest even)",
            op::naive);
  // The spec's own planted bugs (op.mutants), called as a target is: with the case's dtypes.
  for (const auto& m : decl_->mutants)
    mutant(
        m.name, m.description, [program = m.program](const Case& c) { return program->call(c, false); },
        false, true);
  register_invariants(*this);
  register_external(*this);
}

namespace {

std::vector<DeclaredKey> section_keys() {
  return {
      {"name", "NAME", "the op's name in exec:/plugin: requests (default: the spec's name)"},
      {"dims", "{DIM: [lo, hi] | N | {range: [lo, hi], multiple_of: M, one_of: [N, ...]}}",
       "symbolic extents drawn per case (1 <= lo <= hi <= 2^24); shrinking moves each toward its least valid "
       "value"},
      {"relations", "[\"A OP B\" (OP: <, <=, ==, >=, >), \"A OP M * B + N\", {equal: [A, B], rate: R}, ...]",
       "relations between dims: always hold, or an equality forced in a fraction R of the cases; checked "
       "satisfiable at load; shrinking lowers coupled dims together"},
      {"attrs",
       "{ATTR: X | [lo, hi] | {one_of: [X, ...]} | {range: [lo, hi], near: {values: EXPR, rate: R, distance: "
       "[lo, hi]}}, with int: true for integers}",
       "scalars drawn per case, sent as JSON attrs; references read them by name; one_of of names (e.g. "
       "[gelu, tanh]) is a named choice: targets get the name, references its index (0, 1, ...); near: draws "
       "a "
       "real range in a fraction R of the cases next to an element of EXPR (on the inputs), at a relative "
       "distance in [lo, hi]"},
      {"inputs",
       "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64 | f16 | bf16 | i8 | u8 | i32 | i64 | bool | [..], "
       "values: KIND "
       "| [KIND, "
       "...] | "
       "{KIND: {params}}, specials: RATE | {rate: R, values: [nan, inf, -inf, 0, -0, denormal, max, 254, "
       "...]} | "
       "{rate: R, values: [INT, ...]} (integer inputs)}}",
       "input tensors; the first floating input listing dtypes sets the case's dtype; floating kinds: "
       "normal, "
       "uniform, integer, large, small, constant_rows, denormal; index tensors (i32, i64): ids {below: V}, "
       "permutation {axis}, integer, with specials the sentinels they must treat specially (ignore_index "
       "-100, a padding id -1; kept by remapping and the domain check); masks (bool, sent as u8): causal "
       "{align}, padding {min}, bernoulli {p}"},
      {"outputs",
       "{NAME: {shape: [DIM | N, ...], dtype: f32 | f64 | f16 | bf16 | i8 | u8 | i32 | i64 | bool}}",
       "output tensors the target returns (dtype default: the case's; f16/bf16 store in half, computed in "
       "f32; an integer or bool output's reference gives its values, judged exactly but across a step of "
       "round/floor/ceil or a comparison the case's rounding can cross)"},
      {"summation", "tree | sequential",
       "how the kernel adds long sums in f32: pairwise or in blocks (default), or one running total in an "
       "order of its own (the f32 floor takes n - 1 additions per term)"},
      {"reference", "{OUTPUT: EXPR} | exec:COMMAND | plugin:PATH",
       "one expression per output, evaluated in fp64 on the inputs, dims and attrs (docs/SPEC.md expression "
       "functions); also evaluated with every intermediate rounded to the output's dtype (naive.OUTPUT; f32 "
       "for a half output, then rounded to it); or the user's own eager reference, called with f64 tensors "
       "(reference) and with the case's (naive)"},
      {"mutants",
       "{NAME: exec:COMMAND | plugin:PATH | {target: exec:COMMAND | plugin:PATH, description: TEXT}}",
       "your planted bugs, programs started from the spec's folder and called as a target is: --mutants runs "
       "each and fails unless an invariant kills it; --target NAME runs one; a profile's mutants: list names "
       "those only its cases reach"},
  };
}

[[maybe_unused]] const bool registered = register_declared_family(
    {"op", "op", "a kernel declared in the spec itself",
     [](const YAML::Node& section, const DeclaredFamilyContext& context) -> std::shared_ptr<const Family> {
       return std::make_shared<OpFamily>(parse_decl(section, context));
     },
     section_keys(),
     "dims: {T: [1, 64], D: [1, 512]}\n"
     "attrs: {eps: {one_of: [1.0e-5, 1.0e-6]}}\n"
     "inputs:\n"
     "  x: {shape: [T, D], dtype: [f32, f64], values: [normal, large, constant_rows, integer]}\n"
     "  w: {shape: [D], values: {normal: {mean: 1, std: 0.1}}}\n"
     "outputs:\n"
     "  y: {shape: [T, D]}\n"
     "reference:\n"
     "  y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w\n"});

}  // namespace

}  // namespace kprop::op
