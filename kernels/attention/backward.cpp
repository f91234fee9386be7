// Tiled backward (FlashAttention 2 order): the outer loop walks key tiles and
// keeps that tile's dK, dV in scratch; the inner loop walks the query tiles
// that can see it, recomputes P = exp(S - LSE) from the forward's LSE and
// accumulates dV += Pᵀ·dO, dS = P ⊙ (dP - D), dQ += dS·K, dK += dSᵀ·Q.
// Half-precision storage (in.store): P and dS rounded before the products
// (dS from the unrounded P), dQ, dK, dV when stored; D stays in T.
//   single_pass_d  D = rowsum(dO ⊙ O), from the forward's output;
//   two_pass       D = rowsum(P ⊙ dP), accumulated by a first pass over the tiles.
// Scratch: K and V tiles (transposed), two Bq×Bk tiles, Bk×D dK/dV
// accumulators and one value per query row — nothing Nq×Nk.
#include <cmath>
#include <limits>

#include "kernels/attention/attention.h"
#include "kernels/attention/masking.h"
#include "kernels/attention/tile_ops.h"

namespace kprop::attention {

template <typename T, BwdMode mode, BwdBug bug>
void tiled_backward(const Inputs<T>& args, const T* o, const T* lse, Grads<T> out, Workspace& ws) {
  Inputs<T> in = args;
  if constexpr (bug == BwdBug::scale_in_storage) in.scale = ops::stored(in.store, in.scale);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const Shape& s = in.shape;
  const int dim = s.dim, nq = s.nq, nk = s.nk;
  const int bq = std::min(in.block_q, nq), bk = std::min(in.block_k, nk);
  std::fill(out.dq, out.dq + s.q_size(), T(0));
  std::fill(out.dk, out.dk + s.kv_size(), T(0));
  std::fill(out.dv, out.dv + s.kv_size(), T(0));
  auto kt = ws.take<T>(size_t(dim) * bk);  // K tile, [D][Bk]
  auto vt = ws.take<T>(size_t(dim) * bk);  // V tile, [D][Bk]
  auto pt = ws.take<T>(size_t(bq) * bk);   // P
  auto dst = ws.take<T>(size_t(bq) * bk);  // dP, then dS
  auto dk_acc = ws.take<T>(size_t(bk) * dim);
  auto dv_acc = ws.take<T>(size_t(bk) * dim);
  auto d_rows = ws.take<T>(size_t(nq));
  // Mutant state: running and final row maxima, per-key sums.
  Workspace::Buffer<T> m_run, m_final, d_cols;
  if constexpr (bug == BwdBug::stale_tile_max)
    m_run = ws.take<T>(size_t(nq)), m_final = ws.take<T>(size_t(nq));
  if constexpr (bug == BwdBug::dsoftmax_wrong_axis) d_cols = ws.take<T>(size_t(bk));

  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const int kvh = h / s.group();
      const size_t qrow = (size_t(b) * s.heads_q + h) * nq, kvrow = (size_t(b) * s.heads_kv + kvh) * nk;
      const T* q = in.q + qrow * dim;
      const T* d_out = in.d_out + qrow * dim;
      const T* k = in.k + kvrow * dim;
      const T* v = in.v + kvrow * dim;
      const T* row_lse = lse + qrow;
      T* dq = out.dq + qrow * dim;
      const int key_end = masking::key_end(in.mask, b, nk, 0, nq);

      // Scores of query tile [i0, i0+rows) against the current key tile, masked.
      auto scores = [&](int i0, int rows, int j0, int cols) {
        ops::scores(q + size_t(i0) * dim, rows, kt.data(), bk, cols, dim, in.scale, pt.data(), bk);
        masking::apply(in.mask, b, nq, nk, i0, rows, j0, cols, pt.data(), bk);
      };
      // P = exp(S - LSE) in place; a fully masked row (LSE = -inf) gives 0.
      auto probabilities = [&](int i0, int rows, int cols) {
        for (int i = 0; i < rows; ++i) {
          T* pr = pt.data() + size_t(i) * bk;
          T offset = row_lse[i0 + i];
          if constexpr (bug != BwdBug::masked_row_nan)
            if (offset == kNegInf) offset = kInf;
          if constexpr (bug == BwdBug::stale_tile_max) {
            T& mr = m_run[size_t(i0 + i)];
            for (int j = 0; j < cols; ++j) mr = std::max(mr, pr[j]);
            if (offset != kInf) offset = mr == kNegInf ? kInf : mr + (offset - m_final[size_t(i0 + i)]);
          }
          for (int j = 0; j < cols; ++j) pr[j] = std::exp(pr[j] - offset);
        }
      };
      // First query tile that holds a row seeing key j0.
      auto first_tile = [&](int j0) {
        int first = masking::first_row_seeing(in.mask, j0);
        if constexpr (bug == BwdBug::causal_skip_off_by_one)
          if (in.mask.kind == MaskKind::causal) first = std::max(0, j0 - in.mask.causal_offset + 1);
        return first / bq * bq;
      };
      auto load_tile = [&](int j0, int cols) {
        ops::transpose(k + size_t(j0) * dim, cols, dim, kt.data(), bk);
        ops::transpose(v + size_t(j0) * dim, cols, dim, vt.data(), bk);
      };
      // dP = dO·Vᵀ for a query tile.
      auto d_probabilities = [&](int i0, int rows, int cols) {
        ops::scores(d_out + size_t(i0) * dim, rows, vt.data(), bk, cols, dim, T(1), dst.data(), bk);
      };

      // Every key tile (loaded), then every query tile that sees it, with
      // its scores S computed: body(i0, rows, cols).
      auto each_tile_pair = [&](auto&& body) {
        for (int j0 = 0; j0 < key_end; j0 += bk) {
          const int cols = std::min(bk, key_end - j0);
          load_tile(j0, cols);
          for (int i0 = first_tile(j0); i0 < nq; i0 += bq) {
            const int rows = std::min(bq, nq - i0);
            scores(i0, rows, j0, cols);
            body(i0, rows, cols);
          }
        }
      };

      // ---- D per row
      if constexpr (mode == BwdMode::two_pass) {
        std::fill(d_rows.data(), d_rows.data() + nq, T(0));
        each_tile_pair([&](int i0, int rows, int cols) {
          probabilities(i0, rows, cols);
          d_probabilities(i0, rows, cols);
          for (int i = 0; i < rows; ++i) {
            T sum = 0;
            for (int j = 0; j < cols; ++j) sum += pt[size_t(i) * bk + j] * dst[size_t(i) * bk + j];
            d_rows[size_t(i0 + i)] += sum;
          }
        });
      } else {
        for (int i = 0; i < nq; ++i) {
          T sum = 0;
          for (int d = 0; d < dim; ++d) {
            const T oi = o[(qrow + size_t(i)) * dim + d];
            sum += bug == BwdBug::d_without_do ? oi : d_out[size_t(i) * dim + d] * oi;
          }
          d_rows[size_t(i)] = sum;
        }
      }
      if constexpr (bug == BwdBug::d_in_storage)
        for (int i = 0; i < nq; ++i) d_rows[size_t(i)] = ops::stored(in.store, d_rows[size_t(i)]);
      if constexpr (bug == BwdBug::d_rows_4096) {  // written in row order, read back by slot
        constexpr int kSlots = 4096;
        for (int i = kSlots; i < nq; ++i) d_rows[size_t(i % kSlots)] = d_rows[size_t(i)];
        for (int i = kSlots; i < nq; ++i) d_rows[size_t(i)] = d_rows[size_t(i % kSlots)];
      }
      for (int i = 0; i < nq; ++i)
        out.d[qrow + size_t(i)] = bug == BwdBug::dsoftmax_wrong_axis ? T(0) : d_rows[size_t(i)];

      if constexpr (bug == BwdBug::stale_tile_max) {  // final row maxima, as the forward saw them
        for (int i = 0; i < nq; ++i) m_final[size_t(i)] = kNegInf, m_run[size_t(i)] = kNegInf;
        each_tile_pair([&](int i0, int rows, int cols) {
          for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j)
              m_final[size_t(i0 + i)] = std::max(m_final[size_t(i0 + i)], pt[size_t(i) * bk + j]);
        });
      }

