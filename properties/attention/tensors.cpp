// Named tensors of attention.fwd and attention.bwd for expression invariants
// (kprop/expr.h): the case's inputs and masks, the target's and reference's
// outputs, and the fp64 intermediates S, P, dP, dS computed here from the
// case, obviously, one row at a time (the contract in attention.h).
#include <cmath>
#include <limits>

#include "properties/attention/bounds.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {

using expr::DType;
using expr::Tensor;
using expr::TensorInfos;
using expr::TensorMap;

TensorInfos common_infos(bool backward) {
  TensorInfos t = expr::tensor_table(R"(
B                      []               int   batch size
Hq                     []               int   query heads
Hkv                    []               int   key/value heads (GQA: query head h reads kv head h / (Hq / Hkv))
Nq                     []               int   queries per head
Nk                     []               int   keys per head
D                      []               int   head dimension
scale                  []               real  softmax scale as the kernels use it (1/sqrt(D) unless the case
                                              gives one)
Bq                     []               int   the case's query tile size (may exceed Nq)
Bk                     []               int   the case's key tile size (may exceed Nk)
dtype_bytes            []               int   bytes per element of the case's dtype (2, 4 or 8)
eps                    []               real  machine epsilon of the precision the kernels compute in (2^-52
                                              for f64, else f32's 2^-23)
compute_bytes          []               int   bytes per element of the precision the kernels compute in (8 or
                                              4)
q                      [B, Hq, Nq, D]   real  queries
k                      [B, Hkv, Nk, D]  real  keys
v                      [B, Hkv, Nk, D]  real  values
kh                     [B, Hq, Nk, D]   real  the keys each query head reads (k with GQA heads repeated)
vh                     [B, Hq, Nk, D]   real  the values each query head reads
allowed                [B, 1, Nq, Nk]   bool  query i sees key j (any mask kind; shared by heads)
row_fully_masked       [B, 1, Nq]       bool  query i sees no key
target.o               [B, Hq, Nq, D]   real  the target's output O
target.lse             [B, Hq, Nq]      real  the target's log-sum-exp (-inf on fully masked rows)
target.workspace_peak  []               int   high-water mark in bytes of the target's Workspace (0: it took
                                              none, or was built elsewhere)
reference.o            [B, Hq, Nq, D]   real  the reference's O
reference.lse          [B, Hq, Nq]      real  the reference's LSE
reference.s            [B, Hq, Nq, Nk]  real  scores scale·QKᵀ in fp64, -inf where masked
reference.p            [B, Hq, Nq, Nk]  real  probabilities softmax(S) in fp64, 0 where masked and on fully
                                              masked rows
naive.o                [B, Hq, Nq, D]   real  O of the naive materialized computation in the case's dtype (the
                                              policy's same-precision baseline)
naive.lse              [B, Hq, Nq]      real  LSE of the naive computation
err.o                  [B, Hq, 1, 1]    real  first-order error scale of O (bounds.h; times eps for a floor),
                                              per (batch, head)
err.lse                [B, Hq, 1]       real  first-order error scale of LSE
floor.o                [B, Hq, 1, 1]    real  the policy's absolute floor for O: 8 × eps × err.o, plus the
                                              storage terms of f16/bf16 (close(k=) takes the naive error per
                                              head too)
floor.lse              [B, Hq, 1]       real  the policy's absolute floor for LSE: 8 × eps × err.lse
)");
  if (backward) {
    const TensorInfos more = expr::tensor_table(R"(
d_out         [B, Hq, Nq, D]   real  dO, the gradient flowing into O
target.d      [B, Hq, Nq]      real  the D = rowsum(P ⊙ dP) the target used
target.dq     [B, Hq, Nq, D]   real  the target's dQ
target.dk     [B, Hkv, Nk, D]  real  the target's dK (summed over a kv head's queries)
target.dv     [B, Hkv, Nk, D]  real  the target's dV
reference.d   [B, Hq, Nq]      real  the reference's D
reference.dq  [B, Hq, Nq, D]   real  the reference's dQ
reference.dk  [B, Hkv, Nk, D]  real  the reference's dK
reference.dv  [B, Hkv, Nk, D]  real  the reference's dV
reference.dp  [B, Hq, Nq, Nk]  real  dP = dO·Vᵀ in fp64 (0 where masked)
reference.ds  [B, Hq, Nq, Nk]  real  dS = P ⊙ (dP - rowsum(P ⊙ dP)) in fp64
naive.d       [B, Hq, Nq]      real  D of the naive same-precision backward
naive.dq      [B, Hq, Nq, D]   real  dQ of the naive same-precision backward
naive.dk      [B, Hkv, Nk, D]  real  dK of the naive same-precision backward
naive.dv      [B, Hkv, Nk, D]  real  dV of the naive same-precision backward
err.d         [B, Hq, 1]       real  first-order error scale of D, per (batch, head)
err.dq        [B, Hq, 1, 1]    real  first-order error scale of dQ
err.dk        [B, Hkv, 1, 1]   real  first-order error scale of dK, per (batch, kv head)
err.dv        [B, Hkv, 1, 1]   real  first-order error scale of dV
err.dk_sum    [B, Hkv, 1]      real  first-order error scale of sum(dK, axis=2)
err.dv_sum    [B, Hkv, 1]      real  first-order error scale of sum(dV, axis=2)
floor.d       [B, Hq, 1]       real  the policy's absolute floor for D: 8 × eps × err.d
floor.dq      [B, Hq, 1, 1]    real  the policy's absolute floor for dQ: 8 × eps × err.dq
floor.dk      [B, Hkv, 1, 1]   real  the policy's absolute floor for dK: 8 × eps × err.dk
floor.dv      [B, Hkv, 1, 1]   real  the policy's absolute floor for dV: 8 × eps × err.dv
floor.dk_sum  [B, Hkv, 1]      real  the policy's absolute floor for sum(dK, axis=2): 8 × eps × err.dk_sum
floor.dv_sum  [B, Hkv, 1]      real  the policy's absolute floor for sum(dV, axis=2): 8 × eps × err.dv_sum
)");
    t.insert(t.end(), more.begin(), more.end());
  }
  return t;
}

