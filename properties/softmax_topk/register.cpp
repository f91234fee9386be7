#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation({"reference", ImplKind::reference, "full softmax in double, stable sort by logit"},
                   reference);
  f.implementation(
      {"fused", ImplKind::optimized,
       "single pass: blocked online max and normaliser with a running top-k buffer (any K up to V)"},
      fused);
  for (const Mutant& m : mutants()) f.mutant(m.name, m.description, m.run);
  register_invariants(f);
});

}  // namespace kprop::softmax_topk
