// DFlash: the kernels on hand-built trees, the shrinker's minimal trees, and
// every mutant killed under the committed spec with fixed seeds.
#include "kernels/dflash/dflash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kprop/runner.h"
#include "properties/dflash/family.h"
#include "tests/support/registered.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::dflash {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace kernels {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/dflash.yaml";

// Greedy continuation of `context` for `n` tokens.
std::vector<int> greedy(const Case& c, std::vector<int> context, int n) {
  const TinyLM model(c.model);
  Autoregressive ar(model, context);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(ar.next().index);
    ar.push(out.back());
  }
  return out;
}

Case base_case() {
  Case c;
  c.prompt = {1, 2, 0};
  c.model = {8, 8, 2, 2, 42};
  return c;
}

TEST(DflashKernels, ChainOfGreedyTokensIsFullyAccepted) {
  Case c = base_case();
  const auto g = greedy(c, c.prompt, 4);
  c.cycles = {{{g[0], g[1], g[2]}, {-1, 0, 1}}};
  const Result r = reference(c);
  ASSERT_EQ(r.cycles.size(), 1u);
  EXPECT_EQ(r.cycles[0].accepted, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.output, g);  // three accepted + the bonus
}

TEST(DflashKernels, ParentIndexedVerificationOnABranchingTree) {
  Case c = base_case();
  const auto g = greedy(c, c.prompt, 2);
  const int wrong = (g[0] + 1) % c.model.vocab;
  // Root 0 is wrong, root 1 is right, node 2 (child of root 1) is right.
  c.cycles = {{{wrong, g[0], g[1]}, {-1, -1, 1}}};
  const Result r = reference(c);
  EXPECT_EQ(r.cycles[0].accepted, (std::vector<int>{1, 2}));
  EXPECT_EQ(r.output, greedy(c, c.prompt, 3));
  // The positional mutant reads node 1's prediction from L[P] (after the wrong root).
  const Result bad = mutants()[0].run(c);
  EXPECT_NE(bad.output, r.output);
}

// The auditor's minimal case: a 2-token model whose two output rows are one
// (tied = 1), so every logits row is an exact tie and argmax is token 0. A
// root drafting token 1 is rejected and the bonus is 0; an argmax that keeps
// the last of tied maxima accepts the root and emits 1, 1. The oracle's
// margin is no near-tie (no token outside the tied group), so both
// invariants judge the case.
TEST(DflashKernels, ExactTieGoesToTheLowestIndex) {
  Case c;
  c.prompt = {1};
  c.model = {2, 4, 1, 1, 7, 1};  // vocab 2, tied 1: what shrinking reaches
  c.cycles = {{{1}, {-1}}};
  const Result r = reference(c), kv = kv_cached(c);
  EXPECT_TRUE(r.cycles[0].accepted.empty());
  EXPECT_EQ(r.output, (std::vector<int>{0}));
  EXPECT_EQ(kv.output, r.output);
  for (const Logits& row : r.cycles[0].logits) EXPECT_EQ(row[0], row[1]);
  EXPECT_EQ(oracle_of(c).cycles[0].margin, std::numeric_limits<double>::infinity());
  const Result bad = speculative_generate(c, mutant_pipeline("argmax_last_on_tie"), false);
  EXPECT_EQ(bad.output, (std::vector<int>{1, 1}));
}

