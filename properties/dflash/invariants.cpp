// DFlash invariants. Each compares what the target reports against an
// independent autoregressive oracle (plain greedy decoding with a KV cache),
// never against another tree implementation.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <optional>

#include "kprop/tolerance.h"
#include "properties/dflash/family.h"

namespace kprop::dflash {
namespace {

using T = Trial<Traits>;

Schema tie_param() {
  return {field::real("tie_margin", 1e-6, 0, 1e3,
                      "argmax gaps below this are near-ties: the case is discarded, never failed")};
}

// The case's model, built once per trial (its weights are drawn from the
// seed: the oracles of three invariants share it).
TinyLM model_of(const Case& c) {
  return *TinyLM::shared(c.model);  // a copy of the shared model (cheaper than building it)
}

std::string tokens_text(const std::vector<int>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

// Greedy continuation of `context` for `steps` tokens; false on a near-tie.
bool greedy(const TinyLM& model, const std::vector<int>& context, size_t steps, double tie,
            std::vector<int>& out) {
  Autoregressive ar(model, context);
  out.clear();
  for (size_t s = 0; s < steps; ++s) {
    const Argmax a = ar.next();
    if (a.margin < tie) return false;
    out.push_back(a.index);
    ar.push(a.index);
  }
  return true;
}

Verdict lossless(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  std::vector<int> expected;
  if (!greedy(t.once<model_of>(), c.prompt, r.output.size(), p.real("tie_margin"), expected))
    return Verdict::discard("near-tie in greedy decoding");
  for (size_t i = 0; i < expected.size(); ++i)
    if (r.output[i] != expected[i])
      return Verdict::fail(
          fmt::format("output token {} is {}, greedy decoding gives {} (output {}, greedy {})", i,
                      r.output[i], expected[i], tokens_text(r.output), tokens_text(expected)),
          {{"position", double(i)},
           {"output_token", double(r.output[i])},
           {"greedy_token", double(expected[i])}});
  return Verdict::pass();
}

Verdict maximal_acceptance(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const TinyLM& model = t.once<model_of>();
  // The decoder after the context, advanced with it (the same pushes as
  // decoding each cycle's context from scratch, so the same logits).
  Autoregressive context_state(model, c.prompt);
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    // The oracle: follow the greedy continuation down the tree.
    Autoregressive ar = context_state;
    std::vector<int> oracle;
    for (int current = -1;;) {
      const Argmax a = ar.next();
      if (a.margin < p.real("tie_margin")) return Verdict::discard("near-tie on the draft path");
      int next = -1;
      for (int i = 0; i < tree.size() && next < 0; ++i)
        if (tree.parents[static_cast<size_t>(i)] == current && tree.tokens[static_cast<size_t>(i)] == a.index)
          next = i;
      if (next < 0) break;
      oracle.push_back(next);
      ar.push(a.index);
      current = next;
    }
    // Sibling tokens are distinct, so the matching path is unique: compare
    // the nodes, not only the count.
    const auto& accepted = r.cycles[k].accepted;
    if (accepted != oracle)
      return Verdict::fail(
          fmt::format("cycle {}: target accepted {} node(s) {}, the longest matching root path is {} {}", k,
                      accepted.size(), tokens_text(accepted), oracle.size(), tokens_text(oracle)),
          {{"cycle", double(k)},
           {"accepted", double(accepted.size())},
           {"oracle_accepted", double(oracle.size())}});
    // Continue from the target's own context so one wrong cycle is reported
    // once (decoded only when a cycle follows, as the context alone was).
    if (k + 1 < c.cycles.size() && k + 1 < r.cycles.size())
      for (int token : r.cycles[k].emitted) context_state.push(token);
  }
  return Verdict::pass();
}

Verdict tree_logits_match_path(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const TinyLM& model = t.once<model_of>();
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  Autoregressive context_state(model, c.prompt);  // as in maximal_acceptance
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const CycleTrace& trace = r.cycles[k];
    if (trace.logits.size() != static_cast<size_t>(tree.size()) + 1)
      return Verdict::fail(fmt::format("cycle {}: {} logit rows, expected N + 1 = {}", k, trace.logits.size(),
                                       tree.size() + 1));
    // Row 0 predicts after the context; row 1 + i after context ++ path(i).
    // Each node's decoder state is its parent's plus its own token, so a
    // depth-first walk decodes every tree edge once, with the same pushes in
    // the same order as decoding the path from scratch (the same logits bit
    // for bit), and goes back up by truncating the cache (no state copies).
    // The first failing row in row order is reported, as a row-by-row check
    // would.
    std::optional<Verdict> first;
    int first_row = tree.size() + 1;
    auto check_row = [&](int row, const Logits& expected) {
      if (row >= first_row) return;
      const Logits& got = trace.logits[static_cast<size_t>(row)];
      for (size_t v = 0; v < expected.size(); ++v) {
        const double err = std::fabs(got.at(v) - expected[v]);
        if (!within(got.at(v), expected[v], atol, rtol)) {
          first_row = row;
          first = Verdict::fail(
              fmt::format("cycle {}: {} logit[{}] = {:.17g}, autoregressive on its path gives {:.17g}", k,
                          row == 0 ? std::string("context row") : fmt::format("node {}", row - 1), v,
                          got.at(v), expected[v]),
              {{"cycle", double(k)},
               {"node", double(row - 1)},
               {"logit", got.at(v)},
               {"expected", expected[v]},
               {"abs_error", err}});
          return;
        }
      }
    };
    Autoregressive ar = context_state;
    check_row(0, ar.logits());
    std::vector<std::vector<int>> children(static_cast<size_t>(tree.size()) + 1);  // [parent + 1]
    for (int i = 0; i < tree.size(); ++i)
      children[static_cast<size_t>(tree.parents[static_cast<size_t>(i)] + 1)].push_back(i);
    // (node, the length and logits of its parent's state), deepest last.
    struct Visit {
      int node;
      int length;
      std::shared_ptr<const Logits> parent_logits;
    };
    std::vector<Visit> stack;
    const auto root_logits = std::make_shared<const Logits>(ar.logits());
    for (auto it = children[0].rbegin(); it != children[0].rend(); ++it)
      stack.push_back({*it, ar.length(), root_logits});
    while (!stack.empty()) {
      const Visit visit = std::move(stack.back());
      stack.pop_back();
      if (ar.length() != visit.length) ar.truncate(visit.length, *visit.parent_logits);
      ar.push(tree.tokens[static_cast<size_t>(visit.node)]);
      check_row(visit.node + 1, ar.logits());
      const auto& below = children[static_cast<size_t>(visit.node) + 1];
      if (below.empty()) continue;
      const auto mine = std::make_shared<const Logits>(ar.logits());
      for (auto it = below.rbegin(); it != below.rend(); ++it) stack.push_back({*it, ar.length(), mine});
    }
    if (first) return *first;
    if (k + 1 < c.cycles.size() && k + 1 < r.cycles.size())
      for (int token : trace.emitted) context_state.push(token);
  }
  return Verdict::pass();
}

Verdict mask_is_ancestor_closure(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const int P = r.cycles[k].context_length, N = tree.size();
    const auto& mask = r.cycles[k].mask;
    if (mask.size() != static_cast<size_t>(N) * (P + N))
      return Verdict::fail(fmt::format("cycle {}: mask has {} entries, expected N x (P + N) = {}", k,
                                       mask.size(), N * (P + N)));
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < P + N; ++j) {
        const bool want = j < P || is_ancestor_or_self(tree, j - P, i);
        if ((mask[static_cast<size_t>(i) * (P + N) + j] != 0) != want)
          return Verdict::fail(
              fmt::format("cycle {}: node {} {} {} {}", k, i, want ? "does not attend to" : "attends to",
                          j < P ? "context position" : "node", j < P ? j : j - P),
              {{"cycle", double(k)}, {"node", double(i)}, {"column", double(j)}});
      }
  }
  return Verdict::pass();
}

