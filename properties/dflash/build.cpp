// The dflash family's one case builder.
#include <algorithm>
#include <cmath>
#include <optional>

#include "kprop/rng.h"
#include "properties/dflash/family.h"

namespace kprop::dflash {

// One case builder for RapidCheck draws, fuzz bytes and seed corpora.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  c.model.vocab = static_cast<int>(draw.sized(domain.int_range("vocab")));
  c.model.heads = static_cast<int>(draw.any(domain.int_range("model.heads")));
  c.model.layers = static_cast<int>(draw.any(domain.int_range("model.layers")));
  const int width = static_cast<int>(draw.sized(domain.int_range("model.d_model")));
  c.model.d_model = (width + c.model.heads - 1) / c.model.heads * c.model.heads;
  c.model.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  // Exactly tied logits (the lowest-index rule of argmax) in a fraction of
  // the models; the random projection rows never tie on their own. Whether a
  // model ties is a function of its seed, like its weights, not a draw of its
  // own: a draw here would shift every later draw of the case, and the
  // untied cases stay the ones drawn before tie_rate existed (the other
  // mutants' kill trials with them). Only tokens 0 and 1, and only with a
  // third token: a vocabulary tied whole predicts token 0 everywhere, which
  // hid the prediction-row mutants (positional_logits, depth_logits) in the
  // small early cases; shrinking still reaches vocab 2 with tied 1.
  constexpr uint64_t kTieStream = 0x7469656400000000;  // "tied"
  if (c.model.vocab >= 3 && rng::uniform(c.model.seed, kTieStream, 0) < domain.real("model.tie_rate"))
    c.model.tied = 1;
  // Near-tied logits in a fraction of the other models (vocab >= 3, as for
  // ties): token 1's logit is token 0's times (1 + r) in every row (model.h),
  // |r| log-uniform over model.near_tie (default 2^-50, four f64 ulps of 1,
  // to 1e-3; two thirds of them below f32's 2^-24, where a float argmax
  // sees a tie), the sign of r a coin, so token 1 lies above token 0 in some rows
  // and below in others. A function of the seed, like the tie, for the same
  // reason: no draw of the case moves.
  constexpr uint64_t kNearStream = 0x6e65617200000000;  // "near"
  if (c.model.tied == 0 && c.model.vocab >= 3 &&
      rng::uniform(c.model.seed, kNearStream, 0) < domain.real("model.near_tie_rate")) {
    const RealRange r = domain.real_range("model.near_tie");
    const double magnitude = std::exp(std::log(r.lo) + rng::uniform(c.model.seed, kNearStream, 1) *
                                                           (std::log(r.hi) - std::log(r.lo)));
    const double signed_r = rng::uniform(c.model.seed, kNearStream, 2) < 0.5 ? -magnitude : magnitude;
    c.model.near_tie = (1 + signed_r) - 1;  // exactly 1 + near_tie - 1 (Sterbenz), the model's factor
  }
  const int prompt_len = static_cast<int>(draw.sized(domain.int_range("prompt_len")));
  c.prompt.reserve(size_t(prompt_len));
  for (int i = 0; i < prompt_len; ++i)
    c.prompt.push_back(static_cast<int>(draw.any(IntRange{0, c.model.vocab - 1})));

  const auto shared_model = TinyLM::shared(c.model);
  const TinyLM& model = *shared_model;
  const double match_rate = draw.any(domain.real_range("tree.match_rate"));
  const double chain_rate = draw.any(domain.real_range("tree.chain_rate"));
  const int cycles = static_cast<int>(draw.sized(domain.int_range("cycles")));
  std::vector<int> context = c.prompt;
  Autoregressive root_state(model, context);  // the decoder after `context`, advanced with it
  c.cycles.reserve(size_t(std::max(cycles, 0)));
  // Scratch of one node's draw, reused (the builder runs on every fuzz input).
  std::vector<int> open, taken, free;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    const int nodes = static_cast<int>(draw.sized(domain.int_range("tree.nodes")));
    const int max_roots =
        std::min<int>(static_cast<int>(draw.any(domain.int_range("tree.roots"))), c.model.vocab);
    const int max_children =
        std::min<int>(static_cast<int>(draw.any(domain.int_range("tree.max_children"))), c.model.vocab);
    DraftTree tree;
    std::vector<int> children;  // per node
    // The AR state after context ++ path(i), decoded when node i first
    // becomes a parent (its parent's state exists by then): leaves, often
    // half the tree, are never decoded.
    std::vector<std::optional<Autoregressive>> states;
    for (auto* v : {&tree.tokens, &tree.parents, &children}) v->reserve(size_t(std::max(nodes, 0)));
    states.reserve(size_t(std::max(nodes, 0)));
    auto state_of = [&](int i) -> const Autoregressive& {
      if (i < 0) return root_state;
      std::optional<Autoregressive>& s = states[static_cast<size_t>(i)];
      if (!s) {
        const int parent = tree.parents[static_cast<size_t>(i)];
        s = parent < 0 ? root_state : *states[static_cast<size_t>(parent)];
        s->push(tree.tokens[static_cast<size_t>(i)]);
      }
      return *s;
    };
    int roots = 0;
    for (int i = 0; i < nodes; ++i) {
      // Candidate parents with room left; -1 (a new root) while roots remain.
      open.clear();
      if (roots < max_roots) open.push_back(-1);
      for (int p = 0; p < i; ++p)
        if (children[static_cast<size_t>(p)] < max_children) open.push_back(p);
      if (open.empty()) break;
      int parent;
      if (i > 0 && children[static_cast<size_t>(i - 1)] < max_children && draw.chance(chain_rate))
        parent = i - 1;
      else
        parent = open[static_cast<size_t>(draw.index(open.size()))];
      const Autoregressive& at = state_of(parent);
      taken.clear();  // the parent's children's tokens (at most max_children)
      for (int j = 0; j < i; ++j)
        if (tree.parents[static_cast<size_t>(j)] == parent)
          taken.push_back(tree.tokens[static_cast<size_t>(j)]);
      std::sort(taken.begin(), taken.end());
      const auto is_taken = [&](int t) { return std::binary_search(taken.begin(), taken.end(), t); };
      int token = at.next().index;
      if (is_taken(token) || !draw.chance(match_rate)) {
        free.clear();
        for (int t = 0; t < c.model.vocab; ++t)
          if (!is_taken(t)) free.push_back(t);
        token = free[static_cast<size_t>(draw.index(free.size()))];
      }
      tree.tokens.push_back(token);
      tree.parents.push_back(parent);
      children.push_back(0);
      if (parent < 0)
        ++roots;
      else
        ++children[static_cast<size_t>(parent)];
      states.emplace_back();
    }
    advance_context(root_state, tree, context);
    c.cycles.push_back(std::move(tree));
  }
  return c;
}

void advance_context(Autoregressive& state, const DraftTree& tree, std::vector<int>& context) {
  for (int current = -1;;) {
    const int want = state.next().index;
    int next = -1;
    for (int i = 0; i < tree.size() && next < 0; ++i)
      if (tree.parents[static_cast<size_t>(i)] == current && tree.tokens[static_cast<size_t>(i)] == want)
        next = i;
    context.push_back(want);
    state.push(want);
    if (next < 0) break;
    current = next;
  }
}

}  // namespace kprop::dflash
