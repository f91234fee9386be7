// Reporters: one small interface, chosen by name (--format text|json|junit).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kprop/runner.h"

namespace kprop {

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual std::string run(const RunReport& report) const = 0;
  virtual std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const = 0;
  virtual std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const = 0;
};

std::vector<std::string> reporter_names();
std::unique_ptr<Reporter> make_reporter(const std::string& name);  // nullptr if unknown

// The live progress line on a terminal (stderr): the case being checked, or
// the shrink under way; cleared when the run ends. Silent when stderr is not
// a terminal.
std::unique_ptr<RunListener> make_progress_line();

}  // namespace kprop
