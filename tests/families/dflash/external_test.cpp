// dflash as an external target (include/kprop/abi/dflash.h): C++ entry points
// with the ABI signatures run in process, and the NumPy worker of
// examples/python/dflash_verify.py through the exec: protocol. A correct
// pipeline passes the committed spec; each planted bug fails on the invariant
// that names it, with a shrunk counterexample.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/dflash/dflash.h"
#include "kprop/abi.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "tests/support/python_worker.h"

namespace kprop::dflash {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace external {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/dflash.yaml";

RunOptions quick(int64_t trials, std::vector<std::string> only = {}) {
  RunOptions o;
  o.seed = 20261122;
  o.trials = trials;
  o.write_corpus = false;
  o.only_invariants = std::move(only);
  return o;
}

// ---- in-process entry points: kprop's own pipeline stages behind the C ABI.
// The pipeline they run: correct, or with one mutant's stage planted.
Pipeline g_pipeline = correct_pipeline();

int32_t& i32_at(const kprop_tensor& t, int64_t i) {
  return static_cast<int32_t*>(t.data)[i * t.strides[0]];
}

int fail(char* error, size_t error_size, const char* why) {
  std::snprintf(error, error_size, "%s", why);
  return KPROP_ERROR;
}

bool read_tree(const kprop_tensor& tokens, const kprop_tensor& parents, DraftTree& tree) {
  if (tokens.dtype != KPROP_I32 || parents.dtype != KPROP_I32 || tokens.ndim != 1 || parents.ndim != 1)
    return false;
  for (int64_t i = 0; i < tokens.shape[0]; ++i) {
    tree.tokens.push_back(i32_at(tokens, i));
    tree.parents.push_back(i32_at(parents, i));
  }
  return true;
}

int tree_inputs(const kprop_dflash_tree_inputs_args* a, char* error, size_t error_size) {
  DraftTree tree;
  if (!read_tree(a->tokens, a->parents, tree)) return fail(error, error_size, "tokens/parents: want [N] i32");
  CycleTrace trace;
  build_tree_inputs(g_pipeline, tree, a->context_length, trace);
  const int64_t columns = a->context_length + tree.size();
  for (int64_t i = 0; i < tree.size(); ++i) {
    i32_at(a->position_ids, i) = trace.position_ids[static_cast<size_t>(i)];
    for (int64_t j = 0; j < columns; ++j) {
      const int64_t index[2] = {i, j};
      static_cast<uint8_t*>(a->mask.data)[kprop_offset(&a->mask, index)] =
          trace.mask[static_cast<size_t>(i * columns + j)];
    }
  }
  return KPROP_OK;
}

int verify(const kprop_dflash_verify_args* a, char* error, size_t error_size) {
  DraftTree tree;
  if (!read_tree(a->tokens, a->parents, tree)) return fail(error, error_size, "tokens/parents: want [N] i32");
  if (a->logits.dtype != KPROP_F64 || a->logits.ndim != 2) return fail(error, error_size, "logits: want f64");
  CycleTrace trace;
  for (int64_t r = 0; r < a->logits.shape[0]; ++r) {
    Logits row;
    for (int64_t v = 0; v < a->logits.shape[1]; ++v) {
      const int64_t index[2] = {r, v};
      row.push_back(static_cast<const double*>(a->logits.data)[kprop_offset(&a->logits, index)]);
    }
    trace.logits.push_back(std::move(row));
  }
  verify_tree(g_pipeline, tree, trace);
  for (int64_t i = 0; i < tree.size(); ++i)
    i32_at(a->accepted, i) =
        i < static_cast<int64_t>(trace.accepted.size()) ? trace.accepted[static_cast<size_t>(i)] : -1;
  i32_at(a->bonus, 0) = g_pipeline.bonus_token ? trace.emitted.back() : -1;
  return KPROP_OK;
}

// Claims a node the tree does not have: kprop cannot build the next context
// from it, so it is a target error rather than a verdict.
int verify_out_of_tree(const kprop_dflash_verify_args* a, char*, size_t) {
  for (int64_t i = 0; i < a->accepted.shape[0]; ++i)
    i32_at(a->accepted, i) = static_cast<int32_t>(a->accepted.shape[0]);
  i32_at(a->bonus, 0) = 0;
  return KPROP_OK;
}

// Greedy verification written against the ABI alone, with an argmax that
// keeps the LAST of exactly tied maxima (`>=`): the contract takes the lowest
// index. Wrong only where two logits are exactly equal, which the model's
// own projection rows never give: the spec must draw tied models.
int verify_last_on_tie(const kprop_dflash_verify_args* a, char*, size_t) {
  const int64_t N = a->tokens.shape[0], V = a->logits.shape[1];
  auto predict = [&](int64_t row) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v) {
      const int64_t at[2] = {row, v}, top[2] = {row, best};
      const auto* x = static_cast<const double*>(a->logits.data);
      if (x[kprop_offset(&a->logits, at)] >= x[kprop_offset(&a->logits, top)]) best = v;
    }
    return static_cast<int32_t>(best);
  };
  int64_t count = 0;
  for (int32_t current = -1;;) {
    int32_t next = -1;
    const int32_t want = predict(current + 1);
    for (int64_t i = 0; i < N && next < 0; ++i)
      if (i32_at(a->parents, i) == current && i32_at(a->tokens, i) == want) next = static_cast<int32_t>(i);
    if (next < 0) break;
    i32_at(a->accepted, count++) = next;
    current = next;
  }
  for (int64_t i = count; i < N; ++i) i32_at(a->accepted, i) = -1;
  i32_at(a->bonus, 0) = predict(count == 0 ? 0 : i32_at(a->accepted, count - 1) + 1);
  return KPROP_OK;
}

