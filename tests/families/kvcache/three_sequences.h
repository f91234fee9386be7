// The kvcache tests' hand-made batch.
#pragma once

#include <utility>
#include <vector>

#include "kernels/kvcache/kvcache.h"

namespace kprop::kvcache {

// A free list that is not in block order.
inline const std::vector<int> kShuffledPool = {4, 1, 6, 0, 3, 5, 2, 7, 8, 9};

// Three sequences, GQA 2x2, pages of 3 that divide no length, `chunk` prompt
// tokens per prefill chunk, staggered arrivals: the third sequence arrives at
// step `third_arrives` (3: it reuses blocks the first released; 7: blocks
// the second released). The free list starts with `pool`, grown to what the
// case needs.
inline Case three_sequences(int third_arrives, int chunk, std::vector<int> pool, DType dtype = DType::f64) {
  Case c;
  c.kv_heads = 2;
  c.group = 2;
  c.head_dim = 4;
  c.seqs = {{4, 2, 0, 11}, {1, 5, 0, 12}, {5, 3, third_arrives, 13}};
  c.page_size = 3;
  c.chunk = chunk;
  c.k_spread = 20;
  c.v_spread = 30;
  c.q_scale = 2;
  c.seed = 5;
  c.pool = std::move(pool);
  c.dtype = dtype;
  return fit_pool(c);
}

}  // namespace kprop::kvcache
