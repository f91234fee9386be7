// Case -> FwdResult wrapper around the spec-checked CUDA forwards
// (attention_cuda.cu): f32/f64 cases run the generic kernel with the case's
// tiles, f16/bf16 cases the tensor-core kernel (wgmma on an sm_90 device,
// else mma.sync; D = 64 or 128, no boolean mask: the registration declines
// the rest). Compiled to nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_cuda.h"

#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda_case.h"
#include "kernels/convert.h"

namespace kprop::attention {
namespace {

template <typename T>
FwdResult run_typed(const Case& c) {
  const Shape& s = c.shape;
  const auto q = narrow<T>(c.q), k = narrow<T>(c.k), v = narrow<T>(c.v);
  std::vector<T> o(s.q_size()), lse(s.rows());
  cuda_raw::HostProblem p;
  p.batch = s.batch, p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.nq = s.nq, p.nk = s.nk, p.dim = s.dim;
  p.block_q = c.block_q, p.block_k = c.block_k;
  p.mask = generic_mask(c);
  const size_t smem = cuda_raw::forward(p, static_cast<T>(effective_scale(c)), q.data(), k.data(), v.data(),
                                        o.data(), lse.data());
  FwdResult r;
  r.o = widen(o);
  r.lse = widen(lse);
  r.workspace_peak = smem;  // one block's shared-memory tiles (no Nq×Nk buffer anywhere)
  return r;
}

// f16/bf16: the case's values are already exact in its dtype; the kernel
// takes them as 16-bit inputs, accumulates in f32 and stores O in the dtype,
// LSE in f32 (stats_dtype).
FwdResult run_half(const Case& c) {
  const Shape& s = c.shape;
  const auto q = narrow<float>(c.q), k = narrow<float>(c.k), v = narrow<float>(c.v);
  std::vector<float> o(s.q_size()), lse(s.rows());
  cuda_raw::tc_forward_host(tc_type(c), s.batch, s.heads_q, s.heads_kv, s.nq, s.nk, s.dim, tc_mask(c),
                            c.key_lengths.data(), static_cast<float>(effective_scale(c)), q.data(), k.data(),
                            v.data(), o.data(), lse.data());
  FwdResult r;
  r.o.assign(o.begin(), o.end());
  r.lse.assign(lse.begin(), lse.end());
  r.fixed_tiles = true;
  return r;
}

}  // namespace

FwdResult cuda_forward(const Case& c) {
  if (is_half(c.dtype)) return run_half(c);
  return c.dtype == DType::f32 ? run_typed<float>(c) : run_typed<double>(c);
}

}  // namespace kprop::attention
#endif
