// Case -> Result wrappers around the row kernels of kernels.h: the fused
// implementation, the naive two-pass baseline and the mutants, each run in
// the case's dtype. A half case (f16, bf16) runs the float kernels on its
// half values and rounds what a GPU kernel stores (layernorm.h, "Precision
// contract"): y and the x̂ cache after the forward (the backward reads the
// rounded cache), dx, dγ, dβ after the backward; μ and rstd stay f32.
#include <type_traits>
#include <vector>

#include "kernels/layernorm/kernels.h"
#include "kernels/layernorm/layernorm.h"
#include "kprop/half.h"

namespace kprop::layernorm {
namespace {

template <typename T>
std::vector<T> narrow(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Stores a float in f16 / bf16 (round to nearest even) and reads it back.
float store_f16(float v) {
  return half::f16_to_float(half::f16_from_float(v));
}
float store_bf16(float v) {
  return half::bf16_to_float(half::bf16_from_float(v));
}
// The bf16_truncate mutant's store: the low 16 bits dropped.
float store_bf16_truncated(float v) {
  return half::bf16_to_float(half::bf16_truncate(v));
}

// The storage rounding of a case's dtype (null: f32 and f64 store exactly).
kernel::StoreFn<float> storage_of(DType t) {
  if (t == DType::f16) return store_f16;
  if (t == DType::bf16) return store_bf16;
  return nullptr;
}

void store_all(std::vector<float>& v, kernel::StoreFn<float> store) {
  if (store)
    for (float& e : v) e = store(e);
}

// `store`: the rounding of the outputs (and of the x̂ cache) for a half
// case; null for f32 and f64. `m2_store`: the rounding the
// variance_in_storage mutant applies to M2.
template <typename T, kernel::Bug B>
Result run_fused(const Case& c, kernel::StoreFn<T> store = nullptr, kernel::StoreFn<T> m2_store = nullptr) {
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim);
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), xhat(n), mean(static_cast<size_t>(c.rows)), rstd(static_cast<size_t>(c.rows)), dx(n),
      dgamma(static_cast<size_t>(c.dim)), dbeta(static_cast<size_t>(c.dim));
  kernel::fused_forward<T, B>(x.data(), gamma.data(), beta.data(), c.rows, c.dim, static_cast<T>(c.eps),
                              y.data(), xhat.data(), mean.data(), rstd.data(), m2_store);
  if constexpr (std::is_same_v<T, float>) store_all(y, store), store_all(xhat, store);
  kernel::fused_backward<T, B>(dy.data(), gamma.data(), xhat.data(), rstd.data(), c.rows, c.dim, dx.data(),
                               dgamma.data(), dbeta.data(),
                               B == kernel::Bug::dgamma_no_xhat ? x.data() : nullptr);
  if constexpr (std::is_same_v<T, float>)
    store_all(dx, store), store_all(dgamma, store), store_all(dbeta, store);
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

template <kernel::Bug B>
Result by_dtype(const Case& c) {
  if (c.dtype == DType::f64) return run_fused<double, B>(c);
  const kernel::StoreFn<float> store = storage_of(c.dtype);
  return run_fused<float, B>(c, store, store);
}

// The bf16_truncate mutant: the correct kernel, but a bf16 case's outputs
// (and x̂ cache) are converted to bf16 by truncation; other dtypes as fused.
Result bf16_truncated(const Case& c) {
  if (c.dtype != DType::bf16) return by_dtype<kernel::Bug::none>(c);
  return run_fused<float, kernel::Bug::none>(c, store_bf16_truncated);
}

template <typename T>
Result run_two_pass(const Case& c, kernel::StoreFn<T> store = nullptr) {
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim);
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), mean(static_cast<size_t>(c.rows)), rstd(static_cast<size_t>(c.rows)), dx(n),
      dgamma(static_cast<size_t>(c.dim)), dbeta(static_cast<size_t>(c.dim));
  kernel::two_pass_forward<T>(x.data(), gamma.data(), beta.data(), c.rows, c.dim, static_cast<T>(c.eps),
                              y.data(), mean.data(), rstd.data());
  kernel::two_pass_backward<T>(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), c.rows, c.dim,
                               dx.data(), dgamma.data(), dbeta.data());
  std::vector<T> xhat(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = i / static_cast<size_t>(c.dim);
    xhat[i] = (x[i] - mean[r]) * rstd[r];
  }
  if constexpr (std::is_same_v<T, float>)
    for (auto* v : {&y, &xhat, &dx, &dgamma, &dbeta}) store_all(*v, store);
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

}  // namespace

Result fused(const Case& c) {
  return by_dtype<kernel::Bug::none>(c);
}

Result two_pass(const Case& c) {
  return c.dtype == DType::f64 ? run_two_pass<double>(c) : run_two_pass<float>(c, storage_of(c.dtype));
}

const std::vector<Mutant>& mutants() {
  using kernel::Bug;
  static const std::vector<Mutant> table = {
      {"naive_variance",
       "sigma^2 = E[x^2] - E[x]^2 in one pass over raw x (clamped at 0): cancels catastrophically at large "
       "means",
       by_dtype<Bug::naive_variance>},
      {"missing_mean_term", "dx = rstd * (g - xhat * mean(g xhat)): the -mean(g) term dropped",
       by_dtype<Bug::missing_mean_term>},
      {"missing_proj_term", "dx = rstd * (g - mean(g)): the -xhat * mean(g xhat) projection dropped",
       by_dtype<Bug::missing_proj_term>},
      {"eps_outside_sqrt", "rstd = 1 / (sqrt(sigma^2) + eps) instead of 1 / sqrt(sigma^2 + eps)",
       by_dtype<Bug::eps_outside_sqrt>},
      {"unbiased_variance", "sigma^2 = M2 / (D - 1) instead of the biased M2 / D",
       by_dtype<Bug::unbiased_variance>},
      {"dgamma_no_xhat",
       "dgamma = sum dy * x: the raw input instead of xhat (right only for normalised inputs)",
       by_dtype<Bug::dgamma_no_xhat>},
      {"variance_in_storage",
       "Welford's M2 (the sum of squared deviations) accumulated in the storage type (f16/bf16) instead of "
       "f32: overflows past f16's 65504; f32 and f64 cases as fused",
       by_dtype<Bug::variance_in_storage>},
      {"bf16_truncate",
       "outputs (and the xhat cache) converted to bf16 by truncation instead of round-to-nearest-even; "
       "other dtypes as fused",
       bf16_truncated},
  };
  return table;
}

}  // namespace kprop::layernorm
