// LayerNorm row kernels on raw arrays, templated on the element type (float
// or double). Header-only so the benchmark compiles exactly what the
// properties test. The Case/Result wrappers are in layernorm.h.
//
//   y = γ ⊙ (x − μ) / sqrt(σ² + ε) + β     over the last dim (D), σ² biased
//   x̂ = (x − μ) · rstd,  rstd = 1 / sqrt(σ² + ε)
//   g = γ ⊙ dy
//   dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))
//   dγ = Σ_rows dy ⊙ x̂,  dβ = Σ_rows dy
//
// Two algorithms:
//  * fused: one-pass Welford statistics (kLanes independent accumulators,
//    combined pairwise with Chan's formula) over x shifted by its first
//    element, then one normalising pass that writes y and caches x̂; the
//    backward reads only dy, γ and the cached x̂ and rstd (never x or μ).
//    Shifting by a sample of the row is the textbook cure for large means:
//    x − x₀ is exact when the row sits at a large offset (Sterbenz), so the
//    statistics never see the offset and μ is never subtracted in rounded
//    form.
//  * two_pass: the reference algorithm written naively in T — μ = Σx / D,
//    σ² = Σ(x − μ)² / D, sequential sums, μ and rstd saved, x̂ recomputed in
//    the backward. It is the tolerance baseline (docs/DESIGN.md, "Tolerance
//    policy": the error of a naive computation in the target's own
//    precision) and the benchmark's "reference-style" comparison.
//
// Mutants reuse the fused kernel with one deliberate bug (Bug below).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace kprop::layernorm::kernel {

enum class Bug {
  none,
  naive_variance,     // σ² = E[x²] − E[x]² in one pass over raw x (clamped at 0)
  missing_mean_term,  // dx = rstd·(g − x̂·mean(g x̂))
  missing_proj_term,  // dx = rstd·(g − mean(g))
  eps_outside_sqrt,   // rstd = 1 / (sqrt(σ²) + ε)
  unbiased_variance,  // σ² = M2 / (D − 1)
  dgamma_no_xhat,     // dγ = Σ dy ⊙ x (the raw input instead of x̂)
  // Welford's M2 (the running sum of squared deviations) rounded to the
  // storage type after every update and combine (`store`, a half-precision
  // case's f16/bf16 rounding): overflows at f16's 65504, loses bits in bf16.
  // The last one: fused_with (fused.cpp) counts the bugs up to it.
  variance_in_storage,
};

// Rounds a value to the storage type (identity when null).
template <typename T>
using StoreFn = T (*)(T);

// Independent Welford accumulators per row; a multiple of every SIMD width.
inline constexpr int kLanes = 16;

// ------------------------------------------------------------------ fused
template <typename T>
struct Welford {
  T n = 0, mean = 0, m2 = 0;
};

// Chan et al.'s pairwise combination of two partial (count, mean, M2).
template <typename T>
inline Welford<T> combine(Welford<T> a, const Welford<T>& b, StoreFn<T> m2_store = nullptr) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const T n = a.n + b.n;
  const T delta = b.mean - a.mean;
  const T wb = b.n / n;
  a.mean += delta * wb;
  // δ · (δ · n_a n_b / n), not δ² · …: the product δ² alone can overflow
  // where the true M2 fits (x = [-2e19, 0] in f32: δ² = 4e38, M2 = 2e38).
  // With |δ| >= 1 the inner product is at most the outer; below, nothing
  // overflows. Same three multiplications, same rounding bound.
  a.m2 += b.m2 + delta * (delta * (a.n * wb));
  if (m2_store) a.m2 = m2_store(a.m2);
  a.n = n;
  return a;
}

// Forward of one row. Writes y and x̂ (D each), the row's mean and rstd.
// `store` is used by Bug::variance_in_storage only.
template <typename T, Bug B = Bug::none>
inline void fused_forward_row(const T* x, const T* gamma, const T* beta, int D, T eps, T* y, T* xhat,
                              T* mean_out, T* rstd_out, [[maybe_unused]] StoreFn<T> store = nullptr) {
  const StoreFn<T> m2_store = B == Bug::variance_in_storage ? store : nullptr;
  T shift = 0, center = 0, var = 0;
  if constexpr (B == Bug::naive_variance) {
    T s[kLanes] = {}, s2[kLanes] = {};
    const int full = D / kLanes * kLanes;
    for (int i = 0; i < full; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        s[j] += x[i + j];
        s2[j] += x[i + j] * x[i + j];
      }
    for (int i = full; i < D; ++i) {
      s[i - full] += x[i];
      s2[i - full] += x[i] * x[i];
    }
    for (int h = kLanes / 2; h > 0; h /= 2)
      for (int j = 0; j < h; ++j) s[j] += s[j + h], s2[j] += s2[j + h];
    center = s[0] / T(D);
    var = std::max(s2[0] / T(D) - center * center, T(0));
  } else {
    shift = x[0];
    T m[kLanes] = {}, m2[kLanes] = {};
    // Welford step k (0-based) of lanes [0, lanes) over x[k·kLanes + j].
    const auto step = [&](int k, int lanes) {
      const T inv = T(1) / T(k + 1);
      const T* xs = x + k * kLanes;
      for (int j = 0; j < lanes; ++j) {
        const T d = xs[j] - shift;
        const T delta = d - m[j];
        m[j] += delta * inv;
        m2[j] += delta * (d - m[j]);
        if (m2_store) m2[j] = m2_store(m2[j]);
      }
    };
    const int steps = D / kLanes;
    for (int k = 0; k < steps; ++k) step(k, kLanes);
    const int rem = D - steps * kLanes;
    if (rem > 0) step(steps, rem);
    Welford<T> w[kLanes];
    for (int j = 0; j < kLanes; ++j) w[j] = {T(steps + (j < rem ? 1 : 0)), m[j], m2[j]};
    for (int h = kLanes / 2; h > 0; h /= 2)
      for (int j = 0; j < h; ++j) w[j] = combine(w[j], w[j + h], m2_store);
    center = w[0].mean;
    if constexpr (B == Bug::unbiased_variance)
      var = w[0].m2 / T(D - 1);
    else
      var = w[0].m2 / T(D);
  }
  T rstd;
  if constexpr (B == Bug::eps_outside_sqrt)
    rstd = T(1) / (std::sqrt(var) + eps);
  else
    rstd = T(1) / std::sqrt(var + eps);
  for (int i = 0; i < D; ++i) {
    const T xh = ((x[i] - shift) - center) * rstd;
    xhat[i] = xh;
    y[i] = gamma[i] * xh + beta[i];
  }
  *mean_out = shift + center;
  *rstd_out = rstd;
}

