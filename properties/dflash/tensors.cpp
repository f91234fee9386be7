// Named tensors of dflash for expression invariants (kprop/expr.h).
//
// Layout. A case has C cycles, each with its own draft tree and context, so
// per-node tensors put the nodes of every cycle on one flat axis T (cycle 0's
// nodes first, in tree order); `cycle[g]` is node g's cycle and `parents[g]`
// the flat index of its parent (-1 for a root). The logits the contract
// indexes by parent, L[P-1] for a root and L[P+p] for a child of p, are split
// into `*.context_logits` [C, V] (L[P-1] of each cycle) and `*.node_logits`
// [T, V] (L[P+i] of each node), so the row that predicts node g is
//   where(parents[:, None] < 0, X.context_logits[cycle], X.node_logits[maximum(parents, 0)])
// The `oracle.*` tensors come from plain greedy decoding with a KV cache (the
// independent oracle the C++ invariants use), run cycle by cycle on the
// oracle's own context: what a correct implementation reports. A target that
// emits other tokens runs its later cycles on another context, so the
// invariants that compare its logits or acceptance with the oracle read
// `target.oracle_*`: the same oracle on the target's own context, as the C++
// invariants (tree_logits_match_path, maximal_acceptance) compare.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "properties/dflash/family.h"

namespace kprop::dflash {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
Np                        []      int   prompt length
V                         []      int   vocabulary size
C                         []      int   verification cycles (one draft tree each)
T                         []      int   draft nodes over all cycles (the flat node axis)
d_model                   []      int   model width
layers                    []      int   transformer layers
heads                     []      int   attention heads
prompt                    [Np]    int   the prompt tokens
vocab_ids                 [V]     int   0, 1, ..., V-1 (for one-hot selections)
tree_sizes                [C]     int   nodes of each cycle's draft tree
tokens                    [T]     int   draft token of node g
parents                   [T]     int   flat index of node g's parent, -1 for a root
cycle                     [T]     int   the cycle node g belongs to
node_index                [T]     int   node g's index in its own tree
depth                     [T]     int   depth of node g (1 for roots)
ancestor_or_self          [T, T]  bool  [g, h]: node h is node g or an ancestor of it (same cycle)
oracle.context_length     [C]     int   context length P of each cycle (oracle's context)
oracle.context_logits     [C, V]  real  autoregressive logits after each cycle's context (the oracle's own: the
                                        prompt ++ the oracle's emissions; target.oracle_* follows the target's)
oracle.node_logits        [T, V]  real  autoregressive logits after context ++ path(g)
oracle.prediction_logits  [T, V]  real  autoregressive logits after context ++ path(parent(g)): the row whose
                                        argmax node g is checked against
oracle.accepted           [T]     bool  node g is on the longest root path matching greedy decoding
oracle.accepted_count     [C]     int   nodes the oracle accepts per cycle
oracle.margin             []      real  smallest argmax gap over the rows the oracle's decisions read, to a
                                        token with another output row, or |L[0]| for the winner of a
                                        near_tie model's pair (near-tie indicator; inf if none)
target.oracle_context_logits     [C, V]  real  oracle.context_logits on the target's context (the prompt ++ what
                                               the target emitted before each cycle): equals oracle.* while the
                                               target emits what the oracle does
target.oracle_node_logits        [T, V]  real  oracle.node_logits on the target's context
target.oracle_prediction_logits  [T, V]  real  oracle.prediction_logits on the target's context
target.oracle_accepted           [T]     bool  oracle.accepted on the target's context
target.oracle_accepted_count     [C]     int   oracle.accepted_count on the target's context
target.oracle_margin             []      real  oracle.margin on the target's context
target.greedy             [O]     int   plain greedy decoding of the prompt for as many tokens as the target
                                        emitted
target.greedy_margin      []      real  smallest argmax gap over the steps of target.greedy (as
                                        oracle.margin)
)");
  // Per implementation; `emitted`: the length of its output (O for the target, Or for the reference).
  const auto outputs = [](const char* emitted) {
    expr::TensorInfos o = expr::tensor_table(R"(
context_length  [C]        int   context length P the implementation used per cycle
position_ids    [T]        int   position id of node g
tree_mask       [T, T]     bool  [g, h]: node g attends to tree node h (false across cycles)
sees_context    [T]        bool  node g attends to every context position
context_logits  [C, V]     real  logits row L[P-1] of each cycle
node_logits     [T, V]     real  logits row L[P+i] of node g (node i of its tree)
accepted        [T]        bool  node g is on the accepted path
accepted_count  [C]        int   accepted nodes per cycle
emitted_count   [C]        int   tokens emitted per cycle
bonus           [C]        int   last token emitted in each cycle (-1 if none)
output          [O]        int   every emitted token, in order
)");
    o.back().shape = {emitted};
    return o;
  };
  expr::add_per_implementation(t, {{"target", ""}}, outputs("O"));
  expr::add_per_implementation(t, {{"reference", ""}}, outputs("Or"));
  return t;
}

