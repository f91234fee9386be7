// Metamorphic transforms of a beam case (Traits::transforms()).
//
// relabel_vocab: a random permutation pi of the vocabulary. The transformed
// case's model is the same table LM with every token v renamed pi[v]
// (ModelConfig::relabel: its logits and prefix hashes read the original
// token), its EOS is pi[eos] and its prompts are mapped through pi. Every
// hypothesis has the same log-prob and score under its renamed tokens, so the
// search keeps the same beams: result tokens map through pi, scores are
// unchanged. Exactness: log_softmax sums exp() in vocabulary order, which pi
// reorders, so log-probs and scores agree up to fp64 rounding (a few ulps of
// the log-sum-exp per token; rtol = atol = 1e-9 covers it by orders of
// magnitude). Two places may legitimately differ: exact ties, broken by the
// lexicographic order of the tokens, which pi changes, and near-ties that
// rounding may flip; an invariant over this transform discards cases whose
// reference run has a (near-)tie at a pruning boundary or between results.
#include <numeric>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/beam/family.h"

namespace kprop::beam {

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"relabel_vocab",
       "renames every token v to vocab_perm[v] (model, EOS and prompts): result tokens map through the "
       "permutation, log-probs and scores are unchanged (up to rounding; exact ties may break differently)",
       {},
       {{"transform.vocab_perm",
         {"V"},
         expr::DType::integer,
         "token v of the case is token vocab_perm[v] of the transformed case (never the identity)"},
        transform_applies_info("V = 1 (no relabeling moves a token)")}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values&, uint64_t seed,
                       expr::TensorMap& out) {
  if (name != "relabel_vocab") throw std::logic_error("beam: no transform '" + name + "'");
  const int V = c.model.vocab;
  const std::vector<int> pi = rng::moving_permutation(static_cast<size_t>(V), seed, 1);
  Case t = c;
  // Compose with a relabeling the case already has: original token u is
  // c's relabel[u], now pi[relabel[u]].
  std::vector<int> relabel(static_cast<size_t>(V));
  for (int u = 0; u < V; ++u)
    relabel[size_t(u)] = pi[size_t(c.model.relabel.empty() ? u : c.model.relabel[size_t(u)])];
  t.model.relabel = std::move(relabel);
  t.model.eos = pi[size_t(c.model.eos)];
  for (auto& p : t.prompts)
    for (int& tok : p) tok = pi[size_t(tok)];
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("beam: relabel_vocab made an invalid case: " + why);
  if (out.wanted("transform.vocab_perm")) out.put("transform.vocab_perm", expr::Tensor::ints({V}, pi));
  put_transform_applies(out, V >= 2);
  return t;
}

}  // namespace kprop::beam
