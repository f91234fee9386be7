// The expression language's evaluator (kprop/expr.h): NumPy-style
// broadcasting over a case's named tensors, the reductions, gathers and
// close(), and the explanation of a failing invariant. The parser and the
// static checks are in expr.cpp; the tree both use is in expr_ast.h.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "expr_ast.h"
#include "kprop/errors.h"
#include "kprop/float_type.h"
#include "kprop/tolerance.h"

namespace kprop::expr {
namespace {

// ---------------------------------------------------------------- evaluation
using Dims = std::vector<int64_t>;

int64_t count(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

Dims broadcast_rt(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt::format("shapes {} and {} do not broadcast", shape_text(a), shape_text(b)));
    out[r - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

// A value during evaluation: a published tensor borrowed from the map (no
// copy), or a computed one owned here (moved in: no allocation of its own).
class Ref {
 public:
  Ref(Tensor t) : own_(std::move(t)) {}
  static Ref borrow(const Tensor& t) { return Ref(&t); }
  const Tensor& operator*() const { return borrowed_ ? *borrowed_ : own_; }
  const Tensor* operator->() const { return &**this; }

 private:
  explicit Ref(const Tensor* t) : borrowed_(t) {}
  Tensor own_;
  const Tensor* borrowed_ = nullptr;
};

// The strides that read a tensor of shape `from` broadcast to `to` (NumPy
// rules, already checked: a size-1 or missing axis has stride 0).
Dims broadcast_strides(const Dims& from, const Dims& to) {
  Dims stride(to.size(), 0);
  int64_t s = 1;
  for (size_t i = 0; i < from.size(); ++i) {
    const size_t k = from.size() - 1 - i, o = to.size() - 1 - i;
    stride[o] = from[k] == 1 ? 0 : s;
    s *= from[k];
  }
  return stride;
}

// Calls f(row, ia, ib) for every run along the last axis of `shape` in
// row-major order, with ia and ib the offsets of its first element in two
// tensors read with strides sa and sb (a scalar shape: one run of one
// element, strides 0), until f returns false: the broadcast of two operands
// without materialising either one.
template <typename F>
void walk_rows(const Dims& shape, const Dims& sa, const Dims& sb, F f) {
  const int64_t total = count(shape);
  if (total == 0) return;
  const size_t r = shape.size();
  if (r == 0) {
    f(0, 0, 0);
    return;
  }
  Dims idx(r, 0);
  int64_t ia = 0, ib = 0;
  for (int64_t row = 0, rows = total / shape[r - 1]; row < rows; ++row) {
    if (!f(row, ia, ib)) return;
    for (size_t k = r - 1; k-- > 0;) {
      ia += sa[k], ib += sb[k];
      if (++idx[k] < shape[k]) break;
      ia -= sa[k] * shape[k], ib -= sb[k] * shape[k];
      idx[k] = 0;
    }
  }
}

// Calls f(n, ia, ib) for every element n of `shape` in row-major order, with
// ia and ib its offsets in the two tensors (walk_rows; the last axis runs as
// a plain loop).
template <typename F>
void walk_broadcast(const Dims& shape, const Dims& sa, const Dims& sb, F f) {
  const size_t r = shape.size();
  const int64_t inner = r ? shape[r - 1] : 1, ja = r ? sa[r - 1] : 0, jb = r ? sb[r - 1] : 0;
  walk_rows(shape, sa, sb, [&](int64_t row, int64_t ia, int64_t ib) {
    for (int64_t j = 0; j < inner; ++j) f(row * inner + j, ia + j * ja, ib + j * jb);
    return true;
  });
}

// `t` broadcast to `shape` (callers skip it when the shape is already right).
Tensor expand(const Tensor& t, const Dims& shape) {
  if (t.shape == shape) return t;
  Tensor out{shape, std::vector<double>(static_cast<size_t>(count(shape))), t.dtype};
  if (t.size() == 1) {
    std::fill(out.data.begin(), out.data.end(), t.data[0]);
    return out;
  }
  const Dims stride = broadcast_strides(t.shape, shape);
  walk_broadcast(shape, stride, stride, [&](int64_t n, int64_t src, int64_t) {
    out.data[static_cast<size_t>(n)] = t.data[static_cast<size_t>(src)];
  });
  return out;
}

// Expression::evaluate_rounded: the rounding applied to real intermediates
// (nullptr: none, plain fp64).
thread_local double (*t_round)(double) = nullptr;
// t_round is f32's rounding, done inline (a call per element cost as much
// as the arithmetic it rounds).
thread_local bool t_round_f32 = false;
inline double to_f32(double v) {
  return static_cast<double>(static_cast<float>(v));
}
inline void round_real(Tensor& t) {
  if (t_round_f32 && t.dtype == DType::real)
    for (double& v : t.data) v = to_f32(v);
  else if (t_round && t.dtype == DType::real)
    for (double& v : t.data) v = t_round(v);
  // An integer has no signed zero (NumPy's int64): -(N - N) is 0, so that
  // 1 / -(N - N) is inf, not -inf.
  if (t.dtype == DType::integer)
    for (double& v : t.data) v += 0.0;
}
inline double round_acc(double v) {
  return t_round_f32 ? to_f32(v) : t_round ? t_round(v) : v;
}

template <typename F>
Tensor zip(const Tensor& a, const Tensor& b, DType dtype, F f) {
  const Dims shape = broadcast_rt(a.shape, b.shape);
  Tensor out{shape, std::vector<double>(static_cast<size_t>(count(shape))), dtype};
  const size_t n = out.data.size();
  double* o = out.data.data();
  if (a.shape == shape && b.shape == shape) {
    for (size_t i = 0; i < n; ++i) o[i] = f(a.data[i], b.data[i]);
  } else if (a.shape == shape && b.size() == 1) {
    const double y = b.data[0];
    for (size_t i = 0; i < n; ++i) o[i] = f(a.data[i], y);
  } else if (b.shape == shape && a.size() == 1) {
    const double x = a.data[0];
    for (size_t i = 0; i < n; ++i) o[i] = f(x, b.data[i]);
  } else {
    const double *x = a.data.data(), *y = b.data.data();
    walk_broadcast(shape, broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape),
                   [&](int64_t i, int64_t ia, int64_t ib) { o[i] = f(x[ia], y[ib]); });
  }
  round_real(out);
  return out;
}

template <typename F>
Tensor map(const Tensor& a, DType dtype, F f) {
  Tensor out{a.shape, std::vector<double>(a.size()), dtype};
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = f(a.data[i]);
  round_real(out);
  return out;
}

// NumPy's maximum and minimum: NaN propagates, and of two equal values the
// second is returned (np.maximum(-0.0, 0.0) is 0.0, np.maximum(0.0, -0.0) is
// -0.0, which a later 1 / x tells apart); max and min fold with them, as
// np.maximum.reduce does.
double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b);
}
double nan_min(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b);
}

// NumPy's isclose with equal_nan: equal values are close whatever the
// tolerance (a NaN one included); NaN matches NaN, an infinity only itself.
bool is_close(double a, double b, double rtol, double atol) {
  if (a == b) return true;
  if (std::isfinite(a) && std::isfinite(b)) return within(a, b, atol, rtol);
  return std::isnan(a) && std::isnan(b);
}

// The expression reads an output of the target (its own or a transformed case's).
bool reads_target(const Node& n) {
  return n.reads_target;  // set by Expression::compile
}

// Expression::target_shapes_as_declared below the node.
bool target_shapes_as_declared(const Node& n, const TensorMap& m) {
  if (n.kind == Kind::name && is_target_name(n.op)) {
    const Tensor* t = m.find(n.op);
    if (!t || t->shape.size() != n.shape.size()) return false;
    // A transformed case's tensor has that case's dims.
    const std::string prefix = n.op.rfind("transformed.", 0) == 0 ? "transformed." : "";
    for (size_t a = 0; a < n.shape.size(); ++a) {
      const std::string& dim = n.shape[a];
      double extent = 0;
      if (!dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]))) {
        extent = std::stod(dim);
      } else {
        // (A dim the transform changes is named transformed.DIM already.)
        const Tensor* d = m.find(dim.rfind("transformed.", 0) == 0 ? dim : prefix + dim);
        if (!d || d->size() != 1) return false;  // "?", or a dim the target decides
        extent = d->data[0];
      }
      if (static_cast<double>(t->shape[a]) != extent) return false;
    }
  }
  for (const NodeP& a : n.args)
    if (!target_shapes_as_declared(*a, m)) return false;
  for (const Item& it : n.items) {
    for (const NodeP& p : {it.lo, it.hi})
      if (p && reads_target(*p)) return false;
    for (const NodeP& p : {it.e, it.lo, it.hi})
      if (p && !target_shapes_as_declared(*p, m)) return false;
  }
  for (const NodeP& p : {n.rtol, n.atol, n.k, n.unjudged})
    if (p && !target_shapes_as_declared(*p, m)) return false;
  return true;
}

struct Split {
  int64_t outer, n, inner;
};
Split split(const Dims& shape, int axis) {
  Split s{1, shape[static_cast<size_t>(axis)], 1};
  for (int k = 0; k < axis; ++k) s.outer *= shape[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < shape.size(); ++k) s.inner *= shape[k];
  return s;
}

// A reduction's split of `shape` (the reduced axis, or all of it) and its
// result's shape.
struct Reduction {
  Split s;
  Dims shape;
};
Reduction reduction(const Node& n, const Dims& shape) {
  Reduction r{{1, count(shape), 1}, {}};
  if (n.axis) {
    r.s = split(shape, *n.axis);
    r.shape = shape;
    if (n.keepdims)
      r.shape[static_cast<size_t>(*n.axis)] = 1;
    else
      r.shape.erase(r.shape.begin() + *n.axis);
  } else if (n.keepdims) {
    r.shape = Dims(shape.size(), 1);
  }
  return r;
}

// Set by a reduction over an empty axis, or a contraction over an empty
// inner dim, whose value has elements (each the operation's identity, none
// the operands' doing): Expression::check then asks which elements of a
// holding verdict the target decided (`all(max(diff(target.p), axis=-1) <= 0)`
// on rows of one element held on every case, checking nothing).
thread_local bool t_empty_reduction = false;

Tensor reduce(const Node& n, const Tensor& x) {
  const Reduction r = reduction(n, x.shape);
  const Split s = r.s;  // (not a structured binding: lambdas capture it, which clang 14 refuses)
  if (s.n == 0 && s.outer * s.inner > 0) t_empty_reduction = true;
  const std::string& op = n.op;
  // The identities: max/min of an empty axis are -inf/inf, or false/true on
  // a bool tensor (any/all: ±inf there was neither true nor false, so
  // `max(m[:, 5:])` held in an `and` and failed `== false`).
  const bool boolean = n.dtype == DType::boolean;
  const double inf = std::numeric_limits<double>::infinity();
  const double init = op == "min"   ? (boolean ? 1 : inf)
                      : op == "max" ? (boolean ? 0 : -inf)
                      : op == "all" ? 1
                                    : 0;
  Tensor out{r.shape, std::vector<double>(static_cast<size_t>(s.outer * s.inner), init), n.dtype};
  // The operation is chosen once, not per element (a string compare per
  // element was most of a fuzz run's time, traced as it is there).
  auto fold = [&](auto f) {
    if (s.inner == 1) {  // the last axis (or all): one accumulator per run, in the same order
      const double* in = x.data.data();
      for (int64_t o = 0; o < s.outer; ++o) {
        double acc = init;
        for (int64_t k = 0; k < s.n; ++k) acc = f(acc, in[o * s.n + k]);
        out.data[static_cast<size_t>(o)] = acc;
      }
      return;
    }
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t k = 0; k < s.n; ++k)
        for (int64_t i = 0; i < s.inner; ++i) {
          double& acc = out.data[static_cast<size_t>(o * s.inner + i)];
          acc = f(acc, x.data[static_cast<size_t>((o * s.n + k) * s.inner + i)]);
        }
  };
  if (op == "sum" || op == "mean" || op == "rowsum") {
    if (n.dtype == DType::real)
      fold([](double acc, double v) { return round_acc(acc + v); });
    else
      fold([](double acc, double v) { return acc + v; });
  } else if (op == "max") {
    fold(nan_max);
  } else if (op == "min") {
    fold(nan_min);
  } else if (op == "any") {
    fold([](double acc, double v) { return (acc != 0 || v != 0) ? 1.0 : 0.0; });
  } else if (op == "all") {
    fold([](double acc, double v) { return (acc != 0 && v != 0) ? 1.0 : 0.0; });
  }
  if (op == "mean")
    for (double& v : out.data) v = s.n ? round_acc(v / static_cast<double>(s.n)) : NAN;
  return out;
}

Tensor scan(const Node& n, const Tensor& x) {
  const Split s = split(x.shape, *n.axis);
  if (n.op == "diff") {
    Dims shape = x.shape;
    const int64_t m = std::max<int64_t>(s.n - 1, 0);
    shape[static_cast<size_t>(*n.axis)] = m;
    Tensor out{shape, std::vector<double>(static_cast<size_t>(s.outer * m * s.inner)), n.dtype};
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t k = 0; k < m; ++k)
        for (int64_t i = 0; i < s.inner; ++i)
          out.data[static_cast<size_t>((o * m + k) * s.inner + i)] =
              x.data[static_cast<size_t>((o * s.n + k + 1) * s.inner + i)] -
              x.data[static_cast<size_t>((o * s.n + k) * s.inner + i)];
    round_real(out);  // a subtraction per element, as `-` is
    return out;
  }
  if (n.op == "indices") {  // x's shape, each element its index along the axis (exact)
    Tensor out{x.shape, std::vector<double>(x.size()), DType::integer};
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t k = 0; k < s.n; ++k)
        for (int64_t i = 0; i < s.inner; ++i) out.data[static_cast<size_t>((o * s.n + k) * s.inner + i)] = k;
    return out;
  }
  Tensor out = x;
  out.dtype = n.dtype;
  const bool cummax = n.op == "cummax", rounded = n.dtype == DType::real;
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 1; k < s.n; ++k)
      for (int64_t i = 0; i < s.inner; ++i) {
        const double prev = out.data[static_cast<size_t>((o * s.n + k - 1) * s.inner + i)];
        double& v = out.data[static_cast<size_t>((o * s.n + k) * s.inner + i)];
        v = cummax ? nan_max(prev, v) : (rounded ? round_acc(prev + v) : prev + v);
      }
  return out;
}

