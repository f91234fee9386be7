// Metamorphic transforms of a dflash case (Traits::transforms()).
//
// reorder_siblings: every draft tree is rebuilt with its roots and each
// node's children in a random order, and its nodes renumbered in the
// depth-first preorder of the shuffled tree (parents still come before
// children, so the case stays valid). Sibling tokens are distinct, so at most
// one child of a node matches a prediction and the accepted path is the same
// set of tokens in the same order; the output is identical. Node logits move
// with the nodes: node g of the transformed case is node node_perm[g]. The
// tree forward's sums over the tree's key positions run in another order, so
// logits agree up to fp64 rounding (a few ulps of |logit|; the logits
// invariants' rtol = atol = 1e-9 covers it by orders of magnitude), and an
// argmax can flip only at a near-tie, which `oracle.margin` rules out.
#include <numeric>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/dflash/family.h"

namespace kprop::dflash {
namespace {

using XT = expr::DType;
using expr::Tensor;

}  // namespace

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"reorder_siblings",
       "shuffles each tree's roots and every node's children and renumbers the nodes in preorder: the "
       "accepted path is the same tokens (same length), the output is unchanged, node logits move with "
       "their nodes (up to rounding)",
       {},
       {{"transform.node_perm",
         {"T"},
         XT::integer,
         "flat node g of the transformed case is flat node node_perm[g] (same cycle)"}}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values&, uint64_t seed,
                       expr::TensorMap& out) {
  if (name != "reorder_siblings") throw std::logic_error("dflash: no transform '" + name + "'");
  Case t = c;
  std::vector<int> perm;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const int N = tree.size();
    std::vector<std::vector<int>> children(size_t(N) + 1);  // [0]: roots, [1 + p]: children of p
    for (int i = 0; i < N; ++i) children[size_t(tree.parents[size_t(i)] + 1)].push_back(i);
    for (size_t p = 0; p < children.size(); ++p) rng::shuffle(children[p], seed, k * 4096 + p);
    // Depth-first preorder over the shuffled children: order[n] = old index of new node n.
    std::vector<int> order, stack(children[0].rbegin(), children[0].rend());
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      order.push_back(n);
      const auto& ch = children[size_t(n) + 1];
      stack.insert(stack.end(), ch.rbegin(), ch.rend());
    }
    std::vector<int> new_index(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) new_index[size_t(order[size_t(n)])] = n;
    DraftTree& moved = t.cycles[k];
    const int base = static_cast<int>(perm.size());
    for (int n = 0; n < N; ++n) {
      const int old = order[size_t(n)], p = tree.parents[size_t(old)];
      moved.tokens[size_t(n)] = tree.tokens[size_t(old)];
      moved.parents[size_t(n)] = p < 0 ? -1 : new_index[size_t(p)];
      perm.push_back(base + old);
    }
  }
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("dflash: reorder_siblings made an invalid case: " + why);
  if (out.wanted("transform.node_perm"))
    out.put("transform.node_perm", Tensor::ints({static_cast<int64_t>(perm.size())}, perm, XT::integer));
  return t;
}

}  // namespace kprop::dflash
