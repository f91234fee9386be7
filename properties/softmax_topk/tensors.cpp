// Named tensors of softmax_topk for expression invariants (kprop/expr.h): the
// logits, the target's and reference's top-k (probabilities and indices),
// the full fp64 softmax of every row, the naive same-dtype softmax (the
// tolerance baseline) and gathers at the returned indices (logit, softmax,
// naive softmax), since a per-row gather is not a NumPy take.
#include <algorithm>
#include <cmath>
#include <limits>

#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
R                   []      int   rows
V                   []      int   vocabulary size (logits per row)
K                   []      int   outputs per row, 1 <= K <= V
block               []      int   the fused kernel's tile width
eps                 []      real  machine epsilon of the case's arithmetic (2^-23 for f32, f16, bf16; 2^-52
                                  for f64)
dtype_bytes         []      int   bytes per element of the case's dtype (2, 4 or 8)
u_store             []      real  unit roundoff of a half case's store of the probabilities (2^-11 for f16, 2^-8 for
                                  bf16); 0 for f32 and f64 (no store rounding)
tiny                []      real  each probability's absolute error allowance: half the dtype's smallest subnormal
                                  (f16/bf16: the store's error there; else 0) + the arithmetic's smallest normal
                                  (a flush-to-zero kernel)
logits              [R, V]  real  the logits, finite or -inf
target.probs        [R, K]  real  the target's K largest probabilities per row, sorted
target.indices      [R, K]  int   the target's indices of those probabilities (ties to the lower index)
reference.probs     [R, K]  real  the reference's top-k probabilities
reference.indices   [R, K]  int   the reference's top-k indices
reference.softmax   [R, V]  real  the full softmax of each row in fp64 (0 at -inf logits and on all -inf
                                  rows), from the case
naive.softmax       [R, V]  real  the naive two-pass softmax in the case's dtype (max, then a sequential sum
                                  of exp)
naive.probs         [R, K]  real  naive.softmax at the reference's indices: the policy's baseline for
                                  target.probs (close(k=))
floor.probs         [R, 1]  real  the policy's absolute floor for a row's probabilities: 8 × eps (f16, bf16:
                                  + u_s max p + s, the store of the row's largest probability in the dtype);
                                  close(k=) takes the naive error per row too
target.logit_at     [R, K]  real  the logit at each index the target returned
target.softmax_at   [R, K]  real  reference.softmax at each index the target returned
target.naive_at     [R, K]  real  naive.softmax at each index the target returned
reference.logit_at  [R, K]  real  the logit at each index the reference returned
)");
  return t;
}

namespace {

using XT = expr::DType;
using expr::Tensor;
using expr::TensorMap;

// The built-in invariants' floor: tol.floor_eps (8, as specs/softmax_topk.yaml
// leaves it) × the dtype epsilon (properties/softmax_topk/invariants.cpp).
constexpr double kFloorEps = 8;

double epsilon(DType d) {
  return arithmetic_epsilon(d);  // f32's for f16 and bf16 (they compute in f32)
}

// Row-wise gather of a [R, V] table at [R, K] indices; false if an index is
// out of range or the sizes are off (then the tensor stays unpublished).
bool gather(const Case& c, const std::vector<double>& table, const std::vector<int>& indices,
            std::vector<double>& out) {
  const size_t n = static_cast<size_t>(c.rows()) * static_cast<size_t>(c.k);
  if (indices.size() != n) return false;
  out.resize(n);
  for (size_t s = 0; s < n; ++s) {
    const int i = indices[s];
    if (i < 0 || i >= c.vocab) return false;
    out[s] = table[s / static_cast<size_t>(c.k) * static_cast<size_t>(c.vocab) + static_cast<size_t>(i)];
  }
  return true;
}

std::vector<double> full(const Case& c, bool naive) {
  std::vector<double> all;
  for (int row = 0; row < c.rows(); ++row) {
    const auto p = naive ? naive_softmax(c, row) : softmax_row(c, row);
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

void put_outputs(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const int64_t R = c.rows(), K = c.k;
  const size_t n = static_cast<size_t>(R * K);
  out.put_output(who + ".probs", {R, K}, r.probs);  // unpublished when the size is off
  if (out.wanted(who + ".indices") && r.indices.size() == n)
    out.put(who + ".indices", Tensor::ints({R, K}, r.indices));
  std::vector<double> g;
  if (out.wanted(who + ".logit_at") && gather(c, c.logits, r.indices, g))
    out.put(who + ".logit_at", Tensor::of({R, K}, g));
  if (who != "target") return;
  if (out.wanted("target.softmax_at") && gather(c, full(c, false), r.indices, g))
    out.put("target.softmax_at", Tensor::of({R, K}, g));
  if (out.wanted("target.naive_at") && gather(c, full(c, true), r.indices, g))
    out.put("target.naive_at", Tensor::of({R, K}, g));
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference_result, TensorMap& out) {
  const int64_t R = c.rows(), V = c.vocab, K = c.k;
  out.put("R", Tensor::scalar(static_cast<double>(R), XT::integer));
  out.put("V", Tensor::scalar(static_cast<double>(V), XT::integer));
  out.put("K", Tensor::scalar(static_cast<double>(K), XT::integer));
  out.put("block", Tensor::scalar(c.block, XT::integer));
  out.put("eps", Tensor::scalar(epsilon(c.dtype)));
  out.put("dtype_bytes", Tensor::scalar(storage_bytes(c.dtype), XT::integer));
  // each_probability_close's terms (invariants.cpp), for its expression.
  out.put("u_store", Tensor::scalar(is_half(c.dtype) ? unit_roundoff(c.dtype) : 0));
  out.put("tiny", Tensor::scalar(subnormal_half_step(c.dtype) +
                                 (c.dtype == DType::f64 ? std::numeric_limits<double>::min()
                                                        : double(std::numeric_limits<float>::min()))));
  // Per row: a half case adds the store of the row's largest probability
  // (u_s max p over the row's fp64 softmax) + s. One floor for the output
  // (the largest row's) let a row of probabilities below u_s max p be all
  // zeros and pass.
  if (out.wanted("floor.probs")) {
    std::vector<double> floor(static_cast<size_t>(R), kFloorEps * epsilon(c.dtype));
    if (is_half(c.dtype)) {
      const std::vector<double> p = full(c, false);
      for (int64_t r = 0; r < R; ++r) {
        double top = 0;
        for (int64_t j = 0; j < V; ++j) top = std::max(top, p[static_cast<size_t>(r * V + j)]);
        floor[static_cast<size_t>(r)] += unit_roundoff(c.dtype) * top + subnormal_half_step(c.dtype);
      }
    }
    out.put("floor.probs", Tensor::of({R, 1}, std::move(floor)));
  }
  if (out.wanted("logits")) out.put("logits", Tensor::of({R, V}, c.logits));
  if (out.wanted("reference.softmax")) out.put("reference.softmax", Tensor::of({R, V}, full(c, false)));
  if (out.wanted("naive.softmax") || out.wanted("naive.probs")) {
    const std::vector<double> naive = full(c, true);
    std::vector<double> g;
    // The baseline at the reference's indices, whatever the spec's reference:
    // matches_reference takes the exact ranking (the fp64 reference's).
    if (out.wanted("naive.probs") && gather(c, naive, reference(c).indices, g))
      out.put("naive.probs", Tensor::of({R, K}, std::move(g)));
    out.put("naive.softmax", Tensor::of({R, V}, naive));
  }
  if (target) put_outputs(c, "target", *target, out);
  if (reference_result) put_outputs(c, "reference", *reference_result, out);
}

}  // namespace kprop::softmax_topk
