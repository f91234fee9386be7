#include <cmath>
#include <set>

#include "kernels/dflash/dflash.h"

namespace kprop::dflash {

std::vector<int> depths(const DraftTree& tree) {
  std::vector<int> d(tree.tokens.size());
  for (int i = 0; i < tree.size(); ++i) {
    const int p = tree.parents[static_cast<size_t>(i)];
    d[static_cast<size_t>(i)] = p < 0 ? 1 : d[static_cast<size_t>(p)] + 1;
  }
  return d;
}

int depth(const DraftTree& tree, int node) {
  int d = 0;
  for (int n = node; n >= 0; n = tree.parents[static_cast<size_t>(n)]) ++d;
  return d;
}

bool is_ancestor_or_self(const DraftTree& tree, int ancestor, int node) {
  // A parent is an earlier node (the contract; validate() checks it), so the
  // walk up from `node` meets `ancestor` or drops below it and can stop there.
  for (int n = node; n >= 0 && n >= ancestor; n = tree.parents[static_cast<size_t>(n)])
    if (n == ancestor) return true;
  return false;
}

std::vector<int> path_to(const DraftTree& tree, int node) {
  std::vector<int> path;
  for (int n = node; n >= 0; n = tree.parents[static_cast<size_t>(n)]) path.insert(path.begin(), n);
  return path;
}

std::string validate(const Case& c) {
  const ModelConfig& m = c.model;
  if (m.vocab < 2) return "model.vocab must be >= 2";
  if (m.d_model < 1 || m.heads < 1 || m.d_model % m.heads != 0)
    return "model.heads must divide model.d_model";
  if (m.layers < 0) return "model.layers must be >= 0";
  if (m.tied < 0 || m.tied >= m.vocab) return "model.tied must be in [0, vocab)";
  if (m.near_tie != 0 && m.tied != 0) return "model.near_tie and model.tied both set (both use token 1)";
  if (m.near_tie != 0 && !(std::fabs(m.near_tie) >= 0x1p-50 && std::fabs(m.near_tie) <= 0.5 &&
                           (1 + m.near_tie) - 1 == m.near_tie))
    return "model.near_tie must be 0 or r with 2^-50 <= |r| <= 1/2 and 1 + r exact";
  if (c.prompt.empty()) return "prompt must not be empty";
  if (c.cycles.empty()) return "cycles must not be empty: a case verifies at least one draft tree";
  for (int t : c.prompt)
    if (t < 0 || t >= m.vocab) return "prompt token out of vocabulary";
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    if (tree.tokens.size() != tree.parents.size())
      return "cycle " + std::to_string(k) + ": tokens and parents differ in length";
    std::set<std::pair<int, int>> siblings;  // (parent, token)
    for (int i = 0; i < tree.size(); ++i) {
      const int t = tree.tokens[static_cast<size_t>(i)], p = tree.parents[static_cast<size_t>(i)];
      if (t < 0 || t >= m.vocab) return "cycle " + std::to_string(k) + ": token out of vocabulary";
      if (p < -1 || p >= i)
        return "cycle " + std::to_string(k) + ": parent of node " + std::to_string(i) +
               " must be -1 or an earlier node";
      if (!siblings.insert({p, t}).second)
        return "cycle " + std::to_string(k) + ": node " + std::to_string(i) + " repeats a sibling's token";
    }
  }
  return "";
}

Autoregressive::Autoregressive(const TinyLM& model, const std::vector<int>& context)
    : model_(&model), cache_(model.empty_cache()) {
  for (int t : context) push(t);
}

void Autoregressive::push(int token) {
  model_->append(cache_, token, cache_.length);
}

void Autoregressive::truncate(int length, Logits logits) {
  const size_t width = static_cast<size_t>(model_->config().d_model);
  for (auto& k : cache_.keys) k.resize(static_cast<size_t>(length) * width);
  for (auto& v : cache_.values) v.resize(static_cast<size_t>(length) * width);
  cache_.length = length;
  cache_.last_logits = std::move(logits);
}

}  // namespace kprop::dflash
