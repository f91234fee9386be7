// ternary for kernels built elsewhere: each case as a "ternary.quantize_weights"
// request, then a "ternary.linear" request on the packed weights and scale
// the first one returned (field names and layouts of
// include/kprop/abi/ternary.h), for plugins and workers alike.
#include <fmt/format.h>

#include <limits>

#include "properties/ternary/family.h"

namespace kprop::ternary {
namespace {

using external::Message;

constexpr int kWeightsPerByte = 4;

int64_t packed_row_bytes(int in_features) {
  return (in_features + kWeightsPerByte - 1) / kWeightsPerByte;
}

// The 2-bit codes of the packed layout as quantized weights; the invalid
// code 11 reads as NaN so that weights_ternary reports it.
std::vector<double> unpack(const external::Tensor& packed, int rows, int cols) {
  const int64_t row_bytes = packed_row_bytes(cols);
  std::vector<double> w_q;
  w_q.reserve(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (int n = 0; n < rows; ++n)
    for (int k = 0; k < cols; ++k) {
      const uint8_t byte = packed.bytes[static_cast<size_t>(n * row_bytes + k / kWeightsPerByte)];
      const int code = byte >> (2 * (k % kWeightsPerByte)) & 3;
      w_q.push_back(code == 0   ? 0.0
                    : code == 1 ? 1.0
                    : code == 2 ? -1.0
                                : std::numeric_limits<double>::quiet_NaN());
    }
  return w_q;
}

// The codes past K in each row's last byte: the layout pads them with 00
// (include/kprop/abi/ternary.h); a kernel reading whole bytes would take
// anything else as weights.
std::string padding_problem(const external::Tensor& packed, int rows, int cols) {
  const int used = cols % kWeightsPerByte;
  if (used == 0) return "";
  const int64_t row_bytes = packed_row_bytes(cols);
  for (int n = 0; n < rows; ++n) {
    const uint8_t byte = packed.bytes[static_cast<size_t>((n + 1) * row_bytes - 1)];
    if (byte >> (2 * used) != 0)
      return fmt::format("row {}: its last byte 0x{:02x} has codes other than 00 past K = {}", n, byte, cols);
  }
  return "";
}

Result drive(const Case& c, external::Transport& target) {
  const int64_t M = c.tokens, K = c.in_features, N = c.out_features;
  Message quantize;
  quantize.op = "ternary.quantize_weights";
  quantize.input(external::Tensor::of("w", KPROP_F64, {N, K}, c.w));
  quantize.output("w_packed", KPROP_U8, {N, packed_row_bytes(c.in_features)})
      .output("w_scale", KPROP_F64, {1});
  const Message weights = target.call(quantize);

  Result r;
  r.w_scale = weights.tensor("w_scale").to_doubles()[0];
  r.w_q = unpack(weights.tensor("w_packed"), c.out_features, c.in_features);
  r.packing_problem = padding_problem(weights.tensor("w_packed"), c.out_features, c.in_features);

  Message linear;
  linear.op = "ternary.linear";
  linear.input(external::Tensor::of("x", KPROP_F64, {M, K}, c.x))
      .input(weights.tensor("w_packed"))
      .input(weights.tensor("w_scale"))
      .input(external::Tensor::of("dy", KPROP_F64, {M, N}, c.dy));
  linear.output("x_scale", KPROP_F64, {M})
      .output("x_q", KPROP_I8, {M, K})
      .output("acc", KPROP_I32, {M, N})
      .output("y", KPROP_F32, {M, N})
      .output("dx", KPROP_F32, {M, K})
      .output("dw", KPROP_F32, {N, K});
  const Message reply = target.call(linear);
  external::read_outputs(reply, {KPROP_NAMED(r, x_scale), KPROP_NAMED(r, x_q), KPROP_NAMED(r, acc),
                                 KPROP_NAMED(r, y), KPROP_NAMED(r, dx), KPROP_NAMED(r, dw)});
  return r;
}

void invoke_quantize_weights(void* fn, const Message& req, Message& reply) {
  kprop_ternary_quantize_weights_args a{};
  a.w = external::in_view(req, "w");
  a.w_packed = external::out_view(reply, "w_packed");
  a.w_scale = external::out_view(reply, "w_scale");
  external::call_entry(fn, a, req.op);
}

void invoke_linear(void* fn, const Message& req, Message& reply) {
  kprop_ternary_linear_args a{};
  external::in_views(
      req, {KPROP_NAMED(a, x), KPROP_NAMED(a, w_packed), KPROP_NAMED(a, w_scale), KPROP_NAMED(a, dy)});
  external::out_views(reply, {KPROP_NAMED(a, x_scale), KPROP_NAMED(a, x_q), KPROP_NAMED(a, acc),
                              KPROP_NAMED(a, y), KPROP_NAMED(a, dx), KPROP_NAMED(a, dw)});
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external(
      {{"ternary.quantize_weights",
        "kprop_ternary_quantize_weights",
        invoke_quantize_weights,
        {"w_packed", "w_scale"}},
       {"ternary.linear", "kprop_ternary_linear", invoke_linear, {"x_scale", "x_q", "acc", "y", "dx", "dw"}}},
      drive);
}

}  // namespace kprop::ternary
