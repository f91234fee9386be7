// The `op` family: a kernel kprop has never heard of, declared in the spec
// (`family: op` + an `op:` section; docs/SPEC.md "Ops declared in the spec").
//
// The declaration (Decl) names symbolic dims with their ranges, attrs,
// input tensors (shape in dims, dtype choices, value kinds), output tensors
// and a reference expression per output, evaluated in fp64 on the inputs.
// A case fixes the dims, attrs and dtypes and holds every input's values;
// a result holds every output's values. Both are row-major doubles holding
// values exact in their dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kprop/errors.h"
#include "kprop/expr.h"
#include "kprop/float_type.h"

namespace kprop::op {

// Floating inputs and outputs are f32 / f64 / f16 / bf16 (sent as KPROP_F32,
// KPROP_F64, KPROP_F16, KPROP_BF16); integer inputs (index tensors,
// quantized values) i8 / u8 / i32 / i64 (sent as KPROP_I8, KPROP_U8,
// KPROP_I32, KPROP_I64); masks `bool` (sent as KPROP_U8, 0 or 1).
//
// Precision of the half dtypes (f16, bf16): storage only, as in real GPU
// kernels. A half tensor holds half values; a kernel loads them, computes in
// f32 and rounds each half output to nearest even at its store. The naive
// baseline does exactly that (naive(): every intermediate rounded to f32,
// the result to the half type) and floor_of() adds the store's rounding.
enum class DType { f32, f64, i32, i64, boolean, f16, bf16, i8, u8 };
inline constexpr DType kLastDType = DType::u8;
const char* dtype_name(DType dtype);
bool is_float(DType dtype);
// The floating type of a floating dtype (kprop/float_type.h); none for the others.
std::optional<FloatType> float_type(DType dtype);
double round_to(DType dtype, double v);  // v as the nearest value of dtype (integers unchanged)
// The integers a non-floating dtype holds here (as doubles, so i64 within
// ±2^53, where every integer is exact): [lo, hi].
inline std::pair<double, double> int_range(DType dtype) {
  if (dtype == DType::boolean) return {0, 1};
  if (dtype == DType::i8) return {-128, 127};
  if (dtype == DType::u8) return {0, 255};
  if (dtype == DType::i32) return {-0x1p31, 0x1p31 - 1};
  return {-0x1p53, 0x1p53};
}
double unit_roundoff(DType dtype);  // 2^-24, 2^-53, 2^-11 (f16), 2^-8 (bf16); 0 for integer dtypes
double min_normal(DType dtype);     // 2^-126, 2^-1022, 2^-14 (f16), 2^-126 (bf16)
double denorm_min(DType dtype);     // 2^-149, 2^-1074, 2^-24 (f16), 2^-133 (bf16)
double max_finite(DType dtype);     // FLT_MAX, DBL_MAX, 65504 (f16), (2 - 2^-7) 2^127 (bf16)
bool is_half(DType dtype);          // f16 or bf16
// The magnitude from which a store rounding to nearest gives ±inf: 65520
// (f16), (2 - 2^-8) 2^127 (bf16); 0 for other dtypes (their kernels compute
// in the dtype itself, so an overflow is the computation's, not the store's).
double store_overflow(DType dtype);
// The precision a kernel computes a `dtype` output in: f32 for the halves
// (storage only), the dtype itself otherwise.
DType arithmetic_dtype(DType dtype);

struct DimDecl {
  std::string name;
  int64_t lo = 1, hi = 1;                              // inclusive
  int64_t multiple_of = 1;                             // every drawn value is a multiple
  std::vector<int64_t> one_of;                         // when set, the only values drawn (within [lo, hi])
  bool valid(int64_t v) const;                         // the generator could draw v
  std::vector<int64_t> values_below(int64_t v) const;  // valid values < v, smallest first
  int64_t smallest() const;                            // the least valid value
  int64_t largest() const;                             // the greatest valid value
};

// A relation between two dims (op.relations): `a OP scale * b + offset`,
// always ("S == K - 1": a conv's state of K - 1 columns; "T2 == 2 * T");
// or, for `{equal: [a, b], rate: r}`, a == b in a fraction r of the cases
// (the generator forces it; a case where a != b is still in the domain).
// With scale >= 1 every such relation is max-closed, as the plain ones are
// (Decl::consistent_domains).
enum class RelOp { lt, le, eq, ge, gt };
struct Relation {
  int a = 0, b = 0;  // dim indices
  RelOp op = RelOp::eq;
  int64_t scale = 1, offset = 0;  // b's side: scale * b + offset
  double rate = 1;                // < 1: a soft equality drawn at this rate
  bool hard() const { return rate >= 1; }
  bool holds(int64_t va, int64_t vb) const;
  std::string text(const std::vector<DimDecl>& dims) const;
};

struct AttrDecl {
  std::string name;
  bool integer = false;        // an integer attr (sent as a JSON integer)
  std::vector<double> one_of;  // choices, or
  double lo = 0, hi = 0;       // a range (when one_of is empty)
  // A named choice ({one_of: [gelu, tanh]}): the case holds the index
  // (one_of = 0, 1, ..., integer), targets get the name, expressions the index.
  std::vector<std::string> labels;
  // `near:` (a real range only): in a fraction near_rate of the cases, after
  // the inputs are drawn, the attr moves next to one element of `near`
  // (evaluated on the case's inputs, dims and the other attrs; one element
  // picked uniformly among those in [lo, hi]), off it by a relative distance
  // drawn log-uniformly in [near_lo, near_hi] on either side: a threshold
  // drawn independently of the data (top-p's p against a row's cumulative
  // masses) is almost never within rounding of a decision the kernel makes.
  std::shared_ptr<const expr::Expression> near;
  double near_rate = 0, near_lo = 0, near_hi = 0;
  Mark near_mark;  // where the spec writes near.values
  bool valid(double v) const;
  // What it allows, for a message: "[0, 1]", "[2, 9], an integer",
  // "one of 1, 2", "one of gelu, tanh".
  std::string values_text() const;
};

// How an input's values are drawn (one kind per input per case):
//   normal {mean, std}   mean + std · N(0, 1)
//   uniform {lo, hi}     U[lo, hi)
//   integer {lo, hi}     integers in [lo, hi]: exact sums, ties
//   large {lo, hi}       N(0, 1) · 10^u, u in [lo, hi] once per case (overflow of x², cancellation);
//                        for f16/bf16, 10^u at most a quarter of the max finite value
// (Half dtypes: every drawn value clamped to the finite range, so none is
// infinite by rounding; inf only as a declared special.)
//   small {lo, hi}       N(0, 1) · 10^-u, u in [lo, hi] (underflow, f32 denormals)
//   constant_rows        each row along the last axis constant (zero variance)
// The kinds are the generator's distribution, not a constraint on a case:
// shrinking moves values toward 0, 1 and short decimals regardless.
//   denormal {}          subnormals of the input's dtype (f16: k · 2^-24, bf16: k · 2^-133), random sign
// Integer tensors (dtype i8 / u8 / i32 / i64; every value within the dtype):
//   ids {below: V}       integers in [0, V), V a dim or a positive number
//   permutation {axis}   each line along `axis` (default -1) a permutation of [0, n)
// Masks (dtype bool):
//   causal {align}       the last two axes [rows, cols]: col <= row (top_left) or
//                        col <= row + cols - rows (bottom_right)
//   padding {min}        per row (along the last axis) a valid prefix of length in [min, n]
//   bernoulli {p}        each element true with probability p
enum class ValueKind {
  normal,
  uniform,
  integer,
  large,
  small,
  constant_rows,
  denormal,
  ids,
  permutation,
  causal,
  padding,
  bernoulli
};
const char* value_kind_name(ValueKind kind);
struct ValueSpec {
  ValueKind kind = ValueKind::normal;
  double a = 0, b = 1;        // normal: mean, std; uniform, integer, large, small: lo, hi;
                              // ids: a = the bound when a number; padding: a = min; bernoulli: a = p
  int bound_dim = -1;         // ids: the dim that bounds them (or -1: the number a)
  int axis = -1;              // permutation: the axis (normalized to >= 0 by the parser)
  bool bottom_right = false;  // causal
};

// Special values injected into an input (`specials:`): in a case where they
// are on (half the cases), each element becomes one of the listed values
// (picked uniformly) with probability `rate`.
// Floating inputs list `values` (default: every one before `max`):
// `max`: the largest finite magnitude of the dtype (65504 for f16), random
// sign; `max` and `neg_nan` only when listed.
// Integer inputs (i8, u8, i32, i64; not a permutation) list `sentinels`:
// integers no kind of the input draws (cross-entropy's ignore_index -100, a
// padding id -1), each within every dtype of the input. A sentinel is no
// ordinary value: the domain check accepts it in an `ids` or `integer`
// tensor, and case surgery (keep_indices: permute_DIM, slice_DIM,
// shrinking a dim) leaves it as it is where it remaps ids.
enum class Special { nan, pos_inf, neg_inf, pos_zero, neg_zero, denormal, max, neg_nan };
struct Specials {
  double rate = 0;  // 0: none
  std::vector<Special> values;
  std::vector<double> sentinels;  // integer inputs
  // Floating inputs: finite values listed beside the named ones (254, where
  // scale 2 puts a quantizer's input on a rounding tie), exact in every
  // dtype of the input; drawn as the named ones are, picked among both.
  std::vector<double> finite;
  bool sentinel(double v) const {
    return std::find(sentinels.begin(), sentinels.end(), v) != sentinels.end();
  }
};

struct InputDecl {
  std::string name;
  std::vector<std::string> shape;  // dim names or integers
  std::vector<DType> dtypes;       // empty: the case's dtype (that of the first input listing dtypes)
  std::vector<ValueSpec> values;
  Specials specials;
  bool floating() const { return dtypes.empty() || is_float(dtypes[0]); }
};

struct Case;
struct Result;
// A reference in the user's own eager code (op.reference: exec:COMMAND or
// plugin:PATH): called with every floating tensor in f64 for reference.Y
// (the oracle) and in the case's dtypes for naive.Y (the same-precision
// baseline). The transport behind it lives in properties/op/external.cpp;
// this layer sees only the call.
struct ExternalReference {
  virtual ~ExternalReference() = default;
  virtual Result call(const Case& c, bool fp64) const = 0;
  // How a run names it (its header, the report's "reference"): the target
  // that runs it from where the run started, as --reference takes it ("":
  // none to name).
  virtual std::string name() const { return ""; }
};

struct OutputDecl {
  std::string name;
  std::vector<std::string> shape;
  std::optional<DType> dtype;                         // none: the case's dtype
  std::shared_ptr<const expr::Expression> reference;  // fp64, on inputs, dims and attrs (none: external)
  Mark reference_mark;                                // where the spec writes it
};

struct Decl {
  std::string name;  // the op's name in requests (op.name, default the spec's name)
  // op.summation: how the kernel adds a long sum up in f32 (floor_of). tree
  // (the default): pairwise or in short blocks, as tree reductions, BLAS
  // and NumPy do; each term passes through about ⌈log2 n⌉ additions.
  // sequential: one running total in an order of its own (a CPU loop over
  // another axis, backwards, or a GPU thread adding a long strided slice
  // before a warp's tree), up to n - 1 additions per term: a floor n/log2 n
  // wider.
  bool sequential_sums = false;
  std::vector<DimDecl> dims;
  std::vector<Relation> relations;
  std::vector<AttrDecl> attrs;
  std::vector<InputDecl> inputs;
  std::vector<OutputDecl> outputs;
  std::vector<DType> case_dtypes;     // of the first input listing dtypes (default [f32, f64])
  expr::TensorInfos reference_infos;  // what reference expressions may read
  std::shared_ptr<const ExternalReference> external_reference;  // set: it replaces the expressions
  // op.mutants: the user's planted bugs, programs of their own (each called
  // with the case's dtypes, as a target), registered as the op's mutants.
  struct Mutant {
    std::string name, description;
    std::shared_ptr<const ExternalReference> program;
  };
  std::vector<Mutant> mutants;
  // The spec's own declaration, when a profile's domain: or --domain
  // replaced dtypes or dims here (which cases are drawn, not which are
  // valid: a stored case of a dtype the spec declares replays under a
  // narrower domain). Null when this is it.
  std::shared_ptr<const Decl> declared;

