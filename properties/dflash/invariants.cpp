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
  return {
      field::real("tie_margin", 1e-6, 0, 1e3,
                  "argmax gaps to a distinct logit below this are near-ties: the case is discarded, never "
                  "failed; exact ties of the model's tied tokens are judged (lowest index wins), and so is "
                  "the order of a near_tie model's pair (the sign of L[0] r, margin |L[0]|)")};
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
// The margin is argmax(model, ·)'s: tokens sharing the winner's output row
// (the model's tied group) equal it bit for bit in the oracle's logits and in
// the ones the target was given alike, so that tie is exact everywhere and
// judged by the lowest index; only a gap 0 <= g < tie_margin to a token with
// another row, which the two computations' rounding could close or open, is
// a near-tie. A near_tie model's pair counts |L[0]| (model.h): its order is
// the sign of L[0] r wherever it is computed.
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

// Each cycle's oracle against the target's own context (the prompt, then
// what the target emitted in the cycles before), so that one wrong cycle is
// reported once: the trial's oracle (oracle_of, shared with the named
// tensors) while the target emits what the oracle does, which leaves both in
// the same context; decoded here from the cycle where they part. Call
// cycle(k) for k = 0, 1, ... with advance(k) in between.
class TargetContextOracle {
 public:
  explicit TargetContextOracle(T& t) : t_(t), cached_(t.once<oracle_of>()), context_(t.input().prompt) {}
  const OracleCycle& cycle(size_t k) {
    if (!state_) return cached_.cycles[k];
    own_ = oracle_cycle(*state_, t_.input().cycles[k]);
    return own_;
  }
  // The target emitted `emitted` in cycle k.
  void advance(size_t k, const std::vector<int>& emitted) {
    context_.insert(context_.end(), emitted.begin(), emitted.end());
    if (state_) {
      for (int token : emitted) state_->push(token);
    } else if (emitted != cached_.cycles[k].emitted(t_.input().cycles[k])) {
      state_.emplace(t_.once<model_of>(), context_);  // the same pushes as advancing token by token
    }
  }

 private:
  T& t_;
  const Oracle& cached_;
  std::vector<int> context_;
  std::optional<Autoregressive> state_;
  OracleCycle own_;
};

Verdict maximal_acceptance(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  TargetContextOracle oracle(t);
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    // The oracle: the greedy continuation followed down the tree.
    const OracleCycle& o = oracle.cycle(k);
    if (o.margin < p.real("tie_margin")) return Verdict::discard("near-tie on the draft path");
    // Sibling tokens are distinct, so the matching path is unique: compare
    // the nodes, not only the count.
    const auto& accepted = r.cycles[k].accepted;
    if (accepted != o.path)
      return Verdict::fail(
          fmt::format("cycle {}: target accepted {} node(s) {}, the longest matching root path is {} {}", k,
                      accepted.size(), tokens_text(accepted), o.path.size(), tokens_text(o.path)),
          {{"cycle", double(k)},
           {"accepted", double(accepted.size())},
           {"oracle_accepted", double(o.path.size())}});
    if (k + 1 < c.cycles.size() && k + 1 < r.cycles.size()) oracle.advance(k, r.cycles[k].emitted);
  }
  return Verdict::pass();
}

Verdict tree_logits_match_path(T& t, const Values& p) {
  const Case& c = t.input();
  const Result& r = t.target();
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  double worst = 0;  // the largest error / allowed (kErrorRatio): what --search climbs
  TargetContextOracle oracle(t);
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    const CycleTrace& trace = r.cycles[k];
    if (trace.logits.size() != static_cast<size_t>(tree.size()) + 1)
      return Verdict::fail(fmt::format("cycle {}: {} logit rows, expected N + 1 = {}", k, trace.logits.size(),
                                       tree.size() + 1));
    // Row 0 predicts after the context; row 1 + i after context ++ path(i).
    // The first failing row in row order is reported.
    const OracleCycle& o = oracle.cycle(k);
    for (int row = 0; row <= tree.size(); ++row) {
      const Logits& expected = row == 0 ? o.context_logits : o.node_logits[static_cast<size_t>(row - 1)];
      const Logits& got = trace.logits[static_cast<size_t>(row)];
      for (size_t v = 0; v < expected.size(); ++v) {
        if (!within(got.at(v), expected[v], atol, rtol))
          return Verdict::fail(
              fmt::format("cycle {}: {} logit[{}] = {:.17g}, autoregressive on its path gives {:.17g}", k,
                          row == 0 ? std::string("context row") : fmt::format("node {}", row - 1), v,
                          got.at(v), expected[v]),
              {{"cycle", double(k)},
               {"node", double(row - 1)},
               {"logit", got.at(v)},
               {"expected", expected[v]},
               {"abs_error", std::fabs(got.at(v) - expected[v])}});
        worst = std::max(worst, within_ratio(got.at(v), expected[v], atol, rtol));
      }
    }
    if (k + 1 < c.cycles.size() && k + 1 < r.cycles.size()) oracle.advance(k, trace.emitted);
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

// The context length P the target reports for cycle k, checked against the
// context it built: the prompt and every token it emitted before. Without
// this a P that is stale but used consistently (the prompt alone from cycle
// 1 on) passed the mask and position-id checks, which read P from the trace.
std::optional<Verdict> wrong_context_length(const Case& c, const Result& r, size_t k) {
  size_t want = c.prompt.size();
  for (size_t j = 0; j < k; ++j) want += r.cycles[j].emitted.size();
  const int P = r.cycles[k].context_length;
  if (P == static_cast<int>(want)) return std::nullopt;
  return Verdict::fail(
      fmt::format("cycle {}: context length P = {}, but the prompt and the tokens emitted before hold {}", k,
                  P, want),
      {{"cycle", double(k)}, {"context_length", double(P)}, {"expected", double(want)}});
}

Verdict mask_is_ancestor_closure(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  for (size_t k = 0; k < c.cycles.size() && k < r.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    if (auto v = wrong_context_length(c, r, k)) return *v;
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
    if (auto v = wrong_context_length(c, r, k)) return *v;
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