// A near-tied model (model.h, near_tie): token 1's logit is token 0's times
// (1 + r) in every row, r = ±2^-40, far below f32's 2^-24 and above f64's
// ulps. Where the pair holds the largest logits, the sign of L[0] r picks the
// winner in f64; rounded to f32 the two are one value and the lowest index
// wins. The oracle's margin is |L[0]|, not the 2^-40 gap, so lossless and
// maximal_acceptance judge the case; argmax_f32 decides it wrong whenever
// token 1 is the f64 winner.
TEST(DflashKernels, NearTieIsDecidedInF64) {
  int above = 0, below = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed)
    for (const double r : {0x1p-40, -0x1p-40}) {
      Case c;
      c.prompt = {0};
      c.model = {3, 4, 1, 1, seed, 0, r};
      c.cycles = {{{1}, {-1}}};  // a root drafting token 1
      const Result ref = reference(c);
      const Logits& row = ref.cycles[0].logits[0];
      EXPECT_EQ(row[1], row[0] * (1 + r));
      EXPECT_NE(row[1], row[0]);
      EXPECT_EQ(static_cast<float>(row[1]), static_cast<float>(row[0]));
      const Argmax a = argmax(TinyLM(c.model), row);
      if (a.index > 1) continue;
      EXPECT_EQ(a.margin, std::min(std::fabs(row[0]), row[static_cast<size_t>(a.index)] - row[2]));
      EXPECT_GE(oracle_of(c).cycles[0].margin, 1e-6) << "seed " << seed;
      const Result bad = speculative_generate(c, mutant_pipeline("argmax_f32"), false);
      if (a.index == 1) {
        ++above;
        EXPECT_EQ(ref.cycles[0].accepted, (std::vector<int>{0}));
        EXPECT_TRUE(bad.cycles[0].accepted.empty());
        EXPECT_EQ(bad.output[0], 0);
      } else {
        ++below;
        EXPECT_EQ(bad.output, ref.output);
      }
      EXPECT_EQ(kv_cached(c).output, ref.output);
    }
  EXPECT_GE(above, 10);
  EXPECT_GE(below, 10);
}

// A case file without near_tie reads as before (0); one with it round-trips
// bit for bit.
TEST(DflashCodec, NearTieRoundTrips) {
  Case c = base_case();
  c.cycles = {{{1}, {-1}}};
  EXPECT_EQ(Traits::to_yaml(c)["model"]["near_tie"].IsDefined(), false);
  c.model.near_tie = -0x1.2345p-33;
  const Case back = Traits::from_yaml(YAML::Load(YAML::Dump(Traits::to_yaml(c))));
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.model.near_tie, c.model.near_tie);
  c.model.tied = 1;
  EXPECT_NE(validate(c), "");  // near_tie and tied both use token 1
}

TEST(DflashKernels, KvCachedMatchesReference) {
  Case c = base_case();
  const auto g = greedy(c, c.prompt, 3);
  c.cycles = {{{g[0], 5, g[1]}, {-1, -1, 0}}, {{3, 4}, {-1, 0}}};
  const Result a = reference(c), b = kv_cached(c);
  EXPECT_EQ(a.output, b.output);
  for (size_t k = 0; k < a.cycles.size(); ++k)
    for (size_t row = 0; row < a.cycles[k].logits.size(); ++row)
      for (size_t v = 0; v < a.cycles[k].logits[row].size(); ++v)
        EXPECT_NEAR(a.cycles[k].logits[row][v], b.cycles[k].logits[row][v], 1e-10);
}

TEST(DflashKernels, ValidateRejectsDuplicateSiblingsAndBadParents) {
  Case c = base_case();
  c.cycles = {{{1, 1}, {-1, -1}}};
  EXPECT_NE(validate(c), "");
  c.cycles = {{{1, 2}, {-1, 1}}};
  EXPECT_NE(validate(c), "");
  c.cycles = {{{1, 2}, {-1, 0}}};
  EXPECT_EQ(validate(c), "");
}

TEST(DflashCodec, BadCaseNamesLineAndColumn) {
  const YAML::Node n = YAML::Load(
      "prompt: [1]\nmodel: {vocab: 3, d_model: 4, layers: 1, heads: 1, seed: 1}\ncycles:\n  - {tokens: [1, "
      "1], parents: [-1, -1]}\n");
  testing::expect_bad_case<Traits>(YAML::Dump(n), "sibling");  // duplicate sibling tokens
}

// Shrinking a failing case for positional_logits reaches the two-root tree.
TEST(DflashShrinker, PositionalLogitsShrinksToTwoRoots) {
  for (const Finding& f : testing::counterexamples(kSpec, "positional_logits", 7)) {
    EXPECT_EQ(f.stats.size, 2);
    const Case c = Traits::from_yaml(YAML::Load(f.case_yaml));
    ASSERT_EQ(c.cycles.size(), 1u);
    EXPECT_EQ(c.cycles[0].parents, (std::vector<int>{-1, -1}));
  }
}

// depth_logits needs a depth-2 node under a root other than node 0: 3 nodes.
TEST(DflashShrinker, DepthLogitsShrinksToAtMostThreeNodes) {
  for (uint64_t seed : {1u, 5u, 9u})
    for (const Finding& f : testing::counterexamples(kSpec, "depth_logits", seed))
      EXPECT_LE(f.stats.size, 3) << f.case_yaml;
}