Tensor matmul_rt(const Tensor& a0, const Tensor& b0, DType dtype) {
  Tensor a = a0, b = b0;
  const bool va = a.shape.size() == 1, vb = b.shape.size() == 1;
  if (va) a.shape.insert(a.shape.begin(), 1);
  if (vb) b.shape.push_back(1);
  const int64_t n = a.shape[a.shape.size() - 2], k = a.shape.back(), m = b.shape.back();
  if (b.shape[b.shape.size() - 2] != k)
    throw ShapeError(
        fmt::format("matmul: inner dims differ ({} vs {})", shape_text(a0.shape), shape_text(b0.shape)));
  Dims batch =
      broadcast_rt(Dims(a.shape.begin(), a.shape.end() - 2), Dims(b.shape.begin(), b.shape.end() - 2));
  Dims sa = batch, sb = batch;
  sa.insert(sa.end(), {n, k});
  sb.insert(sb.end(), {k, m});
  a = expand(a, sa);
  b = expand(b, sb);
  const int64_t nb = count(batch);
  Dims shape = batch;
  if (!va) shape.push_back(n);
  if (!vb) shape.push_back(m);
  if (k == 0 && nb * n * m > 0) t_empty_reduction = true;
  Tensor out{shape, std::vector<double>(static_cast<size_t>(nb * n * m), 0.0), dtype};
  // Integer products and sums are exact: only a real matmul rounds (naive.Y).
  const auto rounded = [real = dtype == DType::real](double v) { return real ? round_acc(v) : v; };
  for (int64_t z = 0; z < nb; ++z)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc = rounded(acc + rounded(a.data[static_cast<size_t>((z * n + i) * k + p)] *
                                      b.data[static_cast<size_t>((z * k + p) * m + j)]));
        out.data[static_cast<size_t>((z * n + i) * m + j)] = acc;
      }
  return out;
}

Ref evaluate(const Node& n, const TensorMap& m);

bool is_comparison(const Node& n) {
  static const std::set<std::string> comparisons = {"==", "!=", "<", "<=", ">", ">="};
  return n.kind == Kind::binary && comparisons.count(n.op);
}

// any(a OP b) or all(a OP b), OP a comparison, over the last axis or all of
// them: each element compared and folded as the broadcast walks, not first
// materialised (a relation between every pair of rows, such as
// all(x[:, :, None, :] == x[:, None, :, :], axis=-1), broadcasts to many
// times its operands). The same values as the two steps.
template <typename Cmp>
Tensor any_all_of(const Node& n, const Tensor& a, const Tensor& b, const Dims& shape, const Reduction& r,
                  Cmp cmp) {
  const bool all = n.op == "all";
  // `decides`: the element that settles its run (a false for all, a true for
  // any); the rest of the run, or with no axis the rest of all, is skipped.
  const double settled = all ? 0.0 : 1.0;
  auto decides = [&](double x, double y) { return cmp(x, y) != all; };
  Tensor out{r.shape, std::vector<double>(static_cast<size_t>(r.s.outer), 1.0 - settled), n.dtype};
  const double *x = a.data.data(), *y = b.data.data();
  const Dims sa = broadcast_strides(a.shape, shape), sb = broadcast_strides(b.shape, shape);
  const size_t rank = shape.size();
  const int64_t len = rank ? shape[rank - 1] : 1, ja = rank ? sa[rank - 1] : 0, jb = rank ? sb[rank - 1] : 0;
  walk_rows(shape, sa, sb, [&](int64_t row, int64_t ia, int64_t ib) {
    for (int64_t j = 0; j < len; ++j)
      if (decides(x[ia + j * ja], y[ib + j * jb])) {
        out.data[n.axis ? static_cast<size_t>(row) : 0] = settled;
        return n.axis.has_value();  // with no axis, one element settles the whole
      }
    return true;
  });
  return out;
}
// any_all_of where it applies; nullopt elsewhere (the two steps).
std::optional<Tensor> fused_any_all(const Node& n, const TensorMap& m) {
  if (n.op != "any" && n.op != "all") return std::nullopt;
  const Node& c = *n.args[0];
  if (!is_comparison(c)) return std::nullopt;
  if (n.axis && *n.axis + 1 != static_cast<int>(c.shape.size())) return std::nullopt;
  const Ref ra = evaluate(*c.args[0], m);
  const Ref rb = evaluate(*c.args[1], m);
  const Dims shape = broadcast_rt(ra->shape, rb->shape);
  const Reduction r = reduction(n, shape);
  if (r.s.inner != 1) return reduce(n, *evaluate(c, m));  // the checker's rank was not the case's
  if (r.s.n == 0 && r.s.outer * r.s.inner > 0) t_empty_reduction = true;  // as reduce() says
  const Tensor &a = *ra, &b = *rb;
  if (c.op == "==") return any_all_of(n, a, b, shape, r, [](double x, double y) { return x == y; });
  if (c.op == "!=") return any_all_of(n, a, b, shape, r, [](double x, double y) { return x != y; });
  if (c.op == "<") return any_all_of(n, a, b, shape, r, [](double x, double y) { return x < y; });
  if (c.op == "<=") return any_all_of(n, a, b, shape, r, [](double x, double y) { return x <= y; });
  if (c.op == ">") return any_all_of(n, a, b, shape, r, [](double x, double y) { return x > y; });
  return any_all_of(n, a, b, shape, r, [](double x, double y) { return x >= y; });
}

// close()'s operands and tolerances, broadcast to one shape.
struct CloseArgs {
  Dims shape;
  Ref a = Tensor(), b = Tensor(), rtol = Tensor(), atol = Tensor();
  // close(k=): what the policy makes of each element (expanded; the codes
  // of ExprChecker::policy): compared, not judged, or the store that must
  // overflow to ±inf, which did or did not.
  std::optional<Ref> policy;
  // unbounded: the tolerance, read from the target's outputs, allows an
  // infinite error there (mark_unbounded): only an equal element holds.
  enum Code { compared = 0, excused = 1, overflowed = 2, not_overflowed = 3, unbounded = 4 };
  // Element i of a tolerance (a scalar is not expanded).
  static double at(const Ref& t, size_t i) { return t->size() == 1 ? t->data[0] : t->data[i]; }
  Code code(size_t i) const { return policy ? Code((*policy)->data[i]) : compared; }
  // Whether element i is close: within the tolerance, or as the policy says.
  bool holds(size_t i) const {
    switch (code(i)) {
      case compared:
        return is_close(a->data[i], b->data[i], at(rtol, i), at(atol, i));
      case excused:
      case overflowed:
        return true;
      case not_overflowed:
        return false;
      case unbounded:
        return is_close(a->data[i], b->data[i], 0, 0);
    }
    return false;
  }
};
// Set by each evaluation of a whole expression (SharedValues): the values of
// its Node::shared nodes, computed once each.
thread_local std::unordered_map<const Node*, Tensor>* t_shared = nullptr;
// For the length of one evaluation of an expression (on one TensorMap, in
// one rounding mode): a fresh store of its shared nodes' values, the
// previous one restored after (also when evaluation throws).
class SharedValues {
 public:
  SharedValues() : saved_(t_shared) { t_shared = &values_; }
  ~SharedValues() { t_shared = saved_; }
  SharedValues(const SharedValues&) = delete;
  SharedValues& operator=(const SharedValues&) = delete;

 private:
  std::unordered_map<const Node*, Tensor> values_;
  std::unordered_map<const Node*, Tensor>* saved_;
};

std::string index_text(const Dims& shape, size_t flat);
// Set while close(k=)'s tolerances are evaluated with the floors' lower
// bounds (close_args): a name node marked lower_bound_first reads
// TensorMap::find_lower_bound, and t_read_lower records that one did.
thread_local bool t_lower_first = false, t_read_lower = false;
class LowerBoundsFirst {
 public:
  explicit LowerBoundsFirst(bool on) : first_(t_lower_first), read_(t_read_lower) {
    t_lower_first = on, t_read_lower = false;
  }
  ~LowerBoundsFirst() { t_lower_first = first_, t_read_lower = read_; }
  LowerBoundsFirst(const LowerBoundsFirst&) = delete;
  LowerBoundsFirst& operator=(const LowerBoundsFirst&) = delete;
  bool read_lower() const { return t_read_lower; }

 private:
  bool first_, read_;
};
void tolerances_of(const Node& n, const TensorMap& m, CloseArgs& c);
void expand_operands(CloseArgs& c, bool tolerances);
void nan_tolerances(const Node& n, const CloseArgs& c);
void mark_unbounded(const Node& n, CloseArgs& c);
std::string num(double v);
CloseArgs close_args(const Node& n, const TensorMap& m, bool tolerances) {
  CloseArgs c;
  c.a = evaluate(*n.args[0], m);
  c.b = evaluate(*n.args[1], m);
  c.shape = broadcast_rt(c.a->shape, c.b->shape);
  if (tolerances && n.k) {
    const double k = evaluate(*n.k, m)->data.at(0);
    if (!(std::isfinite(k) && k >= 0))
      throw ToleranceError(
          fmt::format("close(k=): k is {} on this case; it must be a finite number >= 0", k));
  }
  // Every element compared, as the policy's masks say where the tensors they
  // read are all finite (ExprChecker::policy): they are not evaluated then.
  const auto all_finite = [&m](const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      const Tensor* t = m.find(name);
      if (!t) return false;
      for (double v : t->data)
        if (!std::isfinite(v)) return false;
    }
    return !names.empty();
  };
  const bool masked = tolerances && n.unjudged && !all_finite(n.compared_where_finite);
  // close(k=) without masks: every element holds when |a - b| <= its
  // budget, which only grows with the floors, so the budget is taken first
  // with their lower bounds (TensorMap::put_with_lower_bound: a declared
  // op's floor without the reference's own rounding bound, an evaluation of
  // the expression's running error bound), and again with the full floors
  // only if an element fails under it. The masks compare the budget both
  // ways (past or near the overflow threshold): they take the full floors.
  bool lower = false;
  if (tolerances && n.k && !masked) {
    // In a store of shared values of its own: a budget taken with the lower
    // bounds must serve no later read of the node (explain judges an `or`'s
    // operands again, each reading this close's budget). What the
    // tolerances borrow from it is copied out.
    LowerBoundsFirst first(true);
    SharedValues own;
    tolerances_of(n, m, c);
    c.rtol = Ref(Tensor(*c.rtol)), c.atol = Ref(Tensor(*c.atol));
    lower = first.read_lower();
  } else if (tolerances) {
    tolerances_of(n, m, c);
  }
  expand_operands(c, tolerances);
  if (lower) {
    bool all_hold = true;
    for (size_t i = 0; i < c.a->size() && all_hold; ++i) all_hold = c.holds(i);
    if (!all_hold) {  // with the full floors (in the evaluation's store: they are the budget's values)
      tolerances_of(n, m, c);
      expand_operands(c, true);
    }
  }
  if (masked) {
    Ref u = evaluate(*n.unjudged, m);
    if (u->shape != c.shape) u = Ref(expand(*u, broadcast_rt(u->shape, c.shape)));
    if (u->shape != c.shape)
      throw EvalError(fmt::format("close(k=): the policy's mask has shape {}, the comparison {}",
                                  shape_text(u->shape), shape_text(c.shape)));
    size_t judged = 0;
    for (double v : u->data) judged += v != double(CloseArgs::excused);
    if (judged == 0 && !u->data.empty())
      throw NothingJudged(
          "close(k=): the same-precision baseline is not finite wherever the reference is (an intermediate "
          "overflows the dtype): no element to judge");
    c.policy = std::move(u);
  }
  if (tolerances) nan_tolerances(n, c);
  if (tolerances) mark_unbounded(n, c);
  return c;
}

