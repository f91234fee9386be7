// LayerNorm: the kernels on hand-made cases (the traps included), the codec,
// the shrinker, and every mutant killed under the committed spec.
#include "kernels/layernorm/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/layernorm/kernels.h"
#include "kprop/runner.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/layernorm.yaml";

Case make(DType dtype, int rows, int dim, std::vector<double> x, double eps = 1e-5) {
  Case c;
  c.dtype = dtype;
  c.rows = rows;
  c.dim = dim;
  c.eps = eps;
  c.x = std::move(x);
  for (int d = 0; d < dim; ++d) {
    c.gamma.push_back(1.0 + 0.25 * d);
    c.beta.push_back(0.5 - 0.125 * d);
  }
  for (int i = 0; i < rows * dim; ++i) c.dy.push_back(std::sin(1.0 + i));
  round_to_dtype(c);
  return c;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(LayerNormKernels, ReferenceOnAHandComputedRow) {
  // x = [1, 3]: mean 2, var 1, xhat = [-1, 1] / sqrt(1 + eps).
  Case c = make(DType::f64, 1, 2, {1, 3}, 1e-5);
  c.gamma = {2, 3};
  c.beta = {0.5, -0.5};
  c.dy = {1, 0};
  const Result r = reference(c);
  const double s = 1 / std::sqrt(1 + 1e-5);
  EXPECT_NEAR(r.y[0], 2 * -s + 0.5, 1e-15);
  EXPECT_NEAR(r.y[1], 3 * s - 0.5, 1e-15);
  // g = [2, 0], mean(g) = 1, mean(g xhat) = -s: dx = s * (g - 1 - xhat * -s).
  EXPECT_NEAR(r.dx[0], s * (2 - 1 + (-s) * s), 1e-15);
  EXPECT_NEAR(r.dx[1], s * (0 - 1 + s * s), 1e-15);
  EXPECT_NEAR(r.dgamma[0], -s, 1e-15);
  EXPECT_EQ(r.dbeta, (std::vector<double>{1, 0}));
}

TEST(LayerNormKernels, FusedMatchesReferenceInBothDtypes) {
  std::vector<double> x;
  for (int i = 0; i < 3 * 37; ++i) x.push_back(std::cos(0.7 * i) * (1 + i % 5));
  for (DType t : {DType::f32, DType::f64}) {
    const Case c = make(t, 3, 37, x);
    const Result a = reference(c), b = fused(c);
    const double tol = t == DType::f32 ? 1e-5 : 1e-13;
    EXPECT_LT(max_abs_diff(a.y, b.y), tol);
    EXPECT_LT(max_abs_diff(a.dx, b.dx), tol);
    EXPECT_LT(max_abs_diff(a.dgamma, b.dgamma), tol);
    EXPECT_LT(max_abs_diff(a.dbeta, b.dbeta), tol);
  }
}

// The trap: a 1e4 offset with a small spread. The fused f32 kernel stays
// accurate; E[x^2] - E[x]^2 in f32 loses every digit of the variance.
TEST(LayerNormKernels, LargeMeanTinyVarianceInF32) {
  std::vector<double> x;
  for (int i = 0; i < 64; ++i) x.push_back(1e4 + 0.01 * std::sin(1.0 + 3 * i));
  const Case c = make(DType::f32, 1, 64, x);
  const Result ref = reference(c), good = fused(c);
  EXPECT_LT(max_abs_diff(ref.y, good.y), 1e-3);
  const Result bad = mutants()[0].run(c);
  ASSERT_STREQ(mutants()[0].name, "naive_variance");
  EXPECT_GT(max_abs_diff(ref.y, bad.y), 0.1);
}

TEST(LayerNormKernels, ZeroVarianceAndDimOne) {
  for (DType t : {DType::f32, DType::f64}) {
    const Case c = make(t, 2, 3, {1.1, 1.1, 1.1, -7, -7, -7}, 1e-6);
    const Result r = fused(c);
    for (size_t i = 0; i < r.y.size(); ++i) {
      EXPECT_EQ(r.xhat[i], 0.0);
      EXPECT_EQ(r.y[i], c.beta[i % 3]);
    }
    const Case one = make(t, 4, 1, {1, -2, 1e4, 0});
    const Result s = fused(one);
    for (size_t i = 0; i < s.y.size(); ++i) {
      EXPECT_EQ(s.y[i], one.beta[0]);
      EXPECT_EQ(s.dx[i], 0.0);
    }
  }
}

TEST(LayerNormKernels, WelfordLanesHandleEveryRemainder) {
  for (int D : {1, 2, 15, 16, 17, 31, 33, 100}) {
    std::vector<double> x;
    for (int i = 0; i < D; ++i) x.push_back(3.0 + std::sin(0.3 * i * i));
    const Case c = make(DType::f64, 1, D, x);
    const Result a = reference(c), b = fused(c);
    EXPECT_NEAR(a.mean[0], b.mean[0], 1e-14) << D;
    EXPECT_NEAR(a.rstd[0], b.rstd[0], 1e-12 * a.rstd[0]) << D;
  }
}

TEST(LayerNormCodec, YamlRoundTripIsExact) {
  for (DType t : {DType::f32, DType::f64}) {
    const Case c = make(t, 2, 3, {0.1, 1e4 + 1.0 / 3, -2.5e-7, 1, 2, 3}, 1e-6);
    EXPECT_EQ(Traits::from_yaml(YAML::Load(emit_yaml(Traits::to_yaml(c)))), c);
  }
}

TEST(LayerNormCodec, BadCasesNameTheProblem) {
  const char* bad[] = {
      "dtype: f16\neps: 1e-5\nx: [[1]]\ngamma: [1]\nbeta: [0]\ndy: [[1]]\n",
      "dtype: f32\neps: 1e-5\nx: [[1, 2], [3]]\ngamma: [1, 1]\nbeta: [0, 0]\ndy: [[1, 1], [1]]\n",
      "dtype: f32\neps: 0\nx: [[1]]\ngamma: [1]\nbeta: [0]\ndy: [[1]]\n",
      "dtype: f32\neps: 1e-5\nx: [[1e39]]\ngamma: [1]\nbeta: [0]\ndy: [[1]]\n",
      "dtype: f64\neps: 1e-5\nx: [[1, 2]]\ngamma: [1]\nbeta: [0, 0]\ndy: [[1, 1]]\n",
      "dtype: f64\neps: 1e-5\nx: [[1]]\ngamma: [1]\nbeta: [0]\ndy: [[1]]\nextra: 1\n",
  };
  for (const char* text : bad) {
    EXPECT_THROW(Traits::from_yaml(YAML::Load(text)), CaseFormatError) << text;
  }
}

TEST(LayerNormShrinker, EveryCandidateIsValidAndSimpler) {
  std::vector<double> x;
  for (int i = 0; i < 12; ++i) x.push_back(1e4 + 0.0123 * i);
  const Case c = make(DType::f32, 3, 4, x, 2.5e-6);
  auto seq = Traits::shrinks(c, Values::defaults(Traits::domain_schema()));
  int n = 0;
  while (auto s = seq.next()) {
    EXPECT_EQ(validate(*s), "");
    EXPECT_FALSE(*s == c);
    EXPECT_LE(s->rows * s->dim, c.rows * c.dim);
    Case rounded = *s;
    round_to_dtype(rounded);
    EXPECT_EQ(rounded, *s);
    ++n;
  }
  EXPECT_GT(n, 20);
}

TEST(LayerNormShrinker, SignificantDigits) {
  EXPECT_EQ(significant_digits(0, DType::f64), 0);
  EXPECT_EQ(significant_digits(10000, DType::f64), 1);
  EXPECT_EQ(significant_digits(-1.25e-7, DType::f64), 3);
  EXPECT_EQ(significant_digits(0.1, DType::f32), 1);
}

}  // namespace
}  // namespace kprop::layernorm
