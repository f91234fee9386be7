// Metamorphic transforms of a ternary case (Family::transforms()).
//
// permute_out_features: output feature n of the derived case is feature π[n]
//   of the original (rows of W and columns of dy reordered together). Then
//   per token nothing changes but the order of the outputs: x_scale, x_q
//   unchanged; w_q, dW rows and acc, y columns permuted by π; dx unchanged up
//   to the order of its sum over n. One rounding is not exact: the contract
//   sums |W| in row-major order for s, so s of the derived case may differ in
//   its last bits, and a weight with W / s within that of a rounding
//   boundary (x.5) may quantize differently. Relations on w_q, acc and y
//   therefore hold exactly (w_q, acc) or to the f32 scaling error (y) when
//   the reference quantizes the derived case to the permuted w_q — a
//   precondition on the case, not on the target (`when:`); |s' - s| <= N K
//   2^-53 s is far below the f32 tolerances otherwise.
#include <numeric>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"permute_out_features",
       "reorders the output features (rows of W, columns of dy) by π: y, acc columns and w_q, dW rows "
       "permuted the same way; x_scale, x_q unchanged; dx unchanged up to rounding; s up to summation order",
       {},
       {{"transform.perm",
         {"N"},
         expr::DType::integer,
         "output feature n of the transformed case is feature perm[n] of the original (never the identity)"},
        transform_applies_info("N = 1 (no permutation moves a feature)")}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values&, uint64_t seed,
                       expr::TensorMap& out) {
  Case t = c;
  if (name == "permute_out_features") {
    const auto M = static_cast<size_t>(c.tokens), K = static_cast<size_t>(c.in_features),
               N = static_cast<size_t>(c.out_features);
    const std::vector<int> perm = rng::moving_permutation(N, seed, 1);
    for (size_t n = 0; n < N; ++n) {
      const auto from = static_cast<size_t>(perm[n]);
      for (size_t k = 0; k < K; ++k) t.w[n * K + k] = c.w[from * K + k];
      for (size_t m = 0; m < M; ++m) t.dy[m * N + n] = c.dy[m * N + from];
    }
    if (out.wanted("transform.perm"))
      out.put("transform.perm", expr::Tensor::ints({c.out_features}, perm, expr::DType::integer));
    put_transform_applies(out, N >= 2);
  }
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("ternary transform " + name + " made an invalid case: " + why);
  return t;
}

}  // namespace kprop::ternary
