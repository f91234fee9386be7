// An RMSNorm forward written outside kprop, tested as the declared op of
// specs/ops/rmsnorm.yaml through the generic entry point of
// include/kprop/abi/op.h. It needs only include/kprop/abi.h:
//
//   c++ -std=c++17 -O2 -shared -fPIC -I kprop/include rmsnorm_op.cpp -o librmsnorm_op.so
//   prop_runner --spec specs/ops/rmsnorm.yaml --target plugin:./librmsnorm_op.so
//
// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, in the case's dtype
// (f32 or f64), the sum of squares accumulated in that dtype row by row, as a
// CPU kernel does; f16 and bf16 (half storage) as a GPU kernel does: each
// element loaded into f32, the row computed in f32, y stored rounded to
// nearest even. Every tensor read and written through its strides.
//
// KPROP_EXAMPLE_BUG plants one bug, for kprop's own tests:
//   1  eps added outside the square root: x / (sqrt(mean(x^2)) + eps) * w
//   2  a 4-wide unrolled sum of squares that drops the tail (D mod 4 elements)
//   3  the weights cached on the first call and reused while D is unchanged
//      (as if w never changed between calls): the failure depends on the
//      calls before it, so its case alone, replayed in a fresh process, passes
#include <kprop/abi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#ifndef KPROP_EXAMPLE_BUG
#define KPROP_EXAMPLE_BUG 0
#endif

KPROP_PLUGIN();

namespace {

// Half storage: the bit patterns, converted to and from float.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

float load(float v) {
  return v;
}
double load(double v) {
  return v;
}
float load(F16 h) {  // exact
  const int e = (h.bits >> 10) & 0x1F;
  const unsigned m = h.bits & 0x3FFu;
  const float v = e == 0x1F ? (m ? NAN : INFINITY)
                  : e == 0  ? std::ldexp(static_cast<float>(m), -24)
                            : std::ldexp(static_cast<float>(m | 0x400u), e - 25);
  return (h.bits & 0x8000u) ? -v : v;
}
float load(BF16 h) {  // exact: a bf16 is the top half of a float
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename S>
S store(float v);
template <>
F16 store<F16>(float v) {  // to nearest, ties to even (std::nearbyint in the default rounding mode)
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const float a = std::fabs(v);
  if (std::isnan(v)) return {static_cast<uint16_t>(sign | 0x7E00)};
  if (a >= 65520.0f) return {static_cast<uint16_t>(sign | 0x7C00)};  // max + half an ulp: inf
  if (a < 0x1p-14f) return {static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f)))};
  int e = 0;
  const float m = std::frexp(a, &e);                                        // a = m 2^e, m in [0.5, 1)
  const auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 11 bits; 2048 carries
  return {static_cast<uint16_t>(sign | ((static_cast<uint32_t>(e + 14) << 10) + (q - 1024)))};
}
template <>
BF16 store<BF16>(float v) {  // to nearest, ties to even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if (std::isnan(v)) return {static_cast<uint16_t>((u >> 16) | 0x0040)};
  return {static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

template <typename S>
const S* at(const kprop_tensor& t, int64_t i0, int64_t i1) {
  const int64_t index[2] = {i0, i1};
  return static_cast<const S*>(t.data) + kprop_offset(&t, index);
}

// S: the storage type; T: the arithmetic type (float for halves).
template <typename S, typename T>
void rmsnorm(const kprop_tensor& x, const kprop_tensor& w, T eps, const kprop_tensor& y) {
  const int64_t rows = x.shape[0], d = x.shape[1];
  auto xv = [&](int64_t r, int64_t j) -> T { return load(*at<S>(x, r, j)); };
  auto wv = [&](int64_t j) -> T {
    const int64_t wi[1] = {j};
    return load(static_cast<const S*>(w.data)[kprop_offset(&w, wi)]);
  };
#if KPROP_EXAMPLE_BUG == 3
  static std::vector<double> cached;
  if (static_cast<int64_t>(cached.size()) != d) {
    cached.resize(static_cast<size_t>(d));
    for (int64_t j = 0; j < d; ++j) cached[static_cast<size_t>(j)] = static_cast<double>(wv(j));
  }
  auto weight = [&](int64_t j) { return static_cast<T>(cached[static_cast<size_t>(j)]); };
#else
  auto weight = wv;
#endif
  for (int64_t r = 0; r < rows; ++r) {
    T sum = 0;
#if KPROP_EXAMPLE_BUG == 2
    for (int64_t j = 0; j + 4 <= d; j += 4)
      for (int64_t u = 0; u < 4; ++u) sum += xv(r, j + u) * xv(r, j + u);
#else
    for (int64_t j = 0; j < d; ++j) sum += xv(r, j) * xv(r, j);
#endif
    const T ms = sum / static_cast<T>(d);
#if KPROP_EXAMPLE_BUG == 1
    const T scale = T(1) / (std::sqrt(ms) + eps);
#else
    const T scale = T(1) / std::sqrt(ms + eps);
#endif
    for (int64_t j = 0; j < d; ++j) {
      const int64_t yi[2] = {r, j};
      const T v = xv(r, j) * scale * weight(j);
      S* out = static_cast<S*>(y.data) + kprop_offset(&y, yi);
      if constexpr (sizeof(S) == sizeof(T))
        *out = static_cast<S>(v);
      else
        *out = store<S>(v);
    }
  }
}

bool all(const kprop_tensor* x, const kprop_tensor* w, const kprop_tensor* y, int32_t dtype) {
  return x->dtype == dtype && w->dtype == dtype && y->dtype == dtype;
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
  if (all(x, w, y, KPROP_F32)) {
    rmsnorm<float, float>(*x, *w, static_cast<float>(eps), *y);
  } else if (all(x, w, y, KPROP_F64)) {
    rmsnorm<double, double>(*x, *w, eps, *y);
  } else if (all(x, w, y, KPROP_F16)) {
    rmsnorm<F16, float>(*x, *w, static_cast<float>(eps), *y);
  } else if (all(x, w, y, KPROP_BF16)) {
    rmsnorm<BF16, float>(*x, *w, static_cast<float>(eps), *y);
  } else {
    std::snprintf(error, error_size, "rmsnorm: x, w and y must share one dtype, f32, f64, f16 or bf16");
    return KPROP_UNSUPPORTED;
  }
  return KPROP_OK;
}
