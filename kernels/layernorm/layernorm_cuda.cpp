// Case -> Result wrapper around the CUDA LayerNorm (layernorm_cuda.cu);
// compiled to nothing without CUDA. A half case (f16, bf16) runs the f32
// kernels on its half values; the forward stores the x̂ cache rounded to the
// case's dtype on the device, so the backward reads the rounded cache (as
// the CPU fused kernel, fused.cpp), and this wrapper rounds the other
// stored outputs (y, dx, dγ, dβ); μ and rstd stay f32 (layernorm.h,
// precision contract).
#if KPROP_HAVE_CUDA
#include "kernels/layernorm/layernorm_cuda.h"

#include <type_traits>
#include <vector>

#include "kernels/convert.h"
#include "kernels/layernorm/layernorm.h"

namespace kprop::layernorm {
namespace {

template <typename T>
Result run_typed(const Case& c, [[maybe_unused]] cuda_raw::Store store = cuda_raw::Store::none) {
  const size_t rows = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim), n = rows * D;
  const auto x = narrow<T>(c.x), gamma = narrow<T>(c.gamma), beta = narrow<T>(c.beta), dy = narrow<T>(c.dy);
  std::vector<T> y(n), xhat(n), mean(rows), rstd(rows), dx(n), dgamma(D), dbeta(D);
  if constexpr (std::is_same_v<T, float>)
    cuda_raw::run(x.data(), gamma.data(), beta.data(), dy.data(), c.rows, c.dim, static_cast<T>(c.eps),
                  y.data(), xhat.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data(),
                  store);
  else
    cuda_raw::run(x.data(), gamma.data(), beta.data(), dy.data(), c.rows, c.dim, static_cast<T>(c.eps),
                  y.data(), xhat.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data());
  return {widen(y), widen(xhat), widen(mean), widen(rstd), widen(dx), widen(dgamma), widen(dbeta)};
}

}  // namespace

Result cuda(const Case& c) {
  if (c.dtype == DType::f64) return run_typed<double>(c);
  const cuda_raw::Store store = c.dtype == DType::f16    ? cuda_raw::Store::f16
                                : c.dtype == DType::bf16 ? cuda_raw::Store::bf16
                                                         : cuda_raw::Store::none;
  Result r = run_typed<float>(c, store);
  // x̂ is already in the dtype's values (rounded on the device, before the
  // backward read it).
  if (is_half(c.dtype))
    for (auto* v : {&r.y, &r.dx, &r.dgamma, &r.dbeta})
      for (double& e : *v) e = round_to(c.dtype, e);
  return r;
}

}  // namespace kprop::layernorm
#endif
