// Tiled forward with the online softmax (FlashAttention 2): per query tile a
// running max m, running sum l and unnormalized accumulator, rescaled by
// exp(m_old - m_new) whenever a key tile raises the max. Scratch: one K tile
// (transposed), one score tile, the accumulator and m, l — nothing Nq×Nk.
// Half-precision storage (in.store): P rounded before P·V, O when stored.
#include <cmath>
#include <limits>

#include "kernels/attention/attention.h"
#include "kernels/attention/masking.h"
#include "kernels/attention/tile_ops.h"

namespace kprop::attention {

template <typename T, FwdBug bug>
void tiled_forward(const Inputs<T>& in, T* o, T* lse, Workspace& ws) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Shape& s = in.shape;
  const int dim = s.dim, nq = s.nq, nk = s.nk;
  const int bq = std::min(in.block_q, nq), bk = std::min(in.block_k, nk);
  auto kt = ws.take<T>(size_t(dim) * bk);  // K tile, [D][Bk]
  auto st = ws.take<T>(size_t(bq) * bk);   // scores, then probabilities
  auto acc = ws.take<T>(size_t(bq) * dim);
  auto m = ws.take<T>(size_t(bq));
  auto l = ws.take<T>(size_t(bq));

  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const int kvh = bug == FwdBug::gqa_head_map ? h % s.heads_kv : h / s.group();
      const size_t qrow = (size_t(b) * s.heads_q + h) * nq, kvrow = (size_t(b) * s.heads_kv + kvh) * nk;
      const T* q = in.q + qrow * dim;
      const T* k = in.k + kvrow * dim;
      const T* v = in.v + kvrow * dim;
      for (int i0 = 0; i0 < nq; i0 += bq) {
        const int rows = std::min(bq, nq - i0);
        for (int i = 0; i < rows; ++i) m[size_t(i)] = kNegInf, l[size_t(i)] = 0;
        std::fill(acc.data(), acc.data() + size_t(rows) * dim, T(0));
        int end = bug == FwdBug::additive_mask ? nk : masking::key_end(in.mask, b, nk, i0, rows);
        if constexpr (bug == FwdBug::keys_capped_64) end = std::min(end, 64);
        for (int j0 = 0; j0 < end; j0 += bk) {
          if constexpr (bug == FwdBug::drop_partial_tile)
            if (j0 + bk > nk) break;
          const int cols = std::min(bk, end - j0);
          ops::transpose(k + size_t(j0) * dim, cols, dim, kt.data(), bk);
          ops::scores(q + size_t(i0) * dim, rows, kt.data(), bk, cols, dim, in.scale, st.data(), bk);
          if constexpr (bug == FwdBug::additive_mask)
            masking::apply(in.mask, b, nq, nk, i0, rows, j0, cols, st.data(), bk, T(-1e4));
          else
            masking::apply(in.mask, b, nq, nk, i0, rows, j0, cols, st.data(), bk);
          for (int i = 0; i < rows; ++i) {
            T* sr = st.data() + size_t(i) * bk;
            T tile_max = kNegInf;
            for (int j = 0; j < cols; ++j) tile_max = std::max(tile_max, sr[j]);
            const T m_old = m[size_t(i)], m_new = std::max(m_old, tile_max);
            // Guard: while every key so far is masked, subtract 0, not -inf.
            T m_use = m_new;
            if constexpr (bug != FwdBug::nan_masked_tile)
              if (m_new == kNegInf) m_use = 0;
            T alpha;
            if constexpr (bug == FwdBug::rescale_inverted)
              alpha = m_old == kNegInf ? T(0) : std::exp(m_use - m_old);
            else
              alpha = std::exp(m_old - m_use);
            T sum = 0;
            if constexpr (bug == FwdBug::rowsum_in_storage) {
              for (int j = 0; j < cols; ++j)
                sum = ops::stored(in.store, sum + (sr[j] = std::exp(sr[j] - m_use)));
              l[size_t(i)] = ops::stored(in.store, alpha * l[size_t(i)] + sum);
            } else {
              for (int j = 0; j < cols; ++j) sum += (sr[j] = std::exp(sr[j] - m_use));
              l[size_t(i)] = alpha * l[size_t(i)] + sum;
            }
            T* ar = acc.data() + size_t(i) * dim;
            for (int d = 0; d < dim; ++d) ar[d] *= alpha;
            m[size_t(i)] = m_new;
          }
          // l has the f32 probabilities; P·V takes them in the storage type.
          ops::store_tile(in.store, st.data(), rows, cols, bk);
          if constexpr (bug == FwdBug::pv_in_storage) {
            for (int i = 0; i < rows; ++i)
              for (int j = 0; j < cols; ++j)
                for (int d = 0; d < dim; ++d) {
                  T& a = acc[size_t(i) * dim + d];
                  a = ops::stored(in.store, a + st[size_t(i) * bk + j] * v[size_t(j0 + j) * dim + d]);
                }
          } else {
            ops::accumulate(st.data(), bk, rows, cols, v + size_t(j0) * dim, dim, acc.data());
          }
        }
        for (int i = 0; i < rows; ++i) {
          T* out = o + (qrow + size_t(i0 + i)) * dim;
          const T* ar = acc.data() + size_t(i) * dim;
          const T li = l[size_t(i)];
          // every key masked (the additive mask's finite scores leave l > 0)
          if ((bug != FwdBug::no_empty_row_guard && li == 0) ||
              (bug == FwdBug::additive_mask && masking::row_empty(in.mask, b, nq, nk, i0 + i))) {
            std::fill(out, out + dim, T(0));
            lse[qrow + size_t(i0 + i)] = kNegInf;
            continue;
          }
          for (int d = 0; d < dim; ++d)
            out[d] = bug == FwdBug::o_store_truncated ? ops::stored_toward_zero(in.store, ar[d] / li)
                                                      : ops::stored(in.store, ar[d] / li);
          T& row_lse = lse[qrow + size_t(i0 + i)];
          row_lse = bug == FwdBug::lse_missing_max ? std::log(li) : m[size_t(i)] + std::log(li);
          if constexpr (bug == FwdBug::lse_in_storage) row_lse = ops::stored(in.store, row_lse);
        }
      }
    }
}