namespace {

using expr::DType;
using expr::Tensor;
using expr::TensorMap;

int64_t total_nodes(const Case& c) {
  int64_t n = 0;
  for (const auto& tree : c.cycles) n += tree.size();
  return n;
}

std::vector<int> offsets(const Case& c) {  // flat index of each cycle's node 0
  std::vector<int> off;
  int n = 0;
  for (const auto& tree : c.cycles) off.push_back(n), n += tree.size();
  return off;
}

void put_case(const Case& c, TensorMap& out) {
  const int64_t C = static_cast<int64_t>(c.cycles.size()), T = total_nodes(c), V = c.model.vocab;
  out.put("Np", Tensor::scalar(double(c.prompt.size()), DType::integer));
  out.put("V", Tensor::scalar(double(V), DType::integer));
  out.put("C", Tensor::scalar(double(C), DType::integer));
  out.put("T", Tensor::scalar(double(T), DType::integer));
  out.put("d_model", Tensor::scalar(c.model.d_model, DType::integer));
  out.put("layers", Tensor::scalar(c.model.layers, DType::integer));
  out.put("heads", Tensor::scalar(c.model.heads, DType::integer));
  if (out.wanted("prompt")) out.put("prompt", Tensor::ints({int64_t(c.prompt.size())}, c.prompt));
  if (out.wanted("vocab_ids")) {
    std::vector<double> ids(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) ids[size_t(v)] = double(v);
    out.put("vocab_ids", Tensor::of({V}, std::move(ids), DType::integer));
  }
  const std::vector<int> off = offsets(c);
  std::vector<int> sizes, tokens, parents, cycle, index, depth;
  std::vector<double> anc(size_t(T * T), 0.0);
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const auto d = depths(tree);
    sizes.push_back(tree.size());
    for (int i = 0; i < tree.size(); ++i) {
      const int p = tree.parents[size_t(i)];
      tokens.push_back(tree.tokens[size_t(i)]);
      parents.push_back(p < 0 ? -1 : off[k] + p);
      cycle.push_back(static_cast<int>(k));
      index.push_back(i);
      depth.push_back(d[size_t(i)]);
      for (int n = i; n >= 0; n = tree.parents[size_t(n)])
        anc[size_t(off[k] + i) * size_t(T) + size_t(off[k] + n)] = 1;
    }
  }
  if (out.wanted("tree_sizes")) out.put("tree_sizes", Tensor::ints({C}, sizes));
  if (out.wanted("tokens")) out.put("tokens", Tensor::ints({T}, tokens));
  if (out.wanted("parents")) out.put("parents", Tensor::ints({T}, parents));
  if (out.wanted("cycle")) out.put("cycle", Tensor::ints({T}, cycle));
  if (out.wanted("node_index")) out.put("node_index", Tensor::ints({T}, index));
  if (out.wanted("depth")) out.put("depth", Tensor::ints({T}, depth));
  if (out.wanted("ancestor_or_self"))
    out.put("ancestor_or_self", Tensor::of({T, T}, std::move(anc), DType::boolean));
}