  int dim_index(const std::string& name) const;  // -1 when absent
  // An input listing the case's dtype choices, in any order, takes the
  // case's dtype (the order of a list is no other choice).
  bool takes_case_dtype(const std::vector<DType>& dtypes) const {
    return dtypes.empty() ||
           std::is_permutation(dtypes.begin(), dtypes.end(), case_dtypes.begin(), case_dtypes.end());
  }
  // The dims' valid values under the hard relations and `extra` (forced
  // equalities), pruned to arc consistency: every value left extends to an
  // assignment satisfying all of them (inequalities and equalities are
  // max-closed; but see extends() for gaps). Fixed dims
  // (`fixed[k] >= 0`) have that one value. Empty domains: unsatisfiable.
  // An assignment of every dim satisfying the hard relations and `extra`
  // extends `fixed` (-1: free). Arc consistency is not enough where valid
  // values have gaps (multiple_of, one_of: a value can survive pruning and
  // still wipe a domain out once fixed), so this searches, depth first over
  // the pruned domains, smallest values first.
  bool extends(std::vector<int64_t> fixed, const std::vector<Relation>& extra) const;
  std::vector<std::vector<int64_t>> consistent_domains(const std::vector<int64_t>& fixed,
                                                       const std::vector<Relation>& extra = {}) const;
  std::string relations_violated(const std::vector<int64_t>& dims) const;  // "" when all hard ones hold
  // A shape's extents on a case's dims (numbers stay numbers).
  std::vector<int64_t> extents(const std::vector<std::string>& shape, const std::vector<int64_t>& dims) const;
};

struct Case {
  std::shared_ptr<const Decl> decl;
  std::vector<int64_t> dims;  // per decl.dims
  std::vector<double> attrs;  // per decl.attrs
  DType dtype = DType::f32;   // the case's dtype
  std::vector<DType> dtypes;  // per decl.inputs
  // per decl.inputs: the index in its `values` of the kind an index tensor
  // or a mask was drawn from (what in_domain checks it against); -1 for
  // floating inputs, whose kinds shape the distribution only.
  std::vector<int> kinds;
  std::vector<std::vector<double>> inputs;  // per decl.inputs, row-major, exact in its dtype