// Elements whose allowed error, atol + rtol·|rhs|, is infinite on this case
// (an atol built from a naive baseline that overflowed there, a tolerance
// over a reference that is 0): within() passes any finite value there, so
// such an element is not judged at all. Computed from the spec's own
// tensors, it is excused as the policy's unjudged elements are, and a case
// that leaves no element judged judges nothing (it is discarded, never
// passed). Read from the target's outputs, it is the target's doing, as a
// NaN there is: an unequal element fails.
void mark_unbounded(const Node& n, CloseArgs& c) {
  const auto infinite = [](const Ref& t) {
    return std::any_of(t->data.begin(), t->data.end(), [](double v) { return std::isinf(v); });
  };
  // Without an infinite tolerance, atol + rtol·|rhs| overflows only past
  // rtol·|rhs| or atol near the largest double: a scan of the operand decides.
  if (!infinite(c.rtol) && !infinite(c.atol)) {
    double rtol = 0, atol = 0, rhs = 0;
    for (double v : c.rtol->data) rtol = std::max(rtol, v);
    for (double v : c.atol->data) atol = std::max(atol, v);
    for (double v : c.b->data)
      if (std::isfinite(v)) rhs = std::max(rhs, std::fabs(v));
    if (std::isfinite(allowed_error(atol, rtol, rhs))) return;
  }
  const bool rtol_target = n.rtol && reads_target(*n.rtol), atol_target = n.atol && reads_target(*n.atol);
  Tensor codes = c.policy ? Tensor(**c.policy) : Tensor{c.shape, std::vector<double>(c.a->size(), 0.0)};
  size_t judged = 0, first = codes.size();
  for (size_t i = 0; i < codes.size(); ++i) {
    double& code = codes.data[i];
    // (An infinity or a NaN operand is close only to the same, whatever the tolerance.)
    if (code == double(CloseArgs::compared) && std::isfinite(c.a->data[i]) && std::isfinite(c.b->data[i])) {
      const double rtol = CloseArgs::at(c.rtol, i), atol = CloseArgs::at(c.atol, i);
      const bool rtol_inf = std::isinf(rtol), atol_inf = std::isinf(atol);
      if (rtol_inf || atol_inf || std::isinf(allowed_error(atol, rtol, std::fabs(c.b->data[i])))) {
        const bool by_target = (rtol_inf && rtol_target) || (atol_inf && atol_target) ||
                               (!rtol_inf && !atol_inf && (rtol_target || atol_target));
        code = double(by_target ? CloseArgs::unbounded : CloseArgs::excused);
        first = std::min(first, i);
      }
    }
    judged += code != double(CloseArgs::excused);
  }
  if (judged == 0 && first < codes.size())
    throw NothingJudged(fmt::format(
        "close(): the tolerance allows an infinite error on every element it would judge on this case "
        "(atol {}, rtol {} at {}: a bound computed from a value that overflowed): no element to judge",
        num(CloseArgs::at(c.atol, first)), num(CloseArgs::at(c.rtol, first)), index_text(c.shape, first)));
  c.policy = Ref(std::move(codes));
}

// close()'s rtol and atol on this case into c, checked; c.shape takes
// their shapes in.
void tolerances_of(const Node& n, const TensorMap& m, CloseArgs& c) {
  c.rtol = n.rtol ? evaluate(*n.rtol, m) : Ref(Tensor::scalar(1e-5));
  c.atol = n.atol ? evaluate(*n.atol, m) : Ref(Tensor::scalar(1e-8));
  c.shape = broadcast_rt(broadcast_rt(c.shape, c.rtol->shape), c.atol->shape);
  // A tolerance below 0 or NaN on this case (atol=D-3, a max over a NaN)
  // would fail unequal elements however close, and a bound computed from
  // the spec's own tensors (dims, inputs, the reference, the baseline) is
  // the spec's to fix, as a bad k is: never the target's counterexample.
  // One read from the target's outputs is the target's doing, and the
  // elements it cannot judge fail.
  // (A NaN is checked where it is read, nan_tolerances: an element whose
  // sides are equal or not both finite never reads its tolerance.)
  for (const auto& [name, node, t] :
       {std::tuple{"rtol", n.rtol.get(), &c.rtol}, {"atol", n.atol.get(), &c.atol}}) {
    if (!node || reads_target(*node)) continue;
    for (size_t i = 0; i < (*t)->size(); ++i)
      if (const double v = (*t)->data[i]; v < 0)
        throw ToleranceError(
            fmt::format("close(): {} is {}{} on this case; a tolerance must be a number >= 0", name, v,
                        (*t)->size() > 1 ? " at " + index_text((*t)->shape, i) : ""));
  }
}

// A NaN tolerance read from the spec's own tensors where an element needs
// it (both sides finite and unequal): the spec's error, as a negative one
// is. Elsewhere it is never read: an input's NaN makes the tolerance NaN
// exactly where it makes both sides NaN (atol=eps * abs(x) with x NaN
// there), and that element holds as NaN against NaN; a bound that needed
// `when: all(isfinite(x))` to keep the run going does not.
void nan_tolerances(const Node& n, const CloseArgs& c) {
  for (const auto& [name, node, t] :
       {std::tuple{"rtol", n.rtol.get(), &c.rtol}, {"atol", n.atol.get(), &c.atol}}) {
    if (!node || reads_target(*node)) continue;
    // (Most tolerances hold no NaN, often a scalar: then no pass over the operands.)
    if (std::none_of((*t)->data.begin(), (*t)->data.end(), [](double v) { return std::isnan(v); })) continue;
    for (size_t i = 0; i < c.a->size(); ++i) {
      const double x = c.a->data[i], y = c.b->data[i];
      if (std::isnan(CloseArgs::at(*t, i)) && std::isfinite(x) && std::isfinite(y) && x != y)
        throw ToleranceError(fmt::format(
            "close(): {} is nan{} on this case, where the sides {} and {} differ; a tolerance must be a "
            "number >= 0 (a NaN reached it: a reduction over a NaN, or 0 × inf)",
            name, c.a->size() > 1 ? " at " + index_text(c.shape, i) : "", num(x), num(y)));
    }
  }
}

// The operands (and, with `tolerances`, rtol and atol) expanded to c.shape.
void expand_operands(CloseArgs& c, bool tolerances) {
  for (Ref* t : {&c.a, &c.b})
    if ((*t)->shape != c.shape) *t = Ref(expand(**t, c.shape));
  for (Ref* t : {&c.rtol, &c.atol})  // scalars stay scalars (CloseArgs::at)
    if (tolerances && (*t)->size() != 1 && (*t)->shape != c.shape) *t = Ref(expand(**t, c.shape));
}

// A slice bound: clamped to ±2^62 before the cast (a bound of 2^63 or more
// cast as it is has no defined value; the slice clamps to the axis anyway).
int64_t scalar_int(const Node& n, const TensorMap& m) {
  const double v = evaluate(n, m)->data.at(0);
  if (std::isnan(v)) throw EvalError(fmt::format("a slice bound is nan"));
  return static_cast<int64_t>(std::clamp(v, -0x1p62, 0x1p62));
}

// x[items] in one gather, reading x where it is. Each item makes one group
// of the result's axes, with the offsets into x along them: a slice, or a
// whole axis (an ellipsis, the axes after the last item), its range's; the
// index tensor (one at most, the checker says) its values', its dims in
// place of the axis (NumPy's take); a newaxis one axis of length 1, offset
// 0. An element's offset in x is the sum of its groups' offsets.
// x[items] for x given (the index node's base evaluated, or its rounding
// bound: the same gather).
Tensor index_of(const Tensor& x, const Node& n, const TensorMap& m);
Tensor index_rt(const Node& n, const TensorMap& m) {
  const Ref rx = evaluate(*n.args[0], m);
  return index_of(*rx, n, m);
}
Tensor index_of(const Tensor& x, const Node& n, const TensorMap& m) {
  const size_t r = x.shape.size();
  Dims stride(r);
  for (size_t k = r, s = 1; k-- > 0; s *= static_cast<size_t>(x.shape[k]))
    stride[k] = static_cast<int64_t>(s);
  // One group per axis of the result's index space (a slice, an index
  // tensor, a new axis): the offsets into x it steps through, kept in one
  // vector for all groups (the evaluation allocates per node, not per axis).
  struct Group {
    size_t begin, end;  // into offsets
  };
  std::vector<Group> groups;
  groups.reserve(n.items.size() + r);
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(std::accumulate(x.shape.begin(), x.shape.end(), int64_t{0})) +
                  n.items.size());
  Tensor out{{}, {}, x.dtype};
  out.shape.reserve(n.items.size() + r);
  auto range = [&](size_t axis, int64_t lo, int64_t hi) {
    const size_t begin = offsets.size();
    for (int64_t v = lo; v < hi; ++v) offsets.push_back(v * stride[axis]);
    groups.push_back({begin, offsets.size()});
    out.shape.push_back(hi - lo);
  };
  size_t consumed = 0;  // the items still to come that each take an axis of x
  for (const auto& item : n.items)
    if (item.k != Item::K::ellipsis && item.k != Item::K::newaxis) ++consumed;
  size_t axis = 0;  // the next axis of x
  for (const auto& item : n.items) {
    switch (item.k) {
      case Item::K::ellipsis:
        while (axis + consumed < r) range(axis, 0, x.shape[axis]), ++axis;
        break;
      case Item::K::newaxis:
        groups.push_back({offsets.size(), offsets.size() + 1});
        offsets.push_back(0);
        out.shape.push_back(1);
        break;
      case Item::K::slice: {
        const int64_t len = x.shape.at(axis);
        auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + len : v, int64_t{0}, len); };
        const int64_t lo = item.lo ? clampi(scalar_int(*item.lo, m)) : 0;
        const int64_t hi = std::max(lo, item.hi ? clampi(scalar_int(*item.hi, m)) : len);
        range(axis++, lo, hi);
        --consumed;
        break;
      }
      case Item::K::expr: {
        const Ref ridx = evaluate(*item.e, m);
        const int64_t len = x.shape.at(axis);
        const size_t begin = offsets.size();
        for (double v : ridx->data) {
          if (!(v >= -static_cast<double>(len) && v < static_cast<double>(len)) || v != std::floor(v)) {
            const std::string message =
                fmt::format("index {} is out of range for an axis of length {}", v, len);
            // The axis has its declared dim's length, and the index comes from
            // no output of the target: the spec indexes past its own dim.
            const Shape& declared = n.args[0]->shape;
            const Tensor* dim = declared.size() == r ? m.find(declared[axis]) : nullptr;
            if (reads_target(*item.e)) throw EvalError(message);
            if (dim && dim->size() == 1 && dim->data[0] == static_cast<double>(len))
              throw SpecEvalError(fmt::format("{} ({} = {})", message, declared[axis], len));
            // An axis of an intermediate (diff(target.y)[:, 0], a slice's):
            // its length comes from the shapes read, the spec's doing when
            // the target's outputs have their declared shapes.
            throw IndexError(message);
          }
          offsets.push_back((v < 0 ? static_cast<int64_t>(v) + len : static_cast<int64_t>(v)) * stride[axis]);
        }
        groups.push_back({begin, offsets.size()});
        out.shape.insert(out.shape.end(), ridx->shape.begin(), ridx->shape.end());
        ++axis;
        --consumed;
        break;
      }
    }
  }
  while (axis < r) range(axis, 0, x.shape[axis]), ++axis;
  int64_t total = 1;
  for (const Group& g : groups) total *= static_cast<int64_t>(g.end - g.begin);
  out.data.resize(static_cast<size_t>(total));
  if (total == 0) return out;
  if (groups.empty()) {
    out.data[0] = x.data[0];
    return out;
  }
  // An odometer over the groups but the last, whose offsets are the inner loop.
  const Group inner = groups.back();
  const size_t inner_size = inner.end - inner.begin;
  std::vector<size_t> at(groups.size(), 0);
  int64_t base = 0;
  for (const Group& g : groups) base += offsets[g.begin];
  base -= offsets[inner.begin];
  for (size_t o = 0; o < out.data.size(); o += inner_size) {
    for (size_t j = 0; j < inner_size; ++j)
      out.data[o + j] = x.data[static_cast<size_t>(base + offsets[inner.begin + j])];
    for (size_t k = groups.size() - 1; k-- > 0;) {
      const Group& g = groups[k];
      base -= offsets[g.begin + at[k]];
      if (++at[k] < g.end - g.begin) {
        base += offsets[g.begin + at[k]];
        break;
      }
      at[k] = 0;
      base += offsets[g.begin];
    }
  }
  return out;
}

// The last two axes swapped.
Tensor transpose_of(const Tensor& x) {
  const size_t r = x.shape.size();
  const int64_t rows = x.shape[r - 2], cols = x.shape[r - 1],
                batch = count(x.shape) / std::max<int64_t>(rows * cols, 1);
  Tensor out = x;
  std::swap(out.shape[r - 1], out.shape[r - 2]);
  for (int64_t z = 0; z < batch && rows * cols != 0; ++z)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out.data[static_cast<size_t>(z * rows * cols + j * rows + i)] =
            x.data[static_cast<size_t>(z * rows * cols + i * cols + j)];
  return out;
}

