// Case -> Result wrappers around the row kernels of kernels.h: the fused
// implementation (fused_with: with a kernel::Bug switch flipped, which the
// mutants in mutants.cpp run) and the naive two-pass baseline, each run in
// the case's dtype. A half case (f16, bf16) runs the float kernels on its
// half values and rounds what a GPU kernel stores (layernorm.h, "Precision
// contract"): y and the x̂ cache after the forward (the backward reads the
// rounded cache), dx, dγ, dβ after the backward; μ and rstd stay f32.
#include <array>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/convert.h"
#include "kernels/layernorm/kernels.h"
#include "kernels/layernorm/layernorm.h"
#include "kprop/half.h"

namespace kprop::layernorm {
namespace {

// Stores a float in f16 / bf16 (round to nearest even) and reads it back.
float store_f16(float v) {
  return half::f16_to_float(half::f16_from_float(v));
}
float store_bf16(float v) {
  return half::bf16_to_float(half::bf16_from_float(v));
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

// `store`: replaces a half case's storage rounding (null: the dtype's).
template <kernel::Bug B>
Result by_dtype(const Case& c, kernel::StoreFn<float> store = nullptr) {
  if (c.dtype == DType::f64) return run_fused<double, B>(c);
  if (!store) store = storage_of(c.dtype);
  return run_fused<float, B>(c, store, store);
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

Result fused_with(const Case& c, kernel::Bug bug, kernel::StoreFn<float> store) {
  // by_dtype<B> for every kernel::Bug, indexed by the enumerator.
  using Run = Result (*)(const Case&, kernel::StoreFn<float>);
  constexpr size_t kBugs = static_cast<size_t>(kernel::Bug::variance_in_storage) + 1;  // the last one
  static constexpr auto table = []<size_t... I>(std::index_sequence<I...>) {
    return std::array<Run, kBugs>{&by_dtype<static_cast<kernel::Bug>(I)>...};
  }
  (std::make_index_sequence<kBugs>());
  const auto at = static_cast<size_t>(bug);
  if (at >= kBugs) throw std::invalid_argument("layernorm: unknown kernel::Bug");
  return table[at](c, store);
}

}  // namespace kprop::layernorm