  DType output_dtype(size_t output) const;
  bool operator==(const Case& o) const {
    return dims == o.dims && attrs == o.attrs && dtype == o.dtype && dtypes == o.dtypes && kinds == o.kinds &&
           inputs == o.inputs;
  }
};

struct Result {
  std::vector<std::vector<double>> outputs;  // per decl.outputs, row-major
};

// How the expressions see a tensor of `dtype`: real, integer or boolean.
expr::DType expr_dtype(DType dtype);
// The inputs, dims and attrs of a case as named tensors (what the reference
// expressions read). `round`: inputs and attrs rounded for the naive baseline.
void put_inputs(const Case& c, expr::TensorMap& out, bool rounded);
// A map holding just those (every one wanted).
expr::TensorMap inputs_map(const Case& c, bool rounded);
// The reference: each output's expression in fp64, rounded to nothing (or
// the external reference, called in f64).
Result reference(const Case& c);
// The same-precision baseline: each expression evaluated with every real
// intermediate rounded to the output's arithmetic dtype (f32 for a half
// output, as a GPU kernel computes), the result rounded to the output's
// dtype (round-to-nearest-even at the store); or the external reference,
// called in the case's dtypes.
Result naive(const Case& c);
// The same evaluation before the store: a half output's value in f32, not
// yet rounded to its type (expressions only; rounded_to_nearest).
Result naive_before_store(const Case& c);

// The absolute floor of the dtype-aware tolerance for output `output`:
//   floor.Y = (8 + 2 · ceil(log2 n)) · u(dtype of Y) · max|reference.Y|,
// n the largest dim extent of the case, at least 2 (one step of a two-term
// sum, which a reordering kernel may take). A correct kernel that orders its
// rounding steps differently from the naive one differs from it even where
// the naive computation happens to be exact (D = 1, integer or repeated
// values, which shrinking seeks out): a few ulps per element for reordered
// elementwise steps (rsqrt then multiply, fused multiply-add: 8), and for a
// reduction of n terms summed pairwise or in blocks (NumPy, PyTorch, CUB),
// up to ~log2(n) ulps of the sum, doubled for its propagation through
// divisions and roots. Found necessary: NumPy's pairwise mean of 72 f64
// squares against an exact naive sum differed by 8.5 ulps of y. For f64
// outputs the fp64 reference is no more precise than the target (naive ==
// reference), so its own sequential-sum error counts: 2 · n instead of
// 2 · ceil(log2 n) (NumPy's pairwise f64 mean of 60 squares: 24 ulps).
//
// Half outputs (f16, bf16; storage only, f32 arithmetic): a real kernel's
// value before its store, t32, differs from the reference as an f32 output
// may (the term above with f32's u = 2^-24: the arithmetic is f32's whatever
// the storage); the store rounds t32 to nearest in the half type, which adds
// at most u_store · |t32| for a normal result (u_store = 2^-11 for f16, 2^-8
// for bf16) and at most half the smallest subnormal below the normal range.
// The naive error (k · max|naive - reference|) usually covers the store
// already, but not where the naive value happens to be exact while the
// target's t32, a few f32 ulps away, rounds to the neighbouring half value
// (integer inputs, D = 1: what shrinking seeks). With |t32| <= m (1 + a few
// f32 ulps, which the f32 term's constant 8 absorbs):
//   floor.Y = (8 + 2 ceil(log2 n)) · 2^-24 · m + u_store · m + denorm_min(Y) / 2,
// m = max|reference.Y|.
// f64 outputs add 2 · 2^-53 · max B, B the first-order bound of the fp64
// reference's own rounding per element (running error analysis:
// expr::Expression::rounding_bound, its rules in src/expr_eval.cpp): where
// the output cancels (a loss lse - 0.7·x - 0.3·x of one logit), m is ~0 but
// the reference and a correct kernel each err by up to u·B, B ~ the terms.
// f32 arithmetic (f32 and half outputs): the f32 term is at least
// 2 · 2^-24 · max B_tree, B_tree the same bound with every sum added as a
// pairwise tree (Summation::tree): where the output cancels, a naive
// in-order sum can be exact by luck while a correct kernel's tree sum errs
// by u · B_tree (derivation in kernels/op/reference.cpp).
// `rounding_bound` false: without the B terms (for a first, cheaper check:
// they only raise the floor). `sequential`: the floor under that
// op.summation (what declaring it would allow), not the declaration's.
double floor_of(const Case& c, size_t output, const std::vector<double>& reference,
                bool rounding_bound = true, std::optional<bool> sequential = std::nullopt);

// Integer and boolean outputs (dtype i8, u8, i32, i64, bool). The reference
// expression gives values of the dtype (integers within its range, 0 or 1);
// any other value is the spec's error, at the expression. The naive baseline
// computes in the case's arithmetic (f32 for f32 and half cases) and stores
// to nearest. A correct kernel's value is exact but where the case's
// rounding can carry a value across a step: round/floor/ceil of an operand
// within twice its rounding bound of a step, a comparison of operands within
// twice theirs of each other (expr::Expression::rounding_bound with steps,
// src/expr_eval.cpp). Per element, the most it may differ from the reference:
//   E = max(u · B_steps, |naive - reference|),
// u the case's arithmetic unit roundoff (B inf: the element is not judged;
// an external reference has no B: its own run in the case's dtypes alone).
std::vector<double> discrete_bound(const Case& c, size_t output, const std::vector<double>& reference,
                                   const std::vector<double>& naive);

}  // namespace kprop::op
