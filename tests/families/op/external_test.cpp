// A declared op's external side: the external reference
// (op.reference: exec:COMMAND | plugin:PATH) is called in f64 for
// reference.Y and in the case's dtypes for naive.Y; its load-time errors; the
// generic plugin entry point's symbol; the spec's own mutants (op.mutants).
// End to end through a NumPy worker and a C++ plugin: ctests op.sort.*,
// op.*.mutants and op.rmsnorm.plugin.*.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/op/op.h"
#include "kprop/abi/op.h"
#include "kprop/errors.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/op/family.h"
#include "tests/families/op/op_support.h"

namespace kprop::op {
namespace {

using namespace kprop::op::testing;

std::string spec_with_reference(const std::string& reference, const std::string& name = "") {
  return "spec: t\nfamily: op\nop:\n" + name +
         "  dims: {N: [1, 4]}\n"
         "  inputs: {x: {shape: [N], dtype: [f32, f64]}}\n"
         "  outputs: {y: {shape: [N]}}\n"
         "  reference: " +
         reference + "\ntarget: reference\n";
}

// tests/external/op_copy.yaml's kernel (y = x) reading x as if it were
// contiguous (r * D + c), not through its strides.
int copy_reads_contiguous(const kprop_op_args* a, char*, size_t) {
  const kprop_tensor* x = kprop_op_input(a, "x");
  const kprop_tensor* y = kprop_op_output(a, "y");
  const size_t size = kprop_dtype_size(x->dtype);
  for (int64_t r = 0; r < x->shape[0]; ++r)
    for (int64_t c = 0; c < x->shape[1]; ++c) {
      const int64_t index[2] = {r, c};
      std::memcpy(static_cast<char*>(y->data) + kprop_offset(y, index) * int64_t(size),
                  static_cast<const char*>(x->data) + (r * x->shape[1] + c) * int64_t(size), size);
    }
  return KPROP_OK;
}

// kprop::testing::run_in_process takes one of the spec's profiles, as
// prop_runner's --profile (it had no way to name one): op_copy.yaml's
// `padded` pads the tensors of a kernel linked into the test too, so the
// copy above passes without it and fails with it.
TEST(OpInProcess, RunInProcessTakesAProfile) {
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/tests/external/op_copy.yaml";
  const kprop::testing::EntryPoints copy = {
      {"kprop_op_copy", reinterpret_cast<void*>(&copy_reads_contiguous)}};
  RunOptions o;
  o.seed = 1;
  o.trials = 50;
  o.write_corpus = false;
  const RunReport plain = kprop::testing::run_in_process(spec, copy, o);
  EXPECT_EQ(plain.status, RunStatus::passed) << plain.detail;
  const RunReport padded = kprop::testing::run_in_process(spec, copy, o, "", "padded");
  EXPECT_EQ(padded.profile, "padded");
  EXPECT_EQ(padded.status, RunStatus::failed) << padded.detail;
  EXPECT_THROW(kprop::testing::run_in_process(spec, copy, o, "", "no_such_profile"), InputError);
}

TEST(OpExternalReference, LoadsWithoutStartingAnything) {
  // The worker does not exist: loading (and --list, validation) starts nothing.
  EXPECT_EQ(load_error(spec_with_reference("exec:/nonexistent/worker --flag")), "");
  EXPECT_EQ(load_error(spec_with_reference("plugin:./libnothing.so")), "");
}

TEST(OpExternalReference, AScalarReferenceMustNameExecOrPlugin) {
  EXPECT_EQ(
      load_error(spec_with_reference("python3 ref.py")),
      "op.yaml:7:14: reference 'python3 ref.py' is neither {OUTPUT: EXPR} nor exec:COMMAND / plugin:PATH");
  EXPECT_EQ(load_error(spec_with_reference("'exec:  '")),
            "op.yaml:7:14: reference 'exec:  ' names no command or path");
}

TEST(OpExternalReference, OpNamedLikeAnAbiNameIsRefused) {
  EXPECT_EQ(load_error(spec_with_reference("{y: x}", "  name: device\n")).substr(0, 21),
            "op.yaml:4:9: op.name ");
  EXPECT_EQ(load_error(spec_with_reference("{y: x}", "  name: input\n")).substr(0, 21),
            "op.yaml:4:9: op.name ");
  EXPECT_EQ(load_error(spec_with_reference("{y: x}", "  name: device2\n")), "");
}

// A named choice ({one_of: [gelu, tanh]}): the case holds the index, which
// the reference reads; the corpus file holds the name and reads it back; an
// unknown name in a file is refused naming the valid ones.
TEST(OpAttr, NamedChoiceIsAnIndexForExpressionsAndANameInFiles) {
  const Spec spec = parse_spec(R"(spec: act
family: op
op:
  dims: {N: [1, 4]}
  attrs: {act: {one_of: [gelu, tanh]}}
  inputs: {x: {shape: [N], dtype: [f64]}}
  outputs: {y: {shape: [N]}}
  reference:
    y: where(act == 1, 2 * x, x)
target: reference
)",
                               "act.yaml");
  const auto& family = dynamic_cast<const OpFamily&>(*spec.family);
  EXPECT_EQ(family.decl().attrs[0].labels, (std::vector<std::string>{"gelu", "tanh"}));
  Case c;
  c.decl = std::make_shared<Decl>(family.decl());
  c.dims = {2};
  c.dtype = DType::f64;
  c.dtypes = {DType::f64};
  c.kinds = {-1};
  c.inputs = {{1.5, -4}};
  for (const double act : {0.0, 1.0}) {
    c.attrs = {act};
    EXPECT_EQ(reference(c).outputs[0], act == 1 ? (std::vector<double>{3, -8}) : c.inputs[0]);
    YAML::Emitter out;
    out << Traits::to_yaml(c);
    const std::string text = out.c_str();
    EXPECT_NE(text.find(act == 1 ? "act: tanh" : "act: gelu"), std::string::npos) << text;
    const auto back = family.from_yaml(YAML::Load(text));
    EXPECT_EQ(static_cast<const Case*>(back.get())->attrs, c.attrs);
  }
  YAML::Emitter out;
  out << Traits::to_yaml(c);
  std::string text = out.c_str();
  text.replace(text.find("tanh"), 4, "relu");
  try {
    family.from_yaml(YAML::Load(text));
    ADD_FAILURE() << "an unknown name was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("attr act must be one of gelu, tanh"), std::string::npos)
        << e.what();
  }
}

TEST(OpAttr, NamedChoicesMustBeDistinctNamesOnly) {
  const auto with = [](const std::string& one_of) {
    return load_error("spec: t\nfamily: op\nop:\n  dims: {N: [1, 4]}\n  attrs: {act: {one_of: " + one_of +
                      "}}\n  inputs: {x: {shape: [N]}}\n  outputs: {y: {shape: [N]}}\n  reference: {y: x}\n");
  };
  EXPECT_EQ(with("[gelu, tanh]"), "");
  EXPECT_EQ(with("[gelu, 2]"), "op.yaml:5:32: attr act.one_of mixes names and numbers; use one or the other");
  EXPECT_EQ(with("[gelu, gelu]"), "op.yaml:5:32: attr act.one_of lists 'gelu' twice");
}

// A choice's name where its index belongs, bare or quoted, says how the
// expressions read it ("'tanh' is a function: call it", and "unexpected
// character '''", said nothing of it).
TEST(OpAttr, AChoicesNameInAnExpressionSaysToCompareItsIndex) {
  const auto with = [](const std::string& reference) {
    return load_error(
        "spec: t\nfamily: op\nop:\n  dims: {N: [1, 4]}\n  attrs: {act: {one_of: [gelu, tanh]}}\n  inputs: "
        "{x: "
        "{shape: [N]}}\n  outputs: {y: {shape: [N]}}\n  reference: {y: \"" +
        reference + "\"}\n");
  };
  EXPECT_EQ(with("where(act == tanh, 2 * x, x)"),
            "op.yaml:8:32: reference.y: 'tanh' is a choice of act, which expressions read as its index: "
            "write act == 1");
  EXPECT_EQ(with("where(act == 'tanh', 2 * x, x)").substr(0, 72),
            "op.yaml:8:32: reference.y: unexpected character ''': the expressions hav");
}

TEST(OpPlugin, SymbolIsThePrefixedNameWithNonIdentifierCharactersReplaced) {
  EXPECT_EQ(plugin_symbol("rmsnorm"), "kprop_op_rmsnorm");
  EXPECT_EQ(plugin_symbol("swiglu.fwd-v2"), "kprop_op_swiglu_fwd_v2");
}

// A stand-in for the worker: records how it was called and answers with
// the inputs' first values scaled by a marker of the precision asked for.
struct Recording final : ExternalReference {
  mutable std::vector<bool> calls;
  Result call(const Case& c, bool fp64) const override {
    calls.push_back(fp64);
    Result r;
    r.outputs.push_back(c.inputs[0]);
    for (double& v : r.outputs[0]) v *= fp64 ? 2 : 3;
    return r;
  }
};

TEST(OpExternalReference, ReferenceIsTheF64CallAndNaiveTheSamePrecisionCall) {
  const Spec spec = parse_spec(spec_with_reference("exec:/nonexistent/worker"), "op.yaml");
  const auto& family = dynamic_cast<const OpFamily&>(*spec.family);
  auto decl = std::make_shared<Decl>(family.decl());
  auto recording = std::make_shared<Recording>();
  decl->external_reference = recording;
  Case c;
  c.decl = decl;
  c.dims = {2};
  c.dtype = DType::f32;
  c.dtypes = {DType::f32};
  c.inputs = {{1.5, -4}};
  EXPECT_EQ(reference(c).outputs[0], (std::vector<double>{3, -8}));
  EXPECT_EQ(naive(c).outputs[0], (std::vector<double>{4.5, -12}));
  EXPECT_EQ(recording->calls, (std::vector<bool>{true, false}));
}

// An exec: reference that takes longer to start than the case timeout: its
// start-up has the transport's allowance (60 s + the case timeout), and the
// in-process target that calls it (the op's `reference`) is no hang. The
// crash guard's watchdog timed the start-up as the target's call, saved the
// case and ended the run with exit 3.
TEST(OpExternalReference, AWorkerSlowToStartIsNoHangOfTheTargetThatCallsIt) {
  std::ifstream in(std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string plain = "exec:/usr/bin/python3 ../../examples/ops/sort_reference.py";
  ASSERT_NE(text.find(plain), std::string::npos);
  text.replace(text.find(plain), plain.size(),
               "exec:/bin/sh -c 'sleep 1; exec /usr/bin/python3 ../../examples/ops/sort_reference.py'");
  const Spec spec = parse_spec(text, std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  RunOptions o = scratch_run("reference", 3, 3, "kprop_op_external_test");
  o.case_timeout_s = 0.5;
  const RunReport r = run_spec(spec, o);
  EXPECT_EQ(r.status, RunStatus::passed) << r.detail;
  EXPECT_FALSE(r.crash);
}

// A reference that hangs: each call ends at the run's case timeout, the
// spec's or --case-timeout's, and says which. The transport kept its default
// of 30 s whatever the run said ("no reply within case_timeout_s = 30 s").
TEST(OpExternalReference, AHangingReferenceEndsAtTheRunsCaseTimeout) {
  std::ifstream in(std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string plain = "exec:/usr/bin/python3 ../../examples/ops/sort_reference.py";
  const std::string run = "run:\n  trials: 200\n";
  ASSERT_NE(text.find(plain), std::string::npos);
  ASSERT_NE(text.find(run), std::string::npos);
  text.replace(text.find(plain), plain.size(),
               "exec:/usr/bin/python3 ../../tests/external/hanging_reference.py");
  text.replace(text.find(run), run.size(),
               "run:\n  trials: 200\n  case_timeout_s: 0.5\n  shrink_budget_s: 1\n");
  const Spec spec = parse_spec(text, std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  for (const std::optional<double> option : {std::optional<double>(), std::optional<double>(0.75)}) {
    RunOptions o = scratch_run("reference", 3, 3, "kprop_op_external_test");
    o.case_timeout_s = option;
    const RunReport r = run_spec(spec, o);
    EXPECT_EQ(r.status, RunStatus::crashed) << r.detail;
    EXPECT_NE(r.detail.find(option ? "case_timeout_s = 0.75 s" : "case_timeout_s = 0.5 s"), std::string::npos)
        << r.detail;
  }
}

// A reference that fails on a case stops the run as the spec's error (its
// message names the reference), and stores the case in the scratch folder
// with the command that re-runs it: it was reported and lost (the docs said
// "exit 3, case saved").
TEST(OpExternalReference, AFailingReferenceStopsTheRunAndStoresTheCase) {
  std::ifstream in(std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string plain = "../../examples/ops/sort_reference.py";
  ASSERT_NE(text.find(plain), std::string::npos);
  text.replace(text.find(plain), plain.size(), "../../tests/external/raising_reference.py");
  const Spec spec = parse_spec(text, std::string(KPROP_SOURCE_DIR) + "/specs/ops/sort.yaml");
  const std::string scratch = "kprop_op_failing_reference_" + std::to_string(::getpid());
  RunOptions o = scratch_run(
      "exec:/usr/bin/python3 " + std::string(KPROP_SOURCE_DIR) + "/examples/ops/sort_reference.py", 3, 50,
      scratch);
  try {
    const RunReport r = run_spec(spec, o);
    ADD_FAILURE() << "no error; " << r.detail;
  } catch (const ReferenceFailure& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the reference 'reference' failed on a case, so the case cannot judge the target"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("rows longer than two are not handled yet"), std::string::npos) << what;
    const size_t at = what.find("; the case is in ");
    ASSERT_NE(at, std::string::npos) << what;
    const std::string path = what.substr(at + 17, what.find(" (re-run it: ", at) - at - 17);
    EXPECT_EQ(path.rfind(o.scratch_dir + "/sort/", 0), 0u) << what;
    EXPECT_TRUE(std::filesystem::exists(path)) << what;
    EXPECT_NE(what.find("--replay " + path + " --invariant "), std::string::npos) << what;
  }
  std::filesystem::remove_all(o.scratch_dir);
}

// A reference that cannot start is the spec's error (exit 2, one line),
// whoever the target is: as the target itself (`target: reference`) it was
// a crash of the target, shrunk and stored as a finding.
TEST(OpExternalReference, AReferenceThatCannotStartIsTheSpecsError) {
  const Spec spec = parse_spec(spec_with_reference("exec:/nonexistent/worker"), "op.yaml");
  for (const char* target : {"reference", "naive"}) {
    try {
      const RunReport r = run_spec(spec, scratch_run(target, 3, 3, "kprop_op_external_test"));
      ADD_FAILURE() << target << ": no error; " << r.detail;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("the reference exec:/nonexistent/worker (op.yaml:"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot start: "), std::string::npos) << e.what();
    }
  }
}

// op.mutants: each entry is a mutant of the declared family, NAME: exec:COMMAND
// | plugin:PATH | {target: ..., description: TEXT}, and its mistakes are the
// spec's errors at their file:line:col.
std::string spec_with_mutants(const std::string& mutants) {
  return "spec: t\nfamily: op\nop:\n"
         "  dims: {N: [1, 4]}\n"
         "  inputs: {x: {shape: [N], dtype: [f32, f64]}}\n"
         "  outputs: {y: {shape: [N]}}\n"
         "  mutants: " +
         mutants + "\n  reference: {y: x}\ntarget: reference\n";
}

TEST(OpMutants, AreTheDeclaredFamilysMutantsStartedOnlyWhenRun) {
  const Spec spec = parse_spec(
      spec_with_mutants("{flip: 'exec:/nonexistent/worker --bug flip', late: {target: 'plugin:libbug.so', "
                        "description: reads one past the end}}"),
      "dir/op.yaml");
  std::vector<std::pair<std::string, std::string>> mutants;
  for (const auto& impl : spec.family->implementations())
    if (impl.kind == ImplKind::mutant) {
      mutants.emplace_back(impl.name, impl.description);
      EXPECT_TRUE(impl.own_process) << impl.name;  // --isolate does not fork for them
    }
  EXPECT_EQ(mutants,
            (std::vector<std::pair<std::string, std::string>>{{"flip", "exec:/nonexistent/worker --bug flip"},
                                                              {"late", "reads one past the end"}}));
  // A planted bug is never the oracle.
  EXPECT_THROW(resolve_target(spec, "flip", {}, true), InputError);
}

TEST(OpMutants, MistakesAreTheSpecsErrorsAtTheirPlace) {
  EXPECT_EQ(load_error(spec_with_mutants("{}")),
            "op.yaml:7:12: op.mutants is empty: give {NAME: exec:COMMAND | plugin:PATH}, or remove it");
  EXPECT_EQ(load_error(spec_with_mutants("")),  // at its key, not the next line's start
            "op.yaml:7:3: op.mutants is empty: give {NAME: exec:COMMAND | plugin:PATH}, or remove it");
  EXPECT_EQ(
      load_error(spec_with_mutants("{'a b': 'exec:w'}")),
      "op.yaml:7:13: op.mutants: 'a b' is no mutant name (a letter or '_', then letters, digits, '_' and "
      "'-'; --target NAME runs it)");
  EXPECT_NE(load_error(spec_with_mutants("{-x: 'exec:w'}"))
                .find("op.yaml:7:13: op.mutants: '-x' is no mutant name"),
            std::string::npos);
  EXPECT_EQ(load_error(spec_with_mutants("{naive: 'exec:w'}")),
            "op.yaml:7:13: op.mutants: 'naive' is the name of the op's own same-precision implementation; "
            "pick another name");
  EXPECT_EQ(load_error(spec_with_mutants("{flip: python3 bug.py}")),
            "op.yaml:7:19: op.mutants.flip is 'python3 bug.py': a mutant is a program of yours, exec:COMMAND "
            "or plugin:PATH (a built-in family's mutants are its own)");
  EXPECT_EQ(load_error(spec_with_mutants("{flip: 'exec: '}")),
            "op.yaml:7:19: op.mutants.flip 'exec: ' names no command or path");
  EXPECT_EQ(load_error(spec_with_mutants("{flip: {description: x}}")),
            "op.yaml:7:19: op.mutants.flip needs target: exec:COMMAND | plugin:PATH");
  // A profile's mutants: list (one profile, said once).
  EXPECT_EQ(load_error(spec_with_mutants("{flip: 'exec:w'}") + "profiles:\n  p: {mutants: [flip, flip]}\n"),
            "op.yaml:11:23: profile p: mutant 'flip' is listed twice");
  EXPECT_EQ(load_error(spec_with_mutants("{flip: 'exec:w'}") +
                       "profiles:\n  p: {mutants: [flip]}\n  q: {mutants: [flip]}\n"),
            "op.yaml:12:17: profile q: mutant 'flip' is listed by profile p too");
  EXPECT_EQ(load_error(spec_with_mutants("{flip: {target: 'exec:w', why: x}}")).substr(0, 32),
            "op.yaml:7:38: unknown key 'why' ");
}

// A mutant that cannot start is the spec's error (exit 2, one line naming
// it), not its kill: --mutants would count a typo'd command as killed.
TEST(OpMutants, AMutantThatCannotStartIsTheSpecsError) {
  // The one-line error of a run of mutant `name` (of spec `mutants` at `path`).
  const auto start_error = [](const std::string& mutants, const std::string& path, const std::string& name) {
    try {
      const RunReport r = run_spec(parse_spec(spec_with_mutants(mutants), path),
                                   scratch_run(name, 3, 3, "kprop_op_external_test"));
      return "no error; " + r.detail;
    } catch (const InputError& e) {
      return std::string(e.what());
    }
  };
  const std::string exec = start_error("{flip: 'exec:/nonexistent/worker'}", "op.yaml", "flip");
  EXPECT_NE(exec.find("the mutant flip exec:/nonexistent/worker (op.yaml:7:19): cannot start: "),
            std::string::npos)
      << exec;
  // A plugin says where it was looked for: the spec's folder joined to its path.
  const std::string plugin = start_error("{late: 'plugin:libnothere.so'}", "somewhere/op.yaml", "late");
  EXPECT_NE(plugin.find("the mutant late plugin:libnothere.so (somewhere/op.yaml:7:19): cannot start: "
                        "somewhere/libnothere.so: "),
            std::string::npos)
      << plugin;
}

// End to end: specs/ops/rmsnorm.yaml's mutants (its NumPy worker's --bug
// variants, started from the spec's folder) are killed by --mutants, the
// one only the `wide` profile reaches under it; one no invariant run sees passes.
TEST(OpMutants, MutantsRunsTheSpecsPlantedBugs) {
  const std::string path = std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml";
  const Spec spec = load_spec(path);
  RunOptions o = scratch_run("", 20261122, 50, "kprop_op_external_test");
  o.only_invariants = {"matches_reference", "elementwise_relative"};
  o.compare_outputs = true;
  std::map<std::string, std::string> killed;
  for (const MutantRow& row : run_mutants(spec, o))
    killed[row.mutant] = row.killed ? row.killed_by : "survived";
  EXPECT_EQ(killed.size(), 8u);
  for (const auto& [name, by] : killed) EXPECT_NE(by, "survived") << name;
  EXPECT_EQ(spec.mutant_profiles.at("sumsq_first_1024")->profile, "wide");
  // Where no invariant can see the bug (no weight, judged by a check of
  // finiteness alone), the mutant passes: a run of it alone (one program
  // start, where a second --mutants started all eight).
  RunOptions alone = scratch_run("no_weight", 20261122, 5, "kprop_op_external_test");
  alone.only_invariants = {"finite_outputs"};
  EXPECT_EQ(run_spec(spec, alone).status, RunStatus::passed);
}

}  // namespace
}  // namespace kprop::op