// Re-drafting a case for the acceptance pattern it already has changes no
// token: every cycle is re-drafted against the context a correct verifier
// reaches (prompt plus the earlier cycles' accepted paths and bonus tokens),
// not against the prompt alone.
TEST(DflashShrinker, RedraftForItsOwnPatternIsTheIdentity) {
  const Spec spec = load_spec(kSpec);
  int multi_cycle = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const auto bytes = spec.family->seed_bytes(spec.domain, seed, 40 + int(seed % 60));
    const AnyCase any = spec.family->from_bytes(bytes.data(), bytes.size(), spec.domain);
    const Case& c = *static_cast<const Case*>(any.get());
    multi_cycle += c.cycles.size() > 1;
    const Case r = redraft_all(c, acceptance_pattern(c));
    ASSERT_EQ(r.cycles.size(), c.cycles.size());
    for (size_t k = 0; k < c.cycles.size(); ++k)
      EXPECT_EQ(r.cycles[k].tokens, c.cycles[k].tokens) << "seed " << seed << ", cycle " << k;
  }
  EXPECT_GE(multi_cycle, 10);  // the property is about the later cycles
}

// Ancestor sets packed as uint32 bitmasks alias node j with node j + 32:
// right up to 32 nodes, wrong from 33 (node 0 then attends to node 32).
TEST(DflashKernels, U32BitmaskMaskAliasesPast32Nodes) {
  const Pipeline good = correct_pipeline(), bad = mutant_pipeline("mask_u32_bitmask");
  for (int n : {32, 33, 64, 65}) {
    DraftTree t;
    for (int i = 0; i < n; ++i) t.tokens.push_back(i % 7), t.parents.push_back(i < 7 ? -1 : i - 7);
    CycleTrace a, b;
    build_tree_inputs(good, t, 2, a);
    build_tree_inputs(bad, t, 2, b);
    EXPECT_EQ(a.mask == b.mask, n <= 32) << n << " nodes";
  }
}

// The expressions that compare a target's logits or acceptance with the
// autoregressive oracle judge it on its own context (target.oracle_*): a
// target whose mask, position ids and logits are right but whose cycles emit
// other tokens than the oracle's (no_bonus_token: every later cycle runs on
// a shorter context) passes them, as it passes tree_logits_match_path. They
// compared with oracle.* (the oracle's own context) and failed it. A kernel
// with wrong logits still fails them.
TEST(DflashExpressions, JudgeTheTargetOnItsOwnContext) {
  const std::string examples = std::string(KPROP_SOURCE_DIR) + "/specs/examples/dflash_expr.yaml";
  const std::vector<std::pair<std::string, std::vector<std::string>>> specs = {
      {kSpec, {"parent_indexed_logits_expr", "tree_logits_match_path", "mask_is_ancestor_closure"}},
      {examples,
       {"accepted_is_greedy_path", "tree_logits_match_path_expr", "context_logits_match_expr",
        "parent_indexed_logits_expr", "reorder_siblings_same_path"}}};
  for (const auto& [path, invariants] : specs) {
    RunOptions o = testing::no_corpus_run("no_bonus_token", 20261122);
    o.only_invariants = invariants;
    o.trials = 100;
    o.scratch_dir = ::testing::TempDir() + "kprop_dflash_own_context";
    const RunReport r = run_spec(load_spec(path), o);
    EXPECT_EQ(r.status, RunStatus::passed) << path;
    for (const auto& inv : r.invariants) {
      EXPECT_EQ(inv.status, InvariantStatus::passed) << path << ": " << inv.name;
      EXPECT_GE(inv.passed, 100) << path << ": " << inv.name;
    }
  }
  for (const char* bug : {"index_positions", "parent_only_mask", "sibling_leak_mask"}) {
    RunOptions o = testing::first_failure(bug, 20261122, {"parent_indexed_logits_expr"});
    o.scratch_dir = ::testing::TempDir() + "kprop_dflash_own_context";
    EXPECT_EQ(run_spec(load_spec(kSpec), o).status, RunStatus::failed) << bug;
  }
}

}  // namespace kernels
}  // namespace
}  // namespace kprop::dflash
