// Invariants that cannot observe a case say so: for each, a case it cannot
// observe must be discarded (or n/a for a target it cannot observe), never
// passed.
#include <gtest/gtest.h>

#include "kprop/spec.h"
#include "tests/support/spec_error.h"

namespace kprop {
namespace {

Verdict check(const std::string& family, const std::string& invariant, const std::string& case_yaml,
              const std::string& target = "reference") {
  const Family* f = Registry::instance().find(family);
  EXPECT_NE(f, nullptr) << family;
  const int inv = f->find_invariant(invariant), t = f->find_implementation(target),
            r = f->find_implementation("reference");
  EXPECT_GE(inv, 0) << invariant;
  EXPECT_GE(t, 0) << target;
  const AnyCase c = f->from_yaml(YAML::Load(case_yaml));
  return f->begin_trial(c, size_t(t), size_t(r))
      ->check(size_t(inv), Values::defaults(f->invariants()[size_t(inv)].params));
}

const char* kCausal = R"(
shape: {batch: 1, heads_q: 1, heads_kv: 1, nq: 2, nk: 2, dim: 1}
tiles: {q: 1, k: 1}
dtype: f64
mask: causal
q: [[1], [2]]
k: [[1], [-1]]
v: [[1], [2]]
d_out: [[1], [-1]]
)";

const char* kSingle = R"(
shape: {batch: 1, heads_q: 1, heads_kv: 1, nq: 1, nk: 1, dim: 1}
tiles: {q: 1, k: 1}
dtype: f64
mask: none
q: [[1]]
k: [[1]]
v: [[1]]
d_out: [[1]]
)";

std::string forward(const char* c) {  // the forward case: no d_out
  std::string s = c;
  return s.substr(0, s.find("d_out:"));
}

TEST(Vacuous, AttentionPermutationEquivarianceDiscardsCausalAndSingleCases) {
  for (const char* target : {"reference", "tiled"}) {
    EXPECT_EQ(check("attention.fwd", "permutation_equivariance", forward(kCausal), target).outcome,
              Outcome::discard);
    EXPECT_EQ(check("attention.fwd", "permutation_equivariance", forward(kSingle), target).outcome,
              Outcome::discard);
  }
  EXPECT_EQ(check("attention.bwd", "permutation_equivariance", kCausal).outcome, Outcome::discard);
  EXPECT_EQ(check("attention.bwd", "permutation_equivariance", kSingle).outcome, Outcome::discard);
}

TEST(Vacuous, AttentionTileSizeInvarianceDiscardsASingleTiling) {
  EXPECT_EQ(check("attention.fwd", "tile_size_invariance", forward(kSingle)).outcome, Outcome::discard);
  EXPECT_EQ(check("attention.bwd", "tile_size_invariance", kSingle).outcome, Outcome::discard);
}

TEST(Vacuous, AttentionMaskedRowsZeroDiscardsCasesWithoutMaskedRows) {
  EXPECT_EQ(check("attention.fwd", "masked_rows_zero", forward(kSingle)).outcome, Outcome::discard);
  EXPECT_EQ(check("attention.bwd", "masked_rows_zero", kSingle).outcome, Outcome::discard);
  // Observed when there is one: Nq > Nk causal leaves row 0 fully masked.
  const std::string masked = R"(
shape: {batch: 1, heads_q: 1, heads_kv: 1, nq: 2, nk: 1, dim: 1}
tiles: {q: 1, k: 1}
dtype: f64
mask: causal
q: [[1], [2]]
k: [[1]]
v: [[1]]
)";
  EXPECT_EQ(check("attention.fwd", "masked_rows_zero", masked).outcome, Outcome::pass);
}

TEST(Vacuous, AttentionWorkspaceIsNotApplicableToTheReference) {
  EXPECT_EQ(check("attention.fwd", "workspace_bounded", forward(kSingle)).outcome, Outcome::not_applicable);
  EXPECT_EQ(check("attention.bwd", "workspace_bounded", kSingle).outcome, Outcome::not_applicable);
}

TEST(Vacuous, LayernormConstantRowsDiscardsCasesWithoutOne) {
  const std::string c = R"(
dtype: f64
eps: 1e-5
x: [[0, 1]]
gamma: [1, 1]
beta: [0, 0]
dy: [[1, 1]]
)";
  EXPECT_EQ(check("layernorm", "constant_rows", c).outcome, Outcome::discard);
}

