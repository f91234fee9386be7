// The tensor-core tests' cases (cuda_fwd_test.cpp, attention_bwd_cuda_test.cpp):
// the fp64 Case of a table row's shape and mask, values left to the test.
#pragma once

#if KPROP_HAVE_CUDA
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"

namespace kprop::attention {

// TC: a table row with batch, heads_q, heads_kv, nq, nk, dim, mask and
// key_lengths (used where the mask is key padding). Tiles 1×1: the fp64
// reference ignores them, and each test sets the kernel's own.
template <typename TC>
Case tc_case(const TC& tc) {
  Case c;
  c.shape = {tc.batch, tc.heads_q, tc.heads_kv, tc.nq, tc.nk, tc.dim};
  c.dtype = DType::f64;
  c.block_q = c.block_k = 1;
  switch (tc.mask) {
    case cuda_raw::TcMask::none:
      c.mask = MaskKind::none;
      break;
    case cuda_raw::TcMask::causal:
      c.mask = MaskKind::causal;
      break;
    case cuda_raw::TcMask::key_padding:
      c.mask = MaskKind::key_padding;
      c.key_lengths = tc.key_lengths;
      break;
  }
  return c;
}

}  // namespace kprop::attention
#endif