// The oracle's cycles as tensors named `prefix` + "context_logits", ...
// (`cycle(k)`: the oracle's cycle k, on whichever context it followed).
template <typename CycleOf>
void put_oracle_cycles(const Case& c, const std::string& prefix, CycleOf&& cycle, TensorMap& out) {
  const int64_t C = static_cast<int64_t>(c.cycles.size()), T = total_nodes(c), V = c.model.vocab;
  std::vector<int> counts;
  std::vector<double> ctx_logits, node_logits, pred_logits, accepted;
  double margin = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const OracleCycle& o = cycle(k);
    ctx_logits.insert(ctx_logits.end(), o.context_logits.begin(), o.context_logits.end());
    for (int i = 0; i < tree.size(); ++i) {
      const int p = tree.parents[size_t(i)];
      const Logits& above = p < 0 ? o.context_logits : o.node_logits[size_t(p)];
      pred_logits.insert(pred_logits.end(), above.begin(), above.end());
      node_logits.insert(node_logits.end(), o.node_logits[size_t(i)].begin(), o.node_logits[size_t(i)].end());
    }
    std::vector<double> on_path(size_t(tree.size()), 0.0);
    for (int n : o.path) on_path[size_t(n)] = 1;
    accepted.insert(accepted.end(), on_path.begin(), on_path.end());
    counts.push_back(static_cast<int>(o.path.size()));
    margin = std::min(margin, o.margin);
  }
  out.put(prefix + "context_logits", Tensor::of({C, V}, std::move(ctx_logits)));
  out.put(prefix + "node_logits", Tensor::of({T, V}, std::move(node_logits)));
  out.put(prefix + "prediction_logits", Tensor::of({T, V}, std::move(pred_logits)));
  out.put(prefix + "accepted", Tensor::of({T}, std::move(accepted), DType::boolean));
  out.put(prefix + "accepted_count", Tensor::ints({C}, counts));
  out.put(prefix + "margin", Tensor::scalar(margin));
}

const Oracle& trial_oracle(const Case& c, TensorMap& out, std::optional<Oracle>& own) {
  return out.once_store() ? out.once_store()->get<oracle_of>(c) : own.emplace(oracle_of(c));
}

// Greedy verification done by the autoregressive oracle, cycle by cycle
// (oracle_of: the trial's, when these tensors belong to one).
void put_oracle(const Case& c, TensorMap& out) {
  std::optional<Oracle> own;
  const Oracle& o = trial_oracle(c, out, own);
  out.put("oracle.context_length", Tensor::ints({int64_t(c.cycles.size())}, o.context_lengths));
  put_oracle_cycles(
      c, "oracle.", [&](size_t k) -> const OracleCycle& { return o.cycles[k]; }, out);
}

// The oracle on the target's own context: cycle k after the prompt and the
// tokens the target emitted in cycles 0..k-1 (what maximal_acceptance and
// tree_logits_match_path compare against). oracle.* follows the oracle's own
// emissions, so once a target emits other tokens (a wrong acceptance, a
// missing bonus) its later cycles run on another context, and comparing
// their logits with oracle.* fails a target whose logits are right. The
// trial's oracle serves while the target emits what it does; from the first
// cycle where they part, decoded here. A target that reports another number
// of cycles, or emits a token outside the vocabulary before its last cycle,
// has no such context: the tensors stay unpublished (an invariant naming
// them fails saying so).
void put_target_oracle(const Case& c, const Result& r, TensorMap& out) {
  if (r.cycles.size() != c.cycles.size()) return;
  for (size_t k = 0; k + 1 < r.cycles.size(); ++k)
    for (int token : r.cycles[k].emitted)
      if (token < 0 || token >= c.model.vocab) return;
  std::optional<Oracle> own;
  const Oracle& cached = trial_oracle(c, out, own);
  const auto model = TinyLM::shared(c.model);
  std::vector<int> context = c.prompt;
  std::optional<Autoregressive> state;  // from the first cycle the target's context leaves the oracle's
  OracleCycle decoded;
  put_oracle_cycles(
      c, "target.oracle_",
      [&](size_t k) -> const OracleCycle& {
        if (k > 0) {  // advance past cycle k - 1's emissions
          const std::vector<int>& emitted = r.cycles[k - 1].emitted;
          context.insert(context.end(), emitted.begin(), emitted.end());
          if (state)
            for (int token : emitted) state->push(token);
          else if (emitted != cached.cycles[k - 1].emitted(c.cycles[k - 1]))
            state.emplace(*model, context);
        }
        if (!state) return cached.cycles[k];
        decoded = oracle_cycle(*state, c.cycles[k]);
        return decoded;
      },
      out);
}