const testing::EntryPoints kEntryPoints = {
    {"kprop_dflash_tree_inputs", reinterpret_cast<void*>(&tree_inputs)},
    {"kprop_dflash_verify", reinterpret_cast<void*>(&verify)}};

const Counterexample* counterexample(const RunReport& report, const std::string& invariant) {
  for (const InvariantReport& r : report.invariants)
    if (r.name == invariant && r.status == InvariantStatus::failed && r.counterexample)
      return &*r.counterexample;
  return nullptr;
}

TEST(DflashExternal, CorrectPipelinePassesInProcess) {
  g_pipeline = correct_pipeline();
  const RunReport report = testing::run_in_process(kSpec, kEntryPoints, quick(80));
  EXPECT_TRUE(testing::spec_passes(report));
  for (const InvariantReport& r : report.invariants)
    EXPECT_EQ(r.status, InvariantStatus::passed) << r.name << " must observe an external target";
}

// Each of the family's mutants planted in one ABI op: the invariant that
// names its bug catches it through the external path.
struct PlantedBug {
  const char* mutant;
  const char* invariant;
};
void PrintTo(const PlantedBug& bug, std::ostream* out) {
  *out << bug.mutant << " on " << bug.invariant;
}
class DflashExternalBug : public ::testing::TestWithParam<PlantedBug> {};

TEST_P(DflashExternalBug, FailsOnItsInvariant) {
  const PlantedBug bug = GetParam();
  g_pipeline = mutant_pipeline(bug.mutant);
  const RunReport report = testing::run_in_process(kSpec, kEntryPoints, quick(200, {bug.invariant}));
  g_pipeline = correct_pipeline();
  ASSERT_EQ(report.status, RunStatus::failed) << bug.mutant << " survived " << bug.invariant;
  const Counterexample* cex = counterexample(report, bug.invariant);
  ASSERT_NE(cex, nullptr);
  EXPECT_GT(cex->shrink_steps, 0) << cex->case_yaml;
}

INSTANTIATE_TEST_SUITE_P(AllMutants, DflashExternalBug,
                         ::testing::Values(PlantedBug{"positional_logits", "maximal_acceptance"},
                                           PlantedBug{"depth_logits", "maximal_acceptance"},
                                           PlantedBug{"no_subtree_invalidation", "maximal_acceptance"},
                                           PlantedBug{"no_bonus_token", "progress"},
                                           PlantedBug{"argmax_last_on_tie", "maximal_acceptance"},
                                           PlantedBug{"argmax_last_on_tie", "lossless"},
                                           PlantedBug{"argmax_f32", "maximal_acceptance"},
                                           PlantedBug{"argmax_f32", "lossless"},
                                           PlantedBug{"index_positions", "position_ids_by_depth"},
                                           PlantedBug{"index_positions", "tree_logits_match_path"},
                                           PlantedBug{"parent_only_mask", "mask_is_ancestor_closure"},
                                           PlantedBug{"parent_only_mask", "tree_logits_match_path"},
                                           PlantedBug{"sibling_leak_mask", "mask_is_ancestor_closure"},
                                           PlantedBug{"sibling_leak_mask", "tree_logits_match_path"}),
                         [](const auto& info) {
                           return std::string(info.param.mutant) + "_" + info.param.invariant;
                         });

