// Helpers shared by family tests: a registered family with its typed side
// and an implementation's index by name (a test fails if either is absent),
// the shrunk counterexamples of a run that must fail, a case file the
// family's decoder must refuse with its position, and the half-precision
// runs of a committed spec narrowed to one dtype.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kprop/bytes.h"
#include "kprop/draw.h"
#include "kprop/family.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace kprop::testing {

template <typename Traits>
const FamilyDef<Traits>& registered_family(const char* name) {
  const auto* f = dynamic_cast<const FamilyDef<Traits>*>(Registry::instance().find(name));
  EXPECT_NE(f, nullptr) << "family " << name << " is not registered";
  return *f;
}

inline size_t implementation_index(const Family& family, const std::string& name) {
  const auto& impls = family.implementations();
  const auto it = std::find_if(impls.begin(), impls.end(), [&](const ImplInfo& i) { return i.name == name; });
  EXPECT_NE(it, impls.end()) << "no implementation " << name << " in " << family.name();
  return static_cast<size_t>(it - impls.begin());
}

// The `spec:` name and `family:` of each shipped spec (specs/*.yaml), sorted
// by path. Read once per process: the parameterized suites list them at
// start-up, and ctest runs every test in a process of its own.
struct ShippedSpec {
  std::string path, name, family;
};
inline const std::vector<ShippedSpec>& shipped_spec_heads() {
  static const std::vector<ShippedSpec> heads = [] {
    std::vector<ShippedSpec> out;
    for (const auto& e : std::filesystem::directory_iterator(std::string(KPROP_SOURCE_DIR) + "/specs")) {
      if (e.path().extension() != ".yaml") continue;
      const YAML::Node root = YAML::LoadFile(e.path().string());
      out.push_back({e.path().string(), root["spec"].as<std::string>(), root["family"].as<std::string>()});
    }
    std::sort(out.begin(), out.end(),
              [](const ShippedSpec& a, const ShippedSpec& b) { return a.path < b.path; });
    return out;
  }();
  return heads;
}

// The shipped specs whose family is built and passes `keep`, sorted: what
// the spec-wide tests (tests/specs, tests/sweeps) run on.
inline std::vector<std::string> shipped_specs(const std::function<bool(const Family&)>& keep) {
  std::vector<std::string> out;
  for (const ShippedSpec& s : shipped_spec_heads())
    if (const Family* f = Registry::instance().find(s.family); f && keep(*f)) out.push_back(s.path);
  return out;
}
// A spec path's stem, as a test parameter's name.
inline std::string spec_stem(const ::testing::TestParamInfo<std::string>& info) {
  return std::filesystem::path(info.param).stem().string();
}

// Implementation `name` of a registered family, called on typed cases.
template <typename Traits>
struct Implementation {
  const FamilyDef<Traits>& family;
  size_t index;
  typename Traits::Result operator()(const typename Traits::Case& c) const { return family.run(index, c); }
};
// A family with the fp64 `reference`, the planted targets (name: the bug)
// and the invariants `add_invariants` registers, in the registered family's
// order: a spec loaded against the registered family runs on it once its
// `family` points here. For targets no registered implementation is (an
// inf in one output) that a test needs the registered invariants to judge.
template <typename Traits>
std::unique_ptr<FamilyDef<Traits>> planted_family(
    typename FamilyDef<Traits>::ImplFn reference,
    std::vector<std::pair<std::string, typename FamilyDef<Traits>::ImplFn>> planted,
    const std::function<void(FamilyDef<Traits>&)>& add_invariants) {
  auto f = std::make_unique<FamilyDef<Traits>>();
  f->implementation({"reference", ImplKind::reference, "fp64"}, std::move(reference));
  for (auto& [name, fn] : planted) f->mutant(name, "planted by the test", std::move(fn));
  add_invariants(*f);
  return f;
}

template <typename Traits>
Implementation<Traits> registered_implementation(const char* family, const std::string& name) {
  const FamilyDef<Traits>& f = registered_family<Traits>(family);
  return {f, implementation_index(f, name)};
}

// A run of `target` at seed `seed` that keeps its findings out of the corpus
// (as --no-corpus): they go to RunOptions::scratch_dir, .kprop/findings
// under the working folder (ctest's: build/).
inline RunOptions no_corpus_run(const std::string& target, uint64_t seed) {
  RunOptions o;
  o.target = target;
  o.seed = seed;
  o.write_corpus = false;
  return o;
}

