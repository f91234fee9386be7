// What the CUDA kernels (attention_cuda.h, attention_bwd_cuda.h) call a
// Case's mask, and the tensor-core kernels its dtype: shared by the Case
// wrappers of the CUDA forward and backward (attention_cuda.cpp,
// attention_bwd_cuda.cpp). Their registrations decline boolean masks for
// the tensor-core kernels, which do not take them.
#pragma once

#if KPROP_HAVE_CUDA
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"

namespace kprop::attention {

// The generic (f32/f64) kernels' mask: every kind, numbered as MaskKind.
inline cuda_raw::Mask generic_mask(const Case& c) {
  static_assert(static_cast<int>(MaskKind::none) == 0 && static_cast<int>(MaskKind::causal) == 1 &&
                    static_cast<int>(MaskKind::key_padding) == 2 && static_cast<int>(MaskKind::boolean) == 3,
                "cuda_raw::Mask numbers the kinds as MaskKind");
  cuda_raw::Mask m;
  m.kind = static_cast<int>(c.mask);
  m.causal_offset = c.shape.nk - c.shape.nq;
  m.key_lengths = c.key_lengths.empty() ? nullptr : c.key_lengths.data();
  m.allowed = c.allowed.empty() ? nullptr : c.allowed.data();
  return m;
}

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
