#include "properties/attention/family.h"

#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_cuda.h"
#endif

namespace kprop::attention {
namespace {

// The CUDA forward reports "skipped" (kprop::Unsupported) wherever it cannot
// run: no CUDA compiler at build time, or no device at run time.
FwdResult cuda_forward_or_skip([[maybe_unused]] const Case& c) {
#if KPROP_HAVE_CUDA
  if (cuda_raw::device_count() <= 0) throw Unsupported("no CUDA device");
  return cuda_forward(c);
#else
  throw Unsupported("built without CUDA");
#endif
}

}  // namespace

KPROP_REGISTER_FAMILY(FwdTraits, [](FamilyDef<FwdTraits>& f) {
  f.implementation({"reference", ImplKind::reference, "fp64, materialized row by row, written for clarity"},
                   reference_forward);
  f.implementation(
      {"tiled", ImplKind::optimized, "online softmax over Bq×Bk tiles from the case (f32 or f64)"}, tiled);
  f.implementation({"cuda", ImplKind::optimized,
                    "one block per (q tile, head, batch), the case's Bq×Bk tiles in shared memory, online "
                    "softmax with exact empty-row handling; f32 or f64 per case",
                    "cuda"},
                   cuda_forward_or_skip);
  for (const auto& m : forward_mutants()) f.mutant(m.name, m.description, m.run);
  register_forward_invariants(f);
  register_forward_external(f);
});

KPROP_REGISTER_FAMILY(BwdTraits, [](FamilyDef<BwdTraits>& f) {
  f.implementation({"reference", ImplKind::reference, "fp64, materialized row by row, written for clarity"},
                   reference_backward);
  f.implementation(
      {"tiled_d", ImplKind::optimized, "tiled forward, then one pass over KV tiles with D = rowsum(dO ⊙ O)"},
      tiled_d);
  f.implementation(
      {"tiled_two_pass", ImplKind::optimized,
       "tiled forward, then rowsum(P ⊙ dP) in a first pass over the tiles and the gradients in a second"},
      tiled_two_pass);
  for (const auto& m : backward_mutants()) f.mutant(m.name, m.description, m.run);
  register_backward_invariants(f);
  register_backward_external(f);
});

}  // namespace kprop::attention
