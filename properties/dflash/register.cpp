#include "properties/dflash/family.h"

namespace kprop::dflash {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation(
      {"reference", ImplKind::reference, "full recomputation under the explicit tree mask, fp64"}, reference);
  f.implementation(
      {"kv_cached", ImplKind::optimized, "context in a KV cache across cycles; only the tree block runs"},
      kv_cached);
  f.mutants(mutants());
  register_invariants(f);
  register_external(f);
});

}  // namespace kprop::dflash
