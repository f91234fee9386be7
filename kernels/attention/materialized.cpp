// Plain materialized attention in one precision: the whole Nq×Nk score
// matrix, a safe softmax over each row, then matrix products — what autograd
// through softmax(Q·Kᵀ)·V computes. It is the "naive computation in the
// target's own precision" of the tolerance policy and the benchmark's
// baseline, built from the same inner loops as the tiled kernels. With a
// half-precision Storage it is what eager half-precision code computes:
// every materialized tensor (P, dP, dS, the outputs) rounded to the storage
// type, products accumulated in T (f32).
#include <cmath>
#include <limits>

#include "kernels/attention/attention.h"
#include "kernels/attention/masking.h"
#include "kernels/attention/tile_ops.h"

namespace kprop::attention {
namespace {

// P (normalized, 0 where masked) of one head into p [Nq][Nk]; LSE per row.
template <typename T>
void softmax_rows(const Inputs<T>& in, int b, const T* q, const T* kt, T* p, T* lse) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Shape& s = in.shape;
  ops::scores(q, s.nq, kt, s.nk, s.nk, s.dim, in.scale, p, s.nk);
  masking::apply(in.mask, b, s.nq, s.nk, 0, s.nq, 0, s.nk, p, s.nk);
  for (int i = 0; i < s.nq; ++i) {
    T* row = p + size_t(i) * s.nk;
    T mx = kNegInf;
    for (int j = 0; j < s.nk; ++j) mx = std::max(mx, row[j]);
    if (mx == kNegInf) {  // fully masked row
      std::fill(row, row + s.nk, T(0));
      lse[i] = kNegInf;
      continue;
    }
    T sum = 0;
    for (int j = 0; j < s.nk; ++j) sum += (row[j] = std::exp(row[j] - mx));
    const T inv = T(1) / sum;
    for (int j = 0; j < s.nk; ++j) row[j] *= inv;
    lse[i] = mx + std::log(sum);
  }
}

}  // namespace

template <typename T>
void materialized_forward(const Inputs<T>& in, T* o, T* lse, Workspace& ws) {
  const Shape& s = in.shape;
  auto kt = ws.take<T>(size_t(s.dim) * s.nk);
  auto p = ws.take<T>(size_t(s.nq) * s.nk);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const size_t qrow = (size_t(b) * s.heads_q + h) * s.nq;
      const size_t kvrow = (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
      ops::transpose(in.k + kvrow * s.dim, s.nk, s.dim, kt.data(), s.nk);
      softmax_rows(in, b, in.q + qrow * s.dim, kt.data(), p.data(), lse + qrow);
      ops::store_all(in.store, p.data(), size_t(s.nq) * s.nk);  // softmax's output tensor
      T* out = o + qrow * s.dim;
      std::fill(out, out + size_t(s.nq) * s.dim, T(0));
      ops::accumulate(p.data(), s.nk, s.nq, s.nk, in.v + kvrow * s.dim, s.dim, out);
      ops::store_all(in.store, out, size_t(s.nq) * s.dim);
    }
}

template <typename T>
void materialized_backward(const Inputs<T>& in, Grads<T> out, Workspace& ws) {
  const Shape& s = in.shape;
  std::fill(out.dq, out.dq + s.q_size(), T(0));
  std::fill(out.dk, out.dk + s.kv_size(), T(0));
  std::fill(out.dv, out.dv + s.kv_size(), T(0));
  auto kt = ws.take<T>(size_t(s.dim) * s.nk);
  auto vt = ws.take<T>(size_t(s.dim) * s.nk);
  auto p = ws.take<T>(size_t(s.nq) * s.nk);
  auto ds = ws.take<T>(size_t(s.nq) * s.nk);  // dP, then dS
  auto lse = ws.take<T>(size_t(s.nq));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const size_t qrow = (size_t(b) * s.heads_q + h) * s.nq;
      const size_t kvrow = (size_t(b) * s.heads_kv + h / s.group()) * s.nk;
      const T* q = in.q + qrow * s.dim;
      const T* d_out = in.d_out + qrow * s.dim;
      ops::transpose(in.k + kvrow * s.dim, s.nk, s.dim, kt.data(), s.nk);
      ops::transpose(in.v + kvrow * s.dim, s.nk, s.dim, vt.data(), s.nk);
      softmax_rows(in, b, q, kt.data(), p.data(), lse.data());
      ops::scores(d_out, s.nq, vt.data(), s.nk, s.nk, s.dim, T(1), ds.data(), s.nk);  // dP = dO·Vᵀ
      // D = rowsum(P ⊙ dP) in T, before P and dP are stored: D is a
      // statistic, not a materialized tensor (it stays in T, as in the
      // kernels and FlashAttention, and as D_from_own_forward requires).
      for (int i = 0; i < s.nq; ++i) {
        T d_row = 0;
        for (int j = 0; j < s.nk; ++j) d_row += p[size_t(i) * s.nk + j] * ds[size_t(i) * s.nk + j];
        out.d[qrow + size_t(i)] = d_row;
      }
      // Every materialized tensor (P, dP, then dS) in the storage type.
      ops::store_all(in.store, p.data(), size_t(s.nq) * s.nk);
      ops::store_all(in.store, ds.data(), size_t(s.nq) * s.nk);
      for (int i = 0; i < s.nq; ++i) {
        const T* pr = p.data() + size_t(i) * s.nk;
        T* dr = ds.data() + size_t(i) * s.nk;
        const T d_row = out.d[qrow + size_t(i)];
        for (int j = 0; j < s.nk; ++j) dr[j] = ops::stored(in.store, pr[j] * (dr[j] - d_row));
      }
      ops::accumulate(ds.data(), s.nk, s.nq, s.nk, in.k + kvrow * s.dim, s.dim, out.dq + qrow * s.dim);
      ops::accumulate_transposed(ds.data(), s.nk, s.nq, s.nk, q, s.dim, out.dk + kvrow * s.dim);
      ops::accumulate_transposed(p.data(), s.nk, s.nq, s.nk, d_out, s.dim, out.dv + kvrow * s.dim);
    }
  for (size_t x = 0; x < s.q_size(); ++x) out.dq[x] *= in.scale;
  for (size_t x = 0; x < s.kv_size(); ++x) out.dk[x] *= in.scale;
  ops::store_all(in.store, out.dq, s.q_size());
  ops::store_all(in.store, out.dk, s.kv_size());
  ops::store_all(in.store, out.dv, s.kv_size());
}

template void materialized_forward<float>(const Inputs<float>&, float*, float*, Workspace&);
template void materialized_forward<double>(const Inputs<double>&, double*, double*, Workspace&);
template void materialized_backward<float>(const Inputs<float>&, Grads<float>, Workspace&);
template void materialized_backward<double>(const Inputs<double>&, Grads<double>, Workspace&);

}  // namespace kprop::attention
