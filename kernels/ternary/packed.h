// The packed ternary kernel: weights stored 2 bits each (4 per byte) or 5 per
// byte (base 3), int8 activations, an int32 matmul, and dequantization by the
// per-token activation scale and the per-tensor weight scale in f32. Used by
// the `packed` implementations and by bench/ternary.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace kprop::ternary::kernel {

enum class Packing { two_bit, base3 };

struct PackedWeights {
  Packing packing = Packing::two_bit;
  int rows = 0, cols = 0;  // N, K
  int row_bytes = 0;       // ceil(K / 4) or ceil(K / 5); the tail of a row is padded with zeros
  double scale = 0;        // s
  std::vector<uint8_t> bytes;
  // Bytes a row's read starts late: 0, except in a mutant (1: every row is
  // read one byte late, and the last row one byte past the buffer, which
  // AddressSanitizer reports as a heap-buffer-overflow).
  int read_offset = 0;
};

// Quantizes latent weights (absmean, eps, round half to even) and packs them.
PackedWeights quantize_and_pack(const double* w, int rows, int cols, Packing packing);
PackedWeights quantize_and_pack(const float* w, int rows, int cols, Packing packing);
// Row n as int8 values in {-1, 0, 1}; `out` has room for cols + 8.
void unpack_row(const PackedWeights& p, int n, int8_t* out);

struct QuantizedActivations {
  int tokens = 0, cols = 0;
  int stride = 0;             // cols rounded up to the kernel's block (zero padded)
  std::vector<int8_t> q;      // tokens x stride
  std::vector<double> scale;  // a_t = 127 / max(absmax, eps)
};
QuantizedActivations quantize_activations(const double* x, int tokens, int cols);
QuantizedActivations quantize_activations(const float* x, int tokens, int cols);

// acc[t][n] = sum_k q[t][k] * w[n][k], exact in int32 (|acc| <= 128 K).
void matmul_int(const QuantizedActivations& x, const PackedWeights& w, int32_t* acc);
// y[t][n] = acc[t][n] * (s / a_t), in f32.
void dequantize(const QuantizedActivations& x, const PackedWeights& w, const int32_t* acc, float* y);

// Straight-through backward in f32: dx = dy · (s wq), dW = dyᵀ · x̃.
void backward(const QuantizedActivations& x, const PackedWeights& w, const float* dy, float* dx, float* dw);

}  // namespace kprop::ternary::kernel
