#include "properties/ternary/family.h"

namespace kprop::ternary {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation({"reference", ImplKind::reference, "fake-quant pipeline in double, written for clarity"},
                   reference);
  f.implementation({"packed", ImplKind::optimized,
                    "2-bit packed weights (4 per byte), int8 x ternary int matmul, f32 scaling"},
                   packed);
  f.implementation({"packed_base3", ImplKind::optimized,
                    "base-3 packed weights (5 per byte), same int matmul, f32 scaling"},
                   packed_base3);
  f.mutants(mutants());
  register_invariants(f);
  register_external(f);
});

}  // namespace kprop::ternary
