// Invariants written in the spec: expressions over a family's named tensors.
//
//   close(rowsum(reference.p * reference.dp), rowsum(d_out * reference.o), rtol=1e-9)
//
// A small NumPy-like language (docs/SPEC.md, "Invariants as expressions"):
// numbers, named tensors, elementwise arithmetic and comparisons with NumPy
// broadcasting, and/or/not, reductions along an axis, indexing and gather,
// matmul and close(). Expressions are parsed and checked once, when the spec
// loads (names, arity, axes, dtypes and shapes in the family's symbolic
// dims), then evaluated in double precision on each case.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kprop/once.h"

// kprop/float_type.h (internal: not installed with this header).
namespace kprop {
enum class FloatType;
}

namespace kprop::expr {

// What a tensor holds; every value is stored as a double.
enum class DType { boolean, integer, real };
const char* dtype_name(DType dtype);

// A dense row-major tensor; rank 0 is a scalar (one element).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  DType dtype = DType::real;

  size_t size() const { return data.size(); }
  int rank() const { return static_cast<int>(shape.size()); }
  static Tensor scalar(double value, DType dtype = DType::real);
  // Throws std::logic_error when data.size() is not the product of shape.
  static Tensor of(std::vector<int64_t> shape, std::vector<double> data, DType dtype = DType::real);
  // Integer and boolean tensors from the containers families use.
  template <typename Int>
  static Tensor ints(std::vector<int64_t> shape, const std::vector<Int>& values,
                     DType dtype = DType::integer) {
    return of(std::move(shape), std::vector<double>(values.begin(), values.end()), dtype);
  }
};

// One tensor a family publishes: its name, its shape in the family's
// symbolic dims ("B", "Nq", or a number), dtype and a one-line meaning.
struct TensorInfo {
  std::string name;
  std::vector<std::string> shape;
  DType dtype = DType::real;
  std::string meaning;
  // A named choice (an op's attr {one_of: [gelu, tanh]}): the names, in
  // the order of the indices the tensor holds (an unknown name that is one
  // of them says to compare the index).
  std::vector<std::string> labels = {};
  // A spec's `let:` name: the expression it stands for. compile() puts the
  // expression's tree in place of every use of the name (one tree, computed
  // once per evaluation however often it is used); shape and dtype are
  // then the expression's own, not the fields above.
  std::string definition = {};
};
using TensorInfos = std::vector<TensorInfo>;
// A family's tensors as a table, one tensor a line, in the columns
// `prop_runner --list` prints them in:
//   NAME  [DIM, ...]  TYPE  MEANING
// TYPE is bool, int or real; a line that starts with a blank continues the
// meaning of the tensor above it; blank lines are skipped. A malformed table
// is a bug in the family: std::logic_error naming the line.
TensorInfos tensor_table(std::string_view table);
// The outputs each implementation reports are declared once and published
// per implementation as "<who>.<name>" (target.y, reference.y, naive.y):
// for each of `whose` in turn, one row per output, its meaning after
// `prefix` ("the target's ").
struct Whose {
  std::string who, prefix;
};
void add_per_implementation(TensorInfos& t, const std::vector<Whose>& whose, const TensorInfos& outputs);
// "[B, Hq, Nq, D]"
std::string shape_text(const std::vector<std::string>& shape);
std::string shape_text(const std::vector<int64_t>& shape);

// close(k=)'s budget and masks read the family's own reference, as the
// built-in invariants do (Trial::own_reference), whatever the run's oracle:
// "own:reference.X" (a name no spec can write) is reference.X of the
// family's own reference; it is the same tensor unless the run has another
// oracle (--reference, Python's reference=).
inline const std::string kOwnPrefix = "own:";

// The tensors of one trial by name. An evaluator asks for the names it reads
// (want); the family's hook computes only those still wanted (wanted) and
// hands them over (put). Entries stay, so several invariants of one trial
// share them.
class TensorMap {
 public:
  void want(const std::string& name) {
    if (!tensors_.count(name) && !bounded_.count(name)) wanted_.insert(name);
  }
  bool wanted(const std::string& name) const { return wanted_.count(name) != 0; }
  // Is some wanted name "prefix..."? (e.g. "target." before running the target)
  bool wants_prefix(const std::string& prefix) const;
  // Keeps `t` when wanted, and any scalar (cheap to keep): a family that
  // computes a group of scalars at once (error scales, floors) then serves
  // the trial's later invariants without computing the group again.
  void put(const std::string& name, Tensor t) {
    if (!wanted(name) && (t.size() > 1 || tensors_.count(name))) return;
    wanted_.erase(name);
    tensors_[name] = std::move(t);
  }
  // An implementation's output `data` as tensor `name` of `shape`, when
  // wanted and of the shape's size: an external kernel's output of the
  // wrong size stays unpublished, so the evaluation names it and the
  // invariant reading it fails.
  void put_output(const std::string& name, std::vector<int64_t> shape, const std::vector<double>& data,
                  DType dtype = DType::real);
  // A tensor whose value costs much more than a lower bound on it that
  // settles most of its uses: close(k=)'s budget reads floor.X's lower bound
  // first (find_lower_bound), where a larger floor can only turn an element's
  // failure into a pass, and the full value only when an element fails under
  // it. `full` (every element >= `lower`'s) is computed once, the first time
  // the name is read with find(): every other reader sees the full value.
  // It runs when the map is read, so what it refers to must live as long as
  // the map (a trial's case and results, for the trial's map).
  void put_with_lower_bound(const std::string& name, Tensor lower, std::function<Tensor()> full);
  // Its own tensors first, then the links in the order they were made.
  const Tensor* find(const std::string& name) const;
  // find(), except that a name put_with_lower_bound() gave whose full value
  // is not computed yet gives its lower bound, and sets *lower.
  const Tensor* find_lower_bound(const std::string& name, bool* lower) const;
  const std::set<std::string>& missing() const { return wanted_; }
  // The trial's values derived once from its case (Trial::once), when the
  // map belongs to a trial: a family's tensors() hook reads a baseline a
  // native invariant computed, and the other way round. Null otherwise.
  OnceStore* once_store() const { return once_; }
  void set_once_store(OnceStore* s) { once_ = s; }

