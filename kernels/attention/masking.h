// Mask handling shared by the typed kernels: which key range a block of
// queries can see at all (for skipping whole tiles), and -inf on the masked
// scores of a tile.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention/attention.h"

namespace kprop::attention::masking {

// Keys [0, end) hold every key visible to some row of [i0, i0 + rows).
inline int key_end(const MaskView& m, int b, int nk, int i0, int rows) {
  switch (m.kind) {
    case MaskKind::causal:
      return std::clamp(i0 + rows + m.causal_offset, 0, nk);
    case MaskKind::key_padding:
      return std::min(m.key_lengths[b], nk);
    default:
      return nk;
  }
}

// The first query row that can see key j (every row without a causal mask).
inline int first_row_seeing(const MaskView& m, int j) {
  return m.kind == MaskKind::causal ? std::max(0, j - m.causal_offset) : 0;
}

// Query i of batch b sees no key at all.
inline bool row_empty(const MaskView& m, int b, int nq, int nk, int i) {
  if (m.kind != MaskKind::boolean) return key_end(m, b, nk, i, 1) == 0;
  const uint8_t* row = m.allowed + (size_t(b) * nq + size_t(i)) * nk;
  return std::none_of(row, row + nk, [](uint8_t a) { return a != 0; });
}

// Sets s[i][j] = -inf where query i0 + i of batch b must not see key j0 + j
// (adds `bias` there instead when it is finite: the additive mask of the
// mutant additive_mask_1e4, mutants.cpp).
template <typename T>
inline void apply(const MaskView& m, int b, int nq, int nk, int i0, int rows, int j0, int cols, T* s, int lds,
                  T bias = -std::numeric_limits<T>::infinity()) {
  auto hide = [bias, additive = std::isfinite(bias)](T& x) { x = additive ? x + bias : bias; };
  switch (m.kind) {
    case MaskKind::none:
      return;
    case MaskKind::causal:
      for (int i = 0; i < rows; ++i) {
        const int first_hidden = std::max(i0 + i + m.causal_offset + 1 - j0, 0);
        for (int j = first_hidden; j < cols; ++j) hide(s[i * lds + j]);
      }
      return;
    case MaskKind::key_padding: {
      const int first_hidden = std::max(m.key_lengths[b] - j0, 0);
      for (int i = 0; i < rows; ++i)
        for (int j = first_hidden; j < cols; ++j) hide(s[i * lds + j]);
      return;
    }
    case MaskKind::boolean:
      for (int i = 0; i < rows; ++i) {
        const uint8_t* row = m.allowed + (size_t(b) * nq + size_t(i0 + i)) * nk + j0;
        for (int j = 0; j < cols; ++j)
          if (!row[j]) hide(s[i * lds + j]);
      }
      return;
  }
}

}  // namespace kprop::attention::masking