#define KPROP_FWD(T)                                                                                \
  template void tiled_forward<T, FwdBug::none>(const Inputs<T>&, T*, T*, Workspace&);               \
  template void tiled_forward<T, FwdBug::rescale_inverted>(const Inputs<T>&, T*, T*, Workspace&);   \
  template void tiled_forward<T, FwdBug::nan_masked_tile>(const Inputs<T>&, T*, T*, Workspace&);    \
  template void tiled_forward<T, FwdBug::no_empty_row_guard>(const Inputs<T>&, T*, T*, Workspace&); \
  template void tiled_forward<T, FwdBug::drop_partial_tile>(const Inputs<T>&, T*, T*, Workspace&);  \
  template void tiled_forward<T, FwdBug::gqa_head_map>(const Inputs<T>&, T*, T*, Workspace&);       \
  template void tiled_forward<T, FwdBug::lse_missing_max>(const Inputs<T>&, T*, T*, Workspace&);    \
  template void tiled_forward<T, FwdBug::additive_mask>(const Inputs<T>&, T*, T*, Workspace&);      \
  template void tiled_forward<T, FwdBug::pv_in_storage>(const Inputs<T>&, T*, T*, Workspace&);      \
  template void tiled_forward<T, FwdBug::rowsum_in_storage>(const Inputs<T>&, T*, T*, Workspace&);  \
  template void tiled_forward<T, FwdBug::lse_in_storage>(const Inputs<T>&, T*, T*, Workspace&);     \
  template void tiled_forward<T, FwdBug::o_store_truncated>(const Inputs<T>&, T*, T*, Workspace&);  \
  template void tiled_forward<T, FwdBug::keys_capped_64>(const Inputs<T>&, T*, T*, Workspace&);
KPROP_FWD(float)
KPROP_FWD(double)
#undef KPROP_FWD

}  // namespace kprop::attention