  // A view over other maps: a name starting with `prefix` is looked up in
  // `other`, without the prefix when `strip`. How a metamorphic invariant
  // reads the trial's tensors and "transformed.*" ones of the derived case
  // in one expression without copying either.
  void link(std::string prefix, const TensorMap* other, bool strip) {
    links_.push_back({std::move(prefix), other, strip});
  }

 private:
  struct Link {
    std::string prefix;
    const TensorMap* other;
    bool strip;
  };
  // A name put_with_lower_bound() gave: its lower bound, kept once the full
  // value is computed (in tensors_: an evaluation may still hold the lower).
  struct Bounded {
    Tensor lower;
    std::function<Tensor()> full;
  };
  const Tensor* lookup(const std::string& name, bool* lower) const;
  std::set<std::string> wanted_;
  // mutable: find() computes a bounded name's full value on first read.
  mutable std::map<std::string, Tensor> tensors_;
  mutable std::map<std::string, Bounded> bounded_;
  OnceStore* once_ = nullptr;
  std::vector<Link> links_;
};

// A load-time error: `offset` is a byte position in the expression's text.
class ExprError : public std::runtime_error {
 public:
  ExprError(size_t offset, const std::string& message) : std::runtime_error(message), offset(offset) {}
  size_t offset;
};

// An evaluation that cannot complete on this case (an index out of range,
// shapes that do not broadcast: the load-time check knows dims only by
// name). The expression's own error (exit 2) when it reads no output of the
// target, else possibly the target's (an index it returned out of range,
// an output whose length is the target's answer).
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Shapes that do not broadcast, or a matmul's inner dims that differ: the
// spec's error when every shape the evaluation started from is the spec's
// (Expression::target_shapes_as_declared), else possibly the target's.
class ShapeError : public EvalError {
 public:
  using EvalError::EvalError;
};
// An index past an axis whose length is the spec's own dim (the indexed
// tensor has that length on this case) computed from no output of the
// target: the spec's error (exit 2), even where the expression reads the
// target elsewhere.
class SpecEvalError : public EvalError {
 public:
  using EvalError::EvalError;
};
// An index computed from no output of the target past an axis whose
// length is not the spec's own dim (an intermediate's: diff(target.y)[:, 0]
// at D = 1, target.y[:, 1:][:, 0]): the spec's error when every shape the
// evaluation started from is the spec's (as for a ShapeError), else
// possibly the target's.
class IndexError : public EvalError {
 public:
  using EvalError::EvalError;
};
// A close(k=) whose k is negative or not finite on this case: always the
// spec's error, never the target's counterexample.
class ToleranceError : public EvalError {
 public:
  using EvalError::EvalError;
};
// close(k=) on a case where no element can be judged: the same-precision
// baseline is not finite wherever the reference is (an intermediate
// overflows the dtype), so the policy has no budget. The case is discarded,
// as matches_reference discards it.
class NothingJudged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Node;

// How an expression's sums (sum, mean, rowsum, matmul) are added up, for
// Expression::rounding_bound.
enum class Summation { in_order, tree };

class Expression {
 public:
  // Parses `text` and checks it against `tensors`; throws ExprError.
  static Expression compile(const std::string& text, const TensorInfos& tensors);

