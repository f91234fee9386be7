// Run statistics: collected from the runner's events (StatsCollector),
// summarised here for the reporters (report.cpp, html_report.cpp).
#include "kprop/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kprop/reasons.h"
#include "kprop/runner.h"

namespace kprop {

int64_t DimStats::count() const {
  int64_t n = 0;
  for (const auto& [v, k] : values) n += k;
  for (const auto& [v, k] : kinds) n += k;
  return n;
}

double DimStats::min() const {
  return values.empty() ? 0 : values.begin()->first;
}

double DimStats::max() const {
  return values.empty() ? 0 : values.rbegin()->first;
}

double DimStats::median() const {
  int64_t total = 0;
  for (const auto& [v, k] : values) total += k;
  int64_t seen = 0;
  for (const auto& [v, k] : values) {
    seen += k;
    if (2 * seen >= total) return v;  // the lower median: a value that was drawn
  }
  return 0;
}

std::vector<std::pair<std::string, double>> DimStats::histogram(int bins) const {
  std::vector<std::pair<std::string, double>> out;
  if (!kinds.empty()) {
    for (const auto& [k, n] : kinds) out.push_back({k, static_cast<double>(n)});
    return out;
  }
  if (values.empty()) return out;
  bool integers = true;
  for (const auto& [v, k] : values) integers = integers && v == std::floor(v);
  const double lo = min(), hi = max();
  // Few distinct values: one bar each.
  if (values.size() <= static_cast<size_t>(bins)) {
    for (const auto& [v, k] : values) out.push_back({fmt::format("{:g}", v), static_cast<double>(k)});
    return out;
  }
  double width = (hi - lo) / bins;
  if (integers) width = std::ceil(width);
  const int n = static_cast<int>(std::ceil((hi - lo + (integers ? 1 : 0)) / width));
  std::vector<double> counts(static_cast<size_t>(std::max(n, 1)), 0);
  for (const auto& [v, k] : values) {
    const size_t b = std::min(counts.size() - 1, static_cast<size_t>((v - lo) / width));
    counts[b] += static_cast<double>(k);
  }
  for (size_t b = 0; b < counts.size(); ++b) {
    const double a = lo + width * static_cast<double>(b);
    out.push_back({integers
                       ? (width == 1 ? fmt::format("{:g}", a) : fmt::format("{:g}–{:g}", a, a + width - 1))
                       : fmt::format("{:.3g}–{:.3g}", a, a + width),
                   counts[b]});
  }
  return out;
}

double RatioStats::quantile(double q) const {
  if (ratios.empty()) return 0;
  std::vector<double> v = ratios;
  const size_t at = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
  return v[at];
}

std::vector<std::pair<std::string, double>> RatioStats::histogram() const {
  // Half decades from 1e-6 to 10: [1e-6, 3e-6), ..., [3, 10]; 0 and smaller
  // values go to the first bin, larger to the last.
  constexpr int kLow = -12, kHigh = 2;  // in half decades: 10^(k/2)
  std::vector<double> counts(kHigh - kLow, 0);
  for (double r : ratios) {
    const int k = r > 0 ? static_cast<int>(std::floor(2 * std::log10(r))) : kLow;
    counts[static_cast<size_t>(std::clamp(k, kLow, kHigh - 1) - kLow)] += 1;
  }
  std::vector<std::pair<std::string, double>> out;
  for (int k = kLow; k < kHigh; ++k)
    out.push_back({fmt::format("{}{:.0e}", k == kLow ? "≤" : "≥", std::pow(10.0, k / 2.0)),
                   counts[static_cast<size_t>(k - kLow)]});
  return out;
}

DimStats& RunStats::dim(const std::string& name) {
  for (auto& d : dims)
    if (d.name == name) return d;
  dims.push_back({name, {}, {}});
  return dims.back();
}

void StatsCollector::case_checked(const CaseEvent& e) {
  ++stats_.cases;
  stats_.size.name = "size";
  stats_.rc_size.name = "rapidcheck_size";
  ++stats_.size.values[static_cast<double>(e.stats.size)];
  ++stats_.rc_size.values[e.size];
  for (const auto& d : e.stats.dims) {
    DimStats& s = stats_.dim(d.name);
    if (d.kind.empty())
      ++s.values[d.value];
    else
      ++s.kinds[d.kind];
  }
  stats_.time.generation += e.generation_seconds;
  for (size_t n = 0; n < e.results.size(); ++n) {
    const CheckResult& r = e.results[n];
    stats_.time.target += r.target_seconds;
    stats_.time.reference += r.reference_seconds;
    stats_.time.invariants += std::max(0.0, r.seconds - r.target_seconds - r.reference_seconds);
    if (r.kind != CheckResult::Kind::verdict || r.verdict.outcome != Outcome::pass) continue;
    for (const Measured& m : r.verdict.measured)
      if (m.name == kErrorRatio) stats_.ratios[e.uses[n]->name].ratios.push_back(m.value);
  }
  next_.case_checked(e);
}

void StatsCollector::failure(const Finding& finding) {
  stats_.time.shrinking += finding.shrink_seconds;
  next_.failure(finding);
}

RunStats StatsCollector::result(const RunReport& report) const {
  RunStats s = stats_;
  const TimeSplit& t = s.time;
  s.time.other =
      std::max(0.0, report.seconds - t.generation - t.target - t.reference - t.invariants - t.shrinking);
  return s;
}

std::string sparkline(const std::vector<std::pair<std::string, double>>& bars) {
  static const char* const blocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  double most = 0;
  for (const auto& b : bars) most = std::max(most, b.second);
  std::string out;
  for (const auto& b : bars)
    out += b.second <= 0 ? " " : blocks[std::min(7, static_cast<int>(7.999 * b.second / most))];
  return out;
}

namespace {

std::string range_text(const DimStats& d) {
  return fmt::format("min {:g}, median {:g}, max {:g}", d.min(), d.median(), d.max());
}

std::string kinds_text(const DimStats& d) {
  std::string out;
  for (const auto& [k, n] : d.kinds) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k, n);
  return out;
}

double total_time(const TimeSplit& t) {
  return t.generation + t.target + t.reference + t.invariants + t.shrinking + t.other;
}

// A whole number as a JSON integer (a count of 34 was written 34.0).
nlohmann::json number_json(double x) {
  return std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 9e15 ? nlohmann::json(int64_t(x))
                                                                       : nlohmann::json(x);
}

nlohmann::json dim_json(const DimStats& d) {
  nlohmann::json j = {{"name", d.name}, {"count", d.count()}};
  if (!d.kinds.empty()) {
    j["kinds"] = d.kinds;
    return j;
  }
  j["min"] = number_json(d.min()), j["median"] = number_json(d.median()), j["max"] = number_json(d.max());
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [v, n] : d.values) values[fmt::format("{:g}", v)] = n;
  j["values"] = values;
  return j;
}

