// Reporters: one small interface, chosen by name (--format text|json|junit|html).
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
  // A run that ended in an error (bad input, exit 2; an internal error,
  // exit 3) before its report, or did not finish: what --out holds then, so
  // that no earlier run's report stays there to be read as this one's.
  virtual std::string error(const std::string& message, int exit_code) const = 0;
};

std::vector<std::string> reporter_names();
// nullptr if unknown; `stats`: the text reporter adds the run's statistics
// (--stats) and the kill matrix of --mutants. JSON always has them.
std::unique_ptr<Reporter> make_reporter(const std::string& name, bool stats = false);
// The self-contained HTML report (src/html_report.cpp): summary, statistics
// charts, each failure drawn by its family (kprop/drawing.h), kill matrix.
std::unique_ptr<Reporter> make_html_reporter();

// The targeted search's lines (kprop/search.h), "" when it did not run: its
// cases, and per invariant the worst error/allowed reached from where the
// random phase left it, per output, and how the ratios of every checked
// case spread. The text report's, and the HTML report's section.
std::string search_text(const RunReport& r);

// What came from a focus (RunReport::focused, kprop/focus.h), for the text
// and HTML reports: "of the cases drawn, 7670 came from {dtypes: [f16,
// bf16]}, where every invariant still checking observes (...)".
std::string focused_text(const RunReport& r);

// A finding's case as the reports show it: whole when it is small (a shrunk
// case is), cut to 20,000 characters (2,000 a line) otherwise, saying that
// the whole case is in `stored`; whole when it was stored nowhere. The
// text, JUnit and HTML reports' (JSON's case_yaml is whole).
std::string shown_case(const std::string& yaml, const std::string& stored);

// A finding whose replay, re-run in a fresh process, did not fail or did not
// run through (Finding::replay_check): the warning every format shows; ""
// otherwise.
std::string replay_warning(const Finding& f);
// Under a mutant's row that killed nothing: what its run saw of its outputs
// against the family's correct implementations' (unreached: theirs on every
// case; survived: differing on N of M cases, uncaught); "" when nothing was
// compared or the mutant was killed.
std::string not_killed_note(const MutantRow& row);
// Why a replayed file no longer guards its mutant ("mutant X no longer fails
// INV: why", or "stale file: found_against ..."); for a row whose
// mutant_checked && !mutant_still_fails.
std::string mutant_failure(const ReplayRow& row);

// --mutants: mutant x invariant, what each invariant did against each mutant.
struct KillCell {
  // absent: the invariant is not in that mutant's run (a mutant run under
  // a profile that skips it).
  enum class State { killed, held, not_reached, gave_up, not_applicable, crashed, absent };
  State state = State::absent;
  int64_t trials = 0;        // killed: trials to kill; held: cases checked
  std::string text() const;  // "12", "-", ".", "?", "n/a", "crash", "x"
};
struct KillMatrix {
  std::vector<std::string> mutants, invariants;
  std::vector<std::vector<KillCell>> cells;  // [mutant][invariant]
};
KillMatrix kill_matrix(const std::vector<MutantRow>& rows);

// The live progress line on a terminal (stderr): the case being checked, or
// the shrink under way; cleared when the run ends. Silent when stderr is not
// a terminal.
std::unique_ptr<RunListener> make_progress_line();

}  // namespace kprop
