// Reference, fused kernel and naive baseline for softmax + top-k (the
// mutants, the fused kernel with one FusedConfig switch flipped, are in
// mutants.cpp).
#include "kernels/softmax_topk/softmax_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kprop/half.h"

namespace kprop::softmax_topk {

double subnormal_half_step(DType d) {
  return is_half(d) ? denorm_min(d) / 2 : 0;
}
double arithmetic_epsilon(DType d) {
  return d == DType::f64 ? 0x1p-52 : 0x1p-23;
}

std::string validate(const Case& c) {
  if (c.vocab < 1) return "vocab must be at least 1";
  if (c.k < 1 || c.k > c.vocab) return "k must be in [1, vocab]";
  if (c.block < 1) return "block must be at least 1";
  if (c.logits.empty() || c.logits.size() % static_cast<size_t>(c.vocab) != 0)
    return "logits must be rows x vocab with at least one row";
  for (double x : c.logits) {
    if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) return "logits must be finite or -inf";
    if (c.dtype != DType::f64 && std::isfinite(x) && round_to(c.dtype, x) != x)
      return c.dtype == DType::f32 ? "f32 logits must be exactly representable as float"
                                   : std::string(dtype_name(c.dtype)) + " logits must be exact " +
                                         dtype_name(c.dtype) + " values";
  }
  return "";
}

// ---------------------------------------------------------------- reference

std::vector<double> softmax_row(const Case& c, int row) {
  const double* x = c.logits.data() + static_cast<size_t>(row) * c.vocab;
  std::vector<double> p(static_cast<size_t>(c.vocab), 0.0);
  const double m = *std::max_element(x, x + c.vocab);
  if (m == -std::numeric_limits<double>::infinity()) return p;  // all -inf: every probability is 0
  double z = 0;
  for (int i = 0; i < c.vocab; ++i) z += std::exp(x[i] - m);
  for (int i = 0; i < c.vocab; ++i) p[static_cast<size_t>(i)] = std::exp(x[i] - m) / z;
  return p;
}

Result reference(const Case& c) {
  Result r;
  for (int row = 0; row < c.rows(); ++row) {
    const double* x = c.logits.data() + static_cast<size_t>(row) * c.vocab;
    const std::vector<double> p = softmax_row(c, row);
    std::vector<int> order(static_cast<size_t>(c.vocab));
    std::iota(order.begin(), order.end(), 0);
    // Stable: equal logits (all -inf included) keep index order.
    std::stable_sort(order.begin(), order.end(), [x](int a, int b) { return x[a] > x[b]; });
    for (int j = 0; j < c.k; ++j) {
      r.indices.push_back(order[static_cast<size_t>(j)]);
      r.probs.push_back(p[static_cast<size_t>(order[static_cast<size_t>(j)])]);
    }
  }
  return r;
}

// ---------------------------------------------------------------- naive baseline

namespace {

template <typename T>
std::vector<double> naive_row(const double* xd, int n) {
  std::vector<T> x(xd, xd + n);
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  T m = -std::numeric_limits<T>::infinity();
  for (T v : x) m = std::max(m, v);
  if (m == -std::numeric_limits<T>::infinity()) return p;
  T z = 0;
  for (T v : x) z += std::exp(v - m);
  for (int i = 0; i < n; ++i)
    p[static_cast<size_t>(i)] = static_cast<T>(std::exp(x[static_cast<size_t>(i)] - m) / z);
  return p;
}

}  // namespace

std::vector<double> naive_softmax(const Case& c, int row) {
  const double* x = c.logits.data() + static_cast<size_t>(row) * c.vocab;
  if (c.dtype == DType::f64) return naive_row<double>(x, c.vocab);
  std::vector<double> p = naive_row<float>(x, c.vocab);
  if (is_half(c.dtype))
    for (double& q : p) q = round_to(c.dtype, q);  // stored in the dtype
  return p;
}

// ---------------------------------------------------------------- fused