nlohmann::json bars_json(const std::vector<std::pair<std::string, double>>& bars) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [label, n] : bars) out.push_back({{"bin", label}, {"count", number_json(n)}});
  return out;
}

}  // namespace

std::string stats_text(const RunReport& r) {
  const RunStats& s = r.stats;
  std::string out = fmt::format("  statistics: {} case(s) drawn\n", s.cases);
  if (s.cases == 0) return out;
  out += fmt::format("    {:<18} {:<36} {}\n", "size", range_text(s.size), sparkline(s.size.histogram(24)));
  for (const auto& d : s.dims)
    out += d.kinds.empty()
               ? fmt::format("    {:<18} {:<36} {}\n", d.name, range_text(d), sparkline(d.histogram(24)))
               : fmt::format("    {:<18} {}\n", d.name, kinds_text(d));
  const TimeSplit& t = s.time;
  const double total = std::max(total_time(t), 1e-12);
  auto part = [&](const char* name, double v) {
    return fmt::format("{} {:.3f} s ({:.0f}%)", name, v, 100 * v / total);
  };
  out +=
      fmt::format("    time: {}, {}, {}, {}, {}, {}\n", part("generation", t.generation),
                  part("target", t.target), part("reference", t.reference), part("invariants", t.invariants),
                  part("shrinking", t.shrinking), part("other", t.other));
  size_t width = 26;  // or the longest name: the columns stay aligned
  for (const auto& inv : r.invariants) width = std::max(width, inv.name.size());
  out += fmt::format("    {:<{}} {:>8} {:>9} {:>8} {:>5}   {}\n", "invariant", width, "checked", "discarded",
                     "declined", "n/a", "error/bound: median  p99    max   (log histogram 1e-6..10)");
  for (const auto& inv : r.invariants) {
    out += fmt::format("    {:<{}} {:>8} {:>9} {:>8} {:>5}", inv.name, width, inv.checked(), inv.discarded,
                       inv.declined, inv.not_applicable);
    const auto it = s.ratios.find(inv.name);
    if (it != s.ratios.end() && !it->second.ratios.empty()) {
      const RatioStats& q = it->second;
      out += fmt::format("   {:>19} {:>6} {:>6}  {}", ratio_text(q.quantile(0.5)),
                         ratio_text(q.quantile(0.99)), ratio_text(q.quantile(1.0)), sparkline(q.histogram()));
    }
    out += "\n";
    for (const auto& [why, n] : grouped_reasons(inv.discard_reasons))
      out += fmt::format("      discarded {}x: {}\n", n, why);
  }
  return out;
}

std::string ratio_text(double ratio) {
  std::string text = fmt::format("{:.3g}", ratio);
  for (int digits = 4; text == "1" && ratio != 1 && digits <= 17; ++digits)
    text = fmt::format("{:.{}g}", ratio, digits);
  return text;
}

std::string stats_json(const RunReport& r) {
  const RunStats& s = r.stats;
  nlohmann::json j = {{"cases", s.cases}};
  j["size"] = dim_json(s.size);
  j["size"]["histogram"] = bars_json(s.size.histogram());
  j["rapidcheck_size"] = dim_json(s.rc_size);
  j["dims"] = nlohmann::json::array();
  for (const auto& d : s.dims) j["dims"].push_back(dim_json(d));
  const TimeSplit& t = s.time;
  j["time_s"] = {{"generation", t.generation}, {"target", t.target},       {"reference", t.reference},
                 {"invariants", t.invariants}, {"shrinking", t.shrinking}, {"other", t.other},
                 {"total", total_time(t)}};
  j["invariants"] = nlohmann::json::array();
  for (const auto& inv : r.invariants) {
    nlohmann::json ji = {
        {"name", inv.name},           {"checked", inv.checked()},
        {"discarded", inv.discarded}, {"discard_reasons", grouped_reason_counts(inv.discard_reasons)},
        {"declined", inv.declined},   {"not_applicable", inv.not_applicable}};
    const auto it = s.ratios.find(inv.name);
    if (it != s.ratios.end() && !it->second.ratios.empty()) {
      const RatioStats& q = it->second;
      ji["error_ratio"] = {{"count", q.ratios.size()},
                           {"min", q.quantile(0)},
                           {"median", q.quantile(0.5)},
                           {"p90", q.quantile(0.9)},
                           {"p99", q.quantile(0.99)},
                           {"max", q.quantile(1.0)},
                           {"histogram", bars_json(q.histogram())}};
    }
    j["invariants"].push_back(ji);
  }
  return j.dump();
}

}  // namespace kprop
