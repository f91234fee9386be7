// Targeted search (prop_runner --search, run: {search: ...}): after the
// random phase, hill-climb from the cases with the highest error-to-bound
// ratio (kErrorRatio, what a held tolerance check reports) toward a case
// that breaks the bound, as Hypothesis's target() does for numbers.
//
// Generic over every family, through hooks the families already have:
//   - the case's bytes (Family::build under a BytesDraw, the fuzz decoder):
//     a byte nudged by ±1 moves a drawn dim or tile size by one (shapes at
//     tile boundaries), other byte moves redraw a seed or a value kind;
//   - the case's tensors (the YAML codec, Family::to_yaml / from_yaml): the
//     numbers of every list are scaled, shifted, sign-flipped, pushed toward
//     a large magnitude, made to tie, made constant per row, alternated in
//     sign, or nudged;
//   - the shrinker (Family::shrinks): its candidates (a dim one smaller, a
//     tile less) are moves too.
// A move is kept only when it decodes to a case inside the spec's domain
// (Family::in_domain) with no non-finite number the case did not have.
//
// Deterministic: the moves are a function of the run's seed and the cases
// (counter-based randomness, kprop/rng.h), so the same spec, seed and target
// give the same search path, verdicts and report. Budgeted by cases and
// seconds like the random phase. Every search case is a checked case
// (counted apart in the report); a failure is shrunk, stored (found_by:
// search) and replayed like any other.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kprop/family.h"

namespace kprop {

struct RunContext;
struct RunReport;
struct InvariantReport;
struct InvariantUse;
struct CheckResult;
class RunListener;

// How a held check's ratios spread, per invariant: counts of kErrorRatio in
// the bins (0, e0], (e0, e1], ... and above the last edge (a ratio above 1
// belongs to a failure; a check that reports 0 lands in the first bin).
struct RatioHistogram {
  static const std::vector<double>& edges();  // upper edges, ascending, the last = 1
  std::vector<int64_t> counts;                // edges().size() + 1 once anything was added
  void add(double ratio);
  int64_t total() const;
  // "≤0.001: 12, ≤0.01: 30, ..., >1: 0" (bins with no count left out).
  std::string text() const;
};

// Measured names "error_ratio.<output>" carry one output's ratio next to the
// invariant's kErrorRatio (the largest of them): reported per output.
inline constexpr const char* kErrorRatioOf = "error_ratio.";

// A held verdict's numbers into the invariant's report: the worst ratio,
// the worst per output and the histogram. The random phase and the search
// both account passes through here.
void note_ratios(InvariantReport& report, const Verdict& verdict);

// The target (or reference) became unavailable mid-run (`lost`: why): the
// report says so, and a run that had not failed is no pass (health check
// `unavailable`). `phase` names where: "", or " during the search".
void end_unavailable(RunReport& report, const std::string& lost, const char* phase);

// A held verdict `v` about one output, tagged with that output's ratio
// (kErrorRatioOf + output) so a run reports it per output; `both` keeps the
// tags of both verdicts. Anything else is returned as it is.
Verdict for_output(const std::string& output, Verdict v);

// The search part of a run report.
struct SearchInvariant {
  std::string name;
  double start_ratio = -1;                      // the best ratio the random phase reached (-1: none reported)
  double worst_ratio = -1;                      // the worst ratio of the search's own passing cases
                                                // (JSON search_ratio; JSON worst_ratio is the larger
                                                // of this and start_ratio, as the text shows)
  std::map<std::string, double> output_ratios;  // worst per output, search cases only
  int64_t passed = 0, discarded = 0;            // search cases it checked / discarded
  int64_t improvements = 0;                     // moves that raised its ratio
  bool failed = false;                          // the search broke it
};
struct SearchReport {
  bool ran = false;
  int64_t budget = 0;    // cases the search was allowed
  int64_t cases = 0;     // search cases run (checked, declined or discarded)
  int64_t checked = 0;   // ... on which some invariant gave a verdict
  int64_t declined = 0;  // ... the target declined (not checked)
  int64_t rejected = 0;  // moves that left the domain (never run)
  double seconds = 0;
  bool time_budget_hit = false;
  std::string note;                         // why nothing was searched, when so
  std::vector<SearchInvariant> invariants;  // those it hunted
};

// The random phase offers every case it checked; the search keeps, per
// invariant, the few with the highest ratios (with what reproduces their
// bytes), then hill-climbs from them.
class Search {
 public:
  Search(const RunContext& ctx, std::vector<const InvariantUse*> uses);
  ~Search();
  bool enabled() const;
  // Case `c`, drawn from `random` at `size`, gave `results` for the uses
  // `live` (indices into the uses given above). `whole_domain`: drawn from
  // the spec's domain, not a focus (kprop/focus.h), so the fuzz bytes of
  // (random, size) in the spec's domain reproduce it; else the search
  // climbs from it by tensor moves only.
  void offer(const rc::Random& random, int size, const AnyCase& c, const std::vector<size_t>& live,
             const std::vector<CheckResult>& results, bool whole_domain);
  // Runs the search on the invariants that held so far and accounts it into
  // `report` (search cases, ratios, failures, a crash); the report's
  // seconds (the random phase's) grow by the search's.
  void run(RunReport& report, RunListener& events);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace kprop
