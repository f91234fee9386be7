// Case -> Result wrappers around the row kernels of kernels.h: the fused
// implementation, the naive two-pass baseline and the mutants, each run in
// the case's dtype.
#include <vector>

#include "kernels/layernorm/kernels.h"
#include "kernels/layernorm/layernorm.h"

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

template <typename T, kernel::Bug B>
Result run_fused(const Case& c) {
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim);
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), xhat(n), mean(static_cast<size_t>(c.rows)), rstd(static_cast<size_t>(c.rows)), dx(n),
      dgamma(static_cast<size_t>(c.dim)), dbeta(static_cast<size_t>(c.dim));
  kernel::fused_forward<T, B>(x.data(), gamma.data(), beta.data(), c.rows, c.dim, static_cast<T>(c.eps),
                              y.data(), xhat.data(), mean.data(), rstd.data());
  kernel::fused_backward<T, B>(dy.data(), gamma.data(), xhat.data(), rstd.data(), c.rows, c.dim, dx.data(),
                               dgamma.data(), dbeta.data(),
                               B == kernel::Bug::dgamma_no_xhat ? x.data() : nullptr);
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

template <kernel::Bug B>
Result by_dtype(const Case& c) {
  return c.dtype == DType::f32 ? run_fused<float, B>(c) : run_fused<double, B>(c);
}

template <typename T>
Result run_two_pass(const Case& c) {
  const size_t n = static_cast<size_t>(c.rows) * static_cast<size_t>(c.dim);
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), mean(static_cast<size_t>(c.rows)), rstd(static_cast<size_t>(c.rows)), dx(n),
      dgamma(static_cast<size_t>(c.dim)), dbeta(static_cast<size_t>(c.dim));
  kernel::two_pass_forward<T>(x.data(), gamma.data(), beta.data(), c.rows, c.dim, static_cast<T>(c.eps),
                              y.data(), mean.data(), rstd.data());
  kernel::two_pass_backward<T>(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), c.rows, c.dim,
                               dx.data(), dgamma.data(), dbeta.data());
  std::vector<double> xhat(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = i / static_cast<size_t>(c.dim);
    xhat[i] = static_cast<double>((x[i] - mean[r]) * rstd[r]);
  }
  return {widen(y), std::move(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

}  // namespace

Result fused(const Case& c) {
  return by_dtype<kernel::Bug::none>(c);
}

Result two_pass(const Case& c) {
  return c.dtype == DType::f32 ? run_two_pass<float>(c) : run_two_pass<double>(c);
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
  };
  return table;
}

}  // namespace kprop::layernorm