// Backward of one row from the cache (x̂, rstd). Accumulates dγ and dβ
// (callers zero them once for the whole batch). `x` is read only by the
// dgamma_no_xhat mutant; the correct kernel never sees the input.
template <typename T, Bug B = Bug::none>
inline void fused_backward_row(const T* dy, const T* gamma, const T* xhat, T rstd, int D, T* dx, T* dgamma,
                               T* dbeta, [[maybe_unused]] const T* x = nullptr) {
  T sg[kLanes] = {}, sgx[kLanes] = {};
  const int full = D / kLanes * kLanes;
  for (int i = 0; i < full; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const T g = gamma[i + j] * dy[i + j];
      sg[j] += g;
      sgx[j] += g * xhat[i + j];
    }
  for (int i = full; i < D; ++i) {
    const T g = gamma[i] * dy[i];
    sg[i - full] += g;
    sgx[i - full] += g * xhat[i];
  }
  for (int h = kLanes / 2; h > 0; h /= 2)
    for (int j = 0; j < h; ++j) sg[j] += sg[j + h], sgx[j] += sgx[j + h];
  const T mean_g = sg[0] / T(D), mean_gx = sgx[0] / T(D);
  for (int i = 0; i < D; ++i) {
    const T g = gamma[i] * dy[i];
    T inner;
    if constexpr (B == Bug::missing_mean_term)
      inner = g - xhat[i] * mean_gx;
    else if constexpr (B == Bug::missing_proj_term)
      inner = g - mean_g;
    else
      inner = g - mean_g - xhat[i] * mean_gx;
    dx[i] = rstd * inner;
    if constexpr (B == Bug::dgamma_no_xhat)
      dgamma[i] += dy[i] * x[i];
    else
      dgamma[i] += dy[i] * xhat[i];
    dbeta[i] += dy[i];
  }
}

template <typename T, Bug B = Bug::none>
void fused_forward(const T* x, const T* gamma, const T* beta, int rows, int D, T eps, T* y, T* xhat, T* mean,
                   T* rstd, StoreFn<T> store = nullptr) {
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * static_cast<size_t>(D);
    fused_forward_row<T, B>(x + o, gamma, beta, D, eps, y + o, xhat + o, mean + r, rstd + r, store);
  }
}

template <typename T, Bug B = Bug::none>
void fused_backward(const T* dy, const T* gamma, const T* xhat, const T* rstd, int rows, int D, T* dx,
                    T* dgamma, T* dbeta, const T* x = nullptr) {
  std::fill(dgamma, dgamma + D, T(0));
  std::fill(dbeta, dbeta + D, T(0));
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * static_cast<size_t>(D);
    fused_backward_row<T, B>(dy + o, gamma, xhat + o, rstd[r], D, dx + o, dgamma, dbeta, x ? x + o : nullptr);
  }
}

// --------------------------------------------------------------- two-pass
template <typename T>
void two_pass_forward(const T* x, const T* gamma, const T* beta, int rows, int D, T eps, T* y, T* mean,
                      T* rstd) {
  for (int r = 0; r < rows; ++r) {
    const T* xr = x + static_cast<size_t>(r) * static_cast<size_t>(D);
    T* yr = y + static_cast<size_t>(r) * static_cast<size_t>(D);
    T sum = 0;
    for (int i = 0; i < D; ++i) sum += xr[i];
    const T mu = sum / T(D);
    T ss = 0;
    for (int i = 0; i < D; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
    const T rs = T(1) / std::sqrt(ss / T(D) + eps);
    for (int i = 0; i < D; ++i) yr[i] = gamma[i] * ((xr[i] - mu) * rs) + beta[i];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <typename T>
void two_pass_backward(const T* x, const T* dy, const T* gamma, const T* mean, const T* rstd, int rows, int D,
                       T* dx, T* dgamma, T* dbeta) {
  std::fill(dgamma, dgamma + D, T(0));
  std::fill(dbeta, dbeta + D, T(0));
  for (int r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r) * static_cast<size_t>(D);
    const T *xr = x + o, *dyr = dy + o;
    T* dxr = dx + o;
    const T mu = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
    for (int i = 0; i < D; ++i) {
      const T xh = (xr[i] - mu) * rs;
      sg += gamma[i] * dyr[i];
      sgx += gamma[i] * dyr[i] * xh;
    }
    const T mean_g = sg / T(D), mean_gx = sgx / T(D);
    for (int i = 0; i < D; ++i) {
      const T xh = (xr[i] - mu) * rs;
      dxr[i] = rs * (gamma[i] * dyr[i] - mean_g - xh * mean_gx);
      dgamma[i] += dyr[i] * xh;
      dbeta[i] += dyr[i];
    }
  }
}

}  // namespace kprop::layernorm::kernel