Verdict position_ids_by_depth(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const auto d = depths(c.cycles[k]);
    const auto& ids = r.cycles[k].position_ids;
    const int P = r.cycles[k].context_length;
    if (ids.size() != d.size())
      return Verdict::fail(fmt::format("cycle {}: {} position ids for {} nodes", k, ids.size(), d.size()));
    for (size_t i = 0; i < d.size(); ++i)
      if (ids[i] != P + d[i] - 1)
        return Verdict::fail(
            fmt::format("cycle {}: node {} at depth {} has position id {}, expected P + d - 1 = {}", k, i,
                        d[i], ids[i], P + d[i] - 1),
            {{"cycle", double(k)},
             {"node", double(i)},
             {"position_id", double(ids[i])},
             {"expected", double(P + d[i] - 1)}});
  }
  return Verdict::pass();
}

Verdict progress(T& t, const Values&) {
  const Result& r = t.target();
  if (r.cycles.size() != t.input().cycles.size())
    return Verdict::fail(
        fmt::format("{} cycles reported for {} draft trees", r.cycles.size(), t.input().cycles.size()));
  for (size_t k = 0; k < r.cycles.size(); ++k)
    if (r.cycles[k].emitted.empty())
      return Verdict::fail(
          fmt::format("cycle {} emitted no token ({} accepted)", k, r.cycles[k].accepted.size()),
          {{"cycle", double(k)}, {"emitted", 0}});
  return Verdict::pass();
}