// Set while rounding_bound runs: each node's value, computed once (the
// bound of a node reads its operands' values, which the bounds of the
// operands compute again otherwise: O(nodes · depth) evaluations).
thread_local std::unordered_map<const Node*, Tensor>* t_values = nullptr;
// Set while rounding_bound runs: how its sums are taken to be added.
thread_local Summation t_summation = Summation::in_order;
// Set while rounding_bound runs: the unit roundoff of the Hölder terms.
thread_local double t_unit = 0x1p-53;
// Set while rounding_bound runs reassociated (Expression::rounding_bound):
// a ± b adds u·(|a| + |b|), not u·|a ± b|.
thread_local bool t_reassociated = false;
// Set while rounding_bound runs with steps (Expression::rounding_bound): the
// jumps of step functions and comparisons, which no first-order bound has a
// term for, are bounded too (what an integer or boolean output may move by).
thread_local bool t_steps = false;
// Set while rounding_bound runs: an operation whose result falls below the
// normal range errs by up to half the smallest subnormal, u·min_normal,
// whatever |r|: min_normal of t_unit's arithmetic, in B's units. A
// product, quotient, power or function adds it; a sum does not (an
// addition with a subnormal result is exact).
thread_local double t_tiny = 0x1p-1022;
Ref evaluate_node(const Node& n, const TensorMap& m);
Ref evaluate(const Node& n, const TensorMap& m) {
  std::unordered_map<const Node*, Tensor>* memo = t_values ? t_values : n.shared ? t_shared : nullptr;
  if (!memo) return evaluate_node(n, m);
  if (const auto it = memo->find(&n); it != memo->end()) return Ref::borrow(it->second);
  Tensor v = *evaluate_node(n, m);
  return Ref::borrow(memo->emplace(&n, std::move(v)).first->second);
}
Ref evaluate_node(const Node& n, const TensorMap& m) {
  switch (n.kind) {
    case Kind::number:
      return Tensor::scalar(n.value, n.dtype);
    case Kind::name: {
      bool lower = false;
      const Tensor* t =
          n.lower_bound_first && t_lower_first ? m.find_lower_bound(n.op, &lower) : m.find(n.op);
      if (lower) t_read_lower = true;
      if (!t) throw EvalError(fmt::format("the family published no '{}' for this case", n.op));
      if (t->shape.size() != n.shape.size())
        throw EvalError(
            fmt::format("'{}' has shape {}, declared {}", n.op, shape_text(t->shape), shape_text(n.shape)));
      return Ref::borrow(*t);
    }
    case Kind::unary: {
      const Ref ra = evaluate(*n.args[0], m);
      const Tensor& a = *ra;
      if (n.op == "not") return map(a, DType::boolean, [](double v) { return v == 0 ? 1.0 : 0.0; });
      return map(a, n.dtype, [](double v) { return -v; });
    }
    case Kind::binary: {
      const std::string& op = n.op;
      const Ref ra = evaluate(*n.args[0], m);
      const Tensor& a = *ra;
      if (op == "and" && a.size() == 1 && a.data[0] == 0 && n.shape.empty())
        return Tensor::scalar(0, DType::boolean);
      if (op == "or" && a.size() == 1 && a.data[0] != 0 && n.shape.empty())
        return Tensor::scalar(1, DType::boolean);
      const Ref rb = evaluate(*n.args[1], m);
      const Tensor& b = *rb;
      if (op == "@") return matmul_rt(a, b, n.dtype);
      if (op == "+") return zip(a, b, n.dtype, [](double x, double y) { return x + y; });
      if (op == "-") return zip(a, b, n.dtype, [](double x, double y) { return x - y; });
      if (op == "*") return zip(a, b, n.dtype, [](double x, double y) { return x * y; });
      if (op == "/") return zip(a, b, n.dtype, [](double x, double y) { return x / y; });
      if (op == "**") return zip(a, b, n.dtype, [](double x, double y) { return std::pow(x, y); });
      const DType B = DType::boolean;
      if (op == "==") return zip(a, b, B, [](double x, double y) { return double(x == y); });
      if (op == "!=") return zip(a, b, B, [](double x, double y) { return double(x != y); });
      if (op == "<") return zip(a, b, B, [](double x, double y) { return double(x < y); });
      if (op == "<=") return zip(a, b, B, [](double x, double y) { return double(x <= y); });
      if (op == ">") return zip(a, b, B, [](double x, double y) { return double(x > y); });
      if (op == ">=") return zip(a, b, B, [](double x, double y) { return double(x >= y); });
      if (op == "and") return zip(a, b, B, [](double x, double y) { return double(x != 0 && y != 0); });
      if (op == "or") return zip(a, b, B, [](double x, double y) { return double(x != 0 || y != 0); });
      throw std::logic_error("expr: unknown operator " + op);
    }
    case Kind::call: {
      const std::string& f = n.op;
      if (f == "close") {
        const CloseArgs c = close_args(n, m, true);
        Tensor out{c.shape, std::vector<double>(c.a->size()), DType::boolean};
        for (size_t i = 0; i < out.size(); ++i) out.data[i] = c.holds(i);
        return out;
      }
      if (std::optional<Tensor> t = fused_any_all(n, m)) return std::move(*t);
      std::vector<Ref> refs;
      refs.reserve(n.args.size());
      for (const auto& arg : n.args) refs.push_back(evaluate(*arg, m));
      std::vector<std::reference_wrapper<const Tensor>> a;
      a.reserve(refs.size());
      for (const auto& r : refs) a.push_back(*r);
      if (f == "sum" || f == "mean" || f == "any" || f == "all" || f == "min" || f == "max" || f == "rowsum")
        return reduce(n, a[0].get());
      if (f == "diff" || f == "cummax" || f == "cumsum" || f == "indices") return scan(n, a[0].get());
      if (f == "arange") {
        const double v = a[0].get().data.at(0);
        if (!(v >= 0 && v <= double(int64_t{1} << 24) && v == std::floor(v))) {
          const std::string message =
              fmt::format("arange(): its argument is {} on this case, not an integer in [0, 2^24]", v);
          // From no output of the target (a dim, an attr): the spec's own
          // error, even in an expression that reads the target elsewhere.
          if (reads_target(*n.args[0])) throw EvalError(message);
          throw SpecEvalError(message);
        }
        Tensor out{{static_cast<int64_t>(v)}, std::vector<double>(static_cast<size_t>(v)), DType::integer};
        for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = static_cast<double>(i);
        return out;
      }
      if (f == "abs") return map(a[0].get(), n.dtype, [](double v) { return std::fabs(v); });
      if (f == "floor") return map(a[0].get(), n.dtype, [](double v) { return std::floor(v); });
      if (f == "ceil") return map(a[0].get(), n.dtype, [](double v) { return std::ceil(v); });
      // Ties to even, as NumPy's round (the default rounding mode).
      if (f == "round") return map(a[0].get(), n.dtype, [](double v) { return std::nearbyint(v); });
      if (f == "exp") return map(a[0].get(), n.dtype, [](double v) { return std::exp(v); });
      if (f == "log") return map(a[0].get(), n.dtype, [](double v) { return std::log(v); });
      if (f == "sqrt") return map(a[0].get(), n.dtype, [](double v) { return std::sqrt(v); });
      if (f == "tanh") return map(a[0].get(), n.dtype, [](double v) { return std::tanh(v); });
      if (f == "erf") return map(a[0].get(), n.dtype, [](double v) { return std::erf(v); });
      if (f == "erfc") return map(a[0].get(), n.dtype, [](double v) { return std::erfc(v); });
      if (f == "log1p") return map(a[0].get(), n.dtype, [](double v) { return std::log1p(v); });
      if (f == "expm1") return map(a[0].get(), n.dtype, [](double v) { return std::expm1(v); });
      if (f == "sin") return map(a[0].get(), n.dtype, [](double v) { return std::sin(v); });
      if (f == "cos") return map(a[0].get(), n.dtype, [](double v) { return std::cos(v); });
      if (f == "isfinite") return map(a[0].get(), n.dtype, [](double v) { return double(std::isfinite(v)); });
      if (f == "isnan") return map(a[0].get(), n.dtype, [](double v) { return double(std::isnan(v)); });
      if (f == "isinf") return map(a[0].get(), n.dtype, [](double v) { return double(std::isinf(v)); });
      if (f == "minimum") return zip(a[0].get(), a[1].get(), n.dtype, nan_min);
      if (f == "maximum") return zip(a[0].get(), a[1].get(), n.dtype, nan_max);
      if (f == "matmul") return matmul_rt(a[0].get(), a[1].get(), n.dtype);
      if (f == "transpose") return transpose_of(a[0].get());
      if (f == "where") {
        const Dims shape = broadcast_rt(broadcast_rt(a[0].get().shape, a[1].get().shape), a[2].get().shape);
        const Tensor c = expand(a[0].get(), shape), x = expand(a[1].get(), shape),
                     y = expand(a[2].get(), shape);
        Tensor out{shape, std::vector<double>(c.size()), n.dtype};
        for (size_t i = 0; i < c.size(); ++i) out.data[i] = c.data[i] != 0 ? x.data[i] : y.data[i];
        return out;
      }
      throw std::logic_error("expr: unknown function " + f);
    }
    case Kind::index:
      return index_rt(n, m);
  }
  throw std::logic_error("expr: unknown node");
}

