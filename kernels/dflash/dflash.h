// DFlash: speculative decoding with draft-tree verification (docs/FAMILIES.md, dflash).
//
// Contract. Prompt x[0..P-1]. A draft tree of N nodes in topological order:
// tokens t[i], parents p[i] in {-1} ∪ [0, i-1], depth d(i) = 1 for roots and
// d(p[i]) + 1 otherwise; sibling tokens are distinct (a drafter proposes
// distinct candidates). Tree forward: sequence = context ++ tree tokens; node i
// has position id P + d(i) - 1 and attends to the whole context, its
// ancestors and itself. Greedy verification reads logits by parent: a root is
// predicted by L[P-1], a child of p by L[P+p]; starting above the roots,
// accept the first child whose token equals the prediction, descend, repeat.
// A cycle emits the accepted tokens plus one bonus token (the prediction at
// the last accepted node, or at the context's end). Generation runs one cycle
// per draft tree, each against the context so far.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/dflash/model.h"

namespace kprop::dflash {

struct DraftTree {
  std::vector<int> tokens;
  std::vector<int> parents;
  int size() const { return static_cast<int>(tokens.size()); }
  bool operator==(const DraftTree&) const = default;
};

struct Case {
  std::vector<int> prompt;
  ModelConfig model;
  std::vector<DraftTree> cycles;  // one draft tree per verification cycle
  bool operator==(const Case&) const = default;
};

// What an implementation reports for one cycle: enough to check every stage.
struct CycleTrace {
  int context_length = 0;         // P for this cycle
  std::vector<int> position_ids;  // per node
  std::vector<uint8_t> mask;      // N x (P + N): node i attends to column j
  std::vector<Logits> logits;     // N + 1 rows: [0] = L[P-1], [1 + i] = L[P + i]
  std::vector<int> accepted;      // accepted nodes, root first
  std::vector<int> emitted;       // tokens appended to the context
};

struct Result {
  std::vector<CycleTrace> cycles;
  std::vector<int> output;  // every emitted token, in order
};

// ---- tree helpers
std::vector<int> depths(const DraftTree& tree);
int depth(const DraftTree& tree, int node);  // depths(tree)[node], without the vector
bool is_ancestor_or_self(const DraftTree& tree, int ancestor, int node);
std::vector<int> path_to(const DraftTree& tree, int node);  // root first, node last
// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);

// ---- the verification pipeline, one stage per known bug
struct Pipeline {
  // The tree nodes node i attends to: sets row[j] for each (row has one
  // zeroed entry per node; the context is always visible). A row, not a
  // pair at a time: the ancestors of i are one walk up.
  std::function<void(const DraftTree&, int i, std::span<uint8_t> row)> sees;
  // Position id of node i given context length P.
  std::function<int(const DraftTree&, int i, int P)> position_id;
  // Row of CycleTrace::logits whose argmax is the prediction node i is checked against.
  std::function<int(const DraftTree&, int i)> prediction_row;
  // The token a logits row predicts: argmax, the lowest index on exact ties.
  std::function<int(const Logits&)> predict;
  // Accepted nodes (root first) given each node's prediction.
  std::function<std::vector<int>(const DraftTree&, const std::vector<int>& predicted)> accept;
  bool bonus_token = true;
};
Pipeline correct_pipeline();

// The stages of one cycle, split as the external ops split them
// (include/kprop/abi/dflash.h). build_tree_inputs fills context_length,
// position_ids and mask; tree_forward gives the logits rows of a full
// recomputation of context ++ tree tokens (the context causal, node i under
// row i of `mask` at position_ids[i]); verify_tree reads trace.logits and
// fills accepted and emitted.
void build_tree_inputs(const Pipeline& pipeline, const DraftTree& tree, int context_length,
                       CycleTrace& trace);
std::vector<Logits> tree_forward(const TinyLM& model, const std::vector<int>& context, const DraftTree& tree,
                                 const std::vector<int>& position_ids, const std::vector<uint8_t>& mask);
void verify_tree(const Pipeline& pipeline, const DraftTree& tree, CycleTrace& trace);

// Speculative generation through `pipeline`. With `kv_cache` the context is
// kept in a KV cache across cycles and only the tree block is run each cycle
// (what a serving engine does); without, every cycle recomputes the whole
// sequence under the full mask (the reference).
Result speculative_generate(const Case& c, const Pipeline& pipeline, bool kv_cache);

// Implementations.
Result reference(const Case& c);
Result kv_cached(const Case& c);

struct Mutant {
  const char* name;
  const char* description;
  Result (*run)(const Case&);
  void (*change)(Pipeline&);  // the one stage of correct_pipeline() it replaces (null: none, an output bug)
};
const std::vector<Mutant>& mutants();
// correct_pipeline() with the mutant `name`'s stage (std::invalid_argument if unknown).
Pipeline mutant_pipeline(const std::string& name);

// The autoregressive oracle: plain greedy decoding with a KV cache, shared by
// the invariants and the generator. Independent of the tree code paths.
class Autoregressive {
 public:
  Autoregressive(const TinyLM& model, const std::vector<int>& context);
  const Logits& logits() const { return cache_.last_logits; }
  // The greedy token, with the margin of argmax(model, ·): exact ties inside
  // the model's tied group are decided, not near-ties.
  Argmax next() const { return argmax(*model_, cache_.last_logits); }
  const TinyLM& model() const { return *model_; }
  void push(int token);
  int length() const { return cache_.length; }
  // Back to an earlier `length` with the logits it had there: the positions
  // after it are dropped, which leaves exactly the state push() left at that
  // length (pushes only append).
  void truncate(int length, Logits logits);

 private:
  const TinyLM* model_;
  TinyLM::Cache cache_;
};

}  // namespace kprop::dflash
