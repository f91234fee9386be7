#include "properties/beam/family.h"

namespace kprop::beam {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("one pool per prompt, full sort of the candidates, fp64", reference);
  f.optimized("batched",
              "every prompt in one flat B x K pool, [rows x V] log-softmax, per-prompt partial sort",
              batched);
  f.mutants(mutants());
  register_invariants(f);
  // Output coverage (prop_runner --list --spec specs/beam.yaml): a
  // hypothesis is traced back through `parent`, so whatever reads the
  // hypotheses' tokens reads it too.
  // Every named tensor of the result is assembled from the steps' outputs.
  std::map<std::string, std::vector<std::string>> assembled;
  for (const char* tensor :
       {"tokens", "valid", "lengths", "finished", "logprobs", "scores", "model_logprobs", "model_scores",
        "steps", "pool_tokens", "pool_valid", "pool_scores", "pool_lengths", "pool_finished", "prune_margin"})
    assembled[tensor] = {"*"};
  f.tensor_outputs(std::move(assembled));
  f.reads({{"valid_hypotheses", {"parent", "token", "next_done"}},
           {"sorted_distinct", {"parent", "token", "next_score"}},
           {"scores_recomputed", {"parent", "token", "next_logprob", "next_score"}},
           {"finished_retained", {"*"}},  // which beams stay depends on every score
           {"greedy_when_k1", {"parent", "token", "next_done"}},
           {"matches_exhaustive", {"*"}},
           {"batch_independent", {"*"}},
           {"logit_shift_invariant", {"*"}},
           {"matches_reference", {"*"}}});
  register_external(f);
});

}  // namespace kprop::beam