      // ---- gradients, one key tile at a time
      for (int j0 = 0; j0 < key_end; j0 += bk) {
        const int cols = std::min(bk, key_end - j0);
        load_tile(j0, cols);
        std::fill(dk_acc.data(), dk_acc.data() + size_t(cols) * dim, T(0));
        std::fill(dv_acc.data(), dv_acc.data() + size_t(cols) * dim, T(0));
        if constexpr (bug == BwdBug::dsoftmax_wrong_axis) {  // D per key, summed over the queries
          std::fill(d_cols.data(), d_cols.data() + cols, T(0));
          for (int i0 = first_tile(j0); i0 < nq; i0 += bq) {
            const int rows = std::min(bq, nq - i0);
            scores(i0, rows, j0, cols);
            probabilities(i0, rows, cols);
            d_probabilities(i0, rows, cols);
            for (int i = 0; i < rows; ++i)
              for (int j = 0; j < cols; ++j)
                d_cols[size_t(j)] += pt[size_t(i) * bk + j] * dst[size_t(i) * bk + j];
          }
        }
        for (int i0 = first_tile(j0); i0 < nq; i0 += bq) {
          const int rows = std::min(bq, nq - i0);
          scores(i0, rows, j0, cols);
          probabilities(i0, rows, cols);
          d_probabilities(i0, rows, cols);
          for (int i = 0; i < rows; ++i) {
            const T* pr = pt.data() + size_t(i) * bk;
            T* dr = dst.data() + size_t(i) * bk;
            const T di = d_rows[size_t(i0 + i)];
            for (int j = 0; j < cols; ++j) {
              if constexpr (bug == BwdBug::dsoftmax_wrong_axis)
                dr[j] = pr[j] * (dr[j] - d_cols[size_t(j)]);
              else if constexpr (bug == BwdBug::dsoftmax_missing_p)
                dr[j] = dr[j] - di;
              else if constexpr (bug == BwdBug::dsoftmax_divide)
                dr[j] = pr[j] * dr[j] / di;
              else
                dr[j] = pr[j] * (dr[j] - di);
            }
          }
          // dS came from the f32 P; the products take P and dS in the storage type.
          ops::store_tile(in.store, pt.data(), rows, cols, bk);
          ops::store_tile(in.store, dst.data(), rows, cols, bk);
          ops::accumulate_transposed(pt.data(), bk, rows, cols, d_out + size_t(i0) * dim, dim, dv_acc.data());
          ops::accumulate(dst.data(), bk, rows, cols, k + size_t(j0) * dim, dim, dq + size_t(i0) * dim);
          ops::accumulate_transposed(dst.data(), bk, rows, cols, q + size_t(i0) * dim, dim, dk_acc.data());
        }
        T* dk = out.dk + (kvrow + size_t(j0)) * dim;
        T* dv = out.dv + (kvrow + size_t(j0)) * dim;
        const T dk_scale = bug == BwdBug::dk_missing_scale ? T(1) : in.scale;
        for (size_t x = 0; x < size_t(cols) * dim; ++x) {
          dk[x] += dk_scale * dk_acc[x];
          dv[x] += dv_acc[x];
        }
      }
      for (size_t x = 0; x < size_t(nq) * dim; ++x) dq[x] *= in.scale;
    }
  // Accumulated in T across tiles and the heads of a group; stored once.
  const auto store = [&](T* g, size_t n, bool truncated) {
    if (truncated)
      for (size_t x = 0; x < n; ++x) g[x] = ops::stored_toward_zero(in.store, g[x]);
    else
      ops::store_all(in.store, g, n);
  };
  constexpr bool all_truncated = bug == BwdBug::grads_store_truncated;
  store(out.dq, s.q_size(), all_truncated || bug == BwdBug::dq_store_truncated);
  store(out.dk, s.kv_size(), all_truncated);
  store(out.dv, s.kv_size(), all_truncated);
}

#define KPROP_BWD(T, mode, bug) \
  template void tiled_backward<T, mode, bug>(const Inputs<T>&, const T*, const T*, Grads<T>, Workspace&);
#define KPROP_BWD_ALL(T)                                               \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::none)                   \
  KPROP_BWD(T, BwdMode::two_pass, BwdBug::none)                        \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::dsoftmax_wrong_axis)    \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::dsoftmax_missing_p)     \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::grads_store_truncated)  \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::dq_store_truncated)     \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::dsoftmax_divide)        \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::d_without_do)           \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::dk_missing_scale)       \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::masked_row_nan)         \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::stale_tile_max)         \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::causal_skip_off_by_one) \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::scale_in_storage)       \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::d_in_storage)           \
  KPROP_BWD(T, BwdMode::single_pass_d, BwdBug::d_rows_4096)
KPROP_BWD_ALL(float)
KPROP_BWD_ALL(double)
#undef KPROP_BWD_ALL
#undef KPROP_BWD

}  // namespace kprop::attention
