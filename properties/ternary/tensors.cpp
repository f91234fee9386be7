// Named tensors of ternary for expression invariants (kprop/expr.h): the
// case's inputs, every stage of the target's and reference's pipeline (scales,
// quantized values, the integer product, y and the straight-through
// gradients), the dequantized operands x̃ = x_q / a_t and W̃ = s w_q of the
// reference, and the f32 error scales the gradient checks use.
#include <cmath>

#include "properties/ternary/family.h"

namespace kprop::ternary {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
M    []      int   tokens
K    []      int   input features
N    []      int   output features
eps  []      real  the contract's clamp ε = 1e-5 of both scales' denominators
u32  []      real  unit roundoff of f32 (2^-24): the packed kernels scale and accumulate in f32
x    [M, K]  real  input activations
w    [N, K]  real  latent weights
dy   [M, N]  real  upstream gradient
)");
  const expr::TensorInfos outputs = expr::tensor_table(R"(
w_scale  []      real  weight scale s = max(mean|W|, ε)
w_q      [N, K]  real  ternary weights clamp(round(W / s), -1, 1)
x_scale  [M]     real  activation scale a_t = 127 / max(max_k |x_tk|, ε) per token
x_q      [M, K]  real  int8 activations clamp(round(x a_t), -128, 127)
acc      [M, N]  real  integer product x_q · w_qᵀ
y        [M, N]  real  output acc · s / a_t
dx       [M, K]  real  straight-through dx = dy · W̃
dw       [N, K]  real  straight-through dW = dyᵀ · x̃
)");
  expr::add_per_implementation(t, {{"target", "the target's "}, {"reference", "the reference's "}}, outputs);
  const expr::TensorInfos more = expr::tensor_table(R"(
reference.x_deq  [M, K]  real  dequantized activations x̃ = x_q / a_t (reference)
reference.w_deq  [N, K]  real  dequantized weights W̃ = s w_q (reference)
err.dx           [M, K]  real  f32 error bound of dx: u32 (N + 2) Σ_n |dy W̃| (ste_matches_dense allows k ×
                               this)
err.dw           [N, K]  real  f32 error bound of dW: u32 (M + 2) Σ_t |dy x̃| (ste_matches_dense allows k ×
                               this)
)");
  t.insert(t.end(), more.begin(), more.end());
  return t;
}

namespace {

using XT = expr::DType;
using expr::Tensor;
using expr::TensorMap;

void put_outputs(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const int64_t M = c.tokens, K = c.in_features, N = c.out_features;
  auto put = [&](const char* name, std::vector<int64_t> shape, const std::vector<double>& data) {
    out.put_output(who + "." + name, std::move(shape), data);
  };
  if (out.wanted(who + ".w_scale")) out.put(who + ".w_scale", Tensor::scalar(r.w_scale));
  put("w_q", {N, K}, r.w_q);
  put("x_scale", {M}, r.x_scale);
  put("x_q", {M, K}, r.x_q);
  put("acc", {M, N}, r.acc);
  put("y", {M, N}, r.y);
  put("dx", {M, K}, r.dx);
  put("dw", {N, K}, r.dw);
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference_result, TensorMap& out) {
  const int64_t M = c.tokens, K = c.in_features, N = c.out_features;
  const auto m = static_cast<size_t>(M), k = static_cast<size_t>(K), n = static_cast<size_t>(N);
  out.put("M", Tensor::scalar(static_cast<double>(M), XT::integer));
  out.put("K", Tensor::scalar(static_cast<double>(K), XT::integer));
  out.put("N", Tensor::scalar(static_cast<double>(N), XT::integer));
  out.put("eps", Tensor::scalar(kEps));
  out.put("u32", Tensor::scalar(0x1p-24));
  if (out.wanted("x")) out.put("x", Tensor::of({M, K}, c.x));
  if (out.wanted("w")) out.put("w", Tensor::of({N, K}, c.w));
  if (out.wanted("dy")) out.put("dy", Tensor::of({M, N}, c.dy));
  if (out.wanted("reference.x_deq") || out.wanted("reference.w_deq") || out.wants_prefix("err.")) {
    // The quantized point from the fp64 reference pipeline, whatever the spec's reference.
    const Result q = reference(c);
    std::vector<double> xt(m * k), wt(n * k);
    for (size_t t = 0; t < m; ++t)
      for (size_t i = 0; i < k; ++i) xt[t * k + i] = q.x_q[t * k + i] / q.x_scale[t];
    for (size_t i = 0; i < wt.size(); ++i) wt[i] = q.w_scale * q.w_q[i];
    if (out.wants_prefix("err.")) {
      // As ste_matches_dense (properties/ternary/invariants.cpp): u32 (terms + 2) Σ|terms|.
      std::vector<double> dx_mag(m * k), dw_mag(n * k);
      for (size_t t = 0; t < m; ++t)
        for (size_t o = 0; o < n; ++o) {
          const double g = c.dy[t * n + o];
          for (size_t i = 0; i < k; ++i) {
            dx_mag[t * k + i] += std::fabs(g * wt[o * k + i]);
            dw_mag[o * k + i] += std::fabs(g * xt[t * k + i]);
          }
        }
      for (double& v : dx_mag) v *= 0x1p-24 * static_cast<double>(N + 2);
      for (double& v : dw_mag) v *= 0x1p-24 * static_cast<double>(M + 2);
      out.put("err.dx", Tensor::of({M, K}, std::move(dx_mag)));
      out.put("err.dw", Tensor::of({N, K}, std::move(dw_mag)));
    }
    out.put("reference.x_deq", Tensor::of({M, K}, std::move(xt)));
    out.put("reference.w_deq", Tensor::of({N, K}, std::move(wt)));
  }
  if (target) put_outputs(c, "target", *target, out);
  if (reference_result) put_outputs(c, "reference", *reference_result, out);
}

}  // namespace kprop::ternary
