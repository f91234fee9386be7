// An RMSNorm forward written outside kprop, tested as the declared op of
// specs/ops/rmsnorm.yaml through the generic entry point of
// include/kprop/abi/op.h. It needs only include/kprop/abi.h:
//
//   c++ -std=c++17 -O2 -shared -fPIC -I kprop/include rmsnorm_op.cpp -o librmsnorm_op.so
//   prop_runner --spec specs/ops/rmsnorm.yaml --target plugin:./librmsnorm_op.so
//
// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, in the case's dtype
// (f32 or f64), the sum of squares accumulated in that dtype row by row, as a
// CPU kernel does; every tensor read and written through its strides.
//
// KPROP_EXAMPLE_BUG plants one bug, for kprop's own tests:
//   1  eps added outside the square root: x / (sqrt(mean(x^2)) + eps) * w
//   2  a 4-wide unrolled sum of squares that drops the tail (D mod 4 elements)
#include <kprop/abi.h>

#include <cmath>
#include <cstdio>

#ifndef KPROP_EXAMPLE_BUG
#define KPROP_EXAMPLE_BUG 0
#endif

KPROP_PLUGIN();

namespace {

template <typename T>
T* at(const kprop_tensor& t, int64_t i0, int64_t i1) {
  const int64_t index[2] = {i0, i1};
  return static_cast<T*>(t.data) + kprop_offset(&t, index);
}

template <typename T>
void rmsnorm(const kprop_tensor& x, const kprop_tensor& w, T eps, const kprop_tensor& y) {
  const int64_t rows = x.shape[0], d = x.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    T sum = 0;
#if KPROP_EXAMPLE_BUG == 2
    for (int64_t j = 0; j + 4 <= d; j += 4)
      for (int64_t u = 0; u < 4; ++u) sum += *at<T>(x, r, j + u) * *at<T>(x, r, j + u);
#else
    for (int64_t j = 0; j < d; ++j) sum += *at<T>(x, r, j) * *at<T>(x, r, j);
#endif
    const T ms = sum / static_cast<T>(d);
#if KPROP_EXAMPLE_BUG == 1
    const T scale = T(1) / (std::sqrt(ms) + eps);
#else
    const T scale = T(1) / std::sqrt(ms + eps);
#endif
    for (int64_t j = 0; j < d; ++j) {
      const int64_t wi[1] = {j};
      *at<T>(y, r, j) = *at<T>(x, r, j) * scale * static_cast<const T*>(w.data)[kprop_offset(&w, wi)];
    }
  }
}

}  // namespace

KPROP_EXPORT int kprop_op_rmsnorm(const kprop_op_args* a, char* error, size_t error_size) {
  const kprop_tensor* x = kprop_op_input(a, "x");
  const kprop_tensor* w = kprop_op_input(a, "w");
  const kprop_tensor* y = kprop_op_output(a, "y");
  double eps = 0;
  if (!x || !w || !y || !kprop_op_attr_value(a, "eps", &eps) || x->ndim != 2) {
    std::snprintf(error, error_size, "rmsnorm: expected inputs x [T, D], w [D], output y and attr eps");
    return KPROP_ERROR;
  }
  if (x->dtype == KPROP_F32 && w->dtype == KPROP_F32 && y->dtype == KPROP_F32) {
    rmsnorm<float>(*x, *w, static_cast<float>(eps), *y);
  } else if (x->dtype == KPROP_F64 && w->dtype == KPROP_F64 && y->dtype == KPROP_F64) {
    rmsnorm<double>(*x, *w, eps, *y);
  } else {
    std::snprintf(error, error_size, "rmsnorm: x, w and y must share one dtype, f32 or f64");
    return KPROP_UNSUPPORTED;
  }
  return KPROP_OK;
}
