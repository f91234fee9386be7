// Case -> Result wrapper around the CUDA softmax + top-k
// (softmax_topk_cuda.cu); compiled to nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/softmax_topk/softmax_topk_cuda.h"

#include <vector>

#include "kernels/softmax_topk/softmax_topk.h"

namespace kprop::softmax_topk {
namespace {

template <typename T>
Result run_typed(const Case& c) {
  const size_t n_out = static_cast<size_t>(c.rows()) * static_cast<size_t>(c.k);
  const std::vector<T> x(c.logits.begin(), c.logits.end());  // exact: f32 logits are floats
  std::vector<T> p(n_out);
  Result r;
  r.indices.assign(n_out, 0);
  cuda_raw::run(x.data(), c.rows(), c.vocab, c.k, p.data(), r.indices.data());
  r.probs.assign(p.begin(), p.end());
  return r;
}

}  // namespace

// A half case (f16, bf16) runs the f32 kernel on its half logits (exact as
// floats) and rounds the probabilities to the dtype (softmax_topk.h,
// precision contract).
Result cuda(const Case& c) {
  if (c.dtype == DType::f64) return run_typed<double>(c);
  Result r = run_typed<float>(c);
  if (is_half(c.dtype))
    for (double& q : r.probs) q = round_to(c.dtype, q);
  return r;
}

}  // namespace kprop::softmax_topk
#endif
