// Case -> BwdResult wrapper around the CUDA backwards: f32/f64 cases run the
// generic kernels with the case's tiles (attention_bwd_cuda.cu), f16/bf16
// cases the tensor-core forward and backward (attention_bwd_cuda_tc.cu; D = 64
// or 128, no boolean mask: the registration declines the rest). Compiled to
// nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_bwd_cuda.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda_case.h"
#include "kernels/convert.h"

namespace kprop::attention {
namespace {

template <typename T>
BwdResult run_typed(const Case& c) {
  const Shape& s = c.shape;
  const std::vector<T> q = narrow<T>(c.q), k = narrow<T>(c.k), v = narrow<T>(c.v), d_out = narrow<T>(c.d_out);
  std::vector<T> o(s.q_size()), lse(s.rows()), d(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  const cuda_bwd_raw::Dims dims{s.batch, s.heads_q, s.heads_kv, s.nq, s.nk, s.dim, c.block_q, c.block_k};
  const size_t peak = cuda_bwd_raw::backward(dims, generic_mask(c), static_cast<T>(effective_scale(c)),
                                             q.data(), k.data(), v.data(), d_out.data(), o.data(), lse.data(),
                                             d.data(), dq.data(), dk.data(), dv.data());
  return {widen(o), widen(lse), widen(d), widen(dq), widen(dk), widen(dv), peak};
}

// f16/bf16: the case's values are already exact in its dtype; O, dQ, dK, dV
// come back stored in the dtype, LSE and D in f32.
BwdResult run_half(const Case& c) {
  const Shape& s = c.shape;
  cuda_bwd_raw::TcBwdHost a;
  a.type = tc_type(c), a.mask = tc_mask(c);
  a.batch = s.batch, a.heads_q = s.heads_q, a.heads_kv = s.heads_kv, a.nq = s.nq, a.nk = s.nk, a.dim = s.dim;
  a.key_lengths = c.key_lengths.data();
  a.scale = static_cast<float>(effective_scale(c));
  const auto q = narrow<float>(c.q), k = narrow<float>(c.k), v = narrow<float>(c.v),
             d_out = narrow<float>(c.d_out);
  std::vector<float> o(s.q_size()), lse(s.rows()), d(s.rows()), dq(s.q_size()), dk(s.kv_size()),
      dv(s.kv_size());
  const size_t smem = cuda_bwd_raw::tc_backward_host(a, q.data(), k.data(), v.data(), d_out.data(), o.data(),
                                                     lse.data(), d.data(), dq.data(), dk.data(), dv.data());
  BwdResult r{widen(o), widen(lse), widen(d), widen(dq), widen(dk), widen(dv), smem};
  r.fixed_tiles = true;  // 64×64 tiles whatever the case's
  return r;
}

}  // namespace

BwdResult cuda_backward(const Case& c) {
  if (const std::string why = validate(c, true); !why.empty())
    throw std::invalid_argument("attention.bwd case: " + why);
  if (is_half(c.dtype)) return run_half(c);
  return c.dtype == DType::f32 ? run_typed<float>(c) : run_typed<double>(c);
}

}  // namespace kprop::attention
#endif
