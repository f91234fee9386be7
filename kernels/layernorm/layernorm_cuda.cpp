// Case -> Result wrapper around the CUDA LayerNorm (layernorm_cuda.cu);
// compiled to nothing without CUDA. A half case (f16, bf16) runs the f32
// kernel on its half values and rounds the stored outputs (y, x̂, dx, dγ, dβ)
// to the case's dtype; μ and rstd stay f32 (layernorm.h, precision contract).
#if KPROP_HAVE_CUDA
#include "kernels/layernorm/layernorm_cuda.h"

#include <vector>

#include "kernels/convert.h"
#include "kernels/layernorm/layernorm.h"

namespace kprop::layernorm {
namespace {

template <typename T>
Result run_typed(const Case& c) {
  const size_t rows = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim), n = rows * D;
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), xhat(n), mean(rows), rstd(rows), dx(n), dgamma(D), dbeta(D);
  cuda_raw::run(x.data(), gamma.data(), beta.data(), dy.data(), c.rows, c.dim, static_cast<T>(c.eps),
                y.data(), xhat.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data());
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

}  // namespace

Result cuda(const Case& c) {
  if (c.dtype == DType::f64) return run_typed<double>(c);
  Result r = run_typed<float>(c);
  if (is_half(c.dtype))
    for (auto* v : {&r.y, &r.xhat, &r.dx, &r.dgamma, &r.dbeta})
      for (double& e : *v) e = round_to(c.dtype, e);
  return r;
}

}  // namespace kprop::layernorm
#endif
