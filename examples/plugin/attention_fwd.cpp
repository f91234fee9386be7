// A flash attention forward written outside kprop, tested through kprop's
// C ABI. It needs only include/kprop/abi.h:
//
//   c++ -std=c++17 -O2 -shared -fPIC -I kprop/include attention_fwd.cpp -o libattention_fwd.so
//   prop_runner --spec specs/attention_fwd.yaml --target plugin:./libattention_fwd.so
//
// Online softmax over key tiles of the size the case asks for (block_k), in
// the case's dtype, reading every tensor through its strides.
//
// KPROP_EXAMPLE_BUG plants one bug, for kprop's own tests and the README:
//   1  no guard for a fully masked row: O = acc / l with l = 0 (NaN)
//   2  reads key_lengths even when the case has none (a null dereference)
//   3  walks key tiles with `j0 != nk`, which never ends when block_k does not divide Nk
//   4  indexes every tensor as if it were contiguous (row-major offsets from
//      the shape, strides ignored): right on kprop's default tensors, wrong
//      under run.padded_tensors
#include <kprop/abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#ifndef KPROP_EXAMPLE_BUG
#define KPROP_EXAMPLE_BUG 0
#endif

KPROP_PLUGIN();

namespace {

// Offset of `index` in t: through its strides, as kprop/abi.h asks.
int64_t offset(const kprop_tensor& t, const int64_t* index) {
#if KPROP_EXAMPLE_BUG == 4
  int64_t off = 0;
  for (int32_t d = 0; d < t.ndim; ++d) off = off * t.shape[d] + index[d];
  return off;
#else
  return kprop_offset(&t, index);
#endif
}

template <typename T>
const T& at(const kprop_tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t index[4] = {i0, i1, i2, i3};
  return static_cast<const T*>(t.data)[offset(t, index)];
}

bool visible(const kprop_attention_fwd_args& a, int64_t b, int64_t i, int64_t j, int64_t nq, int64_t nk) {
#if KPROP_EXAMPLE_BUG == 2
  if (static_cast<const int32_t*>(a.key_lengths.data)[b * a.key_lengths.strides[0]] < 0) return false;
#endif
  switch (a.mask) {
    case KPROP_MASK_CAUSAL:
      return j <= i + nk - nq;  // bottom-right aligned
    case KPROP_MASK_KEY_PADDING:
      return j < static_cast<const int32_t*>(a.key_lengths.data)[b * a.key_lengths.strides[0]];
    case KPROP_MASK_BOOLEAN: {
      const int64_t index[3] = {b, i, j};
      return static_cast<const uint8_t*>(a.allowed.data)[offset(a.allowed, index)] != 0;
    }
    default:
      return true;
  }
}

template <typename T>
void forward(const kprop_attention_fwd_args& a) {
  const int64_t batch = a.q.shape[0], hq = a.q.shape[1], nq = a.q.shape[2], dim = a.q.shape[3];
  const int64_t hkv = a.k.shape[1], nk = a.k.shape[2], group = hq / hkv;
  const int64_t bk = std::max<int64_t>(1, a.block_k);
  const T scale = static_cast<T>(a.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> acc(static_cast<size_t>(dim)), s(static_cast<size_t>(bk));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t kv = h / group;
        T m = neg_inf, l = 0;
        std::fill(acc.begin(), acc.end(), T(0));
#if KPROP_EXAMPLE_BUG == 3
        for (int64_t j0 = 0; j0 != nk; j0 += bk) {
#else
        for (int64_t j0 = 0; j0 < nk; j0 += bk) {
#endif
          const int64_t j1 = std::min(j0 + bk, nk);
          T tile_max = neg_inf;
          for (int64_t j = j0; j < j1; ++j) {
            T dot = 0;
            for (int64_t d = 0; d < dim; ++d) dot += at<T>(a.q, b, h, i, d) * at<T>(a.k, b, kv, j, d);
            s[size_t(j - j0)] = visible(a, b, i, j, nq, nk) ? scale * dot : neg_inf;
            tile_max = std::max(tile_max, s[size_t(j - j0)]);
          }
          const T m_new = std::max(m, tile_max);
          if (m_new == neg_inf) continue;  // nothing visible yet: no exp(-inf - -inf)
          const T correction = std::exp(m - m_new);
          l *= correction;
          for (auto& x : acc) x *= correction;
          for (int64_t j = j0; j < j1; ++j) {
            const T p = std::exp(s[size_t(j - j0)] - m_new);
            l += p;
            for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * at<T>(a.v, b, kv, j, d);
          }
          m = m_new;
        }
        T* o = static_cast<T*>(a.o.data);
        T* lse = static_cast<T*>(a.lse.data);
        const int64_t row[4] = {b, h, i, 0};
#if KPROP_EXAMPLE_BUG == 1
        const bool empty = false;
#else
        const bool empty = l == T(0);  // a fully masked row: O = 0, LSE = -inf
#endif
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t index[4] = {b, h, i, d};
          o[offset(a.o, index)] = empty ? T(0) : acc[size_t(d)] / l;
        }
        lse[offset(a.lse, row)] = empty ? neg_inf : m + std::log(l);
      }
}

}  // namespace

KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args* args, char* error, size_t error_size) {
  switch (args->q.dtype) {
    case KPROP_F32:
      forward<float>(*args);
      return KPROP_OK;
    case KPROP_F64:
      forward<double>(*args);
      return KPROP_OK;
    default:
      std::snprintf(error, error_size, "dtype %d is not supported", args->q.dtype);
      return KPROP_UNSUPPORTED;
  }
}