std::string index_text(const Dims& shape, size_t flat) {
  if (shape.empty()) return "[]";
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = static_cast<int64_t>(flat) % std::max<int64_t>(shape[k], 1);
    flat /= static_cast<size_t>(std::max<int64_t>(shape[k], 1));
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

std::string num(double v) {
  return fmt::format("{}", v);
}  // shortest exact

// ---------------------------------------------------------------- rounding bound
// A first-order bound on the rounding error of the fp64 evaluation itself
// (running error analysis, Wilkinson; Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., §3.3): each real node carries B with
// |computed - exact| <= u·B + O(u²), u = 2^-53, from its children's bounds
// and its own rounding. A correctly rounded operation adds u·|r|; libm's
// exp, log, tanh, erf, log1p, expm1, sin, cos (within 1 ulp) add 2u·|r|.
// Below the normal range the rounding is absolute, up to half the smallest
// subnormal = u·min_normal: a product, quotient, power or mean adds
// min_normal (t_tiny) more, a function 2·min_normal, matmul k·min_normal
// for its products; additions with a subnormal result are exact (x·w·v
// against x·(w·v) at x = 6e-308 differed by one subnormal where the bound
// said 0). Per node, with
// r the result and a, b the operands' values:
//   a ± b          Ba + Bb + |r|   (reassociated: Ba + Bb + |a| + |b|)
//   a · b          |b|·Ba + |a|·Bb + u·Ba·Bb + |r|: the second-order δa·δb too,
//                  which is not small where a and b are themselves rounding
//                  noise (x - mean(x) on a constant row, then scaled by
//                  1/sqrt(var + eps) ~ 1000: xhat · mean(g · xhat) erred by
//                  1.9e-3 in f32 where the first-order bound said 0)
//   a / b          (Ba + |r|·Bb) / |b| + |r|
//   a ** b         |b·r/a|·Ba + |r·ln|a||·Bb + |r|; at a = 0 (r = 0 for b > 0)
//                  the error is exactly |δa|^b = (u·Ba)^b, in B's units
//                  (u·Ba)^b / u, and r = 0 has no error from b; for
//                  0 < b < 1 the first-order term is capped by that Hölder
//                  bound, |(a + δ)^b - a^b| <= |δ|^b; for b >= 1 it is
//                  b·(|a| + u·Ba)^(b-1)·Ba (the mean value theorem, which
//                  keeps a square's δ² where a is a cancelled difference)
//   sqrt(a)        min(Ba/(2|r|), √(Ba/u)) + |r|: √ is 1/2-Hölder,
//                  |√(a + δ) - √a| <= √|δ|, which bounds it at and near 0
//   exp(a)         |r|·Ba + 2|r|          log(a)   Ba/|a| + 2|r|
//   sqrt(a)        Ba/(2|r|) + |r|        tanh(a)  (1 - r²)·Ba + 2|r|
//   erf(a)         (2/√π)·exp(-a²)·Ba + 2|r|;  sin, cos: Ba + 2|r| (|derivative| <= 1)
//   erfc(a)        (2/√π)·exp(-a²)·Ba + 10|r|: glibc before 2.39 (Debian 12's
//                  2.36) documents erfc within 5 ulps (libm-test-ulps), not 1
//   log1p(a)       Ba/|1 + a| + 2|r|      expm1(a) |1 + r|·Ba + 2|r| (exp(a) = 1 + r)
//   -a, abs(a), gathers, slices, transpose: Ba moved as the values are
//   minimum, maximum (elementwise or reduced), cummax: max(Ba, Bb) (1-Lipschitz)
//   where(c, a, b)  Ba where c, else Bb (c itself exact: first order)
//   sum of n terms x_i in order: Σ Bx_i + Σ_{k>=2} |s_k| <= Σ Bx_i + (n-1)·Σ|x_i|
//     (Summation::tree: added as a tree of depth ⌈log2 n⌉, pairwise, each
//     x_i passes through ⌈log2 n⌉ additions: Σ Bx_i + ⌈log2 n⌉·Σ|x_i|)
//   mean            (the sum's bound)/n + |r|;  cumsum: the running sums' bounds
//   diff            B_{k+1} + B_k + |r|
//   matmul (k inner terms): (|A|·B_B + B_A·|B| + u·B_A·B_B) + k·(|A|·|B|) (products, then the
//     sum; Summation::tree: ⌈log2 k⌉ for k)
// Integers and booleans are exact (a comparison of rounded values is taken
// as exact: first order). A node whose bound is not finite (a division by
// 0) gives inf there; the caller decides what an inf bound means. A 0/0 in
// a rule (an exact operand where the derivative has a pole) is 0, not NaN:
// a NaN bound spreads through a reduction to finite elements, and the
// caller, taking the largest finite bound, loses them (the floor of a
// layer norm over a constant row fell to 0).

// nullopt: exactly 0 everywhere (a leaf, an integer or boolean node).
using Bound = std::optional<Tensor>;

Tensor filled(const Bound& b, const Dims& shape) {
  if (!b) return Tensor{shape, std::vector<double>(static_cast<size_t>(count(shape)), 0.0), DType::real};
  return b->shape == shape ? *b : expand(*b, shape);
}

Tensor abs_of(const Tensor& t) {
  return map(t, DType::real, [](double v) { return std::fabs(v); });
}

// A copy of reduction node n as another reduction (same axis and keepdims).
Node as_reduction(const Node& n, const char* op) {
  Node r = n;
  r.op = op;
  r.dtype = DType::real;
  return r;
}

Bound bound(const Node& n, const TensorMap& m);

// How many additions a term of an n-term sum passes through, at most:
// n - 1 in order, ⌈log2 n⌉ in a tree.
double additions_per_term(int64_t n) {
  if (n <= 1) return 0;
  if (t_summation == Summation::in_order) return static_cast<double>(n - 1);
  return std::ceil(std::log2(static_cast<double>(n)));
}

// Each element: f(value, own bound...) over the node's value r and its operands.
Tensor unary_bound(const Tensor& a, const Bound& ba, const Tensor& r,
                   double (*f)(double a, double ba, double r)) {
  const Tensor b = filled(ba, a.shape);
  Tensor out{r.shape, std::vector<double>(r.size()), DType::real};
  for (size_t i = 0; i < r.size(); ++i) out.data[i] = f(a.data[i], b.data[i], r.data[i]);
  return out;
}

// where(c, x, y): the picked branch's bound. With steps, where c may flip
// (its own bound is not 0 there), the larger branch bound plus the jump
// |x - y| between the branches (inf where that is NaN: a NaN branch).
Bound where_bound(const Node& n, const TensorMap& m, const Tensor& r) {
  const Ref c = evaluate(*n.args[0], m);
  const Bound bx = bound(*n.args[1], m), by = bound(*n.args[2], m);
  const Bound bc = t_steps ? bound(*n.args[0], m) : Bound{};
  if (!bx && !by && !bc) return {};
  const Tensor cc = expand(*c, r.shape), x = filled(bx, r.shape), y = filled(by, r.shape);
  Tensor out{r.shape, std::vector<double>(r.size()), DType::real};
  for (size_t i = 0; i < r.size(); ++i) out.data[i] = cc.data[i] != 0 ? x.data[i] : y.data[i];
  if (bc) {
    const Tensor flips = filled(bc, r.shape);
    const Tensor xv = expand(*evaluate(*n.args[1], m), r.shape),
                 yv = expand(*evaluate(*n.args[2], m), r.shape);
    for (size_t i = 0; i < r.size(); ++i)
      if (flips.data[i] != 0) {
        const double jump = std::fabs(xv.data[i] - yv.data[i]);
        out.data[i] = std::max(x.data[i], y.data[i]) + (std::isnan(jump) ? HUGE_VAL : jump / t_unit);
      }
  }
  return out;
}

// With steps: how far a step function's value r moves when its operand,
// computed in unit u, moves within 2·u·Ba of its value a: the operand
// errs by up to u·Ba (first order), a kernel's computed in another order
// by about as much on its own side, and twice the window holds both (and
// the second-order terms). 0 where no step lies inside; in B's units.
Tensor step_bound(const Tensor& a, const Tensor& ba, const Tensor& r, double (*step)(double)) {
  Tensor out{r.shape, std::vector<double>(r.size()), DType::real};
  for (size_t i = 0; i < r.size(); ++i) {
    const double b = ba.data[i], x = a.data[i];
    if (b == 0 || !std::isfinite(x)) continue;  // exact, or a value no step moves
    const double w = 2 * t_unit * b;
    out.data[i] = std::max(std::fabs(step(x - w) - r.data[i]), std::fabs(step(x + w) - r.data[i])) / t_unit;
  }
  return out;
}

bool exact_operation(char op, double x, double y, double r);

// The exponent of v's lowest set bit (v = odd · 2^that); v finite, nonzero.
int lowest_bit(double v) {
  int e = 0;
  const double mantissa = std::frexp(std::fabs(v), &e);  // in [0.5, 1)
  return e - 53 + std::countr_zero(static_cast<uint64_t>(std::ldexp(mantissa, 53)));
}

// Whether every partial sum of x's elements, in any order, is a value of the
// arithmetic of unit t_unit (p bits): all are multiples of 2^g, g the
// lowest set bit among them, and no larger than Σ|x| <= 2^(p + g).
// The terms are x's elements from `first` on, `count` of them, `stride`
// apart (one slice of a reduction; all of x by default).
bool sums_exactly(const Tensor& x, size_t first = 0, size_t count = SIZE_MAX, size_t stride = 1) {
  int g = std::numeric_limits<int>::max();
  double total = 0;
  count = std::min(count, x.size());
  for (size_t j = 0; j < count; ++j) {
    const double v = x.data[first + j * stride];
    if (!std::isfinite(v)) return false;
    if (v == 0) continue;
    g = std::min(g, lowest_bit(v));
    total += std::fabs(v);
  }
  if (total == 0) return true;
  const int p = static_cast<int>(std::lround(-std::log2(t_unit)));
  return total * (1 + 0x1p-50) <= std::ldexp(1.0, p + g);  // (the fp64 total's own rounding)
}

// Whether f(x) = r is one of the exact points of f that every conforming
// libm returns exactly (call_bound, with steps), in the arithmetic of unit
// t_unit (an operand given exactly, so x is a value of it).
bool exact_point(const std::string& f, double x, double r) {
  if (f == "exp" || f == "cos") return x == 0 && r == 1;
  if (f == "expm1" || f == "log1p" || f == "sin" || f == "tanh" || f == "erf") return x == 0 && r == 0;
  if (f == "log") return x == 1 && r == 0;
  if (f == "sqrt") {
    // Correctly rounded, so exact wherever the root is a value of the
    // arithmetic: r · r == x exactly, r held by f32 in f32 arithmetic.
    if (!std::isfinite(r) || x < 0 || std::fma(r, r, -x) != 0) return false;
    if (t_unit == 0x1p-24) return static_cast<double>(static_cast<float>(r)) == r;
    return t_unit == 0x1p-53;
  }
  return false;
}

Bound call_bound(const Node& n, const TensorMap& m, const Tensor& r) {
  const std::string& f = n.op;
  if (f == "close" || f == "any" || f == "all" || f == "isfinite" || f == "isnan" || f == "isinf" ||
      f == "indices" || f == "arange")
    return {};
  if (f == "where") return where_bound(n, m, r);
  const Ref a = evaluate(*n.args[0], m);
  const Bound ba = bound(*n.args[0], m);
  if (f == "abs" || f == "transpose") {
    if (!ba) return {};
    return f == "abs" ? *ba : transpose_of(filled(ba, a->shape));
  }
  // floor, ceil, round: exact, but a step function: an operand that errs at
  // all may land on the other side of a step, a jump of 1 that no first-order
  // bound covers (inf there; 0 where the operand is exact).
  if (f == "floor" || f == "ceil" || f == "round") {
    if (!ba) return {};
    if (t_steps)
      return step_bound(*a, filled(ba, a->shape), r,
                        f == "floor"  ? static_cast<double (*)(double)>(std::floor)
                        : f == "ceil" ? static_cast<double (*)(double)>(std::ceil)
                                      : static_cast<double (*)(double)>(std::nearbyint));
    return map(*ba, DType::real, [](double b) { return b == 0 ? 0.0 : HUGE_VAL; });
  }
  if (f == "minimum" || f == "maximum") {
    const Bound bb = bound(*n.args[1], m);
    if (!ba && !bb) return {};
    return zip(filled(ba, a->shape), filled(bb, evaluate(*n.args[1], m)->shape), DType::real,
               [](double x, double y) { return std::max(x, y); });
  }
  if (f == "max" || f == "min") {
    if (!ba) return {};
    const Node r2 = as_reduction(n, "max");
    return reduce(r2, filled(ba, a->shape));
  }
  if (f == "cummax") {
    if (!ba) return {};
    Node c2 = n;
    c2.dtype = DType::real;
    return scan(c2, filled(ba, a->shape));
  }
  if (f == "sum" || f == "rowsum" || f == "mean") {
    const Node s = as_reduction(n, "sum");
    const Reduction red = reduction(n, a->shape);
    const double terms = static_cast<double>(red.s.n);
    // With steps: exact terms that every partial sum holds exactly, in any
    // order, add up exactly (mean(|w|) of [1, 3] is 2, and 1 / 2 a tie).
    if (t_steps && !ba && sums_exactly(*a)) {
      if (f != "mean") return {};
      const Tensor sums = reduce(s, *a);
      Tensor out{r.shape, std::vector<double>(r.size()), DType::real};
      for (size_t i = 0; i < r.size(); ++i)
        if (!exact_operation('/', sums.data[i], terms, r.data[i]))
          out.data[i] = std::fabs(r.data[i]) + t_tiny;
      return out;
    }
    Tensor out = reduce(s, abs_of(*a));
    for (double& v : out.data) v *= additions_per_term(red.s.n);
    if (ba) {
      const Tensor propagated = reduce(s, filled(ba, a->shape));
      for (size_t i = 0; i < out.size(); ++i) out.data[i] += propagated.data[i];
    }
    if (f == "mean")
      for (size_t i = 0; i < out.size(); ++i)
        out.data[i] = out.data[i] / terms + std::fabs(r.data[i]) + t_tiny;
    // With steps, slice by slice as above: a row of exact terms that add up
    // exactly (a softmax row of ties: exp(0) = 1 each, summing to V) is
    // exact even where other rows' terms are not.
    if (t_steps && out.size() == static_cast<size_t>(red.s.outer * red.s.inner)) {
      const Tensor b = filled(ba, a->shape);
      const auto n_terms = static_cast<size_t>(red.s.n), inner = static_cast<size_t>(red.s.inner);
      for (size_t o = 0; o < static_cast<size_t>(red.s.outer); ++o)
        for (size_t i = 0; i < inner; ++i) {
          const size_t first = o * n_terms * inner + i, at = o * inner + i;
          bool exact_terms = true;
          double sum = 0;  // exact when the slice sums exactly
          for (size_t j = 0; j < n_terms && exact_terms; ++j)
            exact_terms = b.data[first + j * inner] == 0, sum += a->data[first + j * inner];
          if (!exact_terms || !sums_exactly(*a, first, n_terms, inner)) continue;
          out.data[at] = f != "mean" || exact_operation('/', sum, terms, r.data[at])
                             ? 0
                             : std::fabs(r.data[at]) + t_tiny;
        }
    }
    return out;
  }
  if (f == "cumsum") {
    Node c2 = n;
    c2.dtype = DType::real;
    Tensor out = scan(c2, abs_of(r));  // Σ_{j<=k} |s_j|: each running sum's rounding
    if (ba) {
      const Tensor propagated = scan(c2, filled(ba, a->shape));
      for (size_t i = 0; i < out.size(); ++i) out.data[i] += propagated.data[i];
    }
    return out;
  }
  if (f == "diff") {
    const Tensor b = filled(ba, a->shape);
    const Split s = split(a->shape, *n.axis);
    const int64_t k = std::max<int64_t>(s.n - 1, 0);
    Tensor out{r.shape, std::vector<double>(r.size()), DType::real};
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < s.inner; ++i) {
          const size_t at = static_cast<size_t>((o * k + j) * s.inner + i);
          out.data[at] = b.data[static_cast<size_t>((o * s.n + j + 1) * s.inner + i)] +
                         b.data[static_cast<size_t>((o * s.n + j) * s.inner + i)] + std::fabs(r.data[at]);
        }
    return out;
  }
  if (f == "matmul") {
    const Ref b = evaluate(*n.args[1], m);
    const Bound bb = bound(*n.args[1], m);
    const Tensor aa = abs_of(*a), ab = abs_of(*b);
    const int64_t inner = a->shape.back();
    Tensor out = matmul_rt(aa, ab, DType::real);
    // The k products' roundings (each |a·b| once, and each below the normal
    // range by up to t_tiny) and the sum's.
    for (double& v : out.data) v = v * (1 + additions_per_term(inner)) + static_cast<double>(inner) * t_tiny;
    if (bb) {
      const Tensor t = matmul_rt(aa, *bb, DType::real);
      for (size_t i = 0; i < out.size(); ++i) out.data[i] += t.data[i];
    }
    if (ba) {
      const Tensor t = matmul_rt(*ba, ab, DType::real);
      for (size_t i = 0; i < out.size(); ++i) out.data[i] += t.data[i];
    }
    if (ba && bb) {  // the products' second-order terms, as a · b's (below)
      const Tensor t = matmul_rt(*ba, *bb, DType::real);
      for (size_t i = 0; i < out.size(); ++i) out.data[i] += t_unit * t.data[i];
    }
    return out;
  }
  using F = double (*)(double, double, double);
  const F rule =
      f == "exp"     ? F([](double, double b, double r) { return std::fabs(r) * b + 2 * std::fabs(r); })
      : f == "log"   ? F([](double a, double b, double r) { return b / std::fabs(a) + 2 * std::fabs(r); })
      : f == "sqrt"  ? F([](double, double b, double r) {
          return (b == 0 ? 0 : std::min(b / (2 * std::fabs(r)), std::sqrt(b / t_unit))) + std::fabs(r);
        })
      : f == "tanh"  ? F([](double, double b, double r) { return (1 - r * r) * b + 2 * std::fabs(r); })
      : f == "erf"   ? F([](double a, double b, double r) {
          return 1.1283791670955126 * std::exp(-a * a) * b + 2 * std::fabs(r);
        })
      : f == "erfc"  ? F([](double a, double b, double r) {
          return 1.1283791670955126 * std::exp(-a * a) * b + 10 * std::fabs(r);
        })
      : f == "log1p" ? F([](double a, double b, double r) { return b / std::fabs(1 + a) + 2 * std::fabs(r); })
      : f == "expm1" ? F([](double, double b, double r) { return std::fabs(1 + r) * b + 2 * std::fabs(r); })
      : (f == "sin" || f == "cos") ? F([](double, double b, double r) { return b + 2 * std::fabs(r); })
                                   : nullptr;
  if (!rule) throw std::logic_error("expr: no rounding bound for " + f);
  Tensor out = unary_bound(*a, ba, r, rule);
  const Tensor b = filled(ba, a->shape);
  for (size_t i = 0; i < out.size(); ++i) {
    // With steps: an exact operand at one of the function's exact points
    // rounds nothing, so a comparison of the result with a value it equals
    // is a tie the evaluation cannot move (exp(x) > 1 at x = 0 is false in
    // every evaluation, as x + 1 > 1 is). Only the points every conforming
    // libm returns exactly: C's Annex F (IEC 60559) special values
    // exp(±0) = 1, expm1(±0) = ±0, log(1) = +0, log1p(±0) = ±0, sin(±0) =
    // ±0, cos(±0) = 1, tanh(±0) = ±0, erf(±0) = ±0, and sqrt, which IEC
    // 60559 rounds correctly, of an exact square whose root the arithmetic
    // holds. (Not erfc(0) = 1, nor any other point: Annex F leaves them to
    // the libm's accuracy, and glibc's and CUDA's documented ulp errors are
    // no exactness.)
    if (t_steps && b.data[i] == 0 && exact_point(f, a->data[i], r.data[i])) {
      out.data[i] = 0;
      continue;
    }
    out.data[i] += 2 * t_tiny;  // within 1 ulp below the normal range too
  }
  return out;
}

