// LayerNorm's transforms are as exact as their descriptions claim (every
// declared tensor's shape: tests/core/spec_contract_test.cpp; valid derived
// cases: tests/sweeps/family_contract_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kprop/rng.h"
#include "properties/layernorm/family.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::layernorm {
namespace {

Case random_case(DType dtype, int rows, int dim, uint64_t seed) {
  Case c;
  c.dtype = dtype, c.rows = rows, c.dim = dim, c.eps = 1e-5;
  for (int i = 0; i < rows * dim; ++i) {
    c.x.push_back(1000 + rng::normal(seed, 1, static_cast<uint64_t>(i)));
    c.dy.push_back(rng::normal(seed, 2, static_cast<uint64_t>(i)));
  }
  for (int d = 0; d < dim; ++d) {
    c.gamma.push_back(rng::normal(seed, 3, static_cast<uint64_t>(d)));
    c.beta.push_back(rng::normal(seed, 4, static_cast<uint64_t>(d)));
  }
  round_to_dtype(c);
  return c;
}

Values params_of(const std::string& transform) {
  return testing_support::transform_defaults<Traits>(transform);
}
Values with(Values v, const std::string& key, Value value) {
  v.set(key, std::move(value));
  return v;
}

// The shift lands on the row's grid: x + c is exact, so the fp64 reference's
// x̂ (computed from x - x[0]) is bit for bit the same and μ moves by c.
TEST(LayerNormTensors, ShiftRowsIsExact) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Case c = random_case(dtype, 3, 17, 7);
    expr::TensorMap drawn;
    drawn.want("transform.shift");
    const Case t =
        Traits::transform("shift_rows", c, with(params_of("shift_rows"), "magnitude", 1000.0), 11, drawn);
    ASSERT_EQ(validate(t), "");
    const expr::Tensor* shift = drawn.find("transform.shift");
    ASSERT_NE(shift, nullptr);
    for (size_t i = 0; i < c.x.size(); ++i) {
      const double s = shift->data[i / 17];
      EXPECT_NE(s, 0);
      EXPECT_EQ(t.x[i] - s, c.x[i]);  // exact both ways
    }
    EXPECT_EQ(reference(t).xhat, reference(c).xhat);
  }
}

// With scale_eps a power-of-two factor commutes with every rounding of the
// fp64 reference: y is bit for bit unchanged, rstd divided by a exactly.
TEST(LayerNormTensors, ScaleRowsWithEpsIsExactForTheReference) {
  const Case c = random_case(DType::f64, 4, 9, 3);
  expr::TensorMap drawn;
  drawn.want("transform.factor");
  drawn.want("transform.eps_factor");
  const Case t =
      Traits::transform("scale_rows", c, with(params_of("scale_rows"), "scale_eps", true), 5, drawn);
  ASSERT_EQ(validate(t), "");
  const double a = drawn.find("transform.factor")->data[0];
  EXPECT_EQ(drawn.find("transform.eps_factor")->data[0], a * a);
  EXPECT_EQ(t.eps, c.eps * a * a);
  const Result r = reference(c), s = reference(t);
  EXPECT_EQ(s.y, r.y);
  for (size_t i = 0; i < r.rstd.size(); ++i) EXPECT_EQ(s.rstd[i] * a, r.rstd[i]);
}

// Without it, x̂ moves by ρ = a rstd' / rstd, not 1 (ε is not scaled).
TEST(LayerNormTensors, ScaleRowsWithoutEpsMovesXhatByRho) {
  Case c = random_case(DType::f64, 1, 5, 9);
  for (double& v : c.x) v = 1000 + (v - 1000) * 1e-3;  // σ² near ε: a visible ε effect
  int scaled = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    expr::TensorMap drawn;
    drawn.want("transform.factor");
    const Case t = Traits::transform("scale_rows", c, params_of("scale_rows"), seed, drawn);
    const double a = drawn.find("transform.factor")->data[0];
    const Result r = reference(c), s = reference(t);
    const double rho = a * s.rstd[0] / r.rstd[0];
    for (size_t d = 0; d < 5; ++d) EXPECT_NEAR(s.xhat[d], rho * r.xhat[d], 1e-12);
    if (a == 1) continue;
    ++scaled;
    EXPECT_GT(std::fabs(rho - 1), 1e-6) << "a = " << a;
  }
  EXPECT_GT(scaled, 0);
}

}  // namespace
}  // namespace kprop::layernorm
