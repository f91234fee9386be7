// The dflash family's domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "properties/dflash/family.h"

namespace kprop::dflash {

Schema Traits::domain_schema() {
  return {
      field::int_range("prompt_len", {1, 12}, 1, 1 << 20, "prompt tokens"),
      field::int_range("vocab", {2, 16}, 2, 1 << 24, "vocabulary size"),
      field::map(
          "model",
          {
              field::int_range("d_model", {4, 16}, 1, 1 << 16, "width (rounded up to a multiple of heads)"),
              field::int_range("layers", {1, 2}, 0, 8, "transformer layers"),
              field::int_range("heads", {1, 2}, 1, 16, "attention heads"),
              field::real("tie_rate", 0.25, 0, 1,
                          "probability a model of vocab >= 3 gives tokens 0 and 1 one output row (a function "
                          "of its seed): their logits tie exactly, argmax takes token 0"),
              field::real("near_tie_rate", 0.25, 0, 1,
                          "probability an untied model of vocab >= 3 gives token 1 the logit L[0] (1 + r) in "
                          "every row (a function of its seed): a near-tie f64 resolves and f32 may not"),
              field::real_range("near_tie", {0x1p-50, 1e-3}, 0x1p-50, 0.5,
                                "range of |r|, drawn log-uniform (2^-50: four f64 ulps of 1)"),
          },
          "target model shape"),
      field::map("tree",
                 {
                     field::int_range("nodes", {1, 24}, 1, 512, "draft nodes per cycle"),
                     field::int_range("roots", {1, 4}, 1, 64, "most roots per tree"),
                     field::int_range("max_children", {1, 4}, 1, 64, "most children per node"),
                     field::real_range("chain_rate", {0.0, 0.8}, 0, 1,
                                       "probability a node extends the previous node (deep chains)"),
                     field::real_range("match_rate", {0.0, 1.0}, 0, 1,
                                       "probability a draft token equals the target's greedy continuation"),
                 },
                 "draft trees"),
      field::int_range("cycles", {1, 4}, 1, 64, "verification cycles"),
  };
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  const ModelConfig& m = c.model;
  // d_model is a drawn width rounded up to a multiple of heads.
  const IntRange w = d.int_range("model.d_model");
  const int64_t lo = (w.lo + m.heads - 1) / m.heads * m.heads, hi = (w.hi + m.heads - 1) / m.heads * m.heads;
  if (m.d_model < lo || m.d_model > hi)
    return fmt::format("model.d_model = {} is outside [{}, {}] rounded up to a multiple of {} heads",
                       m.d_model, w.lo, w.hi, m.heads);
  if (m.tied != 0 && d.real("model.tie_rate") == 0)
    return fmt::format("model.tied = {}, but model.tie_rate is 0 (no tied models)", m.tied);
  if (m.near_tie != 0 && d.real("model.near_tie_rate") == 0)
    return fmt::format("model.near_tie = {}, but model.near_tie_rate is 0 (no near-tied models)", m.near_tie);
  // |r| is the log-uniform draw rounded once by 1 + r: within an ulp of 1
  // (2^-52) of the range.
  if (const RealRange r = d.real_range("model.near_tie");
      m.near_tie != 0 && (std::fabs(m.near_tie) < r.lo - 0x1p-52 || std::fabs(m.near_tie) > r.hi + 0x1p-52))
    return fmt::format("model.near_tie = {}: |r| outside model.near_tie [{}, {}]", m.near_tie, r.lo, r.hi);
  if (std::string why =
          first_problem({outside_int_range(d, "vocab", m.vocab), outside_int_range(d, "model.heads", m.heads),
                         outside_int_range(d, "model.layers", m.layers),
                         outside_int_range(d, "prompt_len", static_cast<int64_t>(c.prompt.size())),
                         outside_int_range(d, "cycles", static_cast<int64_t>(c.cycles.size()))});
      !why.empty())
    return why;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    // A tree stops short of its drawn node count only when no node has room left.
    if (tree.size() < 1 || tree.size() > d.int_range("tree.nodes").hi)
      return fmt::format("cycle {}: {} nodes, outside [1, {}]", k, tree.size(), d.int_range("tree.nodes").hi);
    std::vector<int> children(static_cast<size_t>(tree.size()), 0);
    int roots = 0;
    for (int p : tree.parents) (p < 0 ? roots : children[static_cast<size_t>(p)]) += 1;
    if (roots > d.int_range("tree.roots").hi)
      return fmt::format("cycle {}: {} roots, over tree.roots = {}", k, roots, d.int_range("tree.roots").hi);
    if (*std::max_element(children.begin(), children.end()) > d.int_range("tree.max_children").hi)
      return fmt::format("cycle {}: a node has more than tree.max_children = {} children", k,
                         d.int_range("tree.max_children").hi);
  }
  return "";
}

namespace {
// Doubles of one trial: the model's weights (about 12 d² per layer plus the
// embedding and unembedding), the generator's and the oracle's per-node
// autoregressive states (a K/V cache per layer over the whole context) and
// the N + 1 logit rows per cycle, for target and reference.
double dflash_bytes(double vocab, double d_model, double layers, double prompt, double nodes, double cycles) {
  const double context = prompt + cycles * (nodes + 1);
  const double weights = layers * 12 * d_model * d_model + 2 * vocab * d_model;
  const double states = nodes * context * layers * 2 * d_model;
  const double logits = cycles * (nodes + 1) * vocab;
  return 8 * (weights + 2 * (states + logits + context * layers * 2 * d_model));
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  int nodes = 0;
  for (const DraftTree& t : c.cycles) nodes = std::max(nodes, t.size());
  return dflash_bytes(c.model.vocab, c.model.d_model, std::max(1, c.model.layers), double(c.prompt.size()),
                      nodes, double(c.cycles.size()));
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  const int64_t heads = hi("model.heads"), width = (hi("model.d_model") + heads - 1) / heads * heads;
  CaseSize size{
      dflash_bytes(double(hi("vocab")), double(width), double(std::max<int64_t>(1, hi("model.layers"))),
                   double(hi("prompt_len")), double(hi("tree.nodes")), double(hi("cycles"))),
      fmt::format("V {} x d_model {} x layers {}, prompt {} + {} cycles of {} nodes", hi("vocab"), width,
                  hi("model.layers"), hi("prompt_len"), hi("cycles"), hi("tree.nodes")),
      "vocab, model.d_model, model.layers, prompt_len, tree.nodes or cycles"};
  // The named tensors' dims (tensors.cpp) at that case: each cycle emits its
  // accepted nodes and one bonus token, so O and Or are at most T + C.
  const double nodes = double(hi("cycles") * hi("tree.nodes"));
  size.extents = {{"Np", double(hi("prompt_len"))},
                  {"V", double(hi("vocab"))},
                  {"C", double(hi("cycles"))},
                  {"T", nodes},
                  {"d_model", double(width)},
                  {"layers", double(hi("model.layers"))},
                  {"heads", double(heads)},
                  {"O", nodes + double(hi("cycles"))},
                  {"Or", nodes + double(hi("cycles"))}};
  return size;
}

}  // namespace kprop::dflash