// A real literal's own rounding: the evaluation holds the nearest number
// of its precision (unit `unit`), within unit·|c| of the decimal written.
// Exact (B = 0) where the literal is a short binary fraction that precision
// holds (0.5, 1.25, 3, 2^-20): a multiple of 2^-30 up to 2^53 whose
// mantissa fits its bits. Otherwise B = |c|: 0.3, 1e-3, 0.044715 (the f32
// evaluation of x · 0.3 erred by 1.6 units where B without it was 1.52).
// (A decimal past a double's own digits that rounds to such a fraction,
// 0.5000000000000000001, is taken as that fraction.)
double literal_bound(double c) {
  if (!std::isfinite(c) || c == 0) return 0;
  const double a = std::fabs(c);
  int e = 0;
  const double mantissa = std::frexp(a, &e);  // in [0.5, 1)
  const double bits = std::round(-std::log2(t_unit));
  const bool fits = std::ldexp(mantissa, static_cast<int>(bits)) ==
                    std::nearbyint(std::ldexp(mantissa, static_cast<int>(bits)));
  const bool short_fraction = a <= 0x1p53 && std::ldexp(a, 30) == std::nearbyint(std::ldexp(a, 30));
  return fits && short_fraction ? 0 : a;
}

// With steps, a boolean or integer node. A comparison of operands that err
// flips where they lie within twice their bounds of each other (the window
// of step_bound): a jump of 1, 1/u in B's units. not, and, or pass their
// operands' flips on; where() is where_bound; integer max, min, minimum,
// maximum and sum as below. isfinite, isnan, isinf and indices are exact
// (rounding moves no value across them but by overflow, which the naive
// baseline shows). Anything else (an index read through flags, a cumsum of
// them) is exact where every operand is and has no bound (inf) once one is
// not.
Bound discrete_bound(const Node& n, const TensorMap& m) {
  if (n.kind == Kind::number || n.kind == Kind::name) return {};
  if (n.kind == Kind::call &&
      (n.op == "isfinite" || n.op == "isnan" || n.op == "isinf" || n.op == "indices" || n.op == "arange"))
    return {};
  const Ref r = evaluate(n, m);
  if (n.kind == Kind::call && n.op == "where") return where_bound(n, m, *r);
  if (is_comparison(n)) {
    const Bound ba = bound(*n.args[0], m), bb = bound(*n.args[1], m);
    if (!ba && !bb) return {};
    const Tensor x = expand(*evaluate(*n.args[0], m), r->shape),
                 y = expand(*evaluate(*n.args[1], m), r->shape);
    const Tensor bx = filled(ba, r->shape), by = filled(bb, r->shape);
    Tensor out{r->shape, std::vector<double>(r->size()), DType::real};
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = bx.data[i] + by.data[i];
      if (e > 0 && !(std::fabs(x.data[i] - y.data[i]) > 2 * t_unit * e)) out.data[i] = 1 / t_unit;
    }
    // z == max(z) (an argmax's flags; or >=, or min with == and <=): the
    // element the extreme is computed from equals it in any evaluation, so
    // it flips only if another element of its row lies within the window
    // too (the extreme's bound, the row's largest, makes the window cover
    // both elements' errors). Each row's count of elements in the window.
    const Node &lhs = *n.args[0], &rhs = *n.args[1];
    const auto extreme_of = [](const Node& e, const Node& of) {
      return e.kind == Kind::call && (e.op == "max" || e.op == "min") && !e.args.empty() &&
             e.args[0].get() == &of;
    };
    const bool on_right = extreme_of(rhs, lhs), on_left = extreme_of(lhs, rhs);
    const Node* ext = on_right ? &rhs : on_left ? &lhs : nullptr;
    if (ext && evaluate(*ext->args[0], m)->shape == r->shape) {
      const bool is_max = ext->op == "max";
      const std::string& op = n.op;
      // true for the extreme's own element: z == m, z >= max, max <= z, z <= min, min >= z
      const bool holds_at_extreme = op == "==" || (on_right && op == (is_max ? ">=" : "<=")) ||
                                    (on_left && op == (is_max ? "<=" : ">="));
      if (holds_at_extreme) {
        Tensor near{r->shape, std::vector<double>(r->size()), DType::real};
        for (size_t i = 0; i < near.size(); ++i) near.data[i] = out.data[i] != 0 ? 1 : 0;
        const Tensor count = expand(reduce(as_reduction(*ext, "sum"), near), r->shape);
        for (size_t i = 0; i < out.size(); ++i)
          if (out.data[i] != 0 && x.data[i] == y.data[i] && count.data[i] == 1) out.data[i] = 0;
      }
    }
    return out;
  }
  // Integer reductions and elementwise extremes over flags that may flip:
  // max and min move by at most their operands' largest move (1-Lipschitz),
  // an integer sum by the sum of its terms' (integers add exactly).
  if (n.kind == Kind::call && n.dtype == DType::integer &&
      (n.op == "max" || n.op == "min" || n.op == "minimum" || n.op == "maximum"))
    return call_bound(n, m, *r);
  if (n.kind == Kind::call && n.dtype == DType::integer && (n.op == "sum" || n.op == "rowsum") &&
      n.args.size() == 1) {
    const Bound ba = bound(*n.args[0], m);
    if (!ba) return {};
    return reduce(as_reduction(n, "sum"), filled(ba, evaluate(*n.args[0], m)->shape));
  }
  const bool logic =
      (n.kind == Kind::binary && (n.op == "and" || n.op == "or")) || (n.kind == Kind::unary && n.op == "not");
  Bound out;
  for (const auto& arg : n.args) {
    const Bound b = bound(*arg, m);
    if (!b) continue;
    if (!logic) {
      if (std::any_of(b->data.begin(), b->data.end(), [](double v) { return v != 0; }))
        return Tensor{r->shape, std::vector<double>(r->size(), HUGE_VAL), DType::real};
      continue;
    }
    const Tensor f = filled(b, r->shape);
    if (!out)
      out = f;
    else
      for (size_t i = 0; i < f.size(); ++i) out->data[i] = std::max(out->data[i], f.data[i]);
  }
  return out;
}

// Whether x OP y is exactly r, and r is a value of the arithmetic of unit
// t_unit (f32 or f64): the computation then rounds nothing, in any order.
bool exact_operation(char op, double x, double y, double r) {
  if (!std::isfinite(r) || !std::isfinite(x) || !std::isfinite(y)) return false;
  if (t_unit == 0x1p-24) {
    if (static_cast<double>(static_cast<float>(r)) != r) return false;
  } else if (t_unit != 0x1p-53) {
    return false;
  }
  switch (op) {
    case '+':
    case '-': {  // Knuth's TwoSum: the rounding error of x ± y, exactly
      const double b = op == '+' ? y : -y, v = r - x;
      return (x - (r - v)) + (b - v) == 0;
    }
    case '*':
      return std::fma(x, y, -r) == 0;
    default:
      return y != 0 && std::fma(r, y, -x) == 0;
  }
}

// With steps: a real tensor's own rounding to the arithmetic of unit t_unit,
// |v| where it holds no value of it (an attr drawn in f64, which the naive
// baseline and an f32 kernel round: a step's window misses that rounding).
Bound name_rounding(const Tensor& v) {
  if (t_unit != 0x1p-24) return {};  // f64 holds every value; other units are not an arithmetic here
  Bound out;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v.data[i];
    if (!std::isfinite(x) || static_cast<double>(static_cast<float>(x)) == x) continue;
    if (!out) out = Tensor{v.shape, std::vector<double>(v.size()), DType::real};
    out->data[i] = std::fabs(x);
  }
  return out;
}

Bound bound(const Node& n, const TensorMap& m) {
  if (n.dtype != DType::real) return t_steps ? discrete_bound(n, m) : Bound{};
  switch (n.kind) {
    case Kind::number:
      if (const double b = literal_bound(n.value); b > 0) return Tensor::scalar(b, DType::real);
      return {};
    case Kind::name:
      return t_steps ? name_rounding(*evaluate(n, m)) : Bound{};
    case Kind::unary:
      return bound(*n.args[0], m);  // -a: exact
    case Kind::binary: {
      const Ref a = evaluate(*n.args[0], m), b = evaluate(*n.args[1], m);
      const Bound ba = bound(*n.args[0], m), bb = bound(*n.args[1], m);
      const std::string& op = n.op;
      if (op == "@") {
        Node mm = n;
        mm.kind = Kind::call;
        mm.op = "matmul";
        return call_bound(mm, m, *evaluate(n, m));
      }
      const Dims shape = broadcast_rt(a->shape, b->shape);
      const Tensor x = expand(*a, shape), y = expand(*b, shape), bx = filled(ba, shape),
                   by = filled(bb, shape);
      const Ref rr = evaluate(n, m);  // the node's value (kept: t_values)
      const Tensor& r = *rr;
      enum class Op { add, mul, div, pow } which = Op::add;  // chosen once, not per element
      if (op == "*") which = Op::mul;
      if (op == "/") which = Op::div;
      if (op == "**") which = Op::pow;
      if (op != "+" && op != "-" && op != "*" && op != "/" && op != "**")
        throw std::logic_error("expr: no rounding bound for " + op);
      Tensor out{shape, std::vector<double>(static_cast<size_t>(count(shape))), DType::real};
      const bool minus = op == "-";
      for (size_t i = 0; i < out.size(); ++i) {
        const double xa = x.data[i], ya = y.data[i], ri = std::fabs(r.data[i]);
        // With steps: exact operands and an exact result (254 / 127, w / 2)
        // round nothing, and a step at the value (a rounding tie) is then
        // no step a correct kernel can land on the other side of.
        if (t_steps && which != Op::pow && bx.data[i] == 0 && by.data[i] == 0 &&
            exact_operation(which == Op::add   ? (minus ? '-' : '+')
                            : which == Op::mul ? '*'
                                               : '/',
                            xa, ya, r.data[i]))
          continue;
        switch (which) {
          case Op::add:
            out.data[i] = bx.data[i] + by.data[i] + (t_reassociated ? std::fabs(xa) + std::fabs(ya) : ri);
            break;
          case Op::mul:  // (a + δa)(b + δb) - ab = a·δb + b·δa + δa·δb, the last in B's units u·Ba·Bb
            out.data[i] = std::fabs(ya) * bx.data[i] + std::fabs(xa) * by.data[i] +
                          t_unit * bx.data[i] * by.data[i] + ri + t_tiny;
            break;
          case Op::div:
            out.data[i] = (bx.data[i] + ri * by.data[i]) / std::fabs(ya) + ri + t_tiny;
            break;
          case Op::pow: {
            double from_x = 0;
            if (bx.data[i] != 0 && ya != 0) {
              const double holder = std::pow(t_unit * bx.data[i], ya) / t_unit;  // |δ|^b, b > 0
              // b >= 1: |(a + δ)^b - a^b| <= b·(|a| + |δ|)^(b-1)·|δ| (the mean
              // value theorem), the first-order b·|a|^(b-1)·|δ| with |a| widened
              // by δ: at a near 0 (a cancelled difference) the δ² of a square is
              // no smaller than the first-order term.
              from_x = xa == 0            ? (ya > 0 ? holder : HUGE_VAL)
                       : ya < 1 && ya > 0 ? std::min(std::fabs(ya * r.data[i] / xa) * bx.data[i], holder)
                       : ya >= 1 ? ya * std::pow(std::fabs(xa) + t_unit * bx.data[i], ya - 1) * bx.data[i]
                                 : std::fabs(ya * r.data[i] / xa) * bx.data[i];
            }
            const double from_y =
                by.data[i] == 0 || ri == 0 ? 0 : ri * std::fabs(std::log(std::fabs(xa))) * by.data[i];
            out.data[i] = from_x + from_y + ri + t_tiny;
            break;
          }
        }
      }
      return out;
    }
    case Kind::call:
      return call_bound(n, m, *evaluate(n, m));
    case Kind::index: {
      const Bound bx = bound(*n.args[0], m);
      if (!bx) return {};
      return index_of(filled(bx, evaluate(*n.args[0], m)->shape), n, m);
    }
  }
  throw std::logic_error("expr: unknown node");
}

}  // namespace