std::vector<int64_t> dims(std::initializer_list<int> d) {
  return {d.begin(), d.end()};
}

// S, P, dP, dS of every (b, h, i) row in fp64, straight from the contract.
struct Intermediates {
  std::vector<double> s, p, dp, ds;
};
Intermediates intermediates(const Case& c, bool want_dp) {
  const Shape& sh = c.shape;
  const double scale = effective_scale(c);
  const int g = sh.group();
  const size_t n = sh.rows() * size_t(sh.nk);
  Intermediates r;
  r.s.assign(n, -std::numeric_limits<double>::infinity());
  r.p.assign(n, 0.0);
  if (want_dp) r.dp.assign(n, 0.0), r.ds.assign(n, 0.0);
  for (int b = 0; b < sh.batch; ++b)
    for (int h = 0; h < sh.heads_q; ++h)
      for (int i = 0; i < sh.nq; ++i) {
        const size_t row = (size_t(b) * sh.heads_q + h) * sh.nq + i;
        const double* q = &c.q[row * sh.dim];
        double* s = &r.s[row * sh.nk];
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < sh.nk; ++j) {
          if (!visible(c, b, i, j)) continue;
          const double* k = &c.k[((size_t(b) * sh.heads_kv + h / g) * sh.nk + j) * sh.dim];
          double acc = 0;
          for (int d = 0; d < sh.dim; ++d) acc += q[d] * k[d];
          s[j] = scale * acc;
          m = std::max(m, s[j]);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;  // fully masked: P = 0
        double l = 0;
        for (int j = 0; j < sh.nk; ++j) l += std::exp(s[j] - m);
        double* p = &r.p[row * sh.nk];
        for (int j = 0; j < sh.nk; ++j) p[j] = std::exp(s[j] - m) / l;
        if (!want_dp) continue;
        double* dp = &r.dp[row * sh.nk];
        double dsum = 0;
        for (int j = 0; j < sh.nk; ++j) {
          if (!visible(c, b, i, j)) continue;
          const double* v = &c.v[((size_t(b) * sh.heads_kv + h / g) * sh.nk + j) * sh.dim];
          double acc = 0;
          for (int d = 0; d < sh.dim; ++d) acc += c.d_out[row * sh.dim + d] * v[d];
          dp[j] = acc;
          dsum += p[j] * acc;
        }
        for (int j = 0; j < sh.nk; ++j) r.ds[row * sh.nk + j] = p[j] * (dp[j] - dsum);
      }
  return r;
}

