#include "properties/layernorm/family.h"

namespace kprop::layernorm {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation(
      {"reference", ImplKind::reference, "fp64, two passes per row (mean, then variance), for clarity"},
      reference);
  f.implementation(
      {"fused", ImplKind::optimized,
       "one-pass Welford forward (16 lanes, Chan combine, shifted by x[0]) caching xhat and rstd; "
       "fused backward from the cache; f32 or f64 per case"},
      fused);
  for (const Mutant& m : mutants()) f.mutant(m.name, m.description, m.run);
  register_invariants(f);
});

}  // namespace kprop::layernorm
