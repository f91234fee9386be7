// The expression language of spec invariants (kprop/expr.h): evaluation
// (broadcasting, reductions, gather, NaN semantics, close), one test per
// load-time error class, the spec loader's positions, and prop_runner end to
// end (an expression invariant kills a mutant and its stored case replays).
#include "kprop/expr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include "kprop/float_type.h"
#include "kprop/spec.h"
#include "tests/support/cli.h"
#include "tests/support/spec_error.h"

namespace kprop::expr {
namespace {

const TensorInfos kInfos = tensor_table(R"(
x    [N, M]  real  a matrix
y    [M]     real  a row
v    [N]     real  a column
b    [N, M]  bool  a mask
idx  [K]     int   row indices
z    [K]     real  NaN and inf
w    [K]     real  NaN and inf, other signs
t.o  [N, M]  real  a dotted name
)");

bool same(const TensorInfo& a, const TensorInfo& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype && a.meaning == b.meaning;
}

TEST(TensorTable, ColumnsAndContinuationLines) {
  const TensorInfos t = tensor_table(R"(
s             []           int   a scalar
p.q           [B, 1, Nq]   bool  [i, j]: a meaning with a shape,
                                 a comma and a colon in it

m [N,M] real   spaced  out
)");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_TRUE(same(t[0], {"s", {}, DType::integer, "a scalar"}));
  EXPECT_TRUE(same(t[1], {"p.q",
                          {"B", "1", "Nq"},
                          DType::boolean,
                          "[i, j]: a meaning with a shape, a comma and a colon in it"}));
  EXPECT_TRUE(same(t[2], {"m", {"N", "M"}, DType::real, "spaced  out"}));
  EXPECT_TRUE(tensor_table("\n  \n").empty());
}

TEST(TensorTable, AMalformedLineIsNamed) {
  const auto error = [](const char* table) -> std::string {
    try {
      tensor_table(table);
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error("x [N] real fine\ny N real no shape"),
            "tensor table line 2: no [shape] after the name: 'y N real no shape'");
  EXPECT_EQ(error("  starts blank"),
            "tensor table line 1: a continuation before the first tensor: '  starts blank'");
  EXPECT_EQ(error("x [N] float what"),
            "tensor table line 1: the type is bool, int or real: 'x [N] float what'");
  EXPECT_EQ(error("x [N,,M] real gap"), "tensor table line 1: an empty dimension: 'x [N,,M] real gap'");
  EXPECT_EQ(error("x [N] real"), "tensor table line 1: no meaning: 'x [N] real'");
  EXPECT_EQ(error("x y [N] real two names"),
            "tensor table line 1: one name before the shape: 'x y [N] real two names'");
}

TensorMap tensors(std::vector<double> x = {1, 2, 3, 4, 5, 6}, std::vector<double> y = {10, 20, 30},
                  std::vector<double> v = {100, 200}) {
  TensorMap m;
  for (const auto& i : kInfos) m.want(i.name);
  m.put("x", Tensor::of({2, 3}, std::move(x)));
  m.put("y", Tensor::of({3}, std::move(y)));
  m.put("v", Tensor::of({2}, std::move(v)));
  m.put("b", Tensor::of({2, 3}, {1, 0, 1, 0, 0, 0}, DType::boolean));
  m.put("idx", Tensor::of({3}, {1, 0, -1}, DType::integer));
  m.put("z", Tensor::of({3}, {NAN, INFINITY, 1.0}));
  m.put("w", Tensor::of({3}, {NAN, -INFINITY, NAN}));
  m.put("t.o", Tensor::of({2, 3}, {1, 2, 3, 4, 5, 6}));
  return m;
}

Tensor eval(const std::string& text) {
  return Expression::compile(text, kInfos).evaluate(tensors());
}
std::vector<double> values(const std::string& text) {
  return eval(text).data;
}
std::vector<int64_t> shape(const std::string& text) {
  return eval(text).shape;
}

// The load-time error of `text`, as "offset: message".
std::string error_of(const std::string& text) {
  try {
    Expression::compile(text, kInfos);
  } catch (const ExprError& e) {
    return std::to_string(e.offset) + ": " + e.what();
  }
  return "(no error)";
}

TEST(Expr, ArithmeticAndBroadcasting) {
  EXPECT_EQ(values("x + y"), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values("x * v[:, None]"), (std::vector<double>{100, 200, 300, 800, 1000, 1200}));
  EXPECT_EQ(values("-x[0] / 2 + 1"), (std::vector<double>{0.5, 0, -0.5}));
  EXPECT_EQ(values("2 ** 3 - 1"), (std::vector<double>{7}));
  EXPECT_EQ(shape("x[..., None] + y[None, None, :]"), (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(Expression::compile("x + y", kInfos).shape(), "[N, M]");
  EXPECT_EQ(values("t.o - x"), (std::vector<double>(6, 0.0)));
}

TEST(Expr, ComparisonsLogicAndWhere) {
  EXPECT_EQ(values("x > 2 and not b"), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(values("b or x == 5"), (std::vector<double>{1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(values("where(b, x, -1)"), (std::vector<double>{1, -1, 3, -1, -1, -1}));
  EXPECT_EQ(eval("x >= 1").dtype, DType::boolean);
  EXPECT_EQ(eval("x[0, 0] + 1").dtype, DType::real);
  EXPECT_EQ(eval("idx + 1").dtype, DType::integer);
  EXPECT_EQ(values("min(x, 2.5)"), (std::vector<double>{1, 2, 2.5, 2.5, 2.5, 2.5}));
  EXPECT_EQ(values("maximum(y, 15)"), (std::vector<double>{15, 20, 30}));
  EXPECT_EQ(values("abs(-x[1])"), (std::vector<double>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(values("sqrt(exp(log(16)))")[0], 4);
}

// floor, ceil and round as NumPy's (round: ties to even), keeping an integer
// tensor's dtype; a step function has no first-order rounding bound, so an
// operand that errs makes it inf there (0 where the operand is exact).
TEST(Expr, FloorCeilAndRound) {
  EXPECT_EQ(values("floor(x / 4 - 1)"), (std::vector<double>{-1, -1, -1, 0, 0, 0}));
  EXPECT_EQ(values("ceil(x / 4 - 1)"), (std::vector<double>{-0.0, -0.0, -0.0, 0, 1, 1}));
  EXPECT_EQ(values("round(x / 2 - 1)"), (std::vector<double>{-0.0, 0, 0, 1, 2, 2}));  // ties: -0.5, 0.5, 1.5
  EXPECT_EQ(values("all(idx == floor(idx))"), (std::vector<double>{1}));
  EXPECT_EQ(values("x / 2 == round(x / 2)"), (std::vector<double>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(eval("floor(idx)").dtype, DType::integer);
  EXPECT_EQ(eval("round(x)").dtype, DType::real);
  const TensorMap m = tensors();
  EXPECT_EQ(Expression::compile("floor(x)", kInfos).rounding_bound(m).data, std::vector<double>(6, 0.0));
  for (double b : Expression::compile("round(x / 3)", kInfos).rounding_bound(m).data) EXPECT_EQ(b, HUGE_VAL);
}

// Of two equal values NumPy's maximum and minimum return the second, and its
// max and min fold in order with them: the sign of a zero result, which a
// later 1 / x sees, is NumPy's.
TEST(Expr, MaximumAndMinimumOfEqualValuesGiveTheSecondAsNumPyDoes) {
  EXPECT_EQ(values("1 / maximum(-0.0, 0.0)"), (std::vector<double>{INFINITY}));
  EXPECT_EQ(values("1 / maximum(0.0, -0.0)"), (std::vector<double>{-INFINITY}));
  EXPECT_EQ(values("1 / minimum(-0.0, 0.0)"), (std::vector<double>{INFINITY}));
  EXPECT_EQ(values("1 / minimum(0.0, -0.0)"), (std::vector<double>{-INFINITY}));
  EXPECT_EQ(values("1 / max(where(x[0] < 3, 0.0, -0.0), axis=-1)"), (std::vector<double>{-INFINITY}));
  EXPECT_EQ(values("1 / min(where(x[0] < 3, -0.0, 0.0), axis=-1)"), (std::vector<double>{INFINITY}));
}

// tanh, erf, sin, cos: elementwise in fp64 (C's <cmath>), real-valued, and
// rounded like exp/log/sqrt in the same-precision baseline.
TEST(Expr, TranscendentalFunctions) {
  // Within 4 ulps: the compiler may fold std::cos(100.0) more exactly than libm.
  const auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << i;
  };
  near(values("tanh(x[0] - 2)"), {std::tanh(-1.0), 0, std::tanh(1.0)});
  near(values("erf(y / 10 - 2)"), {std::erf(-1.0), 0, std::erf(1.0)});
  near(values("sin(x[1])"), {std::sin(4.0), std::sin(5.0), std::sin(6.0)});
  near(values("cos(v)"), {std::cos(100.0), std::cos(200.0)});
  EXPECT_EQ(eval("erf(idx)").dtype, DType::real);
  EXPECT_EQ(shape("cos(x[..., None])"), (std::vector<int64_t>{2, 3, 1}));
  // GELU, exact (erf) and its tanh approximation, differ by 1.5e-4 at 1.
  EXPECT_NEAR(values("0.5 * y / 10 * (1 + erf(y / 10 / sqrt(2)))")[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(values("0.5 * (1 + tanh(sqrt(2 / 3.141592653589793) * (1 + 0.044715)))")[0] -
                  values("0.5 * (1 + erf(1 / sqrt(2)))")[0],
              -0.000152755, 1e-9);
  // NaN and infinities pass through as in C: tanh(±inf) = ±1, erf(±inf) = ±1,
  // sin(inf) and cos(inf) are NaN.
  EXPECT_EQ(values("tanh(z[1:])"), (std::vector<double>{1, std::tanh(1.0)}));
  EXPECT_EQ(values("erf(w[1])"), (std::vector<double>{-1}));
  EXPECT_TRUE(std::isnan(values("sin(z[1])")[0]));
  EXPECT_TRUE(std::isnan(values("cos(z[0])")[0]));
  // The same-precision baseline rounds each result to the dtype.
  const auto to_f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  for (const std::string f : {"tanh", "erf", "sin", "cos"}) {
    const Tensor t = Expression::compile(f + "(x / 7)", kInfos).evaluate_rounded(tensors(), to_f32);
    const Tensor r = eval(f + "(x / 7)");
    for (size_t i = 0; i < t.data.size(); ++i) {
      EXPECT_EQ(t.data[i], to_f32(t.data[i])) << f;
      EXPECT_NEAR(t.data[i], r.data[i], 1e-7) << f;
    }
  }
  EXPECT_EQ(error_of("erf(x, y)"), "0: erf() takes 1 argument, got 2");
  // erfc, log1p, expm1: where 1 - erf(x), log(1 + x), exp(x) - 1 cancel.
  // GELU's left tail at x = -10: 0.5 * x * erfc(-x / sqrt(2)) is -7.6e-23;
  // through erf, 1 + erf(-7.07) is 0 in doubles.
  EXPECT_NEAR(values("0.5 * (0 - y[2] / 3) * erfc(y[2] / 3 / sqrt(2))")[0] / -7.619853024160527e-23, 1,
              1e-13);
  EXPECT_EQ(values("1 + erf((0 - y[2] / 3) / sqrt(2))")[0], 0);
  EXPECT_EQ(values("log1p(y * 1e-21)")[0], 1e-20);
  EXPECT_EQ(values("expm1(y * 1e-21)")[0], 1e-20);
  EXPECT_EQ(values("log(1 + y * 1e-21)")[0], 0);
  EXPECT_EQ(values("erfc(w[1])"), (std::vector<double>{2}));
  EXPECT_EQ(values("expm1(w[1])"), (std::vector<double>{-1}));
  EXPECT_TRUE(std::isnan(values("log1p(w[1])")[0]));
  EXPECT_TRUE(std::isnan(values("erfc(w[0])")[0]));
  EXPECT_EQ(eval("expm1(idx)").dtype, DType::real);
}

TEST(Expr, ReductionsAlongAxes) {
  EXPECT_EQ(values("sum(x, axis=0)"), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(values("sum(x, axis=-1)"), (std::vector<double>{6, 15}));
  EXPECT_EQ(values("rowsum(x)"), (std::vector<double>{6, 15}));
  EXPECT_EQ(shape("sum(x, axis=1, keepdims=true)"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(shape("sum(x)"), (std::vector<int64_t>{}));
  EXPECT_EQ(shape("max(x, keepdims=true)"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values("sum(x)"), (std::vector<double>{21}));
  EXPECT_EQ(values("mean(x, axis=0)"), (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(values("max(x, axis=0)"), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(values("min(x, axis=-1)"), (std::vector<double>{1, 4}));
  EXPECT_EQ(values("any(b, axis=1)"), (std::vector<double>{1, 0}));
  EXPECT_EQ(values("all(x > 0)"), (std::vector<double>{1}));
  EXPECT_EQ(values("sum(b)"), (std::vector<double>{2}));
  // Empty axes: -inf/inf, but false/true on a bool tensor (they were ±inf,
  // neither true nor false there).
  EXPECT_EQ(values("max(x[:, 0:0], axis=-1)"), (std::vector<double>{-INFINITY, -INFINITY}));
  EXPECT_EQ(values("max(b[:, 0:0], axis=-1)"), (std::vector<double>{0, 0}));
  EXPECT_EQ(values("min(b[:, 0:0], axis=-1)"), (std::vector<double>{1, 1}));
  // Division is by the axis length; the reductions keep NumPy's NaN rules.
  EXPECT_TRUE(std::isnan(values("max(z)")[0]));
  EXPECT_TRUE(std::isnan(values("sum(z)")[0]));
}

// any/all of a comparison fold as they compare (the last axis, or all);
// along another axis they compare first. Each is checked against the two
// steps, the comparison materialised by a where() first.
TEST(Expr, AnyAllOfAComparison) {
  const auto same = [](const std::string& fused, const std::string& steps) {
    const Tensor a = eval(fused), b = eval(steps);
    EXPECT_EQ(a.shape, b.shape) << fused;
    EXPECT_EQ(a.data, b.data) << fused;
    return a;
  };
  // Row i equals row j: the pairs broadcast to [N, N, M].
  Tensor t = same("all(x[:, None, :] == x[None, :, :], axis=-1)",
                  "all(where(x[:, None, :] == x[None, :, :], true, false), axis=-1)");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.data, (std::vector<double>{1, 0, 0, 1}));
  t = same("any(x[:, None, :] < y[None, :, None], axis=-1)",
           "any(where(x[:, None, :] < y[None, :, None], true, false), axis=-1)");
  EXPECT_EQ(t.data, (std::vector<double>{1, 1, 1, 1, 1, 1}));
  t = same("all(x > 2, axis=-1, keepdims=true)", "all(where(x > 2, true, false), axis=-1, keepdims=true)");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t.data, (std::vector<double>{0, 1}));
  EXPECT_EQ(same("all(x > 1, axis=0)", "all(where(x > 1, true, false), axis=0)").data,
            (std::vector<double>{0, 1, 1}));
  // NaN compares false, except with !=; empty runs: all true, any false.
  EXPECT_EQ(same("any(z == w)", "any(where(z == w, true, false))").data, (std::vector<double>{0}));
  EXPECT_EQ(same("all(z != w)", "all(where(z != w, true, false))").data, (std::vector<double>{1}));
  EXPECT_EQ(same("all(z >= w, keepdims=true)", "all(where(z >= w, true, false), keepdims=true)").shape,
            (std::vector<int64_t>{1}));
  EXPECT_EQ(same("all(x[:, 0:0] > 0, axis=-1)", "all(where(x[:, 0:0] > 0, true, false), axis=-1)").data,
            (std::vector<double>{1, 1}));
  EXPECT_EQ(same("any(x[:, 0:0] > 0, axis=-1)", "any(where(x[:, 0:0] > 0, true, false), axis=-1)").data,
            (std::vector<double>{0, 0}));
  EXPECT_EQ(same("all(x[0:0] <= 0, axis=-1)", "all(where(x[0:0] <= 0, true, false), axis=-1)").shape,
            (std::vector<int64_t>{0}));
  EXPECT_EQ(same("any(x != v[:, None])", "any(where(x != v[:, None], true, false))").data,
            (std::vector<double>{1}));
}

TEST(Expr, DiffAndRunningMaximum) {
  EXPECT_EQ(values("diff(x)"), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(shape("diff(x, axis=0)"), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(values("cummax(y * -1 + 25)"), (std::vector<double>{15, 15, 15}));
  EXPECT_EQ(values("cummax(x[:, 0:3] * 0 + y - 2 * x, axis=0)"), (std::vector<double>{8, 16, 24, 8, 16, 24}));
  EXPECT_EQ(values("cumsum(y)"), (std::vector<double>{10, 30, 60}));
  // "the best score never gets worse": a running maximum never decreases.
  EXPECT_EQ(values("all(diff(cummax(y)) >= 0)"), (std::vector<double>{1}));
}

TEST(Expr, IndexingAndGather) {
  EXPECT_EQ(values("x[1]"), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(values("x[:, -1]"), (std::vector<double>{3, 6}));
  EXPECT_EQ(values("x[0, 1:]"), (std::vector<double>{2, 3}));
  EXPECT_EQ(values("y[idx]"), (std::vector<double>{20, 10, 30}));
  EXPECT_EQ(shape("x[idx[0:2]]"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values("x[idx[0:2]]"), (std::vector<double>{4, 5, 6, 1, 2, 3}));
  EXPECT_EQ(values("x[:, idx]"), (std::vector<double>{2, 1, 3, 5, 4, 6}));
  EXPECT_EQ(values("y[where(idx < 0, 2, idx)]"), (std::vector<double>{20, 10, 30}));
  EXPECT_THROW(eval("y[idx + 2]"), EvalError);  // 3 is out of range for length 3
}

// Items together in one subscript: a gather beside slices, newaxis and
// ellipsis anywhere, empty slices, subscripts of subscripts.
TEST(Expr, IndexingItemsTogether) {
  EXPECT_EQ(shape("x[None, ..., 1:]"), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(values("x[None, ..., 1:]"), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_EQ(shape("x[:, None, idx]"), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(values("x[:, None, idx]"), (std::vector<double>{2, 1, 3, 5, 4, 6}));
  EXPECT_EQ(values("x[..., 0]"), (std::vector<double>{1, 4}));
  EXPECT_EQ(values("x[idx[0:2]][:, idx]"), (std::vector<double>{5, 4, 6, 2, 1, 3}));
  EXPECT_EQ(shape("x[-1, None]"), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(values("x[-1, None]"), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(shape("y[idx[None, :]]"), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(values("y[idx[None, :]]"), (std::vector<double>{20, 10, 30}));
  EXPECT_EQ(shape("x[:, idx[None, 0:2]]"), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(values("x[:, idx[None, 0:2]]"), (std::vector<double>{2, 1, 5, 4}));
  EXPECT_EQ(shape("x[1:1]"), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(shape("x[1:1, idx]"), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(values("x[0][1]"), (std::vector<double>{2}));
  EXPECT_EQ(shape("x[0][1]"), (std::vector<int64_t>{}));
}

TEST(Expr, MatmulAndTranspose) {
  EXPECT_EQ(values("x @ y"), (std::vector<double>{140, 320}));
  EXPECT_EQ(values("matmul(x, transpose(x))"), (std::vector<double>{14, 32, 32, 77}));
  EXPECT_EQ(shape("transpose(x) @ x"), (std::vector<int64_t>{3, 3}));
}

TEST(Expr, NanAndInfinityAreCloseOnlyToThemselves) {
  // z = [nan, inf, 1], w = [nan, -inf, nan]
  EXPECT_EQ(values("close(z, z)"), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(values("close(z, w)"), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(values("z == z"), (std::vector<double>{0, 1, 1}));  // IEEE: NaN != NaN
  EXPECT_EQ(values("isfinite(z)"), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(values("isnan(w)"), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(values("isinf(w)"), (std::vector<double>{0, 1, 0}));
}

// Audit findings: an integer zero has no sign (1 / -(N - N) is inf, as in
// NumPy's int64); slice bounds past 2^63 clamp to the axis (the cast had no
// defined value); a NaN tolerance from the spec's own tensors is the spec's
// error, not a verdict.
TEST(Expr, NumPyCornersOfIntegersSlicesAndClose) {
  EXPECT_EQ(values("1 / -(idx[0] - idx[0])"), (std::vector<double>{INFINITY}));
  EXPECT_EQ(values("1 / ((idx[0] - idx[0]) * -1)"), (std::vector<double>{INFINITY}));
  EXPECT_EQ(values("1 / -0"), (std::vector<double>{INFINITY}));
  EXPECT_EQ(shape("x[:, :9223372036854775808]"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shape("x[:, :99999999999999999999]"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shape("x[:, -99999999999999999999:]"), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(eval("close(y, y + 1, atol=z[0])"), ToleranceError);
  // Read only where the sides are finite and unequal: a NaN input makes the
  // tolerance NaN where it makes both sides NaN, and there NaN is close to NaN.
  EXPECT_EQ(values("close(z, z, atol=z)"), (std::vector<double>{1, 1, 1}));
  EXPECT_THROW(eval("close(y, y, atol=-y)"), ToleranceError);
}

// The first-order bound on the fp64 evaluation's own rounding (running
// error analysis, Expression::rounding_bound): checked where it can be, on
// the same operations rounded to f32, whose error must stay within
// 2^-24 · B (the bound's rules with f32's u; the fp64 value is exact to
// 2^-29 of that). Random inputs exact in f32, every rule of the analysis.
TEST(Expr, TheRoundingBoundHoldsForAnF32Evaluation) {
  const char* const exprs[] = {
      "x - y + x * y",
      "x / (abs(y) + 0.5) - 1",
      "exp(x) / sum(exp(x), axis=-1, keepdims=true)",
      "log(sum(exp(x - max(x, axis=-1, keepdims=true)), axis=-1)) + max(x, axis=-1)",
      "sqrt(x * x + y * y + 1)",
      "tanh(x) - erf(y) + sin(x) * cos(y)",
      "erfc(x) * 3 + log1p(abs(y)) - expm1(x / 3)",
      "cumsum(x, axis=1) - mean(x)",
      "diff(x * 3.1, axis=1)",
      "x @ y - v",
      "transpose(x)[1] * 0.7 - v * 0.3",
      "where(x > 0, x * 1.1, y - 0.9) + minimum(x, y) * maximum(x, 0.3)",
      "(abs(x) + 1) ** 1.5 - cummax(x, axis=1)",
      "1 - 0.7 * x - 0.3 * x",
      "sqrt(abs(x - mean(x, axis=-1, keepdims=true))) + abs(x - y) ** 0.5 + (x - y) ** 2",
  };
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> u(-3, 3);
  const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  for (const char* text : exprs) {
    const Expression e = Expression::compile(text, kInfos);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<double> x(6), y(3), v(2);
      for (auto* t : {&x, &y, &v})
        for (double& d : *t) d = f32(trial % 4 == 0 ? std::round(u(rng)) : u(rng));
      const TensorMap m = tensors(x, y, v);
      const Tensor exact = e.evaluate(m), rounded = e.evaluate_rounded(m, f32),
                   b = e.rounding_bound(m, Summation::in_order, 0x1p-24);
      ASSERT_EQ(b.shape, exact.shape) << text;
      // By FloatType: f32's rounding inlined, the same bits as the call.
      ASSERT_EQ(e.evaluate_rounded(m, FloatType::f32).data, rounded.data) << text;
      ASSERT_EQ(e.evaluate_rounded(m, FloatType::f64).data, exact.data) << text;
      ASSERT_EQ(e.evaluate_rounded(m, FloatType::bf16).data, e.evaluate_rounded(m, half::round_to_bf16).data)
          << text;
      for (size_t i = 0; i < exact.size(); ++i)
        ASSERT_LE(std::fabs(rounded.data[i] - exact.data[i]), 0x1p-24 * b.data[i] * 1.01 + 1e-300)
            << text << " element " << i << " trial " << trial;
    }
  }
  // Inputs where the f32 rounding reaches the bound's order, so that a rule
  // that leaves a term out fails here: a sum that drops its small terms
  // (1 + 2^-25 + 2^-25 is 1 in f32, 2^-24 off), an exp of a rounded argument
  // (20 + 2^-22 is 20 in f32: exp errs by 4 units of its own rounding).
  {
    const TensorMap m = tensors({1, 0x1p-25, 0x1p-25, 20, 0, 0}, {0x1p-22, 0, 0});
    for (const char* text : {"sum(x, axis=-1)", "exp(x + y)"}) {
      const Expression e = Expression::compile(text, kInfos);
      const Tensor exact = e.evaluate(m), rounded = e.evaluate_rounded(m, f32), b = e.rounding_bound(m);
      for (size_t i = 0; i < exact.size(); ++i)
        EXPECT_LE(std::fabs(rounded.data[i] - exact.data[i]), 0x1p-24 * b.data[i] * 1.01) << text << " " << i;
      EXPECT_NE(rounded.data, exact.data) << text;  // the rounding did show
    }
  }
  // Where the output cancels the bound follows the terms, not the output.
  const TensorMap m = tensors({1, 1, 1, 1, 1, 1});
  const Tensor b = Expression::compile("1 - 0.7 * x - 0.3 * x", kInfos).rounding_bound(m);
  EXPECT_GE(b.data[0], 1.0);
  EXPECT_LE(b.data[0], 4.0);
}

// A root or power of an operand that is exactly 0 in fp64 but carries
// rounding (x - mean(x) on a constant row: the mean's bound is 3 on [1, 1, 1],
// 6 on [2, 2, 2]) has no first-order bound; its error is (u·B)^b, B u·B.
// The rules gave 0/0 = NaN (a ** 2) and inf (sqrt), which a reduction spread
// over the row.
TEST(Expr, ARootOrPowerOfAnExactZeroHasTheHolderBound) {
  const TensorMap m = tensors({1, 1, 1, 2, 2, 2}, {0, 0, 0});
  const std::string a = "(x - mean(x, axis=-1, keepdims=true))";
  const double u = 0x1p-24;
  const Tensor root =
      Expression::compile("sqrt(" + a + ")", kInfos).rounding_bound(m, Summation::in_order, u);
  const Tensor square = Expression::compile(a + " ** 2", kInfos).rounding_bound(m, Summation::in_order, u);
  const Tensor half = Expression::compile(a + " ** 0.5", kInfos).rounding_bound(m, Summation::in_order, u);
  const Tensor var =
      Expression::compile("mean(" + a + " ** 2, axis=-1)", kInfos).rounding_bound(m, Summation::in_order, u);
  for (size_t i = 0; i < 6; ++i) {
    const double b = i < 3 ? 3 : 6;  // the bound of x - mean(x) there
    EXPECT_DOUBLE_EQ(root.data[i], std::sqrt(b / u)) << i;
    EXPECT_DOUBLE_EQ(half.data[i], std::sqrt(b / u)) << i;
    EXPECT_DOUBLE_EQ(square.data[i], u * b * b) << i;
  }
  for (double v : var.data) EXPECT_TRUE(std::isfinite(v)) << v;
  // Away from 0 the first-order rule stands: sqrt(4) with B = 1 gives 1/4 + 2.
  const Tensor away = Expression::compile("sqrt(x * 4)", kInfos)
                          .rounding_bound(tensors({1, 1, 1, 1, 1, 1}), Summation::in_order, u);
  EXPECT_DOUBLE_EQ(away.data[0], 4.0 / 4 + 2);
}

// Products of two values that are rounding noise (x - mean(x) on a constant
// row whose f32 mean is one ulp off, scaled up: a LayerNorm backward's
// xhat · mean(g · xhat) with rstd ~ 1000) err by δa·δb, all of it second
// order: the first-order rule said B = 0 where the f32 evaluation was off
// by 1.8e-4. The product rule keeps u·Ba·Bb.
TEST(Expr, AProductOfRoundingNoiseKeepsItsSecondOrderTerm) {
  const double c = 21.370685577392578;  // in f32, (c + c + c) / 3 is c + 2^-19
  const TensorMap m = tensors({c, c, c, 1, 1, 1});
  const std::string xhat = "(x - mean(x, axis=-1, keepdims=true)) * 4096";
  for (const std::string& text : {xhat + " * sum(" + xhat + ", axis=-1, keepdims=true)",
                                  "(" + xhat + ") ** 2", "(" + xhat + ") @ transpose(" + xhat + ")"}) {
    const Expression e = Expression::compile(text, kInfos);
    const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
    const Tensor exact = e.evaluate(m), rounded = e.evaluate_rounded(m, f32),
                 b = e.rounding_bound(m, Summation::in_order, 0x1p-24);
    EXPECT_EQ(exact.data[0], 0) << text;
    EXPECT_GT(std::fabs(rounded.data[0]), 1e-5) << text;  // the rounding did show
    for (size_t i = 0; i < exact.size(); ++i)
      EXPECT_LE(std::fabs(rounded.data[i] - exact.data[i]), 0x1p-24 * b.data[i] * 1.01) << text << " " << i;
  }
}

// Summation::tree: the bound of the same sums added as a pairwise tree (a
// blocked or parallel kernel's), checked against such a sum in f32 of a
// sum and a matmul's products; below the in-order bound from 4 terms on.
TEST(Expr, TheTreeRoundingBoundHoldsForAPairwiseF32Sum) {
  const std::function<float(const std::vector<float>&, size_t, size_t)> pairwise =
      [&](const std::vector<float>& p, size_t lo, size_t hi) -> float {
    if (hi - lo == 1) return p[lo];
    const size_t mid = lo + (hi - lo) / 2;
    return pairwise(p, lo, mid) + pairwise(p, mid, hi);
  };
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> u(-3, 3);
  const Expression sum = Expression::compile("sum(x, axis=-1)", kInfos),
                   matmul = Expression::compile("x @ y", kInfos);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + size_t(trial) % 70;
    std::vector<double> x(2 * n), y(n);
    for (auto* t : {&x, &y})
      for (double& d : *t) d = static_cast<float>(trial % 4 == 0 ? std::round(u(rng)) : u(rng));
    TensorMap m;
    m.want("x"), m.want("y");
    m.put("x", Tensor::of({2, static_cast<int64_t>(n)}, x));
    m.put("y", Tensor::of({static_cast<int64_t>(n)}, y));
    for (const bool products : {false, true}) {
      const Expression& e = products ? matmul : sum;
      const Tensor exact = e.evaluate(m), tree = e.rounding_bound(m, Summation::tree),
                   in_order = e.rounding_bound(m);
      for (size_t r = 0; r < 2; ++r) {
        std::vector<float> p(n);
        for (size_t k = 0; k < n; ++k)
          p[k] = products ? static_cast<float>(x[r * n + k]) * static_cast<float>(y[k])
                          : static_cast<float>(x[r * n + k]);
        const double got = pairwise(p, 0, n);
        ASSERT_LE(std::fabs(got - exact.data[r]), 0x1p-24 * tree.data[r] * 1.01 + 1e-300)
            << e.text() << " n " << n << " trial " << trial;
        EXPECT_LE(tree.data[r], in_order.data[r]);
        if (n >= 4 && in_order.data[r] > 0) {
          EXPECT_LT(tree.data[r], in_order.data[r]) << n;
        }
      }
    }
  }
}

TEST(Expr, CloseUsesRtolAndAtol) {
  EXPECT_EQ(values("close(y + 0.001, y)"), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values("close(y + 0.001, y, rtol=1e-4)"), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(values("close(y + 0.001, y, rtol=0, atol=0.002)"), (std::vector<double>{1, 1, 1}));
}

// close(k=): each target operand may err by k × its same-precision baseline's
// worst error plus its floor; the fp64 side is exact.
TEST(Expr, ClosePolicyScalesTheBaselineError) {
  const TensorInfos infos = {{"target.x", {"N"}, DType::real, ""},
                             {"reference.x", {"N"}, DType::real, ""},
                             {"naive.x", {"N"}, DType::real, ""},
                             {"floor.x", {}, DType::real, ""},
                             {"transformed.target.x", {"N"}, DType::real, ""},
                             {"transformed.reference.x", {"N"}, DType::real, ""},
                             {"transformed.naive.x", {"N"}, DType::real, ""},
                             {"transformed.floor.x", {}, DType::real, ""},
                             {"perm", {"N"}, DType::integer, ""}};
  // naive_last: the baseline's third element, where the reference is inf.
  auto holds = [&](const std::string& text, std::vector<double> target, double naive_last = INFINITY) {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    m.put("target.x", Tensor::of({3}, target));
    m.put("reference.x", Tensor::of({3}, {1, 2, INFINITY}));
    m.put("naive.x", Tensor::of({3}, {1.25, 2, naive_last}));  // worst finite error 0.25 (inf excluded)
    m.put("floor.x", Tensor::scalar(0.125));
    m.put("transformed.target.x", Tensor::of({3}, {1, 2, INFINITY}));
    m.put("transformed.reference.x", Tensor::of({3}, {1, 2, INFINITY}));
    m.put("transformed.naive.x", Tensor::of({3}, {1, 2.5, INFINITY}));  // worst error 0.5
    m.put("transformed.floor.x", Tensor::scalar(0));
    m.put("perm", Tensor::of({3}, {0, 1, 2}, DType::integer));
    return Expression::compile(text, infos).check(m).holds;
  };
  // allowed = 2 × 0.25 + 0.125 = 0.625
  EXPECT_TRUE(holds("all(close(target.x, reference.x, k=2))", {1.625, 2, INFINITY}));
  EXPECT_FALSE(holds("all(close(target.x, reference.x, k=2))", {1.6251, 2, INFINITY}));
  EXPECT_FALSE(holds("all(close(target.x, reference.x, k=2))", {1, 2, -INFINITY}));
  // Where the baseline does not reach the reference's inf (1/(x - mean(x)):
  // 1/0 in fp64, 1/±δ in f32), rounding decides: not judged.
  EXPECT_TRUE(holds("all(close(target.x, reference.x, k=2))", {1, 2, -INFINITY}, 5));
  EXPECT_TRUE(holds("all(close(target.x, reference.x, k=2))", {1, 2, 3e38}, NAN));
  EXPECT_FALSE(holds("all(close(target.x, reference.x, k=2))", {1.6251, 2, -INFINITY}, 5));
  // Two target operands: the budgets add (0.625 + 2 × 0.5 + 0).
  EXPECT_TRUE(holds("all(close(transformed.target.x, target.x, k=2))", {2.625, 2, INFINITY}));
  EXPECT_FALSE(holds("all(close(transformed.target.x, target.x, k=2))", {2.626, 2, INFINITY}));
  // An indexed target operand (a relation's reordering) brings its budget
  // too: it was taken as exact, one budget where the policy gives two.
  EXPECT_TRUE(holds("all(close(transformed.target.x, target.x[perm], k=2))", {2.625, 2, INFINITY}));
  EXPECT_FALSE(holds("all(close(transformed.target.x, target.x[perm], k=2))", {2.626, 2, INFINITY}));
  const std::string why = [&] {
    try {
      Expression::compile("close(reference.x, naive.x, k=1)", infos);
    } catch (const ExprError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  }();
  EXPECT_NE(why.find("needs a target output"), std::string::npos) << why;
}

// A target operand times or over an exact number, or negated, however
// written, brings that multiple of its budget: a literal -2 is a negation of
// 2, and each step was once taken alone (a negation, or a bare number's
// product), so `-2 * target.x` brought none and a kernel within the policy
// on both runs failed the relation.
TEST(Expr, ClosePolicyScalesAnOperandHoweverItsFactorIsWritten) {
  TensorInfos infos;
  for (const std::string pre : {"", "transformed."}) {
    for (const char* t : {"target.x", "reference.x", "naive.x"})
      infos.push_back({pre + t, {"N"}, DType::real, ""});
    infos.push_back({pre + "floor.x", {}, DType::real, ""});
  }
  // target.x's budget 2 × 0.25 + 0.125 = 0.625, transformed.target.x's 2 × 0.5.
  const auto holds = [&](const std::string& text, double transformed) {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    m.put("target.x", Tensor::of({2}, {1, 2}));
    m.put("reference.x", Tensor::of({2}, {1, 2}));
    m.put("naive.x", Tensor::of({2}, {1.25, 2}));
    m.put("floor.x", Tensor::scalar(0.125));
    m.put("transformed.target.x", Tensor::of({2}, {transformed, -4}));
    m.put("transformed.reference.x", Tensor::of({2}, {-2, -4}));
    m.put("transformed.naive.x", Tensor::of({2}, {-2, -4.5}));
    m.put("transformed.floor.x", Tensor::scalar(0));
    return Expression::compile(text, infos).check(m).holds;
  };
  // allowed = 1 + 2 × 0.625 = 2.25 about -2 × target.x = -2.
  for (const char* rhs : {"-2 * target.x", "target.x * -2", "2 * -target.x", "-(2 * target.x)",
                          "-(target.x * 2)", "-target.x / 0.5", "target.x / -0.5", "2 * (-1 * target.x)",
                          "-(-(-2 * target.x))", "-4 * target.x / 2"}) {
    const std::string e = std::string("all(close(transformed.target.x, ") + rhs + ", k=2))";
    EXPECT_TRUE(holds(e, -2 + 2.25)) << e;
    EXPECT_FALSE(holds(e, -2 + 2.26)) << e;
  }
  // The only target operand, negated by a product: it has a budget (the
  // load said close(k=) needed a target output).
  EXPECT_TRUE(holds("all(close(-1 * target.x, -reference.x, k=2))", 0));
  // A product of two target outputs, or a number that is no literal, is no multiple.
  EXPECT_FALSE(holds("all(close(transformed.target.x, (1 + 1) * -target.x, k=2))", -2 + 2.25));
}

// A relation between two runs of x, close(transformed.target.x, target.x,
// k=1): both with the same reference and baseline, floor 0 and f16's
// overflow threshold; checked on each case by one compiled expression.
struct TwoRuns {
  TensorInfos infos;
  Expression e;
  TwoRuns() {
    for (const std::string pre : {"", "transformed."}) {
      infos.push_back({pre + "target.x", {"N"}, DType::real, ""});
      for (const char* t : {"reference.x", "naive.x"}) infos.push_back({pre + t, {"N"}, DType::real, ""});
      for (const char* t : {"floor.x", "overflow.x"}) infos.push_back({pre + t, {}, DType::real, ""});
    }
    e = Expression::compile("all(close(transformed.target.x, target.x, k=1))", infos);
  }
  bool holds(const std::vector<double>& reference, const std::vector<double>& naive,
             const std::vector<double>& target, const std::vector<double>& transformed) const {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    const int64_t n = static_cast<int64_t>(reference.size());
    for (const std::string pre : {"", "transformed."}) {
      m.put(pre + "reference.x", Tensor::of({n}, reference));
      m.put(pre + "naive.x", Tensor::of({n}, naive));
      m.put(pre + "floor.x", Tensor::scalar(0));
      m.put(pre + "overflow.x", Tensor::scalar(65520));
    }
    m.put("target.x", Tensor::of({n}, target));
    m.put("transformed.target.x", Tensor::of({n}, transformed));
    return e.check(m).holds;
  }
};

// close(k=)'s budget is one node its rewrite refers to several times (the
// tolerance and, with overflow.X published, the masks of both operands):
// computed once per check, and again on the next case. One compiled
// expression checked on a case with a wide budget, then on one with a
// narrow budget, fails the second: a budget kept from the first passed it.
TEST(Expr, ClosePolicyBudgetIsEachCasesOwn) {
  const TwoRuns r;
  auto check = [&](double naive_error) {  // transformed.target.x 0.5 off
    return r.holds({1, 2}, {1 + naive_error, 2}, {1, 2}, {1.5, 2});
  };
  EXPECT_TRUE(check(0.25));   // budget 0.25 + 0.25
  EXPECT_FALSE(check(0.01));  // budget 0.02
  EXPECT_TRUE(check(0.25));
}

// close(k=) compares every element without its masks only where each
// operand's target, baseline and reference are finite. A run that rounds to
// +inf where the reference lies within the budget of the overflow threshold
// (a store of 65519.5 + 1 in f16) against one that stays finite is not
// judged there: the pair holds. Skipping the masks because the baselines and
// references are finite compared inf with 65519 and failed it.
TEST(Expr, ClosePolicyJudgesAnInfiniteRunWithItsMasks) {
  const TwoRuns r;
  auto holds = [&](double transformed_last) {  // budget 1: 65519 + 1 reaches 65520
    return r.holds({1, 65519}, {1, 65520}, {1, 65519}, {1, transformed_last});
  };
  EXPECT_TRUE(holds(INFINITY));  // one run may round to +inf there: not judged
  EXPECT_TRUE(holds(65519.5));   // compared, within 1 + 1
  EXPECT_FALSE(holds(65530));    // compared, 11 off
  EXPECT_FALSE(holds(-INFINITY));
}

// close(k=) takes the baseline's error per group of floor.X's shape: per
// row of a [R, 1] floor (and per element of an [R] one), over the tensor
// for a scalar. One max over the tensor let a small row be all zeros and
// pass: the large row's naive error set everyone's budget.
TEST(Expr, ClosePolicyTakesTheBaselineErrorPerGroupOfTheFloor) {
  auto holds = [&](std::vector<std::string> floor_shape, const std::vector<double>& target) {
    const TensorInfos infos = {{"target.x", {"R", "C"}, DType::real, ""},
                               {"reference.x", {"R", "C"}, DType::real, ""},
                               {"naive.x", {"R", "C"}, DType::real, ""},
                               {"floor.x", floor_shape, DType::real, ""}};
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    m.put("target.x", Tensor::of({2, 2}, target));
    m.put("reference.x", Tensor::of({2, 2}, {1000, 2000, 1e-3, 2e-3}));
    m.put("naive.x", Tensor::of({2, 2}, {1001, 2000, 1e-3, 2e-3}));  // row 0 errs by 1, row 1 by 0
    if (floor_shape.empty())
      m.put("floor.x", Tensor::scalar(1e-6));
    else if (floor_shape.size() == 2)
      m.put("floor.x", Tensor::of({2, 1}, {1e-6, 1e-6}));
    else
      m.put("floor.x", Tensor::of({2}, {1e-6, 1e-6}));  // [C]: broadcast along the rows
    return Expression::compile("all(close(target.x, reference.x, k=2))", infos).check(m).holds;
  };
  const std::vector<double> small_row_zero = {1000, 2000, 0, 0}, within = {1001.5, 2000, 1e-3, 2e-3};
  // A scalar floor: one group; row 0's naive error 1 budgets row 1 too.
  EXPECT_TRUE(holds({}, small_row_zero));
  // [R, 1]: per row. Row 1 is held to 2 × 0 + 1e-6.
  EXPECT_FALSE(holds({"R", "1"}, small_row_zero));
  EXPECT_TRUE(holds({"R", "1"}, within));
  // [C] (a leading axis it lacks): per column, over the rows: column 0's
  // naive error is 1, column 1's is 0.
  EXPECT_TRUE(holds({"C"}, {1001.5, 2000, 0, 2e-3}));
  EXPECT_FALSE(holds({"C"}, {1000, 2000, 1e-3, 0}));
}

TEST(Expr, CheckExplainsTheWorstElement) {
  const auto ok = Expression::compile("close(x, t.o)", kInfos).check(tensors());
  EXPECT_TRUE(ok.holds);
  const auto o = Expression::compile("close(x + 0.5 * b, t.o, atol=0.1)", kInfos).check(tensors());
  ASSERT_FALSE(o.holds);
  EXPECT_NE(o.message.find("`close(x + 0.5 * b, t.o, atol=0.1)` fails at [0, 0] (2 of 6 elements)"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("lhs `x + 0.5 * b` = 1.5, rhs `t.o` = 1"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("allowed 0.10001"), std::string::npos) << o.message;
  // The worst of several failures, through all(...) and `and`.
  const auto c = Expression::compile("all(x > 0) and all(x <= y / 5)", kInfos).check(tensors());
  ASSERT_FALSE(c.holds);
  EXPECT_NE(c.message.find("`x <= y / 5` fails at [1, 0] (2 of 6 elements)"), std::string::npos) << c.message;
  const auto f = Expression::compile("all(b, axis=0)", kInfos).check(tensors());
  ASSERT_FALSE(f.holds);
  EXPECT_NE(f.message.find("is false at [0] (3 of 3 elements)"), std::string::npos) << f.message;
  // A YAML block scalar keeps line breaks: messages quote it on one line.
  const auto nl = Expression::compile("close(x + 0.5 * b,\n      t.o, atol=0.1)", kInfos).check(tensors());
  ASSERT_FALSE(nl.holds);
  EXPECT_EQ(nl.message.find('\n'), std::string::npos) << nl.message;
  EXPECT_NE(nl.message.find("`close(x + 0.5 * b, t.o, atol=0.1)` fails"), std::string::npos) << nl.message;
  // An `and` whose sides broadcast ([2, 3] and [3]): the side that fails,
  // with its values (it said only "is false at [0, 2] (2 of 6 elements)").
  const auto a = Expression::compile("(x > 0) and (y < 25)", kInfos).check(tensors());
  ASSERT_FALSE(a.holds);
  EXPECT_NE(
      a.message.find("is false at [0, 2] (2 of 6 elements); on its own, `(y < 25)` fails at [2] (1 of 3 "
                     "elements): lhs `y` = 30, rhs `25` = 25"),
      std::string::npos)
      << a.message;
  // where(c, X, true): the branch c picked there, with its values (it said
  // only "is false at [1, 0] (2 of 6 elements)").
  const auto w = Expression::compile("where(x > 3, x <= y / 5, true)", kInfos).check(tensors());
  ASSERT_FALSE(w.holds);
  EXPECT_NE(w.message.find("is false at [1, 0] (2 of 6 elements); there `x > 3` is true, and `x <= y / 5` "
                           "compares lhs `x` = 4 with rhs `y / 5` = 2"),
            std::string::npos)
      << w.message;
  // An `or` of two bounds: each side's own values (it said only "is false").
  const auto e =
      Expression::compile("close(x + 0.5 * b, t.o, atol=0.1) or close(x + 0.5 * b, t.o, atol=0.2)", kInfos)
          .check(tensors());
  ASSERT_FALSE(e.holds);
  EXPECT_NE(
      e.message.find("is false at [0, 0] (2 of 6 elements); on its own, `close(x + 0.5 * b, t.o, atol=0.1)` "
                     "fails at [0, 0]"),
      std::string::npos)
      << e.message;
  EXPECT_NE(
      e.message.find("on its own, `close(x + 0.5 * b, t.o, atol=0.2)` fails at [0, 0] (2 of 6 elements): "
                     "lhs `x + 0.5 * b` = 1.5"),
      std::string::npos)
      << e.message;
}

// close(k=) over two target operands (a relation between runs) where one
// run's half store may or must be ±inf: the pair cannot be compared, and the
// element is not judged (it passed, leaving the other run unjudged: a kernel
// writing 0 there passed); both ±inf as they may be hold, judged.
TEST(Expr, ARelationWhereOneRunOverflowsJudgesNotThePair) {
  TensorInfos infos;
  for (const std::string pre : {"", "transformed."})
    for (const char* t : {"target.x", "reference.x", "naive.x"})
      infos.push_back({pre + t, {"N"}, DType::real, ""});
  for (const std::string pre : {"", "transformed."})
    for (const char* t : {"floor.x", "overflow.x"}) infos.push_back({pre + t, {}, DType::real, ""});
  // Element 0: the transformed reference 65519.8 lies within the budget of
  // f16's threshold, so its run may store inf; the other run's reference is
  // half that. Element 1 (when there): both runs finite and exact.
  auto check = [&](std::vector<double> x, std::vector<double> t_x, size_t n) {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    auto put = [&](const std::string& name, std::vector<double> v) {
      v.resize(n);
      m.put(name, Tensor::of({static_cast<int64_t>(n)}, v));
    };
    put("target.x", x);
    put("reference.x", {32759.9, 1});
    put("naive.x", {32759.9, 1});
    put("transformed.target.x", t_x);
    put("transformed.reference.x", {65519.8, 2});
    put("transformed.naive.x", {65519.8, 2});
    for (const std::string pre : {"", "transformed."}) {
      m.put(pre + "floor.x", Tensor::scalar(16));
      m.put(pre + "overflow.x", Tensor::scalar(65520));
    }
    return Expression::compile("close(transformed.target.x, 2 * target.x, k=2)", infos).check(m);
  };
  const double inf = INFINITY;
  EXPECT_THROW(check({0}, {inf}, 1), NothingJudged);  // it held, judging nothing of the run that wrote 0
  EXPECT_TRUE(check({0, 1}, {inf, 2}, 2).holds);      // element 1 judged; element 0 not
  EXPECT_FALSE(check({0, 1}, {inf, 200}, 2).holds);
  // Not the pair's to judge either (matches_reference judges each run).
  EXPECT_THROW(check({inf}, {inf}, 1), NothingJudged);
  EXPECT_TRUE(check({32759.9}, {65519.8}, 1).holds);  // both finite: compared
}

// A relation between two runs judges the relation: where both runs missed
// an overflow the reference says their stores must make (both finite where
// the reference lies past f16's threshold), their values are compared as
// any others. Two equal values failed a permutation, the failure blamed on
// the relation for what matches_reference judges. One run ±inf as it must
// be against the other's finite value is compared too: not close.
TEST(Expr, ARelationWhereBothRunsMissAnOverflowComparesTheirValues) {
  TensorInfos infos;
  for (const std::string pre : {"", "transformed."}) {
    for (const char* t : {"target.x", "reference.x", "naive.x"})
      infos.push_back({pre + t, {"N"}, DType::real, ""});
    for (const char* t : {"floor.x", "overflow.x"}) infos.push_back({pre + t, {}, DType::real, ""});
  }
  auto check = [&](double x, double t_x) {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    for (const std::string pre : {"", "transformed."}) {
      m.put(pre + "reference.x", Tensor::of({1}, {1e5}));
      m.put(pre + "naive.x", Tensor::of({1}, {INFINITY}));
      m.put(pre + "floor.x", Tensor::scalar(16));
      m.put(pre + "overflow.x", Tensor::scalar(65520));
    }
    m.put("target.x", Tensor::of({1}, {x}));
    m.put("transformed.target.x", Tensor::of({1}, {t_x}));
    return Expression::compile("close(transformed.target.x, target.x, k=2)", infos).check(m);
  };
  EXPECT_TRUE(check(30000, 30000).holds);
  EXPECT_FALSE(check(30000, 20000).holds);
  const auto one_inf = check(30000, INFINITY);
  ASSERT_FALSE(one_inf.holds);
  EXPECT_NE(one_inf.message.find("a NaN or an infinity is close only to the same"), std::string::npos)
      << one_inf.message;
  EXPECT_TRUE(check(INFINITY, INFINITY).holds);
}

// indices(x, axis=k): x's shape, int, each element's index along axis k:
// positions and masks without running counts (cumsum(x * 0 + 1), NaN
// from x's first NaN or inf on). Exact: no rounding bound. Along a dim, it
// is the position there, so not independent along it (a slice moves it).
TEST(Expr, IndicesAreEachElementsPositionAlongAnAxis) {
  const auto values = [](const std::string& e) { return eval(e).data; };
  EXPECT_EQ(values("indices(x)"), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(values("indices(x, axis=0)"), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(values("indices(z)"), (std::vector<double>{0, 1, 2}));  // NaN and inf: positions still
  EXPECT_EQ(values("indices(x, axis=1) <= indices(x, axis=0)"), (std::vector<double>{1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(eval("indices(x)").dtype, DType::integer);
  EXPECT_EQ(shape("indices(x, axis=0)"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Expression::compile("indices(v) * x[:, 0]", kInfos).shape(), "[N]");
  EXPECT_EQ(Expression::compile("indices(z, axis=0)", kInfos).rounding_bound(tensors()).data,
            std::vector<double>(3, 0.0));
  EXPECT_FALSE(Expression::compile("x * indices(x, axis=0)", kInfos).independent_along("N"));
  EXPECT_TRUE(Expression::compile("x * indices(x, axis=1)", kInfos).independent_along("N"));
  try {
    Expression::compile("indices(1.5)", kInfos);
    ADD_FAILURE() << "indices of a scalar compiled";
  } catch (const ExprError& e) {
    EXPECT_NE(std::string(e.what()).find("indices() needs a tensor of rank >= 1"), std::string::npos)
        << e.what();
  }
}

// arange(n): 0, 1, ..., n - 1, int, exact. Of a dim it has that dim's
// shape, so it broadcasts with the tensors along it (positions along a dim
// no tensor at hand carries: a spec had to write indices(logits[0, :K]),
// only where K <= E, and got [?]); of another integer scalar, [?].
TEST(Expr, ArangeOfADimIsPositionsAlongIt) {
  const TensorInfos infos = tensor_table(R"(
x    [N, M]  real  a matrix
M    []      int   a dim
n    []      int   an integer attr
r    []      real  a real attr
)");
  TensorMap m;
  for (const auto& i : infos) m.want(i.name);
  m.put("x", Tensor::of({2, 3}, {1, 2, 3, 4, 5, 6}));
  m.put("M", Tensor::scalar(3, DType::integer));
  m.put("n", Tensor::scalar(-1, DType::integer));
  m.put("r", Tensor::scalar(2.5));
  const auto compiled = [&](const std::string& e) { return Expression::compile(e, infos); };
  EXPECT_EQ(compiled("arange(M)").shape(), "[M]");
  EXPECT_EQ(compiled("x + arange(M)").shape(), "[N, M]");
  EXPECT_EQ(compiled("arange(M - 1)").shape(), "[?]");
  EXPECT_EQ(compiled("arange(4)").shape(), "[4]");
  EXPECT_EQ(compiled("x * arange(M)").evaluate(m).data, (std::vector<double>{0, 2, 6, 0, 5, 12}));
  EXPECT_EQ(compiled("arange(M)").evaluate(m).dtype, DType::integer);
  EXPECT_TRUE(compiled("arange(0)").evaluate(m).data.empty());
  EXPECT_EQ(compiled("arange(M)").rounding_bound(m).data, std::vector<double>(3, 0.0));  // exact
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::string>>{
           {"arange(x)", "arange() takes an integer scalar (a dim: arange(K)), got real [N, M]"},
           {"arange(r)", "arange() takes an integer scalar (a dim: arange(K)), got real []"}}) {
    try {
      compiled(text);
      ADD_FAILURE() << text << " compiled";
    } catch (const ExprError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
  for (const auto& [text, value] : std::vector<std::pair<std::string, std::string>>{
           {"arange(n)", "-1"}, {"arange(-2)", "-2"}, {"arange(M - 4)", "-1"}}) {
    try {
      compiled(text).evaluate(m);
      ADD_FAILURE() << text << " evaluated";
    } catch (const SpecEvalError& e) {  // from no output of the target: the spec's own error
      EXPECT_NE(std::string(e.what()).find("arange(): its argument is " + value + " on this case"),
                std::string::npos)
          << e.what();
    }
  }
}

// An `and` whose sides broadcast is judged whole: broadcast to an empty
// tensor it judges nothing (the case is discarded), though one side alone
// fails. (Each side was judged alone, a wrong failure.) A parenthesised
// part is quoted with its parentheses.
TEST(Expr, AnAndThatBroadcastsIsJudgedWhole) {
  EXPECT_EQ(shape("(x[:, :1] > 100) and (y[:0] > 0)"), (std::vector<int64_t>{2, 0}));
  // Judged whole, its broadcast has no element: nothing is judged (the case
  // is discarded, never passed; it "held").
  EXPECT_THROW(Expression::compile("(x[:, :1] > 100) and (y[:0] > 0)", kInfos).check(tensors()),
               NothingJudged);
  const auto f = Expression::compile("(x[:, :1] > 100) and (y > 0)", kInfos).check(tensors());
  EXPECT_FALSE(f.holds);
  const auto p = Expression::compile("(x + 1) * 2 == 0", kInfos).check(tensors());
  ASSERT_FALSE(p.holds);
  EXPECT_NE(p.message.find("lhs `(x + 1) * 2` = 4"), std::string::npos) << p.message;
}

// `all` and `any` over no element judge nothing, however the expect is
// written: not as NumPy's true and false, which passed `all(empty) or
// <false>` and `not any(empty <= c)` and failed `not all(empty)` and
// `any(empty)`, none of which reads an element. A side of an `or` that
// judges nothing leaves the verdict to the other side.
TEST(Expr, AReductionOverNoElementJudgesNothingInAnyForm) {
  const auto check = [](const std::string& e) { return Expression::compile(e, kInfos).check(tensors()); };
  for (const char* e :
       {"not any(x[:, 3:] <= 1e30)", "not all(x[:, 3:] < -1e30)", "any(x[:, 3:] > 1e30)",
        "all(x[:, 3:] > 1) or any(y[:0] > 1)", "not (all(x[:, 3:] > 1) and not any(y[3:] > 0))"})
    EXPECT_THROW(check(e), NothingJudged) << e;
  const auto left_empty = check("all(x[:, 3:] > 1e30) or all(y < 0)");
  ASSERT_FALSE(left_empty.holds);
  EXPECT_EQ(left_empty.message.find("`y < 0` fails at [2] (3 of 3 elements)"), 0u) << left_empty.message;
  EXPECT_TRUE(check("any(y < 0) or all(x[:, 3:] > 1e30) or all(y > 0)").holds);
  // Judged: `not` of a verdict, and an `or` whose empty side is left out
  // (NumPy's all(empty) = true made the `not` of this `or` false).
  EXPECT_TRUE(check("not any(y < 0)").holds);
  // (Here no tensor is a target output: a side that holds next to one that
  // judges nothing judges nothing of a target, the last test.)
  EXPECT_THROW(check("not (all(x[:, 3:] > 0) or all(y > 0))"), NothingJudged);
  EXPECT_TRUE(check("not (all(x[:, 3:] > 0) or all(y < 0))").holds);
  // However the reduction is written: with keepdims=true, compared with a
  // bool, as min or max of a bool tensor (all and any), and a comparison of
  // a reduction over no element (NumPy's 0 for a sum, ±inf for max and min,
  // NaN for a mean). Each of these held or failed judging no element.
  for (const char* e :
       {"not any(x[:, 3:] <= 1e30, keepdims=true)", "not all(x[:, 3:] < -1e30, keepdims=true)",
        "any(x[:, 3:] > 1e30, keepdims=true)",
        "all(x[:, 3:] > 1e30, keepdims=true) or any(x[:, 3:] > 0, keepdims=true)",
        "any(x[:, 3:] > 0) == false", "all(x[:, 3:] > 0) != false", "false == any(x[:, 3:] > 0)",
        "(not any(x[:, 3:] > 0, keepdims=true)) == true", "not max(x[:, 3:] > 0)", "min(x[:, 3:] > 0)",
        "max(x[:, 3:] > 0)", "not min(x[:, 3:] > 0, keepdims=true)", "sum(x[:, 3:] > 0) == 0",
        "max(x[:, 3:]) <= 0", "min(x[:, 3:]) >= 0", "mean(x[:, 3:]) == 0", "not (sum(x[:, 3:]) != 0)",
        "any(x[:, 3:] > 0, keepdims=true) == any(y > 0)"})
    EXPECT_THROW(check(e), NothingJudged) << e;
  // Over elements they judge as NumPy does.
  EXPECT_TRUE(check("any(x > 5, keepdims=true) and min(x > 0) and not max(x > 6) and sum(x > 3) == 3").holds);
  EXPECT_FALSE(check("any(x > 6) == true").holds);
  const auto bool_min = check("min(x[:, 1:] > 2)");
  ASSERT_FALSE(bool_min.holds);
  EXPECT_EQ(bool_min.message.find("`x[:, 1:] > 2` fails at [0, 0]"), 0u) << bool_min.message;
  const auto compared = check("sum(x > 3) == 2");
  ASSERT_FALSE(compared.holds);
  EXPECT_NE(compared.message.find("lhs `sum(x > 3)` = 3"), std::string::npos) << compared.message;
  // An axis keeps NumPy's reduction (a tensor, judged elementwise).
  EXPECT_TRUE(check("all(all(x[:, 3:] > 1e30, axis=1))").holds);
  // Left to right and short-circuit, as evaluation is: a guard keeps the
  // other side from reading out of range (x has 3 columns).
  EXPECT_TRUE(check("y[0] > 5 or x[0, 3] > 0").holds);
  EXPECT_TRUE(check("not (y[0] < 5 and x[0, 3] < 0)").holds);
  EXPECT_TRUE(check("any(y > 0) or x[0, 3] > 0").holds);
}

// A side of an `and` or `or` that judges nothing leaves the verdict to the
// other side; where that side holds reading no output of the target, nothing
// of the target is judged and the case is discarded (`all(target.y[:, D:]
// == 0) and true` held on every case, an all-NaN target's included).
TEST(Expr, ASideThatJudgesNothingNextToOneThatReadsNoTargetJudgesNothing) {
  const TensorInfos infos = tensor_table("D [] int columns\ntarget.y [N, D] real an output");
  TensorMap m;
  m.want("D"), m.want("target.y");
  m.put("D", Tensor::scalar(2, DType::integer));
  m.put("target.y", Tensor::of({1, 2}, {NAN, NAN}));
  const auto check = [&](const std::string& e) { return Expression::compile(e, infos).check(m); };
  for (const char* e : {"all(target.y[:, D:] == 0) and true", "true and not any(target.y[:, D:] != 0)",
                        "all(target.y[:, D:] == 0) and D > 0", "all(target.y[:, D:] == 0) or D > 0",
                        "D > 0 and (not any(target.y[:, D:] != 0) or D > 1)"})
    EXPECT_THROW(check(e), NothingJudged) << e;
  // The other side judges the target: its verdict (an `or` whose empty side
  // is left out; NumPy's all(empty) = true made the `not` of it false).
  EXPECT_FALSE(check("not (all(target.y[:, D:] == 0) or all(isnan(target.y)))").holds);
  EXPECT_TRUE(check("not (all(target.y[:, D:] == 0) or all(target.y == 0))").holds);
  EXPECT_FALSE(check("all(target.y[:, D:] == 0) and all(target.y == 0)").holds);
  EXPECT_FALSE(check("all(target.y[:, D:] == 0) or all(target.y == 0)").holds);
  EXPECT_TRUE(check("all(target.y[:, D:] == 0) or all(isnan(target.y))").holds);
  // A side that reads no target and fails is the verdict, as before.
  EXPECT_FALSE(check("all(target.y[:, D:] == 0) and D > 5").holds);
  EXPECT_FALSE(check("all(target.y[:, D:] == 0) or D > 5").holds);
}

// A verdict that holds with no element decided by the target judges
// nothing (the case is discarded): a where whose constant branch is picked
// at every element, an `or` whose other side is true, an `and` whose other
// side is false. `all(where(row_masked, target.y == -inf, true))` passed
// every case without a masked row, a NaN-everywhere kernel's included.
TEST(Expr, AVerdictTheTargetDecidedNoElementOfJudgesNothing) {
  const TensorInfos infos = tensor_table(
      "m [N] bool a mask\nx [N] real an input\nD [] int a dim\ntarget.y [N] real an output\n"
      "target.ok [N] bool an output");
  TensorMap none, some;
  for (TensorMap* t : {&none, &some}) {
    t->want("m"), t->want("x"), t->want("D"), t->want("target.y"), t->want("target.ok");
    t->put("x", Tensor::of({3}, {1, 2, 3}));
    t->put("D", Tensor::scalar(3, DType::integer));
    t->put("target.ok", Tensor::of({3}, {1, 1, 1}, DType::boolean));
  }
  none.put("m", Tensor::of({3}, {0, 0, 0}, DType::boolean));
  some.put("m", Tensor::of({3}, {0, 1, 0}, DType::boolean));
  none.put("target.y", Tensor::of({3}, {NAN, NAN, NAN}));
  some.put("target.y", Tensor::of({3}, {NAN, -INFINITY, NAN}));
  const auto check = [&](const std::string& e, const TensorMap& t) {
    return Expression::compile(e, infos).check(t);
  };
  for (const char* e :
       {"all(where(m, target.y == -inf, true))", "where(m, target.y == -inf, true)",
        "all(not m or target.y == -inf)", "all(target.y == -inf or not m)",
        "not any(m and not (target.y == -inf))", "all(where(m, target.y == -inf, x > 0))",
        "all(where(m, target.y == -inf, true), axis=0)", "all(where(m[None, :], target.y == -inf, true))",
        "all(isfinite(x)) and all(where(m, target.y == -inf, true))"}) {
    try {
      check(e, none);
      ADD_FAILURE() << e << " held on a case with no masked element";
    } catch (const NothingJudged& err) {
      EXPECT_NE(std::string(err.what())
                    .find("held without the target's outputs deciding any element on this "
                          "case"),
                std::string::npos)
          << err.what();
    }
    EXPECT_TRUE(check(e, some).holds) << e;  // the masked element is the target's: judged
  }
  // The target decides where the condition reads it, or a side of an and/or
  // that matters does; a check that reads the target outright is judged.
  for (const char* e :
       {"all(where(target.ok, isnan(target.y) or target.y == -inf, false))",
        "all(isnan(target.y) or target.y == -inf)", "all(where(m, true, isnan(target.y)))",
        "all(where(m, target.y == -inf, true)) and all(target.ok)", "D == 2 or all(target.ok)"})
    EXPECT_TRUE(check(e, none).holds) << e;
  // A failure is a failure, whatever decided it.
  EXPECT_FALSE(check("all(where(m, target.y == -inf, x > 2))", none).holds);
  // The left side of a scalar `or` that holds leaves the right unread (it
  // may guard an index out of range).
  EXPECT_THROW(check("D > 2 or target.y[5] > 0", none), NothingJudged);
  EXPECT_THROW(check("D == 3 or all(target.ok)", none), NothingJudged);
}

// What the target could not have changed judges nothing either: a
// reduction along an empty axis (each element the operation's identity: a
// max of no element is -inf, so `max(diff(target.p), axis=-1) <= 0` held on
// rows of one element, checking nothing), a contraction over an empty inner
// dim, an `or` whose other side is true (`X or K >= 1` held wherever X
// did, and cases where X failed were discarded: a broken kernel passed),
// and a where whose branches are equal.
TEST(Expr, AVerdictTheTargetCouldNotChangeJudgesNothing) {
  const TensorInfos infos = tensor_table(
      "K [] int a dim\nx [N] real an input\ntarget.p [R, K] real an output\ntarget.y [N] real an output");
  TensorMap m;
  m.want("K"), m.want("x"), m.want("target.p"), m.want("target.y");
  m.put("K", Tensor::scalar(1, DType::integer));
  m.put("x", Tensor::of({2}, {1, 2}));
  m.put("target.p", Tensor::of({2, 1}, {0.5, 0.5}));
  m.put("target.y", Tensor::of({2}, {NAN, NAN}));
  const auto check = [&](const std::string& e) { return Expression::compile(e, infos).check(m); };
  for (const char* e :
       {"all(max(diff(target.p), axis=-1) <= 0)", "all(min(target.p[:, K:], axis=1) > 5)",
        "all(sum(target.p[:, K:], axis=1) == 0)", "sum(target.p[:, K:]) + 1 == 1",
        "all(mean(target.p[:, K:], axis=1) != 7) or all(target.y > 0)", "all(target.p[:, K:] @ x[2:] == 0)",
        "all(isnan(target.y) or K >= 1)", "all(K >= 1 or target.y > 0)",
        "all(where(isnan(target.y), true, true))", "all(target.p > 0) or K >= 1",
        "not (all(target.p > 0) and K < 1)", "all(all(diff(target.p) <= 0, axis=-1))",
        "not any(any(diff(target.p) > 0, axis=-1))"}) {
    try {
      check(e);
      ADD_FAILURE() << e << " held";
    } catch (const NothingJudged& err) {
      EXPECT_NE(std::string(err.what()).find("held without the target's outputs deciding any element"),
                std::string::npos)
          << err.what();
    }
  }
  // Where the target's side decides, or the reduced axis has elements, it is judged.
  for (const char* e : {"all(max(target.p, axis=1) <= 1)", "all(isnan(target.y) or K >= 2)",
                        "all(where(isnan(target.y), true, x > 5))", "all(target.p[:, :K] @ x[:K] >= 0)"})
    EXPECT_TRUE(check(e).holds) << e;
  EXPECT_FALSE(check("all(where(isnan(target.y), x > 5, true))").holds);
  EXPECT_FALSE(check("all(max(target.p, axis=1) > 1)").holds);
}

// The same-precision baseline rounds every real step, diff's subtraction
// too, and no integer one: an integer matmul is exact. (diff was not
// rounded, and integer matmuls were, so naive.Y set a budget from an error
// the kernel cannot make.)
TEST(Expr, TheRoundedEvaluationRoundsRealStepsOnly) {
  const TensorInfos infos = tensor_table("a [K] real reals\nn [K, K] int integers");
  TensorMap m;
  m.want("a"), m.want("n");
  m.put("a", Tensor::of({2}, {1e8, 1.5}));
  m.put("n", Tensor::of({2, 2}, {4097, 4097, 4097, 4096}, DType::integer));
  const auto to_f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  EXPECT_EQ(Expression::compile("diff(a)", infos).evaluate_rounded(m, to_f32).data,
            (std::vector<double>{to_f32(1.5 - 1e8)}));
  const Tensor exact = Expression::compile("n @ n", infos).evaluate(m);
  EXPECT_EQ(Expression::compile("n @ n", infos).evaluate_rounded(m, to_f32).data, exact.data);
  EXPECT_NE(to_f32(exact.data[0]), exact.data[0]);  // the values a rounding would change
}

// ---- one test per load-time error class
TEST(ExprErrors, UnknownNameSuggestsTheClosest) {
  EXPECT_EQ(error_of("close(t.oo, x)").find("6: unknown name 't.oo' (did you mean 't.o'?); valid: x, y, v"),
            0u);
}
TEST(ExprErrors, NonAsciiOperatorsAreNamedWhole) {
  EXPECT_EQ(error_of("x ≥ 1"), "2: unexpected character '≥': write >=");
  EXPECT_EQ(error_of("x × 2"), "2: unexpected character '×': write *");
  EXPECT_EQ(error_of("x + é"), "4: unexpected character 'é' (expressions are ASCII)");
}

// Two checks of differently shaped outputs joined by `and` do not broadcast:
// the error says to reduce each side.
TEST(ExprErrors, AnAndOfShapesThatDoNotBroadcastSaysToReduceEachSide) {
  const std::string e = error_of("(x > 0) and (v > 0)");
  EXPECT_NE(e.find("do not broadcast"), std::string::npos) << e;
  EXPECT_NE(e.find("; 'and' joins its sides element by element: to require each side whole, write all(...) "
                   "and all(...)"),
            std::string::npos)
      << e;
}

// Every comparison with NaN is false (!= true) under IEEE, whatever the
// other side: `all(target.y != nan)` held on a kernel returning NaN.
TEST(ExprErrors, AComparisonWithNanIsRefused) {
  EXPECT_EQ(error_of("x != nan"),
            "5: a comparison with nan is always true whatever the other side is: use isnan(x)");
  EXPECT_EQ(error_of("nan == x"),
            "0: a comparison with nan is always false whatever the other side is: use isnan(x)");
  EXPECT_EQ(error_of("x < -nan"),
            "4: a comparison with nan is always false whatever the other side is: use isnan(x)");
}
TEST(ExprErrors, NamedConstantsAreWrittenOut) {
  EXPECT_EQ(error_of("x * pi"),
            "4: unknown name 'pi': the only named constants are inf and nan; write the number "
            "(3.141592653589793)");
}
TEST(ExprErrors, UnknownFunction) {
  EXPECT_NE(error_of("x + rowsun(x)").find("4: unknown function 'rowsun' (did you mean 'rowsum'?)"),
            std::string::npos);
}
TEST(ExprErrors, WrongArity) {
  EXPECT_EQ(error_of("where(b, x)"), "0: where() takes 3 arguments, got 2");
  EXPECT_EQ(error_of("close(x)"), "0: close() takes 2 arguments, got 1");
}
TEST(ExprErrors, UnknownKeyword) {
  EXPECT_EQ(error_of("sum(x, axes=1)"), "7: sum() takes no keyword 'axes'; keywords: axis, keepdims");
  // NumPy's tuple of axes: said so, not "expected ')', got ','".
  EXPECT_EQ(
      error_of("sum(x, axis=(0, 1))"),
      "14: axis= takes one integer, not a tuple of axes: reduce one axis at a time (sum(sum(x, axis=1), "
      "axis=0)), or every axis with no axis=");
  // max of two tensors is elementwise (maximum), but the message names what the user wrote.
  EXPECT_EQ(error_of("max(x, x, axis=0)"), "10: max() of two tensors (elementwise) takes no keyword 'axis'");
}
TEST(ExprErrors, ClosePolicyNeedsTheBaselineAndExcludesRtol) {
  // t.o is not target.*: no operand has a policy to scale.
  EXPECT_EQ(error_of("close(t.o, x, k=2)").substr(0, 37), "0: close(k=) needs a target output (t");
  const TensorInfos infos = {{"target.o", {"N"}, DType::real, ""}, {"reference.o", {"N"}, DType::real, ""}};
  try {
    Expression::compile("close(target.o, reference.o, k=2)", infos);
    FAIL() << "no error";
  } catch (const ExprError& e) {
    EXPECT_EQ(e.offset, 6u);
    EXPECT_NE(std::string(e.what()).find("publishes no 'naive.o'"), std::string::npos) << e.what();
  }
  try {
    Expression::compile("close(target.o, reference.o, rtol=0, k=2)", infos);
    FAIL() << "no error";
  } catch (const ExprError& e) {
    EXPECT_NE(std::string(e.what()).find("not both"), std::string::npos) << e.what();
  }
}
TEST(ExprErrors, AxisOutOfRange) {
  EXPECT_EQ(error_of("sum(x, axis=2)"), "12: axis 2 is out of range for [N, M] of rank 2 (valid: -2..1)");
  EXPECT_EQ(error_of("any(b, axis=-3)"), "12: axis -3 is out of range for [N, M] of rank 2 (valid: -2..1)");
  // As written, not wrapped to an int (it said -2147483648).
  EXPECT_EQ(error_of("sum(x, axis=4294967296)"),
            "12: axis 4294967296 is out of range for [N, M] of rank 2 (valid: -2..1)");
}
TEST(ExprErrors, ShapeMismatchInSymbolicDims) {
  EXPECT_EQ(error_of("x + v"), "0: shapes [N, M] and [N] do not broadcast (M vs N)");
  EXPECT_EQ(error_of("x @ v"), "0: matmul: inner dims differ (M of [N, M] vs N of [N])");
}
TEST(ExprErrors, TypeErrors) {
  EXPECT_EQ(error_of("x and b"), "0: 'and' needs a bool operand, got real (compare it: x > 0)");
  EXPECT_EQ(error_of("where(x, 1, 2)").substr(0, 38), "6: where()'s condition needs a bool op");
  EXPECT_EQ(error_of("y[1.5]"), "2: an index must be an integer, got real");
}
TEST(ExprErrors, SyntaxErrorsPointAtTheToken) {
  EXPECT_EQ(error_of("close(x, t.o"), "12: expected ')' before the end");
  EXPECT_EQ(error_of("x + * y"), "4: unexpected '*'");
  EXPECT_EQ(error_of("x & b"), "2: unexpected '&': write and, or, not");
  EXPECT_EQ(error_of("x // 2"),
            "2: unexpected '//': the expressions have no floor division (/ divides exactly)");
  EXPECT_EQ(error_of("x % 2"), "2: unexpected character '%': the expressions have no modulo");
  EXPECT_EQ(error_of("close(x, x, atol=-1)"), "17: atol must be >= 0");
  EXPECT_EQ(error_of("close(x, x, rtol=nan)"), "17: rtol must be >= 0, not nan");
  // An infinite tolerance passes every kernel: refused as k=inf is (it loaded
  // and passed a broken target), also a literal past a double's range.
  for (const std::string tol : {"atol=inf", "rtol=inf", "atol=(inf)", "atol=1e400", "rtol=2e308"})
    EXPECT_EQ(
        error_of("close(x, x, " + tol + ")"),
        "17: " + tol.substr(0, 4) + " must be a finite number >= 0: an infinite tolerance passes every value")
        << tol;
  EXPECT_EQ(error_of("close(x, x, atol=-inf)"), "17: atol must be >= 0");
  EXPECT_EQ(error_of("0 < x < 1"), "6: chained comparisons are ambiguous: write (a < b) and (b < c)");
  EXPECT_EQ(error_of("x[0, 0, 0]"), "0: too many indices (3) for [N, M] of rank 2");
  EXPECT_EQ(error_of("  "), "0: the expression is empty");
  // '=' meant as '==', at the '=': a dotted name before it is no keyword (it
  // was read as one: "all() takes 1 argument, got 0", "a positional argument
  // after a keyword argument").
  EXPECT_EQ(error_of("all(t.o = x)"), "8: '=' is not a comparison; write '=='");
  EXPECT_EQ(error_of("all(where(b, t.o = x, true))"), "17: '=' is not a comparison; write '=='");
  EXPECT_EQ(error_of("all(x + 1 = t.o)"), "10: '=' is not a comparison; write '=='");
  EXPECT_EQ(error_of("x = t.o"), "2: '=' is not a comparison; write '=='");
  EXPECT_EQ(error_of("y[idx = 1]"), "6: '=' is not a comparison; write '=='");
  EXPECT_EQ(error_of("sum(x, axis=1, y)"), "15: a positional argument after a keyword argument");
  // Hostile nesting is refused, not a stack overflow.
  std::string chain = "1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  EXPECT_NE(error_of(chain).find("nests too deeply"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '(') + "1").find("nests too deeply"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '-') + "1").find("nests too deeply"), std::string::npos);
}

}  // namespace
}  // namespace kprop::expr

// ---- the spec loader: expression invariants, positions, exit codes
namespace kprop {
namespace {

std::string spec_error(const std::string& text) {
  return testing::spec_load_error(text, "s.yaml");
}

const std::string kHead = "spec: e\nfamily: attention.bwd\ninvariants:\n";

TEST(ExprSpec, LoadsExpressionInvariantsNextToBuiltIns) {
  const Spec s = parse_spec(kHead +
                                "  - D_identity\n"
                                "  - name: d_identity\n"
                                "    expect: close(target.d, rowsum(reference.p * reference.dp))\n"
                                "  - name: masked\n"
                                "    when: any(row_fully_masked)\n"
                                "    expect: all(isfinite(target.o))\n",
                            "s.yaml");
  ASSERT_EQ(s.invariants.size(), 3u);
  EXPECT_FALSE(s.invariants[0].expression);
  ASSERT_TRUE(s.invariants[1].expression);
  EXPECT_EQ(s.invariants[1].expression->names,
            (std::vector<std::string>{"reference.dp", "reference.p", "target.d"}));
  ASSERT_TRUE(s.invariants[2].expression->when);
}

// A shape error is the spec's where every output of the target it reads has
// its declared shape (the dims from the map) and no slice bound reads one:
// a declared op's outputs always have theirs.
TEST(ExprEval, TargetShapesAsDeclared) {
  using namespace expr;
  const TensorInfos infos = tensor_table(R"(
N                     []      int   rows
M                     []      int   columns
x                     [N, M]  real  an input
target.y              [N, M]  real  an output of declared shape
target.tokens         [A]     int   an output whose length is the target's answer
transformed.N         []      int   rows of the derived case
transformed.M         []      int   columns of the derived case
transformed.target.y  [N, M]  real  the derived case's output
)");
  // target.y of shape `y` (an external kernel's output may have its own).
  const auto map = [&](std::vector<int64_t> y) {
    TensorMap m;
    for (const auto& i : infos) m.want(i.name);
    m.put("N", Tensor::scalar(2, DType::integer));
    m.put("M", Tensor::scalar(3, DType::integer));
    m.put("x", Tensor::of({2, 3}, {1, 2, 3, 4, 5, 6}));
    m.put("target.y", Tensor::of(std::move(y), {1, 2, 3, 4, 5, 6}));
    m.put("target.tokens", Tensor::of({2}, {0, 1}, DType::integer));
    m.put("transformed.N", Tensor::scalar(1, DType::integer));
    m.put("transformed.M", Tensor::scalar(3, DType::integer));
    m.put("transformed.target.y", Tensor::of({1, 3}, {1, 2, 3}));
    return m;
  };
  const TensorMap as_declared = map({2, 3}), transposed = map({3, 2});
  const auto declared = [&](const std::string& text, const TensorMap* m = nullptr) {
    return Expression::compile(text, infos).target_shapes_as_declared(m ? *m : as_declared);
  };
  EXPECT_TRUE(declared("all(target.y <= 0 * x[:, 0:2])"));
  EXPECT_TRUE(declared("all(transformed.target.y[0] == target.y[0])"));
  EXPECT_FALSE(declared("all(target.tokens == 0)"));              // A is no dim the map holds
  EXPECT_FALSE(declared("all(x[:, 0:sum(target.y > 3)] == 0)"));  // a slice the target sizes
  EXPECT_FALSE(declared("all(target.y <= 0 * x[:, 0:2])", &transposed));
}

// The position inside an expression is exact in a file with a UTF-8 byte
// order mark (yaml-cpp's offsets do not count it: it pointed at the
// expression's start), with CRLF line ends (a block's lines kept their '\r':
// at the block's indicator) and in a block with an indentation indicator
// (its first line more indented than the block: at the indicator).
TEST(ExprSpec, ErrorPositionsWithAByteOrderMarkCrlfAndAnIndentationIndicator) {
  const std::function<std::string(std::string)> same = [](std::string s) { return s; };
  const std::function<std::string(std::string)> crlf = [](std::string s) {
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', at + 2))
      s.replace(at, 1, "\r\n");
    return s;
  };
  const std::string bom = "\xEF\xBB\xBF";
  const std::string plain = kHead + "  - name: a\n    expect: close(target.o, reference.pp)\n";
  const std::string block =
      kHead + "  - name: a\n    expect: >-\n      close(target.o,\n            reference.pp)\n";
  const std::string head = "invariant 'a', expect: unknown name 'reference.pp'";
  for (const std::string& text : {plain, bom + plain, crlf(plain), bom + crlf(plain)})
    EXPECT_EQ(spec_error(text).substr(0, 13 + head.size()), "s.yaml:5:29: " + head) << text;
  for (const std::string& text : {block, bom + block, crlf(block), bom + crlf(block)})
    EXPECT_EQ(spec_error(text).substr(0, 13 + head.size()), "s.yaml:7:13: " + head) << text;
  // `|2`: the block is indented 2 past its mapping's 4; its first line keeps 2 more.
  for (const char* indicator : {"|2", "|-2", "|2-", ">2", ">-2", "|+2"})
    for (const auto& form : {same, crlf})
      EXPECT_EQ(spec_error(form(kHead + "  - name: a\n    expect: " + indicator +
                                "\n        all(isfinite(target.o))\n      and all(isfinite(target.oo))\n"))
                    .substr(0, 69),
                "s.yaml:7:24: invariant 'a', expect: unknown name 'target.oo' (did you")
          << indicator;
}

TEST(ExprSpec, ErrorsPointIntoTheExpression) {
  // line 5, column of 'reference.pp': "    expect: close(" is 18 characters.
  EXPECT_EQ(spec_error(kHead + "  - D_identity\n  - name: a\n    expect: close(reference.pp, reference.p)\n")
                .substr(0, 72),
            "s.yaml:6:19: invariant 'a', expect: unknown name 'reference.pp' (did you");
  // In a block scalar, at the line and column of the source (they pointed
  // at the block's indicator): a folded one with a more-indented line kept
  // as it is, a folded one joined by spaces, a literal one.
  EXPECT_EQ(
      spec_error(kHead + "  - name: a\n    expect: >-\n      close(target.o,\n            reference.pp)\n")
          .substr(0, 72),
      "s.yaml:7:13: invariant 'a', expect: unknown name 'reference.pp' (did you");
  for (const char* block : {">-", ">", "|"})
    EXPECT_EQ(spec_error(kHead + "  - name: a\n    expect: " + block +
                         "\n      close(target.o, reference.o)\n      and all(isfinite(target.oo))\n")
                  .substr(0, 69),
              "s.yaml:7:24: invariant 'a', expect: unknown name 'target.oo' (did you")
        << block;
  // A plain or quoted scalar continued on the next line (YAML folds the
  // break to a space): at the error's line and column, not the scalar's start.
  for (const std::string quote : {"", "\""})
    EXPECT_EQ(spec_error(kHead + "  - name: a\n    expect: " + quote +
                         "all(isfinite(target.o)) and\n      all(isfinite(target.oo))" + quote + "\n")
                  .substr(0, 69),
              "s.yaml:6:20: invariant 'a', expect: unknown name 'target.oo' (did you")
        << quote;
  // Quoted scalars count their quote.
  EXPECT_EQ(spec_error(kHead + "  - name: a\n    expect: \"all(sum(reference.p, axis=4) > 0)\"\n"),
            "s.yaml:5:40: invariant 'a', expect: axis 4 is out of range for [B, Hq, Nq, Nk] of rank 4 "
            "(valid: -4..3)");
  EXPECT_EQ(spec_error(kHead + "  - name: a\n    when: rowsum(d_out)\n    expect: all(d_out == d_out)\n"),
            "s.yaml:5:11: invariant 'a', when: must be boolean (a comparison, close(), all(...)); "
            "`rowsum(d_out)` is real");
  EXPECT_EQ(spec_error(kHead + "  - name: D_identity\n    expect: all(d_out == d_out)\n"),
            "s.yaml:4:11: 'D_identity' names a built-in invariant of attention.bwd; give the expression its "
            "own name");
  EXPECT_EQ(spec_error(kHead + "  - name: a\n    expect: all(d_out == d_out)\n    tol: 1\n").substr(0, 64),
            "s.yaml:6:5: unknown key 'tol' in expression invariant a; valid: ");
  EXPECT_EQ(spec_error("spec: e\nfamily: toy.sum\ninvariants:\n  - name: a\n    expect: all(x == x)\n"),
            "s.yaml:5:13: family toy.sum publishes no named tensors: it takes no expression invariants");
  // An expectation that reads no output of the target can fail no kernel
  // (it counted among the invariants held).
  EXPECT_EQ(spec_error(kHead + "  - name: a\n    expect: all(d_out == d_out)\n"),
            "s.yaml:5:13: invariant 'a', expect: `all(d_out == d_out)` reads no output of the target "
            "(target.*), so no kernel can fail it; compare a target tensor");
  // Its name is a report row, a corpus file's invariant: and an --invariant
  // value (an empty one gave a blank row and a replay without --invariant).
  for (const std::string& name :
       std::vector<std::string>{"\"\"", "\"a b\"", "\"a\\nb\"", ".hidden", std::string(101, 'x')})
    EXPECT_EQ(
        spec_error(kHead + "  - name: " + name + "\n    expect: all(isfinite(target.o))\n").substr(0, 29),
        "s.yaml:4:11: invariant name '")
        << name;
  // A misspelled expect: said as such (it was "unknown invariant 'a'").
  EXPECT_EQ(
      spec_error(kHead + "  - name: a\n    expct: all(d_out == d_out)\n"),
      "s.yaml:5:5: unknown key 'expct' in invariant 'a' (did you mean 'expect'? an expression invariant "
      "needs 'expect')");
  // A forgotten expect: (the name alone, or with a transform) says so too.
  for (const std::string body : {"", "    transform: permute_keys\n"}) {
    const std::string got = spec_error(kHead + "  - name: a\n" + body);
    EXPECT_EQ(got.rfind("s.yaml:4:11: unknown invariant 'a' for family attention.bwd", 0), 0u) << got;
    EXPECT_TRUE(got.ends_with(" (or an expression invariant: it needs 'expect:')")) << got;
  }
}

// `let: {NAME: EXPR}` names a subexpression the spec's expressions use:
// each use is the expression's tree, one tree per expression, computed once
// per evaluation (shared). A let uses the lets before it; transformed.NAME
// is no name (a let is over the case itself). Errors at the let's own
// position.
TEST(ExprSpec, LetNamesASubexpression) {
  expr::TensorInfos infos = expr::kInfos;
  infos.push_back({"S", {}, expr::DType::real, "", {}, "sum(x, axis=-1, keepdims=true)"});
  infos.push_back({"P", {}, expr::DType::real, "", {}, "x / S"});
  const expr::Expression e = expr::Expression::compile("P * 2 + S", infos);
  EXPECT_EQ(e.shape(), "[N, M]");
  EXPECT_EQ(e.names(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(e.evaluate(expr::tensors()).data,
            expr::Expression::compile("x / sum(x, axis=-1, keepdims=true) * 2 + "
                                      "sum(x, axis=-1, keepdims=true)",
                                      expr::kInfos)
                .evaluate(expr::tensors())
                .data);
  // A failure quotes the let's name where it quotes its nodes.
  const auto f = expr::Expression::compile("close(P, y, atol=0.1)", infos).check(expr::tensors());
  ASSERT_FALSE(f.holds);
  EXPECT_NE(f.message.find("lhs `P` = "), std::string::npos) << f.message;
  infos.push_back({"L", {}, expr::DType::real, "", {}, "L + 1"});
  try {
    expr::Expression::compile("L", infos);
    ADD_FAILURE() << "a let using itself compiled";
  } catch (const expr::ExprError& err) {
    EXPECT_EQ(std::string(err.what()), "let L uses itself (through L)");
  }

  const Spec s = parse_spec(
      "spec: e\nfamily: attention.bwd\nlet:\n  PdP: rowsum(reference.p * reference.dp)\n"
      "  off: abs(target.d - PdP)\ninvariants:\n  - name: d_identity\n    expect: close(target.d, PdP)\n"
      "  - name: d_small\n    expect: all(off <= 1e-3 + 1e-3 * abs(PdP))\n",
      "s.yaml");
  ASSERT_EQ(s.invariants.size(), 2u);
  EXPECT_EQ(s.invariants[1].expression->names,
            (std::vector<std::string>{"reference.dp", "reference.p", "target.d"}));
  const std::string let = "spec: e\nfamily: attention.bwd\nlet:\n";
  const std::string use = "invariants:\n  - name: a\n    expect: close(target.d, A)\n";
  const auto starts = [](const std::string& got, const std::string& want) {
    if (got.rfind(want, 0) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << got;
  };
  EXPECT_TRUE(starts(spec_error(let + "  A: rowsum(reference.pp)\n" + use),
                     "s.yaml:4:13: let A: unknown name 'reference.pp' (did you"));
  // Lets use one another in any order; not in a cycle.
  EXPECT_EQ(spec_error(let + "  A: later\n  later: target.d\n" + use), "");
  EXPECT_EQ(spec_error(let + "  A: 1 + A\n" + use), "s.yaml:4:10: let A: let A uses itself (through A)");
  EXPECT_EQ(spec_error(let + "  A: later + 1\n  later: 2 * A\n" + use),
            "s.yaml:4:6: let A: let later uses itself (through later, A)");
  EXPECT_EQ(spec_error(let + "  A: rowsum(\n" + use), "s.yaml:4:13: let A: unexpected end of the expression");
  EXPECT_EQ(spec_error(let + "  target.x: target.d\n" + use),
            "s.yaml:4:3: let 'target.x' must be a name (letters, digits, '_'; no dots)");
  EXPECT_EQ(spec_error(let + "  close: target.d\n" + use),
            "s.yaml:4:3: 'close' is reserved in expressions; pick another name");
  EXPECT_EQ(spec_error(let + "  d_out: target.d\n" + use).substr(0, 63),
            "s.yaml:4:3: let 'd_out' is already a tensor of family attention");
  EXPECT_EQ(spec_error("spec: e\nfamily: attention.bwd\nlet:\n" + use),
            "s.yaml:3:1: 'let' is empty: give NAME: EXPR entries, or remove it");
  EXPECT_TRUE(starts(spec_error(let + "  A: target.d\ninvariants:\n  - name: a\n    transform: permute_keys\n"
                                      "    expect: close(transformed.A, A)\n"),
                     "s.yaml:8:19: invariant 'a', expect: unknown name 'transformed.A'"));
}

TEST(ExprSpec, TransformsAreCheckedAtLoad) {
  auto starts = [](const std::string& got, const std::string& want) {
    if (got.rfind(want, 0) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << got;
  };
  const std::string inv = "  - name: a\n";
  EXPECT_TRUE(
      starts(spec_error(kHead + inv +
                        "    transform: permute_kes\n    expect: all(transformed.target.o == target.o)\n"),
             "s.yaml:5:16: unknown transform 'permute_kes' for family attention.bwd (did you mean "
             "'permute_keys'?)"));
  EXPECT_TRUE(starts(
      spec_error(kHead + inv +
                 "    transform: {shift_keys: {magnitud: 1}}\n    expect: all(target.o == target.o)\n"),
      "s.yaml:5:30: unknown key 'magnitud' in transform shift_ke"));
  EXPECT_TRUE(starts(spec_error(kHead + inv + "    expect: all(transformed.target.o == target.o)\n"),
                     "s.yaml:5:17: invariant 'a', expect: unknown name 'transformed.t"));
  EXPECT_TRUE(starts(
      spec_error(kHead + inv +
                 "    transform: {permute_keys: {}, retile: {}}\n    expect: all(target.o == target.o)\n"),
      "s.yaml:5:16: transform must name one transform: NAME or {NA"));
  const Spec s = parse_spec(kHead + inv + "    transform: {shift_keys: {magnitude: 3}}\n" +
                                "    expect: close(transformed.target.o, target.o, k=2)\n",
                            "s.yaml");
  ASSERT_TRUE(s.invariants[0].expression->transform);
  EXPECT_EQ(s.invariants[0].expression->transform->name, "shift_keys");
  EXPECT_EQ(s.invariants[0].expression->transform->params.real("magnitude"), 3.0);
}

// ---- prop_runner end to end
using testing::CliRun;
CliRun run(const std::string& args) {
  return testing::run_cli(args);
}

const std::string kBwdExpr = std::string(KPROP_SOURCE_DIR) + "/specs/examples/attention_bwd_expr.yaml";

TEST(ExprCli, ExpressionInvariantKillsAMutantAndItsCaseReplays) {
  namespace fs = std::filesystem;
  const fs::path corpus = fs::temp_directory_path() / ("kprop_expr_" + std::to_string(::getpid()));
  fs::remove_all(corpus);
  // d_without_do computes D = rowsum(O): only the D expressions see it.
  const CliRun r = run("--spec " + kBwdExpr +
                       " --target d_without_do --seed 20261122 --trials 200 --corpus " + corpus.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("d_is_rowsum_p_dp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fails at ["), std::string::npos) << r.out;
  const fs::path dir = corpus / "attention_bwd_expr";
  ASSERT_TRUE(fs::exists(dir)) << r.out;
  // The stored case passes on the correct kernel and still fails the mutant.
  const CliRun ok = run("--spec " + kBwdExpr + " --replay " + dir.string());
  EXPECT_EQ(ok.code, 0) << ok.out;
  const CliRun bad = run("--spec " + kBwdExpr + " --target d_without_do --replay " + dir.string());
  EXPECT_EQ(bad.code, 1) << bad.out;
  fs::remove_all(corpus);
}

// A metamorphic relation finds a mask bug without any reference: permuting
// the queries of a causal case must permute O's rows, which an off-by-one
// causal diagonal breaks. The stored case replays the same transform.
TEST(ExprCli, TransformKillsAMutantAndItsCaseReplays) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kprop_transform_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path spec = dir / "perm.yaml";
  {
    FILE* f = std::fopen(spec.c_str(), "w");
    std::fputs(
        "spec: perm\nfamily: attention.fwd\ntarget: tiled\ndomain: {masks: [causal], nq: [1, 8], nk: [1, "
        "8]}\n"
        "invariants:\n  - name: queries_permuted\n    transform: permute_queries\n"
        "    expect: close(transformed.target.o, target.o[:, :, transform.query_perm], k=2)\n",
        f);
    std::fclose(f);
  }
  const std::string corpus = (dir / "corpus").string();
  const CliRun ok = run("--spec " + spec.string() + " --seed 7 --trials 300 --no-corpus");
  EXPECT_EQ(ok.code, 0) << ok.out;
  const CliRun r =
      run("--spec " + spec.string() + " --target causal_off_by_one --seed 7 --trials 300 --corpus " + corpus);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("queries_permuted"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(dir / "corpus" / "perm")) << r.out;
  EXPECT_EQ(run("--spec " + spec.string() + " --replay " + corpus + "/perm").code, 0);
  const CliRun bad =
      run("--spec " + spec.string() + " --target causal_off_by_one --replay " + corpus + "/perm");
  EXPECT_EQ(bad.code, 1) << bad.out;
  fs::remove_all(dir);
}

TEST(ExprCli, ListAsJsonNamesTensorsAndTransforms) {
  const CliRun r = run("--list --format json");
  ASSERT_EQ(r.code, 0) << r.out.substr(0, 400);
  for (const char* want :
       {"\"transforms\"", "\"permute_queries\"", "\"transform.query_perm\"", "\"floor.o\"", "\"functions\""})
    EXPECT_NE(r.out.find(want), std::string::npos) << want;
  EXPECT_EQ(run("--list --format junit").code, 2);
}

TEST(ExprCli, BadExpressionExitsTwoWithPosition) {
  namespace fs = std::filesystem;
  const fs::path spec =
      fs::temp_directory_path() / ("kprop_expr_bad_" + std::to_string(::getpid()) + ".yaml");
  {
    FILE* f = std::fopen(spec.c_str(), "w");
    std::fputs(
        "spec: e\nfamily: attention.fwd\ninvariants:\n  - name: a\n    expect: all(isfinite(target.oo))\n",
        f);
    std::fclose(f);
  }
  const CliRun r = run("--spec " + spec.string() + " --no-corpus");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(spec.string() + ":5:26: invariant 'a', expect: unknown name 'target.oo' (did you mean "
                                       "'target.o'?)"),
            std::string::npos)
      << r.out;
  fs::remove(spec);
}

}  // namespace
}  // namespace kprop
