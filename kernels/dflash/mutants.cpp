// Mutants: each reproduces one real draft-tree verification bug by replacing
// exactly one stage of the correct pipeline.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/dflash/dflash.h"

namespace kprop::dflash {
namespace {

template <void (*change)(Pipeline&)>
Result run(const Case& c) {
  Pipeline p = correct_pipeline();
  change(p);
  return speculative_generate(c, p, false);
}

// Node i checked against L[P-1+i]: right only when node i-1 is its parent (chains).
void positional_logits(Pipeline& p) {
  p.prediction_row = [](const DraftTree&, int i) { return i; };
}

// Node i checked against L[P+d(i)-2]: right only when every depth-2 node hangs off node 0.
void depth_logits(Pipeline& p) {
  p.prediction_row = [](const DraftTree& t, int i) { return depths(t)[static_cast<size_t>(i)] - 1; };
}

// Position id by flattened index instead of depth.
void index_positions(Pipeline& p) {
  p.position_id = [](const DraftTree&, int i, int P) { return P + i; };
}

// Node sees its parent and itself, not the rest of its ancestors.
void parent_only_mask(Pipeline& p) {
  p.sees = [](const DraftTree& t, int i, std::span<uint8_t> row) {
    row[static_cast<size_t>(i)] = 1;
    if (const int parent = t.parents[static_cast<size_t>(i)]; parent >= 0)
      row[static_cast<size_t>(parent)] = 1;
  };
}

// Plain causal attention over the flattened tree: siblings and cousins leak in.
void sibling_leak_mask(Pipeline& p) {
  p.sees = [](const DraftTree&, int i, std::span<uint8_t> row) {
    std::fill(row.begin(), row.begin() + i + 1, uint8_t{1});
  };
}

// Ancestor sets kept as one uint32 bitmask per node (node j is bit j % 32),
// a common packing of tree attention masks: past 32 nodes the bits alias, so
// node i attends to every node j whose j % 32 matches an ancestor's (node 0
// sees node 32, node 32 sees node 0). Right for trees of at most 32 nodes;
// real draft trees (EAGLE, Medusa) have ~60 (specs/dflash.yaml, profile
// wide_trees).
void mask_u32_bitmask(Pipeline& p) {
  p.sees = [](const DraftTree& t, int i, std::span<uint8_t> row) {
    uint32_t bits = 0;
    for (int n = i; n >= 0; n = t.parents[static_cast<size_t>(n)]) bits |= uint32_t{1} << (n % 32);
    for (size_t j = 0; j < row.size(); ++j)
      if ((bits >> (j % 32)) & 1u) row[j] = 1;
  };
}

// Every node matching its own prediction counts, even under a rejected
// ancestor; the deepest such node's path is emitted.
void no_subtree_invalidation(Pipeline& p) {
  p.accept = [](const DraftTree& t, const std::vector<int>& predicted) {
    const auto d = depths(t);
    int deepest = -1;
    for (int i = 0; i < t.size(); ++i)
      if (t.tokens[static_cast<size_t>(i)] == predicted[static_cast<size_t>(i)] &&
          (deepest < 0 || d[static_cast<size_t>(i)] > d[static_cast<size_t>(deepest)]))
        deepest = i;
    return deepest < 0 ? std::vector<int>{} : path_to(t, deepest);
  };
}

// argmax keeps the last of exactly tied maxima (`>=` where `>` belongs, or a
// scan from the top of the vocabulary): a tie between equal logits goes to
// the highest index instead of the lowest (include/kprop/abi/dflash.h).
void argmax_last_on_tie(Pipeline& p) {
  p.predict = [](const Logits& row) {
    int best = 0;
    for (size_t v = 1; v < row.size(); ++v)
      if (row[v] >= row[static_cast<size_t>(best)]) best = static_cast<int>(v);
    return best;
  };
}

// argmax of the f64 logits rounded to f32 first (a verify kernel that loads
// the logits as float, or a float32 argmax in NumPy): logits closer than
// f32's resolution round to one value and the lowest index takes the tie, so
// a near-tie whose f64 winner is the higher index is decided wrong. The
// family's logits are f64 only, so f32 is the lower precision (a family with
// f32 logits would round them to bf16 here). Caught at the near-tied pair of
// a near_tie model (specs/dflash.yaml, model.near_tie_rate).
void argmax_f32(Pipeline& p) {
  p.predict = [](const Logits& row) {
    int best = 0;
    for (size_t v = 1; v < row.size(); ++v)
      if (static_cast<float>(row[v]) > static_cast<float>(row[static_cast<size_t>(best)]))
        best = static_cast<int>(v);
    return best;
  };
}

// The cycle ends without the bonus token.
void no_bonus_token(Pipeline& p) {
  p.bonus_token = false;
}

// Emitted tokens written through uint16 output buffers (a kernel written for
// vocabularies below 2^16): an id of 65536 or more wraps (vocabularies of
// 128k-152k; specs/dflash.yaml, profile large).
Result tokens_u16(const Case& c) {
  Result r = kv_cached(c);
  for (int& t : r.output) t = static_cast<uint16_t>(t);
  for (CycleTrace& cycle : r.cycles)
    for (int& t : cycle.emitted) t = static_cast<uint16_t>(t);
  return r;
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"positional_logits", "node i verified against L[P-1+i] (right only for chains)",
       run<positional_logits>, positional_logits},
      {"depth_logits",
       "node i verified against L[P+d(i)-2] (right only when depth-2 nodes are children of node 0)",
       run<depth_logits>, depth_logits},
      {"index_positions", "position id P+i instead of P+d(i)-1", run<index_positions>, index_positions},
      {"parent_only_mask", "node attends to prompt, parent and itself, not all ancestors",
       run<parent_only_mask>, parent_only_mask},
      {"sibling_leak_mask", "node attends to every earlier tree node (causal over the flattened tree)",
       run<sibling_leak_mask>, sibling_leak_mask},
      {"mask_u32_bitmask",
       "ancestor sets as uint32 bitmasks (node j is bit j % 32): past 32 nodes a node attends to aliases",
       run<mask_u32_bitmask>, mask_u32_bitmask},
      {"no_subtree_invalidation", "accepts nodes matching their own prediction under a rejected ancestor",
       run<no_subtree_invalidation>, no_subtree_invalidation},
      {"no_bonus_token", "emits no bonus token at the end of a cycle", run<no_bonus_token>, no_bonus_token},
      {"argmax_last_on_tie", "argmax breaks exact ties toward the highest token index, not the lowest",
       run<argmax_last_on_tie>, argmax_last_on_tie},
      {"argmax_f32",
       "argmax of the f64 logits rounded to f32: a near-tie below f32's resolution goes to the lower index",
       run<argmax_f32>, argmax_f32},
      {"token_ids_u16", "emitted tokens written through uint16 buffers: an id >= 65536 wraps", tokens_u16,
       nullptr},
  };
  return table;
}

Pipeline mutant_pipeline(const std::string& name) {
  for (const Mutant& m : mutants())
    if (name == m.name) {
      if (!m.change) throw std::invalid_argument("dflash: mutant '" + name + "' is no pipeline stage");
      Pipeline p = correct_pipeline();
      m.change(p);
      return p;
    }
  throw std::invalid_argument("dflash: no mutant '" + name + "'");
}

}  // namespace kprop::dflash
