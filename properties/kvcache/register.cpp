#include "properties/kvcache/family.h"

namespace kprop::kvcache {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation(
      {"reference", ImplKind::reference, "full attention recomputed from scratch for every token, fp64"},
      reference);
  f.implementation(
      {"contiguous", ImplKind::optimized, "padded per-sequence cache, online softmax over key tiles"},
      contiguous);
  f.implementation(
      {"paged", ImplKind::optimized, "block pool, block tables, LIFO free list; one page per softmax tile"},
      paged);
  f.implementation(
      {"chunked_prefill", ImplKind::optimized, "paged cache; prompts prefilled one chunk per step"},
      chunked_prefill);
  f.implementation(
      {"int8", ImplKind::optimized, "int8 cache, static per-channel scales, dequantized in attention"}, int8);
  for (const Mutant& m : mutants()) f.mutant(m.name, m.description, m.run);
  register_invariants(f);
  register_external(f);
});

}  // namespace kprop::kvcache