// A run of `target` (seed `seed`, only the invariants `only` when given)
// that stops at its first failure, its finding kept out of the corpus.
inline RunOptions first_failure(const std::string& target, uint64_t seed,
                                std::vector<std::string> only = {}) {
  RunOptions o = no_corpus_run(target, seed);
  o.stop_on_first_failure = true;
  o.only_invariants = std::move(only);
  return o;
}

// The shrunk counterexamples of a first_failure run on the spec at
// `spec_path` that must fail.
inline std::vector<Finding> counterexamples(const std::string& spec_path, const std::string& target,
                                            uint64_t seed, std::vector<std::string> only = {}) {
  const RunReport r = run_spec(load_spec(spec_path), first_failure(target, seed, std::move(only)));
  EXPECT_EQ(r.status, RunStatus::failed) << target << ", seed " << seed;
  std::vector<Finding> out;
  for (const auto& inv : r.invariants)
    if (inv.counterexample) out.push_back(*inv.counterexample);
  EXPECT_FALSE(out.empty()) << target << ", seed " << seed << ": no counterexample";
  return out;
}
// The same, decoded.
template <typename Traits>
std::vector<typename Traits::Case> shrunk_cases(const std::string& spec_path, const std::string& target,
                                                uint64_t seed, std::vector<std::string> only = {}) {
  std::vector<typename Traits::Case> out;
  for (const Finding& f : counterexamples(spec_path, target, seed, std::move(only)))
    out.push_back(Traits::from_yaml(YAML::Load(f.case_yaml)));
  return out;
}

// Traits::from_yaml refuses the case file `text` with a CaseFormatError that
// names a line and, when `word` is given, contains it.
template <typename Traits>
void expect_bad_case(const std::string& text, const std::string& word = "") {
  try {
    Traits::from_yaml(YAML::Load(text));
    ADD_FAILURE() << "accepted: " << text;
  } catch (const CaseFormatError& e) {
    EXPECT_GT(e.line, 0) << text;
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

// The spec at `path` with its line `line` replaced by `replacement` (and
// `edit` applied to the text), parsed in memory as `name`: nothing is
// written. A test fails if `line` is absent.
inline Spec spec_with(const std::string& path, const std::string& line, const std::string& replacement,
                      const std::string& name, const std::function<void(std::string&)>& edit = {}) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const size_t at = s.find(line);
  EXPECT_NE(at, std::string::npos) << path << " has no '" << line << "'";
  if (at != std::string::npos) s.replace(at, line.size(), replacement);
  if (edit) edit(s);
  return parse_spec(s, name);
}

// The half-precision runs of a family's tests: the committed spec at `path`
// with its domain's line `dtypes` narrowed to one dtype (and `edit` applied
// to the text), parsed in memory as <name>_<dtype>.yaml; run with a fixed
// seed, `trials` cases for a correct target, `bug_trials` for a planted bug
// (stopped at its first failure), findings in a scratch folder under the
// test's temp dir.
struct HalfRuns {
  std::string path;
  std::string dtypes;  // e.g. "dtypes: [f16, bf16, f32, f64]"
  std::string name;
  int64_t trials, bug_trials;
  std::function<void(std::string&)> edit = {};

  Spec spec(const std::string& dtype) const {
    return spec_with(path, dtypes, "dtypes: [" + dtype + "]", name + "_" + dtype + ".yaml", edit);
  }
  RunOptions options(const std::string& target, bool bug) const {
    RunOptions o = no_corpus_run(target, 20261123);
    o.trials = bug ? bug_trials : trials;
    o.stop_on_first_failure = bug;
    o.scratch_dir = ::testing::TempDir() + "kprop_" + name + "_half";
    return o;
  }
  // A correct `target` passes the spec narrowed to `dtype`; a planted bug fails it.
  void expect_passes(const std::string& target, const std::string& dtype) const {
    const RunReport r = run_spec(spec(dtype), options(target, false));
    EXPECT_EQ(r.status, RunStatus::passed) << target << " on " << dtype << ": " << r.detail;
  }
  void expect_killed(const std::string& mutant, const std::string& dtype) const {
    EXPECT_EQ(run_spec(spec(dtype), options(mutant, true)).status, RunStatus::failed)
        << mutant << " on " << dtype;
  }
};

// A case decoded from `n` random bytes of `rng`, as libFuzzer's decoder does.
template <typename Traits>
typename Traits::Case from_random_bytes(std::mt19937_64& rng, size_t n, const Values& domain) {
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  ByteReader reader(bytes.data(), bytes.size());
  BytesDraw draw(reader);
  return Traits::build(draw, domain);
}

}  // namespace kprop::testing