// k or v per query head: [B, Hq, Nk, D].
std::vector<double> per_query_head(const Case& c, const std::vector<double>& kv) {
  const Shape& s = c.shape;
  std::vector<double> out;
  out.reserve(size_t(s.batch) * s.heads_q * s.nk * s.dim);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const auto at = kv.begin() + static_cast<long>((size_t(b) * s.heads_kv + h / s.group()) * s.nk * s.dim);
      out.insert(out.end(), at, at + s.nk * s.dim);
    }
  return out;
}

void put_common(const Case& c, bool backward, TensorMap& out) {
  const Shape& s = c.shape;
  const auto B = s.batch, Hq = s.heads_q, Hkv = s.heads_kv, Nq = s.nq, Nk = s.nk, D = s.dim;
  out.put("B", Tensor::scalar(B, DType::integer));
  out.put("Hq", Tensor::scalar(Hq, DType::integer));
  out.put("Hkv", Tensor::scalar(Hkv, DType::integer));
  out.put("Nq", Tensor::scalar(Nq, DType::integer));
  out.put("Nk", Tensor::scalar(Nk, DType::integer));
  out.put("D", Tensor::scalar(D, DType::integer));
  out.put("scale", Tensor::scalar(effective_scale(c)));
  out.put("eps", Tensor::scalar(epsilon(c.dtype)));
  out.put("Bq", Tensor::scalar(c.block_q, DType::integer));
  out.put("Bk", Tensor::scalar(c.block_k, DType::integer));
  out.put("compute_bytes", Tensor::scalar(c.dtype == attention::DType::f64 ? 8 : 4, DType::integer));
  out.put("dtype_bytes", Tensor::scalar(storage_bytes(c.dtype), DType::integer));
  if (out.wanted("q")) out.put("q", Tensor::of(dims({B, Hq, Nq, D}), c.q));
  if (out.wanted("k")) out.put("k", Tensor::of(dims({B, Hkv, Nk, D}), c.k));
  if (out.wanted("v")) out.put("v", Tensor::of(dims({B, Hkv, Nk, D}), c.v));
  if (out.wanted("kh")) out.put("kh", Tensor::of(dims({B, Hq, Nk, D}), per_query_head(c, c.k)));
  if (out.wanted("vh")) out.put("vh", Tensor::of(dims({B, Hq, Nk, D}), per_query_head(c, c.v)));
  if (backward && out.wanted("d_out")) out.put("d_out", Tensor::of(dims({B, Hq, Nq, D}), c.d_out));
  if (out.wanted("allowed") || out.wanted("row_fully_masked")) {
    std::vector<double> allowed, masked;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Nq; ++i) {
        bool any = false;
        for (int j = 0; j < Nk; ++j) {
          const bool v = visible(c, b, i, j);
          allowed.push_back(v);
          any = any || v;
        }
        masked.push_back(!any);
      }
    out.put("allowed", Tensor::of(dims({B, 1, Nq, Nk}), std::move(allowed), DType::boolean));
    out.put("row_fully_masked", Tensor::of(dims({B, 1, Nq}), std::move(masked), DType::boolean));
  }
  const bool want_dp = backward && (out.wanted("reference.dp") || out.wanted("reference.ds"));
  if (out.wanted("reference.s") || out.wanted("reference.p") || want_dp) {
    Intermediates r = intermediates(c, want_dp);
    out.put("reference.s", Tensor::of(dims({B, Hq, Nq, Nk}), std::move(r.s)));
    out.put("reference.p", Tensor::of(dims({B, Hq, Nq, Nk}), std::move(r.p)));
    if (want_dp) {
      out.put("reference.dp", Tensor::of(dims({B, Hq, Nq, Nk}), std::move(r.dp)));
      out.put("reference.ds", Tensor::of(dims({B, Hq, Nq, Nk}), std::move(r.ds)));
    }
  }
  if (out.wants_prefix("err.") || out.wants_prefix("floor.")) {
    // The built-in invariants' floor: floor_ulps (8, properties/attention/checks.cpp) × eps × scale.
    // (bounds.h: plus the storage roundings of f16/bf16 cases).
    // The trial's own scales when it has them (Trial::once), else computed here.
    // Per head, as the built-in comparisons take them (bounds.h): the
    // query side's per (batch, query head), the key side's per (batch, kv head).
    OnceStore* once = out.once_store();
    const Scales scales = once ? (backward ? once->get<backward_scales>(c) : once->get<forward_scales>(c))
                               : error_scales(c, backward);
    const Scales f = floors(c, scales, backward, 8);
    const Shape& s = c.shape;
    // One value per (batch, head) of the query side (rank 4 or 3), or per
    // (batch, kv head) of the key side.
    auto grouped = [&](const Scales& from, double ErrorScales::*field, int rank) {
      const int heads = query_side(field) ? s.heads_q : s.heads_kv;
      return Tensor::of(rank == 4 ? dims({s.batch, heads, 1, 1}) : dims({s.batch, heads, 1}), from.of(field));
    };
    struct Published {
      const char* name;
      double ErrorScales::*field;
      int rank;
    };
    for (const Published& t : {Published{"o", &ErrorScales::o, 4},
                               {"lse", &ErrorScales::lse, 3},
                               {"d", &ErrorScales::d, 3},
                               {"dq", &ErrorScales::dq, 4},
                               {"dk", &ErrorScales::dk, 4},
                               {"dv", &ErrorScales::dv, 4},
                               {"dk_sum", &ErrorScales::dk_sum, 3},
                               {"dv_sum", &ErrorScales::dv_sum, 3}}) {
      if (out.wanted(std::string("floor.") + t.name))
        out.put(std::string("floor.") + t.name, grouped(f, t.field, t.rank));
      if (out.wanted(std::string("err.") + t.name))
        out.put(std::string("err.") + t.name, grouped(scales, t.field, t.rank));
    }
  }
}