Tensor Expression::rounding_bound(const TensorMap& tensors, Summation sums, double unit, bool steps,
                                  bool reassociated) const {
  std::unordered_map<const Node*, Tensor> values;
  struct Scope {  // restores the plain evaluation even when this throws
    std::unordered_map<const Node*, Tensor>* saved = t_values;
    Summation saved_sums = t_summation;
    double saved_unit = t_unit;
    bool saved_steps = t_steps, saved_reassociated = t_reassociated;
    double saved_tiny = t_tiny;
    ~Scope() {
      t_values = saved, t_summation = saved_sums, t_unit = saved_unit, t_steps = saved_steps,
      t_reassociated = saved_reassociated, t_tiny = saved_tiny;
    }
  } scope;
  t_values = &values;
  t_summation = sums;
  t_unit = unit;
  t_steps = steps;
  t_reassociated = reassociated;
  // min_normal of the arithmetic of unit roundoff `unit`: f64, f32, f16
  // (bf16 has f32's range); f32's for any other (larger than f64's).
  t_tiny = unit == 0x1p-53 ? 0x1p-1022 : unit == 0x1p-11 ? 0x1p-14 : 0x1p-126;
  const Bound b = expr::bound(*root_, tensors);
  return filled(b, expr::evaluate(*root_, tensors)->shape);
}

bool is_target_name(std::string_view name) {
  return name.starts_with("target.") || name.starts_with("transformed.target.");
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    bool newline = false;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
      newline = newline || text[j] == '\n' || text[j] == '\r', ++j;
    if (j > i) {
      out.append(newline ? std::string_view(" ") : text.substr(i, j - i));
      i = j;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string Expression::shown() const {
  return one_line(text_);
}

bool Expression::target_shapes_as_declared(const TensorMap& tensors) const {
  return kprop::expr::target_shapes_as_declared(*root_, tensors);
}

Tensor Expression::evaluate(const TensorMap& tensors) const {
  const SharedValues shared;
  return *expr::evaluate(*root_, tensors);
}

int64_t Expression::longest_sum(const TensorMap& tensors) const {
  const SharedValues shared;
  std::function<int64_t(const Node&)> longest = [&](const Node& n) -> int64_t {
    int64_t most = 0;
    for (const auto& a : n.args)
      if (a) most = std::max(most, longest(*a));
    const bool call = n.kind == Kind::call && !n.args.empty() && n.args[0];
    if (call && (n.op == "sum" || n.op == "mean" || n.op == "rowsum"))
      most = std::max(most, reduction(n, expr::evaluate(*n.args[0], tensors)->shape).s.n);
    else if (call && n.op == "cumsum" && n.axis)
      most = std::max(most, split(expr::evaluate(*n.args[0], tensors)->shape, *n.axis).n);
    else if ((call && n.op == "matmul") || (n.kind == Kind::binary && n.op == "@")) {
      const Dims shape = expr::evaluate(*n.args[0], tensors)->shape;
      if (!shape.empty()) most = std::max(most, shape.back());
    }
    return most;
  };
  return longest(*root_);
}

namespace {
Tensor evaluate_with(const Node& root, const TensorMap& tensors, double (*round)(double), bool f32) {
  struct Scope {  // restores the rounding even when evaluation throws
    double (*saved)(double) = t_round;
    bool saved_f32 = t_round_f32;
    ~Scope() { t_round = saved, t_round_f32 = saved_f32; }
  } scope;
  t_round = round, t_round_f32 = f32;
  const SharedValues shared;
  Tensor out = *expr::evaluate(root, tensors);
  round_real(out);
  return out;
}
}  // namespace

Tensor Expression::evaluate_rounded(const TensorMap& tensors, double (*round)(double)) const {
  return evaluate_with(*root_, tensors, round, false);
}

Tensor Expression::evaluate_rounded(const TensorMap& tensors, FloatType type) const {
  switch (type) {
    case FloatType::f64:
      return evaluate_with(*root_, tensors, nullptr, false);
    case FloatType::f32:
      return evaluate_with(*root_, tensors, to_f32, true);
    case FloatType::f16:
      return evaluate_with(*root_, tensors, half::round_to_f16, false);
    case FloatType::bf16:
      return evaluate_with(*root_, tensors, half::round_to_bf16, false);
  }
  return evaluate(tensors);
}

namespace {

// A static shape of one element: a scalar, or every dim 1 (keepdims=true).
bool one_element(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](const std::string& d) { return d == "1"; });
}

// A reduction over all of its operand (no axis; keepdims or not).
bool whole_reduction(const Node& n) {
  return n.kind == Kind::call && !n.axis && n.args.size() == 1 &&
         (n.op == "sum" || n.op == "mean" || n.op == "min" || n.op == "max" || n.op == "any" ||
          n.op == "all");
}

// A logical reduction over all of its operand: all, any, and min and max of
// a bool tensor (which are all and any).
bool whole_logic_reduction(const Node& n) {
  return whole_reduction(n) &&
         (n.op == "all" || n.op == "any" || ((n.op == "min" || n.op == "max") && n.dtype == DType::boolean));
}

bool is_scalar_logic(const Node& n);
// An operand whose reduction over no element makes its comparison judge
// nothing (decide()).
bool may_judge_nothing(const Node& n) {
  return one_element(n.shape) && (whole_reduction(n) || is_scalar_logic(n));
}

// A one-element boolean whose verdict decide() gives: and, or, not, a
// logical reduction over all of its operand, and a comparison of a
// reduction over all of its operand (or of such a boolean).
bool is_scalar_logic(const Node& n) {
  if (!one_element(n.shape)) return false;
  if (n.kind == Kind::binary && (n.op == "and" || n.op == "or")) return true;
  if (n.kind == Kind::unary) return n.op == "not";
  if (is_comparison(n)) return may_judge_nothing(*n.args[0]) || may_judge_nothing(*n.args[1]);
  return whole_logic_reduction(n);
}

// The verdict of a scalar boolean, where a reduction over no element judges
// nothing (nullopt), not NumPy's all(empty) = true and any(empty) = false:
// `all(x[:, D:] > 0) or all(y < 0)` on a case with D columns is judged by
// its right side alone, and `not any(x[:, D:] <= 0)` there judges nothing
// (its case is discarded), as `all(x[:, D:] > 0)` does. A `not` of nothing
// judges nothing; a side of an `and` or `or` that judges nothing leaves the
// verdict to the other; both: nothing. However the reduction is written:
// with keepdims=true, as min or max of a bool tensor (all and any), or
// compared (`any(...) == false`, `sum(m[:, D:]) == 0`, `max(x[:, D:]) <= 1`:
// a comparison with a side reduced over no element judges nothing).
std::optional<bool> decide(const Node& n, const TensorMap& m) {
  if (!is_scalar_logic(n)) {
    // Every element true (a dim declared 1 is 1 on a case whose shapes are as declared).
    const Ref r = evaluate(n, m);
    if (r->size() == 0) return std::nullopt;
    return std::all_of(r->data.begin(), r->data.end(), [](double v) { return v != 0; });
  }
  if (n.kind == Kind::unary) {
    const auto a = decide(*n.args[0], m);
    return a ? std::optional<bool>(!*a) : std::nullopt;
  }
  if (is_comparison(n)) {
    // Each side's value, or nullopt where it reduces no element.
    auto side = [&](const Node& s) -> std::optional<Tensor> {
      if (s.dtype == DType::boolean && is_scalar_logic(s)) {
        const auto d = decide(s, m);
        if (!d) return std::nullopt;
        return Tensor{Dims(s.shape.size(), 1), {*d ? 1.0 : 0.0}, DType::boolean};
      }
      if (whole_reduction(s) && one_element(s.shape)) {
        const Ref x = evaluate(*s.args[0], m);
        if (x->size() == 0) return std::nullopt;
        return reduce(s, *x);
      }
      return Tensor(*evaluate(s, m));
    };
    const std::optional<Tensor> a = side(*n.args[0]);
    if (!a) return std::nullopt;
    const std::optional<Tensor> b = side(*n.args[1]);
    if (!b) return std::nullopt;
    const std::string& op = n.op;
    const Tensor t = zip(*a, *b, DType::boolean, [&](double x, double y) {
      return double(op == "=="   ? x == y
                    : op == "!=" ? x != y
                    : op == "<"  ? x < y
                    : op == "<=" ? x <= y
                    : op == ">"  ? x > y
                                 : x >= y);
    });
    if (t.size() == 0) return std::nullopt;
    return std::all_of(t.data.begin(), t.data.end(), [](double v) { return v != 0; });
  }
  if (n.kind == Kind::binary) {
    // Left to right, short-circuit, as evaluate() does: a guard such as
    // `D < 4 or x[0, 3] > 0` keeps the right side from reading out of range.
    // A side that judges nothing leaves the verdict to the other: to
    // nothing too where that one holds without reading the target
    // (`all(target.y[:, D:] == 0) and true` held on every case).
    const bool is_and = n.op == "and";
    const auto a = decide(*n.args[0], m);
    if (a && *a != is_and) return a;  // false and ..., true or ...
    const auto b = decide(*n.args[1], m);
    if (!a && !b) return std::nullopt;
    if (!a || !b) {
      const Node& other = a ? *n.args[0] : *n.args[1];
      const bool held = a ? *a : *b;
      if (held && !reads_target(other)) return std::nullopt;
      return held;
    }
    return b;
  }
  const Node& arg = *n.args[0];
  if (is_scalar_logic(arg)) return decide(arg, m);
  const Ref r = evaluate(arg, m);
  const Tensor& t = *r;
  if (t.size() == 0) return std::nullopt;
  const bool all = n.op == "all" || n.op == "min";  // min of a bool tensor is all, max is any
  for (size_t i = 0; i < t.size(); ++i)
    if ((t.data[i] != 0) != all) return !all;
  return all;
}

Expression::Outcome explain(const std::string& text, const Node& n, const TensorMap& m) {
  Expression::Outcome out;
  const auto src = [&](const Node& x) {
    return one_line(std::string_view(text).substr(x.begin, x.end - x.begin));
  };
  if (n.kind == Kind::call && !n.axis && (n.op == "all" || (n.op == "min" && n.dtype == DType::boolean)))
    return explain(text, *n.args[0], m);
  // Side by side only where neither side broadcasts: a side broadcast to
  // an empty tensor is no element of the `and`, which then holds.
  const auto unbroadcast = [&](const Node& side) {
    return side.shape == n.shape && std::find(side.shape.begin(), side.shape.end(), "?") == side.shape.end();
  };
  if (n.kind == Kind::binary && n.op == "and" && unbroadcast(*n.args[0]) && unbroadcast(*n.args[1])) {
    // A side that judges nothing on this case (close(k=) without a budget,
    // an empty slice) does not hide the other side's failure; the case is
    // discarded only when neither side judges anything.
    std::optional<NothingJudged> nothing;
    bool judged_target = false;
    for (const NodeP& side : n.args) {
      try {
        out = explain(text, *side, m);
        if (!out.holds) return out;
        judged_target = judged_target || reads_target(*side);
      } catch (const NothingJudged& e) {
        if (nothing) throw NothingJudged(fmt::format("{}; {}", nothing->what(), e.what()));
        nothing = e;
      }
    }
    // The side that held reads no output of the target: nothing of the
    // target was judged.
    if (nothing && !judged_target) throw *nothing;
    return out;  // every side held on what it judged, and one judged something
  }
  if (is_scalar_logic(n) && n.kind == Kind::binary && n.op == "or") {
    // Short-circuit as decide(): a true left side holds, the right unread.
    const std::optional<bool> left = decide(*n.args[0], m);
    if (left && *left) return out;
    if (!left) {
      // The verdict is the right side's, unless it holds reading no output
      // of the target (then nothing is judged, below).
      if (reads_target(*n.args[1])) return explain(text, *n.args[1], m);
      if (const auto right = decide(*n.args[1], m); right && !*right) return explain(text, *n.args[1], m);
    } else if (!decide(*n.args[1], m)) {
      return explain(text, *n.args[0], m);
    }
  }
  if (is_scalar_logic(n)) {
    const std::optional<bool> verdict = decide(n, m);
    if (!verdict)
      throw NothingJudged(
          fmt::format("`{}` judges nothing on this case (each reduction in it is over no element)", src(n)));
    if (*verdict) return out;
  }
  const bool is_close_call = n.kind == Kind::call && n.op == "close";
  const bool is_cmp = is_comparison(n);
  if (is_close_call || is_cmp) {
    const CloseArgs c = close_args(n, m, is_close_call);
    const Dims& shape = c.shape;
    const Tensor &a = *c.a, &b = *c.b;
    size_t failing = 0, worst = 0;
    double worst_score = -1;
    // The comparison, chosen once (not a string compare per element).
    enum class Cmp { eq, ne, lt, le, gt, ge } cmp = Cmp::ge;
    const std::string& op = n.op;
    if (!is_close_call)
      cmp = op == "=="   ? Cmp::eq
            : op == "!=" ? Cmp::ne
            : op == "<"  ? Cmp::lt
            : op == "<=" ? Cmp::le
            : op == ">"  ? Cmp::gt
                         : Cmp::ge;
    if (a.size() == 0)
      throw NothingJudged(
          fmt::format("`{}` compares no element on this case (shape {})", src(n), shape_text(shape)));
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a.data[i], y = b.data[i];
      bool ok;
      double score;  // how badly the element fails; NaN/inf mismatches first
      if (is_close_call) {
        ok = c.holds(i);
        score = c.code(i) == CloseArgs::compared && std::isfinite(x) && std::isfinite(y)
                    ? std::fabs(x - y) - (CloseArgs::at(c.atol, i) + CloseArgs::at(c.rtol, i) * std::fabs(y))
                    : std::numeric_limits<double>::infinity();
      } else {
        switch (cmp) {
          case Cmp::eq:
            ok = x == y, score = 0;
            break;
          case Cmp::ne:
            ok = x != y, score = 0;
            break;
          case Cmp::lt:
            ok = x < y, score = x - y;
            break;
          case Cmp::le:
            ok = x <= y, score = x - y;
            break;
          case Cmp::gt:
            ok = x > y, score = y - x;
            break;
          case Cmp::ge:
            ok = x >= y, score = y - x;
            break;
        }
        if (std::isnan(score)) score = std::numeric_limits<double>::infinity();
      }
      if (ok) continue;
      if (failing++ == 0 || score > worst_score) {
        worst = i;
        worst_score = score;
      }
    }
    if (!failing) return out;
    out.holds = false;
    const double x = a.data[worst], y = b.data[worst];
    out.measured = {{"lhs", x}, {"rhs", y}, {"difference", std::fabs(x - y)}};
    std::string detail;
    if (is_close_call && c.code(worst) == CloseArgs::unbounded) {
      detail = fmt::format(
          "the tolerance, read from the target's outputs, allows an infinite error here (atol {}, rtol {}): "
          "only an equal value is close",
          num(CloseArgs::at(c.atol, worst)), num(CloseArgs::at(c.rtol, worst)));
    } else if (is_close_call && c.code(worst) == CloseArgs::not_overflowed) {
      detail =
          "the reference lies past the output dtype's overflow threshold (overflow.X) by more than the "
          "policy's budget: a store rounding to nearest gives ±inf of the reference's sign";
    } else if (is_close_call && !(std::isfinite(x) && std::isfinite(y))) {
      detail = "a NaN or an infinity is close only to the same (NaN to NaN, inf to inf of its sign)";
    } else if (is_close_call) {
      const double rtol = CloseArgs::at(c.rtol, worst), atol = CloseArgs::at(c.atol, worst);
      const double allowed = allowed_error(atol, rtol, std::fabs(y));
      out.measured.push_back({"allowed", allowed});
      detail = fmt::format("|lhs - rhs| = {} > allowed {} (atol {} + rtol {} × |rhs|)", num(std::fabs(x - y)),
                           num(allowed), num(atol), num(rtol));
    } else {
      detail = fmt::format("{} {} {} is false", num(x), n.op, num(y));
    }
    out.message = fmt::format("`{}` fails at {} ({} of {} elements): lhs `{}` = {}, rhs `{}` = {}; {}",
                              src(n), index_text(shape, worst), failing, a.size(), src(*n.args[0]), num(x),
                              src(*n.args[1]), num(y), detail);
    return out;
  }
  // (A scalar `and`, `or`, `not`, `all` or `any` that gets here is false.)
  const Ref rt = is_scalar_logic(n) ? Ref(Tensor::scalar(0.0, DType::boolean)) : evaluate(n, m);
  const Tensor& t = *rt;
  if (t.size() == 0)
    throw NothingJudged(
        fmt::format("`{}` has no element on this case (shape {})", src(n), shape_text(t.shape)));
  size_t failing = 0, first = 0;
  for (size_t i = 0; i < t.size(); ++i)
    if (t.data[i] == 0 && failing++ == 0) first = i;
  if (!failing) return out;
  out.holds = false;
  out.message = fmt::format("`{}` is false at {} ({} of {} elements)", src(n), index_text(t.shape, first),
                            failing, t.size());
  // An `or` fails where both sides do: each side's own worst element says
  // why (a bound and its alternative, each with its values).
  if (n.kind == Kind::binary && n.op == "or" && unbroadcast(*n.args[0]) && unbroadcast(*n.args[1])) {
    const Expression::Outcome left = explain(text, *n.args[0], m), right = explain(text, *n.args[1], m);
    if (!left.holds && !right.holds)
      out.message += fmt::format("; on its own, {}; on its own, {}", left.message, right.message);
  }
  out.measured = {{"false_elements", static_cast<double>(failing)}};
  // An `and` whose sides broadcast (a [T, D] close next to a [D] one): the
  // `and` is false where a side is, so a side that fails on its own says
  // which and why, with its values (it said only "is false at [0, 1]").
  if (n.kind == Kind::binary && n.op == "and")
    for (const NodeP& side : n.args) {
      try {
        const Expression::Outcome own = explain(text, *side, m);
        if (own.holds) continue;
        out.message += fmt::format("; on its own, {}", own.message);
        out.measured.insert(out.measured.end(), own.measured.begin(), own.measured.end());
        break;
      } catch (const NothingJudged&) {  // that side judges nothing: the other may say
      }
    }
  // where(c, X, Y): the branch c picked at that element, when it is a
  // close() or a comparison computed at the where's own shape, gives its
  // values there (`where(mask, close(...), true)` said only "is false at").
  if (n.kind == Kind::call && n.op == "where" && n.args.size() == 3) {
    try {
      const Tensor cond = expand(*evaluate(*n.args[0], m), t.shape);
      const bool picked = cond.data[first] != 0;
      const Node& branch = *n.args[picked ? 1 : 2];
      const bool is_close_branch = branch.kind == Kind::call && branch.op == "close";
      if (is_close_branch || is_comparison(branch)) {
        const CloseArgs c = close_args(branch, m, is_close_branch);
        if (c.shape == t.shape) {
          const double x = c.a->data[first], y = c.b->data[first];
          std::string allowed;
          if (is_close_branch && c.code(first) == CloseArgs::compared && std::isfinite(x) && std::isfinite(y))
            allowed = fmt::format(
                " (|lhs - rhs| = {}, allowed {})", num(std::fabs(x - y)),
                num(allowed_error(CloseArgs::at(c.atol, first), CloseArgs::at(c.rtol, first), std::fabs(y))));
          out.message +=
              fmt::format("; there `{}` is {}, and `{}` compares lhs `{}` = {} with rhs `{}` = {}{}",
                          src(*n.args[0]), picked ? "true" : "false", src(branch), src(*branch.args[0]),
                          num(x), src(*branch.args[1]), num(y), allowed);
        }
      }
    } catch (const std::exception&) {  // no values to add: the message stands as it is
    }
  }
  return out;
}