// An argmax that breaks exact ties toward the highest index passed every
// seed before the spec drew models with exactly tied logits (model.tie_rate)
// and before the invariants judged exact ties instead of discarding them as
// near-ties.
TEST(DflashExternal, ArgmaxLastOnExactTieFails) {
  g_pipeline = correct_pipeline();
  const testing::EntryPoints last_on_tie = {
      {"kprop_dflash_tree_inputs", reinterpret_cast<void*>(&tree_inputs)},
      {"kprop_dflash_verify", reinterpret_cast<void*>(&verify_last_on_tie)}};
  for (const char* invariant : {"maximal_acceptance", "lossless"}) {
    const RunReport report = testing::run_in_process(kSpec, last_on_tie, quick(200, {invariant}));
    ASSERT_EQ(report.status, RunStatus::failed) << invariant;
    const Counterexample* cex = counterexample(report, invariant);
    ASSERT_NE(cex, nullptr) << invariant;
    EXPECT_NE(cex->case_yaml.find("tied"), std::string::npos) << cex->case_yaml;
  }
}

TEST(DflashExternal, PositionalLogitsShrinksToTwoRoots) {
  g_pipeline = mutant_pipeline("positional_logits");
  const RunReport report = testing::run_in_process(kSpec, kEntryPoints, quick(200, {"maximal_acceptance"}));
  g_pipeline = correct_pipeline();
  const Counterexample* cex = counterexample(report, "maximal_acceptance");
  ASSERT_NE(cex, nullptr);
  EXPECT_EQ(cex->stats.size, 2) << cex->case_yaml;  // docs/FAMILIES.md, dflash: a 2-node tree (two roots)
}

TEST(DflashExternal, AcceptedNodeOutsideTheTreeIsATargetError) {
  const testing::EntryPoints entries = {
      {"kprop_dflash_tree_inputs", reinterpret_cast<void*>(&tree_inputs)},
      {"kprop_dflash_verify", reinterpret_cast<void*>(&verify_out_of_tree)}};
  const RunReport report = testing::run_in_process(kSpec, entries, quick(5));
  EXPECT_EQ(report.status, RunStatus::crashed);
  EXPECT_NE(report.detail.find("is not a node"), std::string::npos) << report.detail;
}

// ---- the NumPy worker through the exec: protocol.
std::string worker(const std::string& args = "") {
  return kprop_test::python_worker("dflash_verify.py", args);
}

RunReport run_worker(const std::string& target, RunOptions options) {
  options.target = target;
  return run_spec(load_spec(kSpec), options);
}

TEST(DflashExternalWorker, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  const RunReport report = run_worker(worker(), quick(60));
  EXPECT_TRUE(testing::spec_passes(report));
}

TEST(DflashExternalWorker, PositionalLogitsBugShrinksToTwoRoots) {
  KPROP_REQUIRE_PYTHON();
  const RunReport report = run_worker(worker("--bug positional_logits"), quick(200, {"maximal_acceptance"}));
  ASSERT_EQ(report.status, RunStatus::failed);
  const Counterexample* cex = counterexample(report, "maximal_acceptance");
  ASSERT_NE(cex, nullptr);
  EXPECT_GT(cex->shrink_steps, 0);
  EXPECT_EQ(cex->stats.size, 2) << cex->case_yaml;
}

TEST(DflashExternalWorker, SiblingLeakMaskBugFails) {
  KPROP_REQUIRE_PYTHON();
  const RunReport report = run_worker(worker("--bug sibling_leak_mask"),
                                      quick(200, {"mask_is_ancestor_closure", "tree_logits_match_path"}));
  ASSERT_EQ(report.status, RunStatus::failed);
  EXPECT_NE(counterexample(report, "mask_is_ancestor_closure"), nullptr);
  EXPECT_NE(counterexample(report, "tree_logits_match_path"), nullptr);
}

}  // namespace external
}  // namespace
}  // namespace kprop::dflash
