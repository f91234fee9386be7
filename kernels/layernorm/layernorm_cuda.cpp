// Case -> Result wrapper around the CUDA LayerNorm (layernorm_cuda.cu);
// compiled to nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/layernorm/layernorm_cuda.h"

#include <vector>

namespace kprop::layernorm {
namespace {

template <typename T>
Result run_typed(const Case& c) {
  const size_t rows = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim), n = rows * D;
  const std::vector<T> x(c.x.begin(), c.x.end()), gamma(c.gamma.begin(), c.gamma.end()),
      beta(c.beta.begin(), c.beta.end()), dy(c.dy.begin(), c.dy.end());
  std::vector<T> y(n), xhat(n), mean(rows), rstd(rows), dx(n), dgamma(D), dbeta(D);
  cuda_raw::run(x.data(), gamma.data(), beta.data(), dy.data(), c.rows, c.dim, static_cast<T>(c.eps),
                y.data(), xhat.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data());
  auto widen = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

}  // namespace

Result cuda(const Case& c) {
  return c.dtype == DType::f32 ? run_typed<float>(c) : run_typed<double>(c);
}

}  // namespace kprop::layernorm
#endif