  const std::string& text() const { return text_; }
  // The text on one line, for messages (a YAML block scalar keeps its line
  // breaks, which broke a one-line error or verdict in two).
  std::string shown() const;
  DType dtype() const;
  std::string shape() const;                                        // symbolic, e.g. "[B, Hq, Nq]"
  const std::vector<std::string>& names() const { return names_; }  // tensors it reads, sorted
  // Whether each element of the value provably depends on the tensors it
  // reads only at its own index along every axis named `dim` (a static
  // analysis: elementwise operations, reductions, scans and contractions
  // over other axes keep it; a reduction or contraction over `dim`, two
  // axes named `dim` that meet, indexing by or into a tensor with the axis,
  // or `dim`'s extent read as a value does not, nor does anything it cannot
  // tell). A slice of the inputs along `dim` then gives the same slice of
  // the value.
  bool independent_along(const std::string& dim) const;
  // Whether it adds terms up anywhere (sum, mean, rowsum, cumsum, matmul, @).
  bool has_sum() const;
  // The most terms one of those sums adds on these tensors (a sum's or
  // mean's reduced extent, a cumsum's axis, a matmul's inner dim); 0 where
  // it adds nothing. Every element of a sum's value adds as many.
  int64_t longest_sum(const TensorMap& tensors) const;
  // The most elements an evaluation's intermediates hold at once (expr.cpp
  // says which are kept), each symbolic dim given by `extent` (a number is
  // itself; a slice's extent "?" counts 1), in double (they may pass int64):
  // the load-time memory estimate of a declared op's reference and of an
  // expression invariant, which an outer product x[:, None] * x[None, :]
  // takes far past the inputs and outputs.
  double peak_elements(const std::function<double(const std::string&)>& extent) const;
  // The elements of each tensor it reads (names()), by the same `extent`:
  // a trial's map materializes them when an invariant first reads them and
  // keeps them to the trial's end.
  std::map<std::string, double> name_elements(const std::function<double(const std::string&)>& extent) const;

  // The value on one trial's tensors (every name in names() present).
  Tensor evaluate(const TensorMap& tensors) const;
  // The value as a naive kernel computes it in a lower precision: every
  // real intermediate (each elementwise result, each step of a sequential
  // sum, mean or matmul accumulation, in index order) is rounded by `round`
  // (e.g. to float). Booleans and integers are not rounded. The declared op
  // family's same-precision baseline (naive.Y).
  Tensor evaluate_rounded(const TensorMap& tensors, double (*round)(double)) const;
  // The same in a floating type's arithmetic (f64: evaluate()). f32's
  // rounding is inlined in the loops, not called per element: the naive
  // baseline of a declared op was a third of its checking time.
  Tensor evaluate_rounded(const TensorMap& tensors, FloatType type) const;
  // B per element of the value: an evaluation in a precision of unit
  // roundoff `unit` (2^-53: the fp64 evaluation above) errs by at most
  // unit · B (to first order; running error analysis, derived in
  // src/expr_eval.cpp). B depends on `unit` only where a root meets an
  // operand at 0 (sqrt(a), a ** b with 0 < b < 1, whose error there is
  // (unit · Ba)^b, no first-order term). inf where no bound exists (a
  // division by 0). `sums`: in_order is evaluate's own order (a term of an
  // n-term sum passes through up to n - 1 additions); tree, a pairwise
  // reduction of depth ⌈log2 n⌉ (a blocked or parallel kernel's).
  // Step functions (floor, ceil, round) of an operand that errs at all have
  // no first-order bound: inf there. `steps`: instead, how far the value may
  // jump: a step function or a comparison moves by the steps that lie
  // within twice its operands' bounds (0 where none does), and the value of
  // a boolean or integer expression is bounded too (what an integer or
  // boolean output of a declared op may differ by; src/expr_eval.cpp).
  // `reassociated`: an addition or subtraction rounds relative to its
  // operands, u·(|a| + |b|), not its result: the bound of any order of the
  // same additions (a kernel's x - (m + log s) where the expression says
  // (x - m) - log s: m + log s rounds at |m| where the expression's order
  // rounds nothing that large).
  Tensor rounding_bound(const TensorMap& tensors, Summation sums = Summation::in_order, double unit = 0x1p-53,
                        bool steps = false, bool reassociated = false) const;

  // A boolean expression holds when every element is true. When it does not,
  // `message` explains the worst element: its index, the values on both
  // sides of the comparison or close() there, and the tolerance.
  struct Outcome {
    bool holds = true;
    std::string message;
    std::vector<std::pair<std::string, double>> measured;
  };
  Outcome check(const TensorMap& tensors) const;
  // Whether every output of the target read here has its declared shape on
  // this case (each dim of the declaration a number, or a dim `tensors`
  // holds as a scalar: transformed.X's the derived case's) and no slice
  // bound reads the target: then no shape the evaluation meets is the
  // target's doing (a ShapeError is the spec's). False where a declared dim
  // is the target's answer (dflash's accepted tokens) or unknown.
  bool target_shapes_as_declared(const TensorMap& tensors) const;

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
  std::vector<std::string> names_;
  // A where() or an and/or may decide the value without the target on a
  // case: check() asks which elements the target decided whenever it holds
  // (otherwise only where a reduction's axis was empty).
  bool selective_ = false;
};

// `text` with each run of white space that holds a line break as one space.
std::string one_line(std::string_view text);

// A tensor name that reads an output of the target: "target.*", or a
// transformed case's "transformed.target.*". What breaks an expression that
// reads none is the spec's error; with one, it may be the kernel's.
bool is_target_name(std::string_view name);

// The functions the language knows, one line each (docs and --list).
std::string describe_functions();
// The same as (name, one-line doc) pairs (prop_runner --list --format json).
std::vector<std::pair<std::string, std::string>> function_docs();

}  // namespace kprop::expr
