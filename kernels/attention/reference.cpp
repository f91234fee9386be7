// The contract in fp64, materialized one row at a time and written to be read:
// the oracle both families compare against.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kernels/attention/attention.h"
#include "kprop/enum_names.h"

namespace kprop::attention {

const char* mask_name(MaskKind kind) {
  static constexpr const char* kNames[] = {"none", "causal", "key_padding", "boolean"};
  static_assert(std::size(kNames) == size_t(MaskKind::boolean) + 1);
  return enum_name(kind, kNames);
}

DType stats_dtype(DType dtype) {
  return arithmetic_type(dtype);
}

// The scale is a kernel argument in the compute precision (f32 for halves).
double effective_scale(const Case& c) {
  return round_to(stats_dtype(c.dtype),
                  c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.shape.dim)));
}

bool visible(const Case& c, int b, int i, int j) {
  switch (c.mask) {
    case MaskKind::none:
      return true;
    case MaskKind::causal:
      return j <= i + c.shape.nk - c.shape.nq;
    case MaskKind::key_padding:
      return j < c.key_lengths[size_t(b)];
    case MaskKind::boolean:
      return c.allowed[(size_t(b) * c.shape.nq + size_t(i)) * c.shape.nk + size_t(j)] != 0;
  }
  return false;
}

bool row_fully_masked(const Case& c, int b, int i) {
  for (int j = 0; j < c.shape.nk; ++j)
    if (visible(c, b, i, j)) return false;
  return true;
}

std::string validate(const Case& c, bool backward) {
  const Shape& s = c.shape;
  if (s.batch < 1 || s.heads_q < 1 || s.heads_kv < 1 || s.nq < 1 || s.nk < 1 || s.dim < 1)
    return "every dimension must be at least 1";
  if (s.heads_q % s.heads_kv != 0)
    return fmt::format("heads_q = {} is not a multiple of heads_kv = {}", s.heads_q, s.heads_kv);
  if (c.block_q < 1 || c.block_k < 1) return "tile sizes must be at least 1";
  if (!(c.scale >= 0) || !std::isfinite(c.scale)) return "scale must be finite and >= 0 (0: 1/sqrt(D))";
  if (c.q.size() != s.q_size())
    return fmt::format("q has {} values, the shape needs {}", c.q.size(), s.q_size());
  if (c.k.size() != s.kv_size())
    return fmt::format("k has {} values, the shape needs {}", c.k.size(), s.kv_size());
  if (c.v.size() != s.kv_size())
    return fmt::format("v has {} values, the shape needs {}", c.v.size(), s.kv_size());
  if (backward && c.d_out.size() != s.q_size())
    return fmt::format("d_out has {} values, the shape needs {}", c.d_out.size(), s.q_size());
  if (!backward && !c.d_out.empty()) return "the forward family takes no d_out";
  for (const auto* t : {&c.q, &c.k, &c.v, &c.d_out})
    for (double x : *t) {
      if (!std::isfinite(x)) return "inputs must be finite";
      if (round_to(c.dtype, x) != x)
        return fmt::format("{} is not representable in {}", x, dtype_name(c.dtype));
    }
  const bool padding = c.mask == MaskKind::key_padding, boolean = c.mask == MaskKind::boolean;
  if (!padding && !c.key_lengths.empty()) return "key_lengths given without mask: key_padding";
  if (padding) {
    if (c.key_lengths.size() != size_t(s.batch)) return "key_padding needs one key length per batch";
    for (int len : c.key_lengths)
      if (len < 0 || len > s.nk) return fmt::format("key length {} is outside [0, {}]", len, s.nk);
  }
  if (boolean && c.allowed.size() != size_t(s.batch) * s.nq * s.nk)
    return fmt::format("the boolean mask has {} entries, [B, Nq, Nk] needs {}", c.allowed.size(),
                       size_t(s.batch) * s.nq * s.nk);
  if (!boolean && !c.allowed.empty()) return "an explicit mask needs mask: boolean";
  return "";
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

size_t q_index(const Shape& s, int b, int h, int i) {
  return ((size_t(b) * s.heads_q + h) * s.nq + i) * s.dim;
}
size_t kv_index(const Shape& s, int b, int h, int j) {
  return ((size_t(b) * s.heads_kv + h) * s.nk + j) * s.dim;
}

// Softmax row of query (b, h, i): probabilities (0 where masked) and the LSE.
double softmax_row(const Case& c, int b, int h, int i, std::vector<double>& p) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c);
  const int kvh = h / s.group();
  double m = kNegInf;
  for (int j = 0; j < s.nk; ++j) {
    p[size_t(j)] = kNegInf;
    if (!visible(c, b, i, j)) continue;
    double dot = 0;
    for (int d = 0; d < s.dim; ++d) dot += c.q[q_index(s, b, h, i) + d] * c.k[kv_index(s, b, kvh, j) + d];
    p[size_t(j)] = scale * dot;
    m = std::max(m, p[size_t(j)]);
  }
  if (m == kNegInf) {
    std::fill(p.begin(), p.end(), 0.0);
    return kNegInf;
  }
  double l = 0;
  for (double& x : p) l += (x = std::exp(x - m));
  for (double& x : p) x /= l;
  return m + std::log(l);
}

}  // namespace

