// Case -> typed-kernel runners shared by the implementations
// (implementations.cpp) and the mutants (mutants.cpp): each converts a Case
// to the typed inputs of its precision, runs a tiled kernel (with its bug
// switch, FwdBug / BwdBug, as a template argument) with a fresh Workspace and
// widens the outputs. f16/bf16 cases run the float kernels with
// half-precision Storage.
#pragma once

#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/convert.h"

namespace kprop::attention::typed {

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

inline int contract_offset(const Case& c) {
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

// A forward kernel, then a backward one given that forward's O and LSE
// (`backward(in, o, lse, grads, ws)`; one Workspace: its peak covers both).
template <typename T, typename Forward, typename Backward>
BwdResult run_forward_backward(const Case& c, Forward forward, Backward backward) {
  const Typed<T> t(c, contract_offset(c));
  const Shape& s = c.shape;
  std::vector<T> o(s.q_size()), lse(s.rows()), d(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  Workspace ws;
  forward(t.in, o.data(), lse.data(), ws);
  backward(t.in, o.data(), lse.data(), Grads<T>{dq.data(), dk.data(), dv.data(), d.data()}, ws);
  return {widen(o), widen(lse), widen(d), widen(dq), widen(dk), widen(dv), ws.peak_bytes()};
}

// The tiled forward, then the tiled backward of `mode` with `bug`.
template <typename T, BwdMode mode, BwdBug bug>
BwdResult run_backward(const Case& c) {
  return run_forward_backward<T>(c, tiled_forward<T, FwdBug::none>, tiled_backward<T, mode, bug>);
}

template <BwdMode mode, BwdBug bug = BwdBug::none>
BwdResult backward(const Case& c) {
  return c.dtype == DType::f64 ? run_backward<double, mode, bug>(c) : run_backward<float, mode, bug>(c);
}

}  // namespace kprop::attention::typed