template <typename Result>
void put_outputs(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const Shape& s = c.shape;
  const auto B = s.batch, Hq = s.heads_q, Hkv = s.heads_kv, Nq = s.nq, Nk = s.nk, D = s.dim;
  auto put = [&](const char* name, std::vector<int64_t> shape, const std::vector<double>& data) {
    out.put_output(who + "." + name, std::move(shape), data);
  };
  put("o", dims({B, Hq, Nq, D}), r.o);
  put("lse", dims({B, Hq, Nq}), r.lse);
  if (out.wanted(who + ".workspace_peak"))
    out.put(who + ".workspace_peak", Tensor::scalar(static_cast<double>(r.workspace_peak), DType::integer));
  if constexpr (std::is_same_v<Result, BwdResult>) {
    put("d", dims({B, Hq, Nq}), r.d);
    put("dq", dims({B, Hq, Nq, D}), r.dq);
    put("dk", dims({B, Hkv, Nk, D}), r.dk);
    put("dv", dims({B, Hkv, Nk, D}), r.dv);
  }
}

// The naive baseline Fn's outputs, from the trial's store when the map has
// one (computed there at most once per trial).
template <auto Fn>
void put_naive(const Case& c, TensorMap& out) {
  if (OnceStore* once = out.once_store())
    put_outputs(c, "naive", once->get<Fn>(c), out);
  else
    put_outputs(c, "naive", Fn(c), out);
}

template <typename Result>
void put_all(const Case& c, bool backward, const Result* target, const Result* reference, TensorMap& out) {
  put_common(c, backward, out);
  if (out.wants_prefix("naive.")) {
    // Every naive.* tensor at once (the map keeps them), from the trial's
    // baseline when there is one (matches_reference computes the same one,
    // Trial::once): the baseline runs once per trial, however many
    // invariants read which of its outputs.
    static const TensorInfos infos[2] = {common_infos(false), common_infos(true)};
    for (const auto& info : infos[backward])
      if (info.name.rfind("naive.", 0) == 0) out.want(info.name);
    if constexpr (std::is_same_v<Result, BwdResult>)
      put_naive<naive_backward>(c, out);
    else
      put_naive<naive_forward>(c, out);
  }
  if (target) put_outputs(c, "target", *target, out);
  if (reference) put_outputs(c, "reference", *reference, out);
}

}  // namespace

expr::TensorInfos FwdTraits::tensor_infos() {
  return common_infos(false);
}
void FwdTraits::tensors(const Case& c, const Result* target, const Result* reference, TensorMap& out) {
  put_all(c, false, target, reference, out);
}
expr::TensorInfos BwdTraits::tensor_infos() {
  return common_infos(true);
}
void BwdTraits::tensors(const Case& c, const Result* target, const Result* reference, TensorMap& out) {
  put_all(c, true, target, reference, out);
}

}  // namespace kprop::attention