FwdResult reference_forward(const Case& c) {
  const Shape& s = c.shape;
  FwdResult r;
  r.o.assign(s.q_size(), 0.0);
  r.lse.assign(s.rows(), 0.0);
  std::vector<double> p(size_t(s.nk));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      for (int i = 0; i < s.nq; ++i) {
        r.lse[(size_t(b) * s.heads_q + h) * s.nq + i] = softmax_row(c, b, h, i, p);
        for (int j = 0; j < s.nk; ++j)
          for (int d = 0; d < s.dim; ++d)
            r.o[q_index(s, b, h, i) + d] += p[size_t(j)] * c.v[kv_index(s, b, h / s.group(), j) + d];
      }
  return r;
}

BwdResult reference_backward(const Case& c) {
  const Shape& s = c.shape;
  const double scale = effective_scale(c);
  const FwdResult f = reference_forward(c);
  BwdResult r;
  r.o = f.o;
  r.lse = f.lse;
  r.d.assign(s.rows(), 0.0);
  r.dq.assign(s.q_size(), 0.0);
  r.dk.assign(s.kv_size(), 0.0);
  r.dv.assign(s.kv_size(), 0.0);
  std::vector<double> p(size_t(s.nk)), dp(size_t(s.nk));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const int kvh = h / s.group();
      for (int i = 0; i < s.nq; ++i) {
        softmax_row(c, b, h, i, p);
        const double* q = &c.q[q_index(s, b, h, i)];
        const double* d_out = &c.d_out[q_index(s, b, h, i)];
        double d_row = 0;  // D = rowsum(P ⊙ dP)
        for (int j = 0; j < s.nk; ++j) {
          dp[size_t(j)] = 0;
          for (int d = 0; d < s.dim; ++d) dp[size_t(j)] += d_out[d] * c.v[kv_index(s, b, kvh, j) + d];
          d_row += p[size_t(j)] * dp[size_t(j)];
        }
        r.d[(size_t(b) * s.heads_q + h) * s.nq + i] = d_row;
        for (int j = 0; j < s.nk; ++j) {
          const double ds = p[size_t(j)] * (dp[size_t(j)] - d_row);
          const size_t kv = kv_index(s, b, kvh, j);
          for (int d = 0; d < s.dim; ++d) {
            r.dv[kv + d] += p[size_t(j)] * d_out[d];
            r.dq[q_index(s, b, h, i) + d] += scale * ds * c.k[kv + d];
            r.dk[kv + d] += scale * ds * q[d];
          }
        }
      }
    }
  return r;
}

}  // namespace kprop::attention
