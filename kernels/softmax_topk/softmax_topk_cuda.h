// Softmax + top-k on a CUDA device. Two layers:
//  * cuda_raw: host arrays in, host arrays out, implemented in
//    softmax_topk_cuda.cu. Plain C++17 (nvcc may compile device code at a
//    lower standard than the C++20 host code), no kprop, RapidCheck or yaml
//    headers.
//  * cuda(Case): the Case -> Result wrapper (softmax_topk_cuda.cpp), host
//    compiler only; declared in softmax_topk.h.
// Both exist only when the family is built with CUDA (KPROP_HAVE_CUDA);
// registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

namespace kprop::softmax_topk::cuda_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

// logits: rows x vocab; probs, indices: rows x k, 1 <= k <= vocab. One block
// per row on device 0. Throws std::runtime_error without a device or on any
// CUDA error.
void run(const float* logits, int rows, int vocab, int k, float* probs, int* indices);
void run(const double* logits, int rows, int vocab, int k, double* probs, int* indices);

}  // namespace kprop::softmax_topk::cuda_raw
