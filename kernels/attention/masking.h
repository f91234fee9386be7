// Mask handling shared by the typed kernels: which key range a block of
// queries can see at all (for skipping whole tiles), and -inf on the masked
// scores of a tile.
#pragma once

#include <algorithm>
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

// Sets s[i][j] = -inf where query i0 + i of batch b must not see key j0 + j.
template <typename T>
inline void apply(const MaskView& m, int b, int nq, int nk, int i0, int rows, int j0, int cols, T* s,
                  int lds) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  switch (m.kind) {
    case MaskKind::none:
      return;
    case MaskKind::causal:
      for (int i = 0; i < rows; ++i) {
        const int first_hidden = std::max(i0 + i + m.causal_offset + 1 - j0, 0);
        for (int j = first_hidden; j < cols; ++j) s[i * lds + j] = kNegInf;
      }
      return;
    case MaskKind::key_padding: {
      const int first_hidden = std::max(m.key_lengths[b] - j0, 0);
      for (int i = 0; i < rows; ++i)
        for (int j = first_hidden; j < cols; ++j) s[i * lds + j] = kNegInf;
      return;
    }
    case MaskKind::boolean:
      for (int i = 0; i < rows; ++i) {
        const uint8_t* row = m.allowed + (size_t(b) * nq + size_t(i0 + i)) * nk + j0;
        for (int j = 0; j < cols; ++j)
          if (!row[j]) s[i * lds + j] = kNegInf;
      }
      return;
  }
}

}  // namespace kprop::attention::masking