// The report is self-consistent: accepted nodes form a root path, the cycle
// emits their tokens plus exactly one bonus token, and the output is the
// concatenation of the cycles.
Verdict accepted_path_consistent(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  std::vector<int> output;
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const CycleTrace& trace = r.cycles[k];
    int parent = -1;
    for (int node : trace.accepted) {
      if (node < 0 || node >= tree.size() || tree.parents[static_cast<size_t>(node)] != parent)
        return Verdict::fail(
            fmt::format("cycle {}: accepted nodes {} are not a root path", k, tokens_text(trace.accepted)));
      parent = node;
    }
    if (trace.emitted.size() != trace.accepted.size() + 1)
      return Verdict::fail(
          fmt::format("cycle {}: emitted {} tokens for {} accepted nodes (expected accepted + 1 bonus)", k,
                      trace.emitted.size(), trace.accepted.size()),
          {{"cycle", double(k)},
           {"emitted", double(trace.emitted.size())},
           {"accepted", double(trace.accepted.size())}});
    for (size_t i = 0; i < trace.accepted.size(); ++i)
      if (trace.emitted[i] != tree.tokens[static_cast<size_t>(trace.accepted[i])])
        return Verdict::fail(
            fmt::format("cycle {}: emitted token {} is not the accepted node's token", k, i));
    output.insert(output.end(), trace.emitted.begin(), trace.emitted.end());
  }
  if (output != r.output)
    return Verdict::fail("output is not the concatenation of the cycles' emitted tokens");
  return Verdict::pass();
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant(
      {"lossless", "output equals plain greedy autoregressive decoding of the same length", tie_param()},
      lossless);
  f.invariant({"maximal_acceptance",
               "each cycle accepts exactly the (unique) longest root path matching the greedy continuation",
               tie_param()},
              maximal_acceptance);
  f.invariant({"tree_logits_match_path",
               "tree logits of node i equal autoregressive logits of context ++ path(i)",
               {field::tolerance(1e-9, 1e-9, "fp64 against fp64: only summation order differs")}},
              tree_logits_match_path);
  f.invariant({"mask_is_ancestor_closure",
               "node i attends to the whole context and exactly its ancestors and itself",
               {}},
              mask_is_ancestor_closure);
  f.invariant({"position_ids_by_depth", "position id of node i is P + d(i) - 1", {}}, position_ids_by_depth);
  f.invariant({"progress", "every cycle emits at least one token", {}}, progress);
  f.invariant({"accepted_path_consistent",
               "accepted nodes form a root path; a cycle emits their tokens plus one bonus",
               {}},
              accepted_path_consistent);
}

}  // namespace kprop::dflash
