// The dense inner loops shared by the tiled and the materialized kernels, so
// the benchmark compares tiling with materializing and nothing else. Each loop
// works on register blocks of a fixed width W (one 64-byte line of T) over a
// contiguous axis — the compiler vectorizes them at -O2 — and keeps the
// reduction over the head dimension sequential, so every score is rounded
// exactly like a plain dot product.
#pragma once

#include <algorithm>
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

// s[i][j] = scale · Σ_d a[i][d]·bt[d][j] for i < rows, j < cols.
template <typename T>
inline void scores(const T* __restrict a, int rows, const T* __restrict bt, int ldb, int cols, int dim,
                   T scale, T* __restrict s, int lds) {
  constexpr int W = kWidth<T>;
  int i = 0;
  for (; i + 2 <= rows; i += 2) {  // two rows share every load of bt
    const T* a0 = a + i * dim;
    const T* a1 = a0 + dim;
    int j = 0;
    for (; j + W <= cols; j += W) {
      T acc0[W] = {}, acc1[W] = {};
      for (int d = 0; d < dim; ++d) {
        const T x0 = a0[d], x1 = a1[d];
        const T* b = bt + d * ldb + j;
        for (int u = 0; u < W; ++u) {
          acc0[u] += x0 * b[u];
          acc1[u] += x1 * b[u];
        }
      }
      for (int u = 0; u < W; ++u) {
        s[i * lds + j + u] = scale * acc0[u];
        s[(i + 1) * lds + j + u] = scale * acc1[u];
      }
    }
    for (; j < cols; ++j) {
      T acc0 = 0, acc1 = 0;
      for (int d = 0; d < dim; ++d) {
        acc0 += a0[d] * bt[d * ldb + j];
        acc1 += a1[d] * bt[d * ldb + j];
      }
      s[i * lds + j] = scale * acc0;
      s[(i + 1) * lds + j] = scale * acc1;
    }
  }
  for (; i < rows; ++i) {
    const T* a0 = a + i * dim;
    int j = 0;
    for (; j + W <= cols; j += W) {
      T acc0[W] = {};
      for (int d = 0; d < dim; ++d) {
        const T x0 = a0[d];
        const T* b = bt + d * ldb + j;
        for (int u = 0; u < W; ++u) acc0[u] += x0 * b[u];
      }
      for (int u = 0; u < W; ++u) s[i * lds + j + u] = scale * acc0[u];
    }
    for (; j < cols; ++j) {
      T acc0 = 0;
      for (int d = 0; d < dim; ++d) acc0 += a0[d] * bt[d * ldb + j];
      s[i * lds + j] = scale * acc0;
    }
  }
}

// out[i][:] += Σ_j p[i][j] · x[j][:] for i < rows, j < cols (x is [cols][D]).
template <typename T>
inline void accumulate(const T* __restrict p, int ldp, int rows, int cols, const T* __restrict x, int dim,
                       T* __restrict out) {
  constexpr int W = kWidth<T>;
  int i = 0;
  for (; i + 2 <= rows; i += 2) {
    T* o0 = out + i * dim;
    T* o1 = o0 + dim;
    const T* p0 = p + i * ldp;
    const T* p1 = p0 + ldp;
    int d = 0;
    for (; d + W <= dim; d += W) {
      T acc0[W], acc1[W];
      for (int u = 0; u < W; ++u) acc0[u] = o0[d + u], acc1[u] = o1[d + u];
      for (int j = 0; j < cols; ++j) {
        const T w0 = p0[j], w1 = p1[j];
        const T* xr = x + j * dim + d;
        for (int u = 0; u < W; ++u) {
          acc0[u] += w0 * xr[u];
          acc1[u] += w1 * xr[u];
        }
      }
      for (int u = 0; u < W; ++u) o0[d + u] = acc0[u], o1[d + u] = acc1[u];
    }
    for (; d < dim; ++d)
      for (int j = 0; j < cols; ++j) {
        o0[d] += p0[j] * x[j * dim + d];
        o1[d] += p1[j] * x[j * dim + d];
      }
  }
  for (; i < rows; ++i) {
    T* o0 = out + i * dim;
    const T* p0 = p + i * ldp;
    int d = 0;
    for (; d + W <= dim; d += W) {
      T acc0[W];
      for (int u = 0; u < W; ++u) acc0[u] = o0[d + u];
      for (int j = 0; j < cols; ++j) {
        const T w0 = p0[j];
        const T* xr = x + j * dim + d;
        for (int u = 0; u < W; ++u) acc0[u] += w0 * xr[u];
      }
      for (int u = 0; u < W; ++u) o0[d + u] = acc0[u];
    }
    for (; d < dim; ++d)
      for (int j = 0; j < cols; ++j) o0[d] += p0[j] * x[j * dim + d];
  }
}

// out[j][:] += Σ_i p[i][j] · x[i][:] for i < rows, j < cols (x is [rows][D]):
// the transposed product (dV = Pᵀ·dO, dK = dSᵀ·Q).
template <typename T>
inline void accumulate_transposed(const T* __restrict p, int ldp, int rows, int cols, const T* __restrict x,
                                  int dim, T* __restrict out) {
  constexpr int W = kWidth<T>;
  int j = 0;
  for (; j + 2 <= cols; j += 2) {
    T* o0 = out + j * dim;
    T* o1 = o0 + dim;
    int d = 0;
    for (; d + W <= dim; d += W) {
      T acc0[W], acc1[W];
      for (int u = 0; u < W; ++u) acc0[u] = o0[d + u], acc1[u] = o1[d + u];
      for (int i = 0; i < rows; ++i) {
        const T w0 = p[i * ldp + j], w1 = p[i * ldp + j + 1];
        const T* xr = x + i * dim + d;
        for (int u = 0; u < W; ++u) {
          acc0[u] += w0 * xr[u];
          acc1[u] += w1 * xr[u];
        }
      }
      for (int u = 0; u < W; ++u) o0[d + u] = acc0[u], o1[d + u] = acc1[u];
    }
    for (; d < dim; ++d)
      for (int i = 0; i < rows; ++i) {
        o0[d] += p[i * ldp + j] * x[i * dim + d];
        o1[d] += p[i * ldp + j + 1] * x[i * dim + d];
      }
  }
  for (; j < cols; ++j) {
    T* o0 = out + j * dim;
    int d = 0;
    for (; d + W <= dim; d += W) {
      T acc0[W];
      for (int u = 0; u < W; ++u) acc0[u] = o0[d + u];
      for (int i = 0; i < rows; ++i) {
        const T w0 = p[i * ldp + j];
        const T* xr = x + i * dim + d;
        for (int u = 0; u < W; ++u) acc0[u] += w0 * xr[u];
      }
      for (int u = 0; u < W; ++u) o0[d + u] = acc0[u];
    }
    for (; d < dim; ++d)
      for (int i = 0; i < rows; ++i) o0[d] += p[i * ldp + j] * x[i * dim + d];
  }
}

}  // namespace kprop::attention::ops