namespace {

template <typename T>
struct Entry {
  T value;
  int index;
};

// One row in a single pass over the logits, `block` elements at a time: the
// block's max updates the running max m (rescaling the running normaliser z
// by exp(m_old - m_new)), the block's exp(x - m) are added to z, and elements
// above the running top-k threshold enter a candidate buffer that is cut back
// to K (nth_element) whenever it reaches 2K. The threshold is the K-th best
// logit seen so far; a later element equal to it has a higher index and so
// loses the tie, hence the strict comparison. Works for any K up to V.
// `store`: a half case's rounding to the storage dtype (null otherwise),
// applied to every exp(.) by the exp_in_storage mutant and to the running
// normaliser by z_in_storage only.
template <typename T>
void fused_row(const T* x, int n, int k, int block, const FusedConfig& cfg, T* out_p, int* out_i,
               std::vector<Entry<T>>& buf, T (*store)(T) = nullptr) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  auto ex = [&](T v) -> T {
    if (cfg.drop_far && v < T(-15)) return T(0);
    return cfg.exp_in_storage && store ? store(std::exp(v)) : std::exp(v);
  };
  auto zs = [&](T v) -> T { return cfg.z_in_storage && store ? store(v) : v; };
  const int keep = cfg.cap > 0 ? std::min(k, cfg.cap) : k;
  auto key = [&cfg](T v) { return cfg.f32_rank_keys ? static_cast<T>(static_cast<float>(v)) : v; };
  // -0.0 below +0.0 (neg_zero_below_zero only): the zeros' one difference, the sign bit.
  auto signed_zero_above = [&cfg](T a, T b) {
    return cfg.neg_zero_below_zero && a == 0 && b == 0 && !std::signbit(a) && std::signbit(b);
  };
  auto above = [&](T a, T b) { return a > b || signed_zero_above(a, b); };
  auto better = [&cfg, &key, &signed_zero_above](const Entry<T>& a, const Entry<T>& b) {
    if (key(a.value) != key(b.value)) return key(a.value) > key(b.value);
    if (signed_zero_above(a.value, b.value) || signed_zero_above(b.value, a.value))
      return signed_zero_above(a.value, b.value);
    return cfg.ties_to_lower ? a.index < b.index : a.index > b.index;
  };
  buf.clear();
  const size_t cut_at = 2 * static_cast<size_t>(keep);
  bool have_threshold = false;
  T threshold = kNegInf, m = kNegInf, z = 0;
  for (int b0 = 0; b0 < n; b0 += block) {
    const int b1 = std::min(n, b0 + block);
    T bmax = kNegInf;
    for (int i = b0; i < b1; ++i) bmax = std::max(bmax, x[i]);
    if (cfg.subtract_max && bmax > m) {
      if (z != 0) z = zs(z * (cfg.rescale_inverted ? std::exp(bmax - m) : std::exp(m - bmax)));
      m = bmax;
    }
    if (!cfg.subtract_max) m = std::max(m, bmax);  // tracked only for the all -inf guard
    const T shift = cfg.subtract_max ? m : T(0);
    if (m != kNegInf)
      for (int i = b0; i < b1; ++i) z = zs(z + ex(x[i] - shift));
    if (!have_threshold) {
      for (int i = b0; i < b1; ++i) buf.push_back({x[i], i});
    } else if (bmax > threshold || (cfg.neg_zero_below_zero && bmax == threshold)) {
      // (bmax may be a -0.0 where the block also holds a +0.0.)
      for (int i = b0; i < b1; ++i)
        if (above(x[i], threshold)) buf.push_back({x[i], i});
    }
    if (buf.size() >= cut_at) {
      std::nth_element(buf.begin(), buf.begin() + (keep - 1), buf.end(), better);
      buf.resize(static_cast<size_t>(keep));
      threshold = buf.back().value;
      have_threshold = true;
    }
  }
  auto prob = [&](T v) -> T {
    if (m == kNegInf) return T(0);
    return ex(v - (cfg.subtract_max ? m : T(0))) / z;
  };
  if (cfg.order_by_probability) {
    for (auto& e : buf) e.value = prob(e.value);  // the rank key becomes the rounded probability
  }
  if (buf.size() > static_cast<size_t>(keep)) {
    std::nth_element(buf.begin(), buf.begin() + (keep - 1), buf.end(), better);
    buf.resize(static_cast<size_t>(keep));
  }
  if (cfg.sort_output)
    std::sort(buf.begin(), buf.end(), better);
  else
    std::sort(buf.begin(), buf.end(), [](const Entry<T>& a, const Entry<T>& b) { return a.index < b.index; });
  for (int j = 0; j < k; ++j) {
    if (j < keep) {
      const Entry<T>& e = buf[static_cast<size_t>(j)];
      out_i[j] = e.index;
      out_p[j] = cfg.order_by_probability ? e.value : prob(e.value);
    } else {  // slots past the cap stay as zero-initialised output
      out_i[j] = 0;
      out_p[j] = 0;
    }
  }
}

template <typename T>
void fused_rows_t(const T* x, int rows, int vocab, int k, int block, const FusedConfig& cfg, T* probs,
                  int* indices, T (*store)(T) = nullptr) {
  std::vector<Entry<T>> buf;
  buf.reserve(2 * static_cast<size_t>(k) + static_cast<size_t>(block));
  for (size_t row = 0; row < static_cast<size_t>(rows); ++row)
    fused_row<T>(x + row * vocab, vocab, k, block, cfg, probs + row * k, indices + row * k, buf, store);
}

float store_f16(float v) {
  return half::f16_to_float(half::f16_from_float(v));
}
float store_bf16(float v) {
  return half::bf16_to_float(half::bf16_from_float(v));
}

// A half case runs the f32 kernel on its half logits (exact as floats) and
// stores the probabilities in the dtype (round to nearest even).
template <typename T>
Result fused_typed(const Case& c, const FusedConfig& cfg) {
  Result r;
  const size_t n = static_cast<size_t>(c.rows()) * static_cast<size_t>(c.k);
  std::vector<T> x(c.logits.begin(), c.logits.end());  // the kernel's input in its own dtype
  if (cfg.f16_inputs_ftz && c.dtype == DType::f16)
    for (T& v : x)
      if (std::fabs(v) < T(0x1p-14)) v = std::copysign(T(0), v);  // f16's subnormals, flushed
  std::vector<T> p(n);
  r.indices.assign(n, 0);
  T (*store)(T) = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (c.dtype == DType::f16) store = store_f16;
    if (c.dtype == DType::bf16) store = store_bf16;
  }
  fused_rows_t<T>(x.data(), c.rows(), c.vocab, c.k, c.block, cfg, p.data(), r.indices.data(), store);
  if (store)
    for (T& q : p) q = store(q);
  r.probs.assign(p.begin(), p.end());
  return r;
}

}  // namespace

Result fused_with(const Case& c, const FusedConfig& config) {
  return c.dtype == DType::f64 ? fused_typed<double>(c, config) : fused_typed<float>(c, config);
}

Result fused(const Case& c) {
  return fused_with(c, FusedConfig{});
}

void fused_rows(const float* x, int rows, int vocab, int k, int block, float* probs, int* indices) {
  fused_rows_t<float>(x, rows, vocab, k, block, FusedConfig{}, probs, indices);
}

}  // namespace kprop::softmax_topk
