// Helpers the op family's tests share (op_test.cpp, half_test.cpp, external_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/op/op.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/op/family.h"
#include "tests/support/spec_error.h"

namespace kprop::op::testing {

inline const Case& as_case(const AnyCase& c) {
  return *static_cast<const Case*>(c.get());
}

// A case through its corpus YAML and back.
inline Case round_trip(const OpFamily& f, const Case& c) {
  YAML::Emitter out;
  out << Traits::to_yaml(c);
  return as_case(f.from_yaml(YAML::Load(out.c_str())));
}

inline const OpFamily& op_family(const Spec& spec) {
  const auto* f = dynamic_cast<const OpFamily*>(spec.family);
  if (!f) throw std::logic_error("spec " + spec.name + " is not an op spec");
  return *f;
}

// A causal conv's carried state of K - 1 columns (S == K - 1) and a
// stride's output (T2 == 2 * T), tied by affine relations; y and z copy the
// inputs (tests of the relations themselves).
inline const std::string kAffineRelationsSpec = R"(spec: conv_state
family: op
op:
  dims: {B: [1, 3], K: [2, 5], S: [1, 8], T: [1, 6], T2: [1, 20]}
  relations: ["S == K - 1", "T2 == 2 * T", "T2 >= S + 1"]
  inputs:
    state: {shape: [B, S], dtype: [f64]}
    w: {shape: [B, T2], dtype: [f64]}
  outputs: {y: {shape: [B, S]}, z: {shape: [B, T2]}}
  reference: {y: state, z: w}
target: reference
)";

// The loader's message for `text`, or "" when it loads.
inline std::string load_error(const std::string& text) {
  return kprop::testing::spec_load_error(text, "op.yaml");
}

// A run of `target` with a fixed seed and budget, findings in a scratch
// folder under the system's temp dir, nothing written to a corpus.
inline RunOptions scratch_run(const std::string& target, uint64_t seed, int trials,
                              const std::string& scratch) {
  RunOptions o;
  o.target = target;
  o.seed = seed;
  o.trials = trials;
  o.write_corpus = false;
  o.scratch_dir = (std::filesystem::temp_directory_path() / scratch).string();
  return o;
}

// x rounded as the case's arithmetic rounds a result: to float in an f32
// case (a double result of + - * / rounded to float is f32's correctly
// rounded operation: double rounding is innocuous at 53 >= 2 * 24 + 2
// bits), unchanged in an f64 case. For kernels written in tests.
inline double in_arithmetic(const Case& c, double x) {
  return c.dtype == DType::f32 ? static_cast<double>(static_cast<float>(x)) : x;
}

// A counterexample's case (the `case:` section of its YAML).
inline YAML::Node case_node(const Finding& found) {
  YAML::Node n = YAML::Load(found.case_yaml);
  return n["case"] ? n["case"] : n;
}

// The shrunk case `n` decodes into the domain, and the reference passes the
// run `o` that found it (the control: the failure is the target's).
inline void expect_in_domain_and_reference_passes(const Spec& spec, const Family& f, const YAML::Node& n,
                                                  RunOptions o) {
  const AnyCase back = f.from_yaml(n);
  EXPECT_EQ(f.in_domain(back, spec.domain), "");
  o.target = "reference";
  EXPECT_EQ(run_spec(spec, o).status, RunStatus::passed);
}

// Replaces `spec`'s family with a copy of its declared op (aliasing the
// loaded declaration) to which `plant` adds mutants; returns the copy.
inline std::shared_ptr<OpFamily> plant_mutants(Spec& spec, const std::function<void(OpFamily&)>& plant) {
  const OpFamily& loaded = op_family(spec);
  auto f = std::make_shared<OpFamily>(std::shared_ptr<const Decl>(spec.declared_family, &loaded.decl()));
  plant(*f);
  spec.declared_family = f;
  spec.family = f.get();
  return f;
}

// The run `o` of `spec` (family `f`, one invariant) fails, and its
// counterexample shrinks to the dims `want`: a case of the domain, which the
// reference passes.
inline void expect_shrunk_to_dims(const Spec& spec, const Family& f, const RunOptions& o,
                                  const std::vector<std::pair<std::string, int>>& want) {
  const RunReport report = run_spec(spec, o);
  ASSERT_EQ(report.status, RunStatus::failed);
  ASSERT_EQ(report.invariants.size(), 1u);
  ASSERT_TRUE(report.invariants[0].counterexample);
  const Finding& found = *report.invariants[0].counterexample;
  const YAML::Node n = case_node(found);
  for (const auto& [dim, value] : want)
    EXPECT_EQ(n["dims"][dim].as<int>(), value) << dim << "\n" << found.case_yaml;
  expect_in_domain_and_reference_passes(spec, f, n, o);
}

// Greedy shrinking to a fixed point of `fails`: each step takes the first
// candidate that still fails, after checking that every candidate of the
// step is inside the domain (not only those up to the first that fails).
struct Shrunk {
  Case c;
  int steps = 0;
  int candidates = 0;
};
template <typename Fails>
Shrunk shrink_while(Case c, const Values& domain, Fails fails) {
  Shrunk out{std::move(c)};
  for (bool progress = true; progress && out.steps < 10000;) {
    progress = false;
    std::optional<Case> first;
    rc::Seq<Case> seq = Traits::shrinks(out.c, domain);
    while (auto next = seq.next()) {
      ++out.candidates;
      const std::string why = Traits::in_domain(*next, domain);
      EXPECT_EQ(why, "") << "candidate " << out.candidates << " outside the domain";
      if (!why.empty()) return out;
      if (!first && fails(*next)) first = std::move(*next);
    }
    if (first) out.c = std::move(*first), ++out.steps, progress = true;
  }
  return out;
}

}  // namespace kprop::op::testing
