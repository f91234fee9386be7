// What the tensor-core kernels (attention_cuda.h, attention_bwd_cuda.h) call
// a Case's dtype and mask: shared by the Case wrappers of the CUDA forward
// and backward (attention_cuda.cpp, attention_bwd_cuda.cpp). Their
// registrations decline boolean masks, which these kernels do not take.
#pragma once

#if KPROP_HAVE_CUDA
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"

namespace kprop::attention {

inline cuda_raw::Half tc_type(const Case& c) {
  return c.dtype == DType::bf16 ? cuda_raw::Half::bf16 : cuda_raw::Half::f16;
}

inline cuda_raw::TcMask tc_mask(const Case& c) {
  switch (c.mask) {
    case MaskKind::causal:
      return cuda_raw::TcMask::causal;
    case MaskKind::key_padding:
      return cuda_raw::TcMask::key_padding;
    default:
      return cuda_raw::TcMask::none;
  }
}

}  // namespace kprop::attention
#endif