// ---------------------------------------------------------------- what the target decided
// A verdict that holds may rest on no output of the target: every element
// of `all(where(row_masked, target.y == -inf, true))` on a case with no
// masked row is the constant branch's, and of `all(not c or target.y > 0)`
// where c is false everywhere the left side's; it held whatever the kernel
// returned. Such a case judges nothing (discarded, as a false `when:`).
//
// decided_by_target(n): for each element of n's value, whether an output of
// the target could change it. A where's element follows the branch it
// picked, and its condition where the branches differ there (or the other
// follows the target); an elementwise `and` follows a side where the other
// is true, an `or` a side where the other is false, and where a side
// decides the element alone (an `or`'s true side) it follows the target only
// if every such side does (`X or K >= 1` is true whatever X was); `not`,
// comparisons and arithmetic follow their operands; a reduction follows any
// element it reduces (none along an empty axis), a contraction over an
// empty inner dim nothing. Any other node that reads the target is taken to
// depend on it at every element (generous: only a holding verdict with no
// element decided by the target is discarded, and a node this cannot see
// through never makes one).
Tensor decided_by_target(const Node& n, const TensorMap& m);

Tensor mask_like(const Tensor& v, double bit) {
  return Tensor{v.shape, std::vector<double>(v.size(), bit), DType::boolean};
}

// The elements of a reduction's result (over n.axis, or all) that any
// decided element of its operand reaches.
Tensor any_reduced(const Node& n, const Tensor& mask) {
  const Reduction r = reduction(n, mask.shape);
  const Split s = r.s;
  Tensor out{r.shape, std::vector<double>(static_cast<size_t>(s.outer * s.inner), 0), DType::boolean};
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 0; k < s.n; ++k)
      for (int64_t i = 0; i < s.inner; ++i)
        if (mask.data[static_cast<size_t>((o * s.n + k) * s.inner + i)] != 0)
          out.data[static_cast<size_t>(o * s.inner + i)] = 1;
  return out;
}

Tensor decided_by_target(const Node& n, const TensorMap& m) {
  if (n.kind == Kind::binary && (n.op == "and" || n.op == "or") && n.may_drop_target) {
    // Each side's value and mask; a side that judges nothing (close(k=) with
    // no element to judge) leaves the verdict to the other, as in explain().
    using Side = std::optional<std::pair<Tensor, Tensor>>;
    const auto side = [&](const Node& x) -> Side {
      try {
        return std::pair{Tensor(*evaluate(x, m)), decided_by_target(x, m)};
      } catch (const NothingJudged&) {
        return std::nullopt;
      }
    };
    const bool is_and = n.op == "and";
    const Side a = side(*n.args[0]);
    // A scalar left side that decides (false and ..., true or ...) leaves
    // the right unread, as evaluate() does (it may guard an index), unless
    // the right reads no output of the target and decides too: then the
    // value is the same whatever the target returned (`all(X) or K >= 1`).
    if (a && n.shape.empty() && a->first.size() == 1 && (a->first.data[0] != 0) != is_and) {
      if (!n.args[1]->reads_target) try {
          const Ref b = evaluate(*n.args[1], m);
          if (b->size() == 1 && (b->data[0] != 0) != is_and) return mask_like(a->first, 0);
        } catch (const std::exception&) {  // unreadable without the left side's guard: the left decides
        }
      return a->second;
    }
    const Side b = side(*n.args[1]);
    if (!a || !b) {
      if (!a && !b) throw NothingJudged("neither side judges anything");
      return (a ? a : b)->second;
    }
    const Dims shape = broadcast_rt(a->first.shape, b->first.shape);
    const Tensor av = expand(a->first, shape), bv = expand(b->first, shape);
    const Tensor da = expand(a->second, shape), db = expand(b->second, shape);
    Tensor out{shape, std::vector<double>(static_cast<size_t>(count(shape)), 0), DType::boolean};
    // Where a side decides the element (a false side of an `and`, a true
    // side of an `or`), the target decides it if every such side is its
    // doing (one the target did not decide fixes it whatever the target
    // returned); elsewhere, if it decided either side.
    for (size_t i = 0; i < out.size(); ++i) {
      const bool a_decides = (av.data[i] != 0) != is_and, b_decides = (bv.data[i] != 0) != is_and;
      const bool ta = da.data[i] != 0, tb = db.data[i] != 0;
      out.data[i] = (a_decides || b_decides ? !((a_decides && !ta) || (b_decides && !tb)) : ta || tb) ? 1 : 0;
    }
    return out;
  }
  const Ref v = evaluate(n, m);
  if (!reads_target(n)) return mask_like(*v, 0);
  if (!n.may_drop_target) return mask_like(*v, 1);
  const Dims& shape = v->shape;
  Tensor out = mask_like(*v, 0);
  if (n.kind == Kind::call && n.op == "where" && n.args.size() == 3) {
    const Tensor c = expand(*evaluate(*n.args[0], m), shape);
    const Tensor va = expand(*evaluate(*n.args[1], m), shape), vb = expand(*evaluate(*n.args[2], m), shape);
    const Tensor dc = expand(decided_by_target(*n.args[0], m), shape);
    const Tensor da = expand(decided_by_target(*n.args[1], m), shape);
    const Tensor db = expand(decided_by_target(*n.args[2], m), shape);
    // The condition decides where the branches differ (NaN differs from
    // itself: generous) or the other branch is the target's doing;
    // `where(isnan(target.p), true, true)` is true whatever the target did.
    for (size_t i = 0; i < out.size(); ++i) {
      const bool picked_a = c.data[i] != 0;
      const bool other_differs = va.data[i] != vb.data[i] || (picked_a ? db.data[i] : da.data[i]) != 0;
      out.data[i] = ((picked_a ? da.data[i] : db.data[i]) != 0 || (dc.data[i] != 0 && other_differs)) ? 1 : 0;
    }
    return out;
  }
  if ((n.kind == Kind::call && n.op == "matmul") || (n.kind == Kind::binary && n.op == "@")) {
    const Ref a = evaluate(*n.args[0], m);  // its inner dim: the last
    return mask_like(*v, a->shape.empty() || a->shape.back() > 0 ? 1 : 0);
  }
  if (n.kind == Kind::unary) return decided_by_target(*n.args[0], m);
  if (n.kind == Kind::binary) {  // comparisons and arithmetic: either side
    const Tensor da = expand(decided_by_target(*n.args[0], m), shape);
    const Tensor db = expand(decided_by_target(*n.args[1], m), shape);
    for (size_t i = 0; i < out.size(); ++i) out.data[i] = (da.data[i] != 0 || db.data[i] != 0) ? 1 : 0;
    return out;
  }
  const bool reduces = n.kind == Kind::call && n.args.size() == 1 &&
                       (n.op == "sum" || n.op == "mean" || n.op == "rowsum" || n.op == "min" ||
                        n.op == "max" || n.op == "any" || n.op == "all");
  if (reduces) return any_reduced(n, decided_by_target(*n.args[0], m));
  return mask_like(*v, 1);
}

}  // namespace

Expression::Outcome Expression::check(const TensorMap& tensors) const {
  const SharedValues shared;
  t_empty_reduction = false;
  Outcome out = explain(text_, *root_, tensors);
  // Held: on what the target decided, or on nothing of it (decided_by_target).
  if (out.holds && root_->may_drop_target && (selective_ || t_empty_reduction)) {
    std::unordered_map<const Node*, Tensor> values;  // each node evaluated once, as in rounding_bound
    struct Scope {
      std::unordered_map<const Node*, Tensor>* saved = t_values;
      ~Scope() { t_values = saved; }
    } scope;
    t_values = &values;
    const Tensor decided = decided_by_target(*root_, tensors);
    if (std::none_of(decided.data.begin(), decided.data.end(), [](double v) { return v != 0; }))
      throw NothingJudged(fmt::format(
          "`{}` held without the target's outputs deciding any element on this case (a where's other "
          "branch, an and/or's other side, or a reduction over an empty axis decided each)",
          one_line(text_)));
  }
  return out;
}

}  // namespace kprop::expr
