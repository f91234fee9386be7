// The dflash family's stats; the rest of Traits is in schema.cpp (domain),
// build.cpp (builder), shrink.cpp (shrinker) and codec.cpp (YAML).
#include "properties/dflash/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace kprop::dflash {

CaseStats Traits::stats(const Case& c) {
  int64_t nodes = 0;
  int max_roots = 0, max_depth = 0;
  for (const auto& tree : c.cycles) {
    nodes += tree.size();
    int roots = 0;
    for (int p : tree.parents) roots += p < 0;
    max_roots = std::max(max_roots, roots);
    for (int d : depths(tree)) max_depth = std::max(max_depth, d);
  }
  return CaseStats{
      nodes, fmt::format("{}-node tree{} ({} root{}, depth {}), vocab {}, prompt {}, d_model {}, layers {}, "
                         "heads {}",
                         nodes, c.cycles.size() > 1 ? fmt::format("s over {} cycles", c.cycles.size()) : "",
                         max_roots, max_roots == 1 ? "" : "s", max_depth, c.model.vocab, c.prompt.size(),
                         c.model.d_model, c.model.layers, c.model.heads)}
      .dim("tree nodes", double(nodes))
      .dim("tree depth", max_depth)
      .dim("roots", max_roots)
      .dim("cycles", double(c.cycles.size()))
      .dim("vocab", c.model.vocab)
      .dim("prompt", double(c.prompt.size()));
}

}  // namespace kprop::dflash
