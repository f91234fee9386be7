// Run statistics (prop_runner --stats, always in --format json, the HTML
// report): what was drawn (the family's size measure and the dims it
// declares in CaseStats), where the time went, and how close the target came
// to each numeric bound. Collected from the runner's events (runner.h,
// RunListener::case_checked) by StatsCollector; docs/REPORT.md documents the
// JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kprop {

// The distribution of one dim over the drawn cases: numeric values (exact
// counts per value: dims are sizes, few distinct values) or named kinds.
struct DimStats {
  std::string name;
  std::map<double, int64_t> values;      // numeric dims
  std::map<std::string, int64_t> kinds;  // categorical dims (mask kind, dtype)
  int64_t count() const;
  double min() const;
  double median() const;
  double max() const;
  // Up to `bins` equal-width bins over [min, max] (integer edges when every
  // value is an integer): (label, count).
  std::vector<std::pair<std::string, double>> histogram(int bins = 12) const;
};

// error / bound of the passes of one numeric invariant (Verdict::pass with
// kErrorRatio): how close a correct kernel came to failing.
struct RatioStats {
  std::vector<double> ratios;  // every pass's ratio, in the order checked
  double quantile(double q) const;
  // Counts per half decade, 10^-6 .. 10^1 (below and above clamp into the ends): (label, count).
  std::vector<std::pair<std::string, double>> histogram() const;
};

// Where a run's time went, in seconds. target / reference: inside the
// implementations (derived cases of metamorphic invariants included);
// invariants: the rest of checking (comparisons, naive baselines, oracles,
// expression evaluation); shrinking: from a failure to its smallest case.
struct TimeSplit {
  double generation = 0, target = 0, reference = 0, invariants = 0, shrinking = 0, other = 0;
};

struct RunStats {
  int64_t cases = 0;                         // cases drawn and handed to the invariants
  DimStats size;                             // the family's size measure (CaseStats::size)
  DimStats rc_size;                          // the RapidCheck size each case was drawn at
  std::vector<DimStats> dims;                // in the family's order
  std::map<std::string, RatioStats> ratios;  // per invariant
  TimeSplit time;
  DimStats& dim(const std::string& name);
};

struct RunReport;
// The statistics as the reporters show them: a few aligned lines (--stats),
// and the "statistics" object of --format json (docs/REPORT.md).
std::string stats_text(const RunReport& report);
std::string stats_json(const RunReport& report);  // a JSON object, serialized
// An error/bound ratio to 3 significant digits, or to as many as it takes
// not to show a ratio short of (or over) 1 as "1" (0.9999998).
std::string ratio_text(double ratio);
// "▁▃█▅": one character per bar, for the terminal.
std::string sparkline(const std::vector<std::pair<std::string, double>>& bars);

}  // namespace kprop
