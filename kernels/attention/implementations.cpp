// The registered implementations: each converts a Case to the typed inputs
// of its precision, runs a typed kernel with a fresh Workspace and widens
// the outputs. Mutants are the same kernels with one bug compiled in (or the
// causal offset moved), so each differs from `tiled` in exactly one place.
// f16/bf16 cases run the float kernels with half-precision Storage.
#include <cmath>

#include "kernels/attention/attention.h"

namespace kprop::attention {
namespace {

template <typename T>
std::vector<T> narrow(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}
template <typename T>
std::vector<double> widen(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// Inputs in precision T; owns the copies the kernel reads.
template <typename T>
struct Typed {
  std::vector<T> q, k, v, d_out;
  Inputs<T> in;
  Typed(const Case& c, int causal_offset)
      : q(narrow<T>(c.q)), k(narrow<T>(c.k)), v(narrow<T>(c.v)), d_out(narrow<T>(c.d_out)) {
    in.shape = c.shape;
    in.store = c.dtype == DType::f16 ? Storage::f16 : c.dtype == DType::bf16 ? Storage::bf16 : Storage::same;
    in.mask = {c.mask, causal_offset, c.key_lengths.data(), c.allowed.data()};
    in.scale = static_cast<T>(effective_scale(c));
    in.block_q = c.block_q;
    in.block_k = c.block_k;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.d_out = d_out.empty() ? nullptr : d_out.data();
  }
};

int contract_offset(const Case& c) {
  return c.shape.nk - c.shape.nq;
}

template <typename T>
using ForwardKernel = void (*)(const Inputs<T>&, T*, T*, Workspace&);

template <typename T>
FwdResult run_forward(const Case& c, ForwardKernel<T> kernel, int causal_offset) {
  const Typed<T> t(c, causal_offset);
  std::vector<T> o(c.shape.q_size()), lse(c.shape.rows());
  Workspace ws;
  kernel(t.in, o.data(), lse.data(), ws);
  return {widen(o), widen(lse), ws.peak_bytes()};
}

template <FwdBug bug>
FwdResult forward(const Case& c, int causal_offset) {
  return c.dtype == DType::f64 ? run_forward<double>(c, tiled_forward<double, bug>, causal_offset)
                               : run_forward<float>(c, tiled_forward<float, bug>, causal_offset);
}
template <FwdBug bug>
FwdResult forward(const Case& c) {
  return forward<bug>(c, contract_offset(c));
}

// The tiled forward, then backward kernel `kernel` on its O and LSE (one
// Workspace: its peak covers both).
template <typename T, BwdMode mode, BwdBug bug>
BwdResult run_backward(const Case& c) {
  const Typed<T> t(c, contract_offset(c));
  const Shape& s = c.shape;
  std::vector<T> o(s.q_size()), lse(s.rows()), d(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  Workspace ws;
  tiled_forward<T>(t.in, o.data(), lse.data(), ws);
  tiled_backward<T, mode, bug>(t.in, o.data(), lse.data(), {dq.data(), dk.data(), dv.data(), d.data()}, ws);
  return {widen(o), widen(lse), widen(d), widen(dq), widen(dk), widen(dv), ws.peak_bytes()};
}

template <BwdMode mode, BwdBug bug = BwdBug::none>
BwdResult backward(const Case& c) {
  return c.dtype == DType::f64 ? run_backward<double, mode, bug>(c) : run_backward<float, mode, bug>(c);
}

template <typename T>
BwdResult run_naive_backward(const Case& c) {
  const Typed<T> t(c, contract_offset(c));
  const Shape& s = c.shape;
  std::vector<T> o(s.q_size()), lse(s.rows()), d(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  Workspace ws;
  materialized_forward<T>(t.in, o.data(), lse.data(), ws);
  materialized_backward<T>(t.in, {dq.data(), dk.data(), dv.data(), d.data()}, ws);
  return {widen(o), widen(lse), widen(d), widen(dq), widen(dk), widen(dv), ws.peak_bytes()};
}

}  // namespace

FwdResult tiled(const Case& c) {
  return forward<FwdBug::none>(c);
}
BwdResult tiled_d(const Case& c) {
  return backward<BwdMode::single_pass_d>(c);
}
BwdResult tiled_two_pass(const Case& c) {
  return backward<BwdMode::two_pass>(c);
}

FwdResult naive_forward(const Case& c) {
  const int offset = contract_offset(c);
  return c.dtype == DType::f64 ? run_forward<double>(c, materialized_forward<double>, offset)
                               : run_forward<float>(c, materialized_forward<float>, offset);
}
BwdResult naive_backward(const Case& c) {
  return c.dtype == DType::f64 ? run_naive_backward<double>(c) : run_naive_backward<float>(c);
}

const std::vector<Mutant<FwdResult>>& forward_mutants() {
  static const std::vector<Mutant<FwdResult>> table = {
      {"rescale_inverted", "online-softmax correction exp(m_new - m_old) instead of exp(m_old - m_new)",
       forward<FwdBug::rescale_inverted>},
      {"nan_masked_tile", "no guard for a fully masked tile: exp(-inf - (-inf)) = NaN",
       forward<FwdBug::nan_masked_tile>},
      {"no_empty_row_guard", "O = acc / l with l = 0 on a fully masked row",
       forward<FwdBug::no_empty_row_guard>},
      {"causal_top_left", "causal mask aligned top-left (key j <= i) even when Nq != Nk",
       [](const Case& c) { return forward<FwdBug::none>(c, 0); }},
      {"causal_off_by_one", "causal mask excludes the diagonal (j < i + Nk - Nq)",
       [](const Case& c) { return forward<FwdBug::none>(c, contract_offset(c) - 1); }},
      {"drop_partial_tile", "the last, uneven KV tile is skipped", forward<FwdBug::drop_partial_tile>},
      {"gqa_head_map", "query head h reads kv head h % Hkv instead of h / (Hq / Hkv)",
       forward<FwdBug::gqa_head_map>},
      {"lse_missing_max", "LSE = log l, without the running max", forward<FwdBug::lse_missing_max>},
      {"pv_in_storage", "f16/bf16: the P·V accumulator held in the storage type instead of f32",
       forward<FwdBug::pv_in_storage>},
      {"rowsum_in_storage", "f16/bf16: the running row sum l held in the storage type instead of f32",
       forward<FwdBug::rowsum_in_storage>},
      {"lse_in_storage", "f16/bf16: LSE stored in the storage type instead of f32",
       forward<FwdBug::lse_in_storage>},

      {"materialized_scores",
       "correct values from a materialized Nq×Nk score matrix (breaks workspace_bounded)", naive_forward},
  };
  return table;
}

const std::vector<Mutant<BwdResult>>& backward_mutants() {
  using M = BwdMode;
  static const std::vector<Mutant<BwdResult>> table = {
      {"dsoftmax_wrong_axis", "dS = P ⊙ (dP - D) with D summed over the queries (per key) instead of per row",
       backward<M::single_pass_d, BwdBug::dsoftmax_wrong_axis>},
      {"dsoftmax_missing_p", "dS = dP - rowsum(P ⊙ dP), without the factor P",
       backward<M::single_pass_d, BwdBug::dsoftmax_missing_p>},
      {"dsoftmax_divide", "dS = P ⊙ dP / rowsum(P ⊙ dP)",
       backward<M::single_pass_d, BwdBug::dsoftmax_divide>},
      {"d_without_do", "D = rowsum(O) instead of rowsum(dO ⊙ O)",
       backward<M::single_pass_d, BwdBug::d_without_do>},
      {"dk_missing_scale", "dK = dSᵀ·Q without the softmax scale",
       backward<M::single_pass_d, BwdBug::dk_missing_scale>},
      {"masked_row_nan", "no guard for fully masked rows: P = exp(-inf - (-inf)) = NaN",
       backward<M::single_pass_d, BwdBug::masked_row_nan>},
      {"stale_tile_max", "P recomputed with the running max at each KV tile instead of the final LSE",
       backward<M::single_pass_d, BwdBug::stale_tile_max>},
      {"causal_skip_off_by_one",
       "causal tile skipping drops the query tile whose last row sees only the tile's first key",
       backward<M::single_pass_d, BwdBug::causal_skip_off_by_one>},
      {"materialized_scores", "correct gradients from materialized Nq×Nk matrices (breaks workspace_bounded)",
       naive_backward},
  };
  return table;
}

}  // namespace kprop::attention
