#include "kprop/determinism.h"
#include "properties/softmax_topk/family.h"

#if KPROP_HAVE_CUDA
#include "kernels/softmax_topk/softmax_topk_cuda.h"
#endif

namespace kprop::softmax_topk {
KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("full softmax in double, stable sort by logit", reference);
  f.optimized("fused",
              "single pass: blocked online max and normaliser with a running top-k buffer (any K up to V)",
              fused);
  f.cuda(
      "one block per row: tree-reduced max and normaliser, then rank selection (each element's "
      "rank by the contract order, stopping at K; rank < K writes its slot), any K up to V; f32 or f64; "
      "f16/bf16 on the f32 kernel, "
      "probabilities rounded to the dtype",
      KPROP_CUDA_IMPL(Traits, cuda_raw::device_count, cuda));
  f.mutants(mutants());
  register_invariants(f);
  register_deterministic(f, [](const Result& r) {
    return std::vector<OutputView>{{"probs", r.probs}, {"indices", {r.indices.begin(), r.indices.end()}}};
  });
  // Output coverage (prop_runner --list --spec specs/softmax_topk.yaml).
  // Values gathered at the indices the target returned.
  f.tensor_outputs({{"logit_at", {"indices"}}, {"softmax_at", {"indices"}}, {"naive_at", {"indices"}}});
  f.reads({{"matches_reference", {"probs", "indices"}},
           {"sorted", {"probs", "indices"}},
           {"distinct_in_range_indices", {"indices"}},
           {"probabilities_match_softmax", {"probs", "indices"}},
           {"shift_invariance", {"probs", "indices"}},
           {"full_sort_at_k_equals_v", {"probs", "indices"}},
           {"no_nan", {"probs"}}});
  register_external(f);
});

}  // namespace kprop::softmax_topk