// An implementation's report. A report of the wrong shape (an external
// kernel's) leaves the tensors it would feed unpublished, so the invariant
// that names them fails naming them instead of this crashing.
void put_result(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const int64_t C = static_cast<int64_t>(c.cycles.size()), T = total_nodes(c), V = c.model.vocab;
  auto want = [&](const char* name) { return out.wanted(who + "." + name); };
  auto put = [&](const char* name, Tensor t) { out.put(who + "." + name, std::move(t)); };
  if (want("output")) put("output", Tensor::ints({int64_t(r.output.size())}, r.output));
  if (r.cycles.size() != c.cycles.size()) return;
  std::vector<int> lengths, accepted_count, emitted_count, bonus;
  for (const CycleTrace& tr : r.cycles) {
    lengths.push_back(tr.context_length);
    accepted_count.push_back(static_cast<int>(tr.accepted.size()));
    emitted_count.push_back(static_cast<int>(tr.emitted.size()));
    bonus.push_back(tr.emitted.empty() ? -1 : tr.emitted.back());
  }
  if (want("context_length")) put("context_length", Tensor::ints({C}, lengths));
  if (want("accepted_count")) put("accepted_count", Tensor::ints({C}, accepted_count));
  if (want("emitted_count")) put("emitted_count", Tensor::ints({C}, emitted_count));
  if (want("bonus")) put("bonus", Tensor::ints({C}, bonus));

  const std::vector<int> off = offsets(c);
  bool ids_ok = true, mask_ok = true, logits_ok = true, accepted_ok = true;
  std::vector<int> ids;
  std::vector<double> mask(size_t(T * T), 0.0), sees_context, ctx_logits, node_logits,
      accepted(size_t(T), 0.0);
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const CycleTrace& tr = r.cycles[k];
    const int N = c.cycles[k].size(), P = tr.context_length;
    ids_ok = ids_ok && tr.position_ids.size() == size_t(N);
    if (ids_ok) ids.insert(ids.end(), tr.position_ids.begin(), tr.position_ids.end());
    mask_ok = mask_ok && P >= 0 && tr.mask.size() == size_t(N) * size_t(P + N);
    if (mask_ok)
      for (int i = 0; i < N; ++i) {
        const uint8_t* row = &tr.mask[size_t(i) * size_t(P + N)];
        sees_context.push_back(std::all_of(row, row + P, [](uint8_t m) { return m != 0; }));
        for (int j = 0; j < N; ++j)
          mask[size_t(off[k] + i) * size_t(T) + size_t(off[k] + j)] = row[P + j] != 0;
      }
    logits_ok = logits_ok && tr.logits.size() == size_t(N) + 1 &&
                std::all_of(tr.logits.begin(), tr.logits.end(),
                            [&](const Logits& l) { return l.size() == size_t(V); });
    if (logits_ok) {
      ctx_logits.insert(ctx_logits.end(), tr.logits[0].begin(), tr.logits[0].end());
      for (int i = 0; i < N; ++i)
        node_logits.insert(node_logits.end(), tr.logits[size_t(i) + 1].begin(),
                           tr.logits[size_t(i) + 1].end());
    }
    for (int n : tr.accepted)
      if (n < 0 || n >= N)
        accepted_ok = false;
      else
        accepted[size_t(off[k] + n)] = 1;
  }
  if (ids_ok && want("position_ids")) put("position_ids", Tensor::ints({T}, ids));
  if (mask_ok && want("tree_mask")) put("tree_mask", Tensor::of({T, T}, std::move(mask), DType::boolean));
  if (mask_ok && want("sees_context"))
    put("sees_context", Tensor::of({T}, std::move(sees_context), DType::boolean));
  if (logits_ok && want("context_logits")) put("context_logits", Tensor::of({C, V}, std::move(ctx_logits)));
  if (logits_ok && want("node_logits")) put("node_logits", Tensor::of({T, V}, std::move(node_logits)));
  if (accepted_ok && want("accepted")) put("accepted", Tensor::of({T}, std::move(accepted), DType::boolean));
}

// Plain greedy decoding for as many tokens as the target emitted.
void put_greedy(const Case& c, const Result& r, TensorMap& out) {
  const auto shared_model = TinyLM::shared(c.model);
  const TinyLM& model = *shared_model;
  Autoregressive ar(model, c.prompt);
  std::vector<int> tokens;
  double margin = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < r.output.size(); ++s) {
    const Argmax a = ar.next();
    margin = std::min(margin, a.margin);
    tokens.push_back(a.index);
    ar.push(a.index);
  }
  out.put("target.greedy", Tensor::ints({int64_t(tokens.size())}, tokens));
  out.put("target.greedy_margin", Tensor::scalar(margin));
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference, TensorMap& out) {
  put_case(c, out);
  if (out.wants_prefix("oracle.")) put_oracle(c, out);
  if (target) {
    if (out.wanted("target.greedy") || out.wanted("target.greedy_margin")) put_greedy(c, *target, out);
    put_result(c, "target", *target, out);
    if (out.wants_prefix("target.oracle_")) put_target_oracle(c, *target, out);
  }
  if (reference) put_result(c, "reference", *reference, out);
}

}  // namespace kprop::dflash
