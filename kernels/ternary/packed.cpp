// The packed kernel (packed.h) and the `packed` / `packed_base3`
// implementations built on it. The quantizers are written independently of
// the reference (a threshold test for the weights, std::nearbyint for the
// activations) but with the contract's operations, so the integers agree
// bit for bit; the matmul is int8 x ternary in int16/int32, the scaling f32.
#include "kernels/ternary/packed.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/ternary/ternary.h"

namespace kprop::ternary::kernel {
namespace {

constexpr int kBlock = 32;    // activation rows and unpacked weight rows are padded to this
constexpr int kSlack = 8;     // unpack writes whole bytes past the padded end
constexpr int kRowTile = 16;  // weight rows unpacked at once and reused across tokens
constexpr int kChunk = 2048;  // elements per int16 partial sum: 2048 / 32 x 256 < 2^15

int padded(int cols) {
  return (cols + kBlock - 1) / kBlock * kBlock;
}
int per_byte(Packing p) {
  return p == Packing::two_bit ? 4 : 5;
}

// Two bits per weight, weight k at bits 2(k % 4): 00 = 0, 01 = +1, 10 = -1.
uint8_t code2(int q) {
  return q == 0 ? 0 : q > 0 ? 1 : 2;
}
// Base 3: byte = sum_j (q_j + 1) 3^j over five weights.

struct Tables {
  std::array<std::array<int8_t, 8>, 256> two_bit{}, base3{};
  Tables() {
    for (int b = 0; b < 256; ++b) {
      for (int j = 0; j < 4; ++j) {
        const int c = (b >> (2 * j)) & 3;
        two_bit[static_cast<size_t>(b)][static_cast<size_t>(j)] = static_cast<int8_t>(c == 1   ? 1
                                                                                      : c == 2 ? -1
                                                                                               : 0);
      }
      for (int j = 0, v = b; j < 5; ++j, v /= 3)
        base3[static_cast<size_t>(b)][static_cast<size_t>(j)] = static_cast<int8_t>(b < 243 ? v % 3 - 1 : 0);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

template <typename T>
PackedWeights pack_impl(const T* w, int rows, int cols, Packing packing) {
  PackedWeights p;
  p.packing = packing;
  p.rows = rows;
  p.cols = cols;
  const int per = per_byte(packing);
  p.row_bytes = (cols + per - 1) / per;
  const size_t count = static_cast<size_t>(rows) * cols;
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += std::fabs(static_cast<double>(w[i]));
  p.scale = std::max(sum / static_cast<double>(count), kEps);
  const double inv = 1.0 / p.scale;
  p.bytes.assign(static_cast<size_t>(rows) * p.row_bytes, 0);
  for (int n = 0; n < rows; ++n)
    for (int b = 0; b < p.row_bytes; ++b) {
      int byte = 0;
      for (int j = per - 1; j >= 0; --j) {
        const int k = b * per + j;
        int q = 0;  // round half to even, then clamp to [-1, 1], is this threshold test
        if (k < cols) {
          const double r = static_cast<double>(w[static_cast<size_t>(n) * cols + k]) * inv;
          q = r > 0.5 ? 1 : r < -0.5 ? -1 : 0;
        }
        byte = packing == Packing::two_bit ? byte | code2(q) << (2 * j) : byte * 3 + (q + 1);
      }
      p.bytes[static_cast<size_t>(n) * p.row_bytes + b] = static_cast<uint8_t>(byte);
    }
  return p;
}

template <typename T>
QuantizedActivations quantize_impl(const T* x, int tokens, int cols) {
  QuantizedActivations a;
  a.tokens = tokens;
  a.cols = cols;
  a.stride = padded(cols);
  a.q.assign(static_cast<size_t>(tokens) * a.stride, 0);
  for (int t = 0; t < tokens; ++t) {
    const T* row = x + static_cast<size_t>(t) * cols;
    double amax = 0;
    for (int k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(static_cast<double>(row[k])));
    const double scale = 127.0 / std::max(amax, kEps);
    a.scale.push_back(scale);
    for (int k = 0; k < cols; ++k)
      a.q[static_cast<size_t>(t) * a.stride + k] =
          static_cast<int8_t>(std::clamp(std::nearbyint(static_cast<double>(row[k]) * scale), -128.0, 127.0));
  }
  return a;
}

// Dot product of an int8 activation row and a ternary row, n a multiple of
// kBlock. Each int16 lane adds at most 2 x 128 per block, so a chunk of
// kChunk elements cannot overflow; the fixed 16-lane shape vectorizes at -O2.
int32_t dot(const int8_t* a, const int8_t* w, int n) {
  int32_t total = 0;
  for (int i0 = 0; i0 < n; i0 += kChunk) {
    const int end = std::min(n, i0 + kChunk);
    int16_t lane[16] = {};
    for (int i = i0; i < end; i += kBlock)
      for (int j = 0; j < 16; ++j)
        lane[j] = static_cast<int16_t>(lane[j] + a[i + j] * w[i + j] + a[i + 16 + j] * w[i + 16 + j]);
    for (int j = 0; j < 16; ++j) total += lane[j];
  }
  return total;
}

}  // namespace

PackedWeights quantize_and_pack(const double* w, int rows, int cols, Packing packing) {
  return pack_impl(w, rows, cols, packing);
}
PackedWeights quantize_and_pack(const float* w, int rows, int cols, Packing packing) {
  return pack_impl(w, rows, cols, packing);
}
QuantizedActivations quantize_activations(const double* x, int tokens, int cols) {
  return quantize_impl(x, tokens, cols);
}
QuantizedActivations quantize_activations(const float* x, int tokens, int cols) {
  return quantize_impl(x, tokens, cols);
}

void unpack_row(const PackedWeights& p, int n, int8_t* out) {
  const auto& table = p.packing == Packing::two_bit ? tables().two_bit : tables().base3;
  const int per = per_byte(p.packing);
  const uint8_t* bytes = p.bytes.data() + static_cast<size_t>(n) * p.row_bytes + p.read_offset;
  for (int b = 0; b < p.row_bytes; ++b) std::memcpy(out + b * per, table[bytes[b]].data(), 8);
  std::fill(out + p.cols, out + padded(p.cols) + kSlack, int8_t{0});
}

void matmul_int(const QuantizedActivations& x, const PackedWeights& w, int32_t* acc) {
  const int P = x.stride, row = P + kSlack, N = w.rows;
  std::vector<int8_t> tile(static_cast<size_t>(kRowTile) * row);
  for (int n0 = 0; n0 < N; n0 += kRowTile) {
    const int rows = std::min(kRowTile, N - n0);
    for (int i = 0; i < rows; ++i) unpack_row(w, n0 + i, tile.data() + static_cast<size_t>(i) * row);
    for (int t = 0; t < x.tokens; ++t) {
      const int8_t* xr = x.q.data() + static_cast<size_t>(t) * P;
      for (int i = 0; i < rows; ++i)
        acc[static_cast<size_t>(t) * N + n0 + i] = dot(xr, tile.data() + static_cast<size_t>(i) * row, P);
    }
  }
}

void dequantize(const QuantizedActivations& x, const PackedWeights& w, const int32_t* acc, float* y) {
  const int N = w.rows;
  for (int t = 0; t < x.tokens; ++t) {
    const float c = static_cast<float>(w.scale / x.scale[static_cast<size_t>(t)]);
    for (int n = 0; n < N; ++n)
      y[static_cast<size_t>(t) * N + n] = static_cast<float>(acc[static_cast<size_t>(t) * N + n]) * c;
  }
}

void backward(const QuantizedActivations& x, const PackedWeights& w, const float* dy, float* dx, float* dw) {
  const int M = x.tokens, K = x.cols, N = w.rows;
  std::fill(dx, dx + static_cast<size_t>(M) * K, 0.0f);
  std::vector<int8_t> q(static_cast<size_t>(padded(K) + kSlack));
  for (int n = 0; n < N; ++n) {
    unpack_row(w, n, q.data());
    float* dwr = dw + static_cast<size_t>(n) * K;
    std::fill(dwr, dwr + K, 0.0f);
    for (int t = 0; t < M; ++t) {
      const float g = dy[static_cast<size_t>(t) * N + n];
      const float gs = static_cast<float>(g * w.scale);
      const float gx = static_cast<float>(g / x.scale[static_cast<size_t>(t)]);
      float* dxr = dx + static_cast<size_t>(t) * K;
      const int8_t* xq = x.q.data() + static_cast<size_t>(t) * x.stride;
      for (int k = 0; k < K; ++k) {
        dxr[k] += gs * static_cast<float>(q[static_cast<size_t>(k)]);
        dwr[k] += gx * static_cast<float>(xq[k]);
      }
    }
  }
}

}  // namespace kprop::ternary::kernel

namespace kprop::ternary {
namespace {

Result run_packed(const Case& c, kernel::Packing packing, int read_offset = 0) {
  const int M = c.tokens, K = c.in_features, N = c.out_features;
  kernel::PackedWeights w = kernel::quantize_and_pack(c.w.data(), N, K, packing);
  w.read_offset = read_offset;
  const kernel::QuantizedActivations x = kernel::quantize_activations(c.x.data(), M, K);
  std::vector<int32_t> acc(static_cast<size_t>(M) * N);
  std::vector<float> y(acc.size()), dy(c.dy.begin(), c.dy.end()), dx(static_cast<size_t>(M) * K),
      dw(static_cast<size_t>(N) * K);
  kernel::matmul_int(x, w, acc.data());
  kernel::dequantize(x, w, acc.data(), y.data());
  kernel::backward(x, w, dy.data(), dx.data(), dw.data());

  Result r;
  r.w_scale = w.scale;
  std::vector<int8_t> row(static_cast<size_t>(x.stride + 8));
  for (int n = 0; n < N; ++n) {  // read back through the packed bytes
    kernel::unpack_row(w, n, row.data());
    r.w_q.insert(r.w_q.end(), row.begin(), row.begin() + K);
  }
  r.x_scale = x.scale;
  for (int t = 0; t < M; ++t)
    r.x_q.insert(r.x_q.end(), x.q.begin() + static_cast<long>(t) * x.stride,
                 x.q.begin() + static_cast<long>(t) * x.stride + K);
  r.acc.assign(acc.begin(), acc.end());
  r.y.assign(y.begin(), y.end());
  r.dx.assign(dx.begin(), dx.end());
  r.dw.assign(dw.begin(), dw.end());
  return r;
}

}  // namespace

Result packed(const Case& c) {
  return run_packed(c, kernel::Packing::two_bit);
}
Result packed_base3(const Case& c) {
  return run_packed(c, kernel::Packing::base3);
}
Result packed_reading_late(const Case& c, int bytes) {
  return run_packed(c, kernel::Packing::two_bit, bytes);
}

}  // namespace kprop::ternary
