// The dense inner loops shared by the tiled and the materialized kernels, so
// the benchmark compares tiling with materializing and nothing else. Each loop
// works on register blocks of a fixed width W (one 64-byte line of T) over a
// contiguous axis — the compiler vectorizes them at -O2 — and keeps the
// reduction over the head dimension sequential, so every score is rounded
// exactly like a plain dot product.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/attention/attention.h"
#include "kprop/half.h"

namespace kprop::attention::ops {

// x as stored in `s` (see Storage in attention.h).
template <typename T>
inline T stored(Storage s, T x) {
  switch (s) {
    case Storage::same:
      return x;
    case Storage::f16:
      return static_cast<T>(half::round_to_f16(double(x)));
    case Storage::bf16:
      return static_cast<T>(half::round_to_bf16(double(x)));
  }
  return x;
}

// x as a kernel that converts by truncation stores it in `s`: rounded
// toward zero (for bf16, the f32's low 16 bits dropped), not to nearest.
// The o_store_truncated mutant's store.
template <typename T>
inline T stored_toward_zero(Storage s, T x) {
  const T r = stored(s, x);
  if (s == Storage::same || !(std::fabs(r) > std::fabs(x))) return r;
  const uint16_t bits =
      s == Storage::f16 ? half::f16_from_double(double(r)) : half::bf16_from_double(double(r));
  const auto below = static_cast<uint16_t>(bits - 1);  // one step toward zero (same sign, |r| > 0)
  return static_cast<T>(s == Storage::f16 ? half::f16_to_double(below) : half::bf16_to_double(below));
}

// Rows × cols of a tile with leading dimension ld, as stored in `s`.
template <typename T>
inline void store_tile(Storage s, T* x, int rows, int cols, int ld) {
  if (s == Storage::same) return;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) x[size_t(i) * ld + j] = stored(s, x[size_t(i) * ld + j]);
}
template <typename T>
inline void store_all(Storage s, T* x, size_t n) {
  if (s == Storage::same) return;
  for (size_t i = 0; i < n; ++i) x[i] = stored(s, x[i]);
}

template <typename T>
inline constexpr int kWidth = 64 / static_cast<int>(sizeof(T));

// Row-major [rows][D] -> [D][ld] (columns 0..rows-1).
template <typename T>
inline void transpose(const T* __restrict src, int rows, int dim, T* __restrict dst, int ld) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < dim; ++d) dst[d * ld + r] = src[r * dim + d];
}

// Each product below is computed on register panels of R rows × B columns
// (R = 2 rows share every load of the other operand, then 1), with B = W, then
// W/2, W/4 and 1 over what is left of the contiguous axis: a head dimension
// or a tile width below W (the default domains draw D ≤ 24, tiles ≤ 32) still
// runs on vector panels instead of scalar loops. Every output element is
// accumulated in the same order whatever panel computes it (over d for a
// score, over the rows of x for an accumulation), so the panel widths change
// no bit of any result.

// s[i][j] = scale · Σ_d a[i][d]·bt[d][j] for i < rows, j < cols.
template <int R, int B, typename T>
inline int scores_panel(const T* __restrict a, const T* __restrict bt, int ldb, int cols, int dim, T scale,
                        T* __restrict s, int lds, int j) {
  for (; j + B <= cols; j += B) {
    T acc[R][B] = {};
    for (int d = 0; d < dim; ++d) {
      const T* b = bt + d * ldb + j;
      for (int r = 0; r < R; ++r) {
        const T x = a[r * dim + d];
        for (int u = 0; u < B; ++u) acc[r][u] += x * b[u];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < B; ++u) s[r * lds + j + u] = scale * acc[r][u];
  }
  return j;
}
template <int R, typename T>
inline void scores_rows(const T* __restrict a, const T* __restrict bt, int ldb, int cols, int dim, T scale,
                        T* __restrict s, int lds) {
  constexpr int W = kWidth<T>;
  int j = scores_panel<R, W>(a, bt, ldb, cols, dim, scale, s, lds, 0);
  j = scores_panel<R, W / 2>(a, bt, ldb, cols, dim, scale, s, lds, j);
  j = scores_panel<R, W / 4>(a, bt, ldb, cols, dim, scale, s, lds, j);
  scores_panel<R, 1>(a, bt, ldb, cols, dim, scale, s, lds, j);
}
template <typename T>
inline void scores(const T* __restrict a, int rows, const T* __restrict bt, int ldb, int cols, int dim,
                   T scale, T* __restrict s, int lds) {
  int i = 0;
  for (; i + 2 <= rows; i += 2) scores_rows<2>(a + i * dim, bt, ldb, cols, dim, scale, s + i * lds, lds);
  for (; i < rows; ++i) scores_rows<1>(a + i * dim, bt, ldb, cols, dim, scale, s + i * lds, lds);
}

// The accumulations: R output rows, each out[r][d..d+B) += Σ_n w(r, n) ·
// x[n][d..d+B) over n < count in order, the weight w(r, n) = p[r·pr + n·pn].
template <int R, int B, typename T>
inline int accumulate_panel(const T* __restrict p, int pr, int pn, int count, const T* __restrict x, int dim,
                            T* __restrict out, int d) {
  for (; d + B <= dim; d += B) {
    T acc[R][B];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < B; ++u) acc[r][u] = out[r * dim + d + u];
    for (int n = 0; n < count; ++n) {
      const T* xr = x + n * dim + d;
      for (int r = 0; r < R; ++r) {
        const T w = p[r * pr + n * pn];
        for (int u = 0; u < B; ++u) acc[r][u] += w * xr[u];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < B; ++u) out[r * dim + d + u] = acc[r][u];
  }
  return d;
}
template <int R, typename T>
inline void accumulate_rows(const T* __restrict p, int pr, int pn, int count, const T* __restrict x, int dim,
                            T* __restrict out) {
  constexpr int W = kWidth<T>;
  int d = accumulate_panel<R, W>(p, pr, pn, count, x, dim, out, 0);
  d = accumulate_panel<R, W / 2>(p, pr, pn, count, x, dim, out, d);
  d = accumulate_panel<R, W / 4>(p, pr, pn, count, x, dim, out, d);
  accumulate_panel<R, 1>(p, pr, pn, count, x, dim, out, d);
}

// out[i][:] += Σ_j p[i][j] · x[j][:] for i < rows, j < cols (x is [cols][D]).
template <typename T>
inline void accumulate(const T* __restrict p, int ldp, int rows, int cols, const T* __restrict x, int dim,
                       T* __restrict out) {
  int i = 0;
  for (; i + 2 <= rows; i += 2) accumulate_rows<2>(p + i * ldp, ldp, 1, cols, x, dim, out + i * dim);
  for (; i < rows; ++i) accumulate_rows<1>(p + i * ldp, ldp, 1, cols, x, dim, out + i * dim);
}

// out[j][:] += Σ_i p[i][j] · x[i][:] for i < rows, j < cols (x is [rows][D]):
// the transposed product (dV = Pᵀ·dO, dK = dSᵀ·Q).
template <typename T>
inline void accumulate_transposed(const T* __restrict p, int ldp, int rows, int cols, const T* __restrict x,
                                  int dim, T* __restrict out) {
  int j = 0;
  for (; j + 2 <= cols; j += 2) accumulate_rows<2>(p + j, 1, ldp, rows, x, dim, out + j * dim);
  for (; j < cols; ++j) accumulate_rows<1>(p + j, 1, ldp, rows, x, dim, out + j * dim);
}

}  // namespace kprop::attention::ops
