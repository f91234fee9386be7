// Static output coverage: which invariants of a spec read each output of
// the kernel under test. The outputs are the family's contract (its
// external ops' outputs, external::PluginOp::outputs); an invariant reads
// what it declares (InvariantInfo::reads), an expression or a caller's
// callback what its target.* tensors name. An output no invariant of the
// spec reads is unchecked: prop_runner --list names it and a run reports it
// at the end. --output-coverage (kprop/coverage.h) measures the same thing
// by corrupting each output of a kernel and checks these declarations.
#pragma once

#include <string>
#include <vector>

#include "kprop/spec.h"

namespace kprop {

struct OutputReaders {
  std::string op;                    // the external op whose reply carries it
  std::string output;                // its name in the reply
  std::vector<std::string> read_by;  // the spec's invariants that read it
};

// The family's outputs in contract order, each with its readers in the spec.
std::vector<OutputReaders> output_readers(const Spec& spec);
// "op.output" of each output no invariant of the spec reads; with `only`
// (a run's --invariant), none of those invariants.
std::vector<std::string> unchecked_outputs(const Spec& spec, const std::vector<std::string>& only = {});
// The target.* tensors that together hold the kernel's outputs: target.X
// for each contract output X the family publishes as a tensor, else every
// tensor computed from X (Family::tensor_outputs). Empty when the family
// has no contract outputs or publishes some output in no tensor: its
// outputs cannot be compared (--mutants' UNREACHED, kprop/runner.h).
std::vector<std::string> output_tensors(const Family& family);
// The outputs an invariant of the spec reads (what InvariantInfo::reads,
// an expression's or a callback's tensor names say; "*" expanded); nullopt
// when the invariant does not declare it.
std::optional<std::vector<std::string>> invariant_reads(const Spec& spec, const InvariantUse& use);

}  // namespace kprop
