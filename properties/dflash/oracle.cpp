// The autoregressive oracle, cycle by cycle (family.h): one decode per tree
// edge, shared by maximal_acceptance, tree_logits_match_path and the
// oracle.* named tensors through the trial's once-store.
#include <limits>
#include <memory>

#include "properties/dflash/family.h"

namespace kprop::dflash {

std::vector<int> OracleCycle::emitted(const DraftTree& tree) const {
  std::vector<int> out;
  for (int node : path) out.push_back(tree.tokens[static_cast<size_t>(node)]);
  out.push_back(bonus);
  return out;
}

OracleCycle oracle_cycle(Autoregressive& state, const DraftTree& tree) {
  const int N = tree.size();
  OracleCycle o;
  o.context_logits = state.logits();
  o.node_logits.resize(static_cast<size_t>(N));
  std::vector<std::vector<int>> children(static_cast<size_t>(N) + 1);  // [parent + 1]
  for (int i = 0; i < N; ++i)
    children[static_cast<size_t>(tree.parents[static_cast<size_t>(i)] + 1)].push_back(i);
  // (node, the length of its parent's state and the logits it had), deepest last.
  struct Visit {
    int node;
    int length;
    const Logits* parent_logits;  // o.context_logits or a node's row: neither moves while walking
  };
  const int root_length = state.length();
  std::vector<Visit> stack;
  for (auto it = children[0].rbegin(); it != children[0].rend(); ++it)
    stack.push_back({*it, root_length, &o.context_logits});
  while (!stack.empty()) {
    const Visit visit = stack.back();
    stack.pop_back();
    if (state.length() != visit.length) state.truncate(visit.length, *visit.parent_logits);
    state.push(tree.tokens[static_cast<size_t>(visit.node)]);
    Logits& mine = o.node_logits[static_cast<size_t>(visit.node)];
    mine = state.logits();
    const auto& below = children[static_cast<size_t>(visit.node) + 1];
    for (auto it = below.rbegin(); it != below.rend(); ++it) stack.push_back({*it, state.length(), &mine});
  }
  if (state.length() != root_length) state.truncate(root_length, o.context_logits);
  // The greedy walk down the tree: sibling tokens are distinct, so the
  // matching child is unique.
  o.margin = std::numeric_limits<double>::infinity();
  for (int current = -1;;) {
    const Argmax a =
        argmax(state.model(), current < 0 ? o.context_logits : o.node_logits[static_cast<size_t>(current)]);
    o.margin = std::min(o.margin, a.margin);
    int next = -1;
    for (int i = 0; i < N && next < 0; ++i)
      if (tree.parents[static_cast<size_t>(i)] == current && tree.tokens[static_cast<size_t>(i)] == a.index)
        next = i;
    if (next < 0) {
      o.bonus = a.index;
      break;
    }
    o.path.push_back(next);
    current = next;
  }
  return o;
}

Oracle oracle_of(const Case& c) {
  const auto model = TinyLM::shared(c.model);
  Oracle out;
  std::vector<int> context = c.prompt;
  Autoregressive state(*model, context);  // the decoder after `context`, advanced with it
  for (const DraftTree& tree : c.cycles) {
    out.context_lengths.push_back(static_cast<int>(context.size()));
    out.cycles.push_back(oracle_cycle(state, tree));
    for (int token : out.cycles.back().emitted(tree)) {
      context.push_back(token);
      state.push(token);
    }
  }
  return out;
}

}  // namespace kprop::dflash
