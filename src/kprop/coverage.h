// Output coverage (prop_runner --output-coverage): does a spec check every
// output of a kernel? For a correct kernel built elsewhere (plugin:/exec:),
// every output its ops return is corrupted in turn (one element changed in
// every reply) and the spec is run again: an output whose corruption no
// invariant catches, and no contract check rejects, is unchecked. Each catch
// is held against the invariant's declared reads (kprop/output_reads.h).
#pragma once

#include <string>
#include <vector>

#include "kprop/runner.h"

namespace kprop {

struct OutputCoverage {
  std::string op, output;
  std::vector<std::string> caught_by;  // invariants that failed on the corrupted output
  std::string rejected;                // or the target failure it caused (the contract's own checks)
  // Of caught_by, those that do not declare reading the output
  // (kprop/output_reads.h): the static coverage would miss them.
  std::vector<std::string> undeclared;
  bool checked() const { return !caught_by.empty() || !rejected.empty(); }
};

struct CoverageReport {
  std::string spec, target;
  uint64_t seed = 0;
  RunReport baseline;  // the uncorrupted kernel: it must pass first
  std::vector<OutputCoverage> outputs;
  std::vector<std::string> unchecked() const;  // "op.output"
  // "op.output: invariant" for each catch by an invariant that does not
  // declare reading the output; prop_runner exits 1 on any.
  std::vector<std::string> undeclared() const;
};

// Throws InputError when options.target is not a kernel built elsewhere
// (check_coverage_target, which a caller can run before anything starts).
void check_coverage_target(const Spec& spec, const RunOptions& options);
CoverageReport output_coverage(const Spec& spec, const RunOptions& options);
std::string coverage_text(const CoverageReport& report);

}  // namespace kprop
