#include "properties/beam/family.h"

namespace kprop::beam {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation(
      {"reference", ImplKind::reference, "one pool per prompt, full sort of the candidates, fp64"},
      reference);
  f.implementation({"batched", ImplKind::optimized,
                    "every prompt in one flat B x K pool, [rows x V] log-softmax, per-prompt partial sort"},
                   batched);
  f.mutants(mutants());
  register_invariants(f);
  register_external(f);
});

}  // namespace kprop::beam
