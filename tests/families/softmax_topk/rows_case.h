// A softmax_topk case from hand-made logit rows, shared by the CPU and CUDA
// kernel tests.
#pragma once

#include <vector>

#include "kernels/softmax_topk/softmax_topk.h"

namespace kprop::softmax_topk {

// Rows of equal length V; `block`: the fused kernel's tile width.
inline Case rows_case(DType dtype, int k, const std::vector<std::vector<double>>& rows,
                      int block = Case{}.block) {
  Case c;
  c.dtype = dtype;
  c.k = k;
  c.block = block;
  c.vocab = static_cast<int>(rows[0].size());
  for (const auto& r : rows) c.logits.insert(c.logits.end(), r.begin(), r.end());
  return c;
}

}  // namespace kprop::softmax_topk