TEST(Vacuous, TernaryTokenIndependenceDiscardsOneToken) {
  EXPECT_EQ(check("ternary", "token_independence",
                  "{tokens: 1, in_features: 1, out_features: 1, x: [1], w: [1], dy: [1]}")
                .outcome,
            Outcome::discard);
}

TEST(Vacuous, BeamSortedDistinctDiscardsOneHypothesis) {
  const std::string c = R"(
model: {vocab: 2, eos: 0, seed: 1, scale: 1, eos_bias: 0, eos_slope: 0, sharpen: 0, shift: 0}
prompts: [[0]]
beam_width: 1
max_new_tokens: 2
alpha: 0
)";
  EXPECT_EQ(check("beam", "sorted_distinct", c).outcome, Outcome::discard);
}

TEST(Vacuous, SoftmaxSortedDiscardsKOne) {
  EXPECT_EQ(check("softmax_topk", "sorted", "{dtype: f64, k: 1, block: 1, logits: [[0, 1]]}").outcome,
            Outcome::discard);
}

// Invariants that need something of the domain say so when the spec loads.
TEST(InvariantNeeds, AnF32OnlyDomainRejectsFiniteDifferences) {
  const std::string text = R"(spec: t
family: layernorm
domain:
  dtype: [f32]
invariants:
  - matches_reference
  - finite_differences
)";
  const std::string f32_only = testing::spec_load_error(text, "t.yaml");
  ASSERT_NE(f32_only, "") << "loaded";
  EXPECT_NE(
      f32_only.find("t.yaml:7:5: invariant finite_differences needs f64 cases but domain.dtypes is [f32]; "
                    "add f64 or drop the invariant"),
      std::string::npos)
      << f32_only;
  // The spec's own gap stays its error under an unrelated --domain (it was
  // an n/a, and the run passed), and a profile's gap names the profile.
  EXPECT_THROW(parse_spec(text, "t.yaml", "", "{rows: [1, 2]}"), InputError);
  const std::string narrow = testing::spec_load_error(
      "spec: t\nfamily: layernorm\ndomain: {dtype: [f32, f64]}\ninvariants: [finite_differences]\n"
      "profiles:\n  narrow:\n    domain: {dtype: [f16]}\n",
      "t.yaml", "narrow");
  ASSERT_NE(narrow, "") << "loaded";
  EXPECT_NE(narrow.find("needs f64 cases but domain.dtypes is [f16]; add f64 or drop the invariant (profile "
                        "narrow)"),
            std::string::npos)
      << narrow;
  // With no list, the default leaves out what the domain cannot exercise.
  const Spec s = parse_spec("spec: t\nfamily: layernorm\ndomain: {dtype: [f32]}\n", "t.yaml");
  for (const auto& use : s.invariants) EXPECT_NE(use.name, "finite_differences");
  EXPECT_FALSE(s.invariants.empty());
}

// The same need unmet because --domain narrowed a domain that met it: the
// spec is right, the run cannot observe the invariant, so it is n/a (with
// the reason) on every case, never a pass and never a load error.
TEST(InvariantNeeds, ADomainOverrideThatStarvesAnInvariantMakesItNotApplicable) {
  const std::string text = R"(spec: t
family: layernorm
domain:
  dtype: [f32, f64]
invariants:
  - matches_reference
  - finite_differences
)";
  const Spec s = parse_spec(text, "t.yaml", "", "{dtype: [f32]}");
  ASSERT_EQ(s.invariants.size(), 2u);
  EXPECT_EQ(s.invariants[1].name, "finite_differences");
  EXPECT_NE(s.invariants[1].unobservable.find("--domain leaves it nothing to observe: it needs f64 cases"),
            std::string::npos)
      << s.invariants[1].unobservable;
  EXPECT_TRUE(s.invariants[0].unobservable.empty());
}

TEST(InvariantNeeds, OtherNeedsAreChecked) {
  EXPECT_THROW(
      parse_spec("spec: t\nfamily: ternary\ndomain: {tokens: [1, 1]}\ninvariants: [token_independence]\n",
                 "t.yaml"),
      InputError);
  EXPECT_THROW(parse_spec("spec: t\nfamily: attention.fwd\ndomain: {masks: [causal]}\n"
                          "invariants: [permutation_equivariance]\n",
                          "t.yaml"),
               InputError);
  EXPECT_NO_THROW(
      parse_spec("spec: t\nfamily: attention.fwd\ndomain: {masks: [none]}\n"
                 "invariants: [permutation_equivariance]\n",
                 "t.yaml"));
}

}  // namespace
}  // namespace kprop
