#include "properties/dflash/family.h"

namespace kprop::dflash {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("full recomputation under the explicit tree mask, fp64", reference);
  f.optimized("kv_cached", "context in a KV cache across cycles; only the tree block runs", kv_cached);
  f.mutants(mutants());
  register_invariants(f);
  // Output coverage (prop_runner --list --spec specs/dflash.yaml): the tree
  // inputs steer the target model, so the decoded tokens read them too.
  // Named tensors computed from the outputs: the logits come from running
  // the target model under the tree inputs, the contexts from what earlier
  // cycles accepted and emitted.
  f.tensor_outputs({{"tree_mask", {"mask"}},
                    {"sees_context", {"mask"}},
                    {"context_length", {"accepted", "bonus"}},
                    {"context_logits", {"*"}},
                    {"node_logits", {"*"}},
                    {"accepted_count", {"accepted"}},
                    {"emitted_count", {"accepted", "bonus"}},
                    {"output", {"accepted", "bonus"}},
                    {"greedy", {"accepted", "bonus"}},
                    {"greedy_margin", {"accepted", "bonus"}}});
  f.reads({{"lossless", {"*"}},
           {"maximal_acceptance", {"position_ids", "mask", "accepted"}},
           {"tree_logits_match_path", {"position_ids", "mask"}},
           {"mask_is_ancestor_closure", {"mask"}},
           {"position_ids_by_depth", {"position_ids"}},
           {"progress", {"accepted", "bonus"}},
           {"accepted_path_consistent", {"accepted", "bonus"}}});
  register_external(f);
});

}  // namespace kprop::dflash
