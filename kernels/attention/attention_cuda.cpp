// Case -> FwdResult wrapper around the spec-checked CUDA forward
// (attention_cuda.cu); compiled to nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_cuda.h"

#include <vector>

#include "kernels/attention/attention.h"

namespace kprop::attention {
namespace {

template <typename T>
FwdResult run_typed(const Case& c) {
  const Shape& s = c.shape;
  const std::vector<T> q(c.q.begin(), c.q.end()), k(c.k.begin(), c.k.end()), v(c.v.begin(), c.v.end());
  std::vector<T> o(s.q_size()), lse(s.rows());
  cuda_raw::HostProblem p;
  p.batch = s.batch, p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.nq = s.nq, p.nk = s.nk, p.dim = s.dim;
  p.block_q = c.block_q, p.block_k = c.block_k;
  p.mask = static_cast<int>(c.mask);
  p.causal_offset = s.nk - s.nq;
  p.key_lengths = c.key_lengths.data();
  p.allowed = c.allowed.data();
  const size_t smem = cuda_raw::forward(p, static_cast<T>(effective_scale(c)), q.data(), k.data(), v.data(),
                                        o.data(), lse.data());
  FwdResult r;
  r.o.assign(o.begin(), o.end());
  r.lse.assign(lse.begin(), lse.end());
  r.workspace_peak = smem;  // one block's shared-memory tiles (no Nq×Nk buffer anywhere)
  return r;
}

}  // namespace

FwdResult cuda_forward(const Case& c) {
  return c.dtype == DType::f32 ? run_typed<float>(c) : run_typed<double>(c);
}

}  // namespace kprop::attention
#endif
