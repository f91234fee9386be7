#include "kprop/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "kprop/enum_names.h"
#include "kprop/reasons.h"
#include "kprop/stats.h"
#include "kprop/svg.h"

namespace kprop {
namespace {

// "too_slow, discarded": the run's failed health checks by name.
std::string failed_health_checks(const RunReport& r) {
  std::string checks;
  for (const auto& h : r.health) checks += (checks.empty() ? "" : ", ") + h.check;
  return checks;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += pad + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

// A case as a terminal shows it: whole when it is small, as a shrunk case
// is; cut past kCaseLineChars per line and kCaseChars in all otherwise (a
// case that could not shrink, e.g. one whose reference ran out of memory,
// printed a million values), saying where the whole case is; whole when it
// was stored nowhere.
constexpr size_t kCaseLineChars = 2000, kCaseChars = 20000;
std::string shown_case(const std::string& yaml, const std::string& stored) {
  if (stored.empty()) return yaml;  // nowhere else to find it: printed whole
  std::string out;
  bool cut = false;
  for (size_t at = 0; at < yaml.size();) {
    if (out.size() >= kCaseChars) {
      out += fmt::format("... ({} more characters)\n", yaml.size() - at);
      cut = true;
      break;
    }
    size_t end = yaml.find('\n', at);
    if (end == std::string::npos) end = yaml.size();
    const size_t n = end - at;
    out += yaml.substr(at, std::min(n, kCaseLineChars));
    if (n > kCaseLineChars) {
      out += fmt::format(" ... ({} more characters)", n - kCaseLineChars);
      cut = true;
    }
    out += "\n";
    at = end + 1;
  }
  if (!cut) return yaml;
  return out + fmt::format("(cut short: the whole case is in {})\n", stored);
}

namespace {

std::string measured_text(const std::vector<Measured>& m) {
  std::string out;
  for (const auto& x : m) out += fmt::format("{}{} = {:.17g}", out.empty() ? "" : ", ", x.name, x.value);
  return out;
}

// The verdict table's name column: 26 wide, or the longest name's width, so
// that the status column stays one column.
size_t name_width(const std::vector<InvariantReport>& invariants) {
  size_t w = 26;
  for (const auto& inv : invariants) w = std::max(w, inv.name.size());
  return w;
}

std::string invariant_line(const InvariantReport& r, const RunReport& run, size_t width) {
  const std::string& shard = run.shard;
  // The search's cases of this invariant, counted after the drawn ones.
  int64_t by_search = 0, held_by_search = 0;
  for (const SearchInvariant& si : run.search.invariants)
    if (si.name == r.name)
      by_search = si.passed + si.discarded + (si.failed ? 1 : 0), held_by_search = si.passed;
  const int64_t search_case = r.trials_to_fail - run.trials;  // > 0: a search case broke it
  std::string what;
  switch (r.status) {
    case InvariantStatus::passed:
      what = fmt::format("{} checked", r.passed);
      if (held_by_search > 0) what += fmt::format(" + {} by the search", held_by_search);
      break;
    case InvariantStatus::failed:
      // A shard checks every N-th case of the run: the failing case's index
      // is the unsharded run's (so the shards' first failure is the run's).
      // A search case has no index there: the search runs on the shard's
      // own cases.
      if (run.search.ran && by_search > 0 && search_case > 0)
        what = fmt::format("on search case {} (after {} drawn{}; {:.2f} s)", search_case, run.trials,
                           shard.empty() ? "" : ", shard " + shard, r.seconds_to_fail);
      else
        what = shard.empty() ? fmt::format("after {} trials ({:.2f} s)", r.trials_to_fail, r.seconds_to_fail)
                             : fmt::format("at case {} of the unsharded run (shard {}; {:.2f} s)",
                                           r.trials_to_fail, shard, r.seconds_to_fail);
      break;
    case InvariantStatus::gave_up:
      what = fmt::format("{} checked, {} discarded (last: {})", r.passed, r.discarded, r.last_discard);
      break;
    case InvariantStatus::not_run:
      what = fmt::format("{} checked before the run stopped", r.passed);
      break;
    case InvariantStatus::not_applicable:
      what = r.last_discard;
      break;
  }
  if (r.discarded && r.status != InvariantStatus::gave_up) what += fmt::format(", {} discarded", r.discarded);
  if (r.declined) what += fmt::format(", {} declined", r.declined);
  // Of the cases that passed: a failed invariant's failing case is over 1.
  if (r.max_error_ratio >= 0)
    what += fmt::format(", worst error/allowed {}{}", ratio_text(r.max_error_ratio),
                        r.status == InvariantStatus::failed ? " on the cases that passed" : "");
  return fmt::format("  {:<{}} {:<8} {}\n", r.name, width, invariant_status_name(r.status), what);
}

}  // namespace

// Why a replayed file no longer guards its mutant: "mutant X no longer
// fails INV: why" (no invariant: a crash or hang it no longer has), or the
// file's stale found_against said as the file's (it names no mutant).
std::string mutant_failure(const ReplayRow& row) {
  if (row.mutant_stale) return "stale file: " + row.mutant_detail;
  return fmt::format("mutant {} no longer fails{}: {}", row.found_against,
                     row.invariant.empty() ? "" : " " + row.invariant, row.mutant_detail);
}

std::string replay_warning(const Finding& f) {
  if (f.replay_check == "error")
    return fmt::format(
        "WARNING: the replay command, re-run in a fresh process, did not run through ({}): "
        "it is not known to reproduce this failure",
        f.replay_check_detail);
  if (f.replay_check != "not_reproduced") return "";
  return fmt::format(
      "WARNING: re-run in a fresh process, the replay did not fail ({}). The failure depends on state "
      "outside the stored case (uninitialised memory, a race, state the target keeps between calls, or "
      "a family codec that does not write all of the case): "
      "the file alone does not reproduce it",
      f.replay_check_detail);
}

namespace {

std::string finding_text(const Finding& f, const std::string& target) {
  std::string out = f.kind == "invariant"
                        ? fmt::format("\nCounterexample: {} broken by target {}\n", f.invariant, target)
                        : fmt::format("\nTarget failure ({}): target {}\n", f.kind, target);
  // A kernel's message as it said it, but no line of it at the margin (where
  // it could pass for the verdict) and no control character (ESC, CR) that
  // would drive the terminal.
  out += f.message.empty() ? "  \n" : indent(printable(f.message, true), "  ");
  if (!f.while_checking.empty())
    out += fmt::format(
        "  while checking: {} (an invariant may call the target on a case it derives from this "
        "one: the replay repeats that call)\n",
        f.while_checking);
  if (!f.measured.empty()) out += fmt::format("  measured: {}\n", measured_text(f.measured));
  if (f.kind == "hang")  // not shrunk: each try would cost the timeout
    out += fmt::format("  not shrunk (a hang): {} (size {})\n", f.stats.summary, f.stats.size);
  else
    out += fmt::format("  shrunk: {} (size {} -> {} in {} steps, {:.2f} s{})\n", f.stats.summary,
                       f.original_size, f.stats.size, f.shrink_steps, f.shrink_seconds,
                       f.shrink_interrupted ? ", stopped early: best so far" : "");
  if (!f.case_yaml.empty()) out += "  case:\n" + indent(shown_case(f.case_yaml, f.corpus_path), "    ");
  if (!f.drawing_text.empty()) out += indent(f.drawing_text, "  ");
  if (!f.corpus_path.empty())
    out += fmt::format("  stored: {}{}\n", f.corpus_path,
                       !f.in_corpus   ? " (not in the corpus)"
                       : f.corpus_new ? ""
                                      : " (already in the corpus)");
  if (!f.store_note.empty()) out += fmt::format("  note: {}\n", f.store_note);
  if (!f.replay_command.empty()) out += fmt::format("  replay: {}\n", f.replay_command);
  if (const std::string w = replay_warning(f); !w.empty()) out += "  " + w + "\n";
  return out;
}

// --mutants --stats: trials to kill per mutant (rows) and invariant (columns).
// Why --domain did not reach the profile a mutant ran under ("" if it did).
std::string domain_dropped(const Spec& spec, const MutantRow& row) {
  const auto own = spec.mutant_profiles.find(row.mutant);
  return own == spec.mutant_profiles.end() ? "" : own->second->domain_dropped;
}

std::string kill_matrix_text(const std::vector<MutantRow>& rows) {
  const KillMatrix m = kill_matrix(rows);
  if (m.invariants.empty()) return "";
  std::string out =
      "  kill matrix (trials to kill; '-' held, '.' not reached, 'x' not in that mutant's run, e.g. its "
      "profile's):\n";
  out += fmt::format("    {:<26}", "");
  for (size_t k = 0; k < m.invariants.size(); ++k) out += fmt::format(" {:>4}", fmt::format("i{}", k + 1));
  out += "\n";
  for (size_t i = 0; i < m.mutants.size(); ++i) {
    out += fmt::format("    {:<26}", m.mutants[i]);
    for (const auto& cell : m.cells[i]) out += fmt::format(" {:>4}", cell.text());
    out += "\n";
  }
  for (size_t k = 0; k < m.invariants.size(); ++k)
    out += fmt::format("    i{} = {}\n", k + 1, m.invariants[k]);
  return out;
}

}  // namespace

// What a mutant's run that killed nothing saw of its outputs against the
// family's correct implementations' (RunOptions::compare_outputs); "" when
// nothing was compared, or the mutant was killed.
std::string not_killed_note(const MutantRow& row) {
  const RunReport& r = row.report;
  const std::string_view verdict = mutant_verdict(row);
  if (verdict == "unreached")
    return fmt::format(
        "its outputs were a correct implementation's, bit for bit, on all {} cases drawn and the cases its "
        "invariants derived from them: no case reaches its bug (widen the domain, or list the mutant under a "
        "profile whose cases do)",
        r.outputs_compared);
  if (verdict != "survived" || r.outputs_compared == 0) return "";
  if (r.outputs_differed > 0)
    return fmt::format(
        "its outputs differed from every correct implementation's on {} of the {} cases compared, and no "
        "invariant failed: they missed the difference, or allowed it as within tolerance{}",
        r.outputs_differed, r.outputs_compared,
        // A declared op's correct implementations are its expressions: a
        // kernel of the user's differs from them whatever its bug.
        r.family == "op" ? " (a declared op's correct implementations are its fp64 reference and naive run, "
                           "which a kernel computing in f32 or in another order differs from on any case: if "
                           "no case reaches its bug, list it under a profile whose cases do)"
                         : "");
  return fmt::format(
      "its outputs were a correct implementation's on the {} cases compared; {} more drawn were not compared "
      "(declined, or discarded by every invariant before the target ran): they may reach its bug",
      r.outputs_compared, r.outputs_uncompared);
}

std::string focused_text(const RunReport& r) {
  std::vector<std::string> parts;
  for (const auto& [focus, n] : r.focused) parts.push_back(fmt::format("{} came from {}", n, focus));
  return fmt::format(
      "of the cases drawn, {}, where every invariant still checking observes (elsewhere they discard every "
      "case)",
      join(parts, "; "));
}

std::string search_text(const RunReport& r) {
  const SearchReport& s = r.search;
  if (!s.ran) return "";
  std::string out = fmt::format("  search: {} of {} cases in {:.2f} s, {} checked", s.cases, s.budget,
                                s.seconds, s.checked);
  if (s.declined) out += fmt::format(", {} declined by the target", s.declined);
  if (s.rejected) out += fmt::format("; {} moves left the domain (not run)", s.rejected);
  if (s.time_budget_hit) out += "; stopped by its time budget (--search-time, run.search.time_budget_s)";
  out += "\n";
  if (!s.note.empty()) out += "    " + s.note + "\n";
  for (const SearchInvariant& si : s.invariants) {
    // A broken invariant's last case has no ratio under 1 to show ("0.0363
    // -> 0.0363 (FAILED)" read as if the search had not moved it).
    if (si.failed)
      out += fmt::format("    {:<26} worst error/allowed {:.3g} -> FAILED on a search case", si.name,
                         si.start_ratio);
    else
      out += fmt::format("    {:<26} worst error/allowed {:.3g} -> {:.3g}", si.name, si.start_ratio,
                         std::max(si.start_ratio, si.worst_ratio));
    std::string outputs;
    for (const auto& [name, ratio] : si.output_ratios)
      outputs += fmt::format("{}{} {:.3g}", outputs.empty() ? "" : ", ", name, ratio);
    if (!outputs.empty()) out += " [search: " + outputs + "]";
    out += fmt::format(", {} improving moves\n", si.improvements);
  }
  for (const auto& inv : r.invariants)
    if (inv.ratios.total() > 0) out += fmt::format("    ratios {:<19} {}\n", inv.name, inv.ratios.text());
  return out;
}

namespace {

// ", profile NAME" for a header line when a spec profile is in effect.
static std::string profile_note(const std::string& profile) {
  return profile.empty() ? "" : ", profile " + profile;
}

// What narrowed the run beyond its spec and seed: ", shard 1/2, domain {...}".
static std::string scope_note(const RunReport& r) {
  return (r.shard.empty() ? "" : ", shard " + r.shard) + (r.domain.empty() ? "" : ", domain " + r.domain);
}

class TextReporter final : public Reporter {
 public:
  explicit TextReporter(bool stats) : stats_(stats) {}
  std::string error(const std::string& message, int exit_code) const override {
    return fmt::format("ERROR (exit {}): {}\n", exit_code, message);
  }
  std::string run(const RunReport& r) const override {
    std::string out = fmt::format("kprop {} ({}): target {}, reference {}, seed {}{}\n", r.spec, r.family,
                                  r.target, r.reference, r.seed, profile_note(r.profile) + scope_note(r));
    if (r.status == RunStatus::skipped) {
      out += printable(r.detail, true) + "\n";
      return out + fmt::format("SKIPPED: nothing was checked ({} cases drawn); seed {}\n", r.trials, r.seed);
    }
    const size_t width = name_width(r.invariants);
    for (const auto& inv : r.invariants) out += invariant_line(inv, r, width);
    // The search's cases come on top of those drawn ("591 drawn, 654 checked
    // (100 by the search)" read as more checked than drawn).
    out += fmt::format(
        "  cases: {} drawn{}, {} checked{}", r.trials,
        r.search.cases > 0 ? fmt::format(" + {} by the search", r.search.cases) : "", r.checked,
        r.discarded > 0 ? fmt::format(", {} discarded by every invariant still checking", r.discarded) : "");
    if (r.declined > 0)
      out += fmt::format(", {} declined by the target (not checked): {}", r.declined,
                         reasons_summary(r.decline_reasons, 5));
    // size_reached -1 (JSON): no case was drawn, no size reached (it read "sizes up to 0").
    out += r.size_reached < 0
               ? fmt::format("; no size reached: no case was drawn (max_size {})\n", r.max_size)
               : fmt::format("; sizes up to {} of max_size {}\n", r.size_reached, r.max_size);
    if (!r.focused.empty()) out += "  focused: " + focused_text(r) + "\n";
    out += search_text(r);
    if (stats_) out += stats_text(r);
    for (const Finding* f : r.findings()) out += finding_text(*f, r.target);
    for (const auto& h : r.health) out += fmt::format("\nHealth check '{}' failed: {}\n", h.check, h.message);
    if (!r.unchecked_outputs.empty())
      out +=
          fmt::format("  unchecked outputs: {} (no invariant of this run reads them; prop_runner --list)\n",
                      join(r.unchecked_outputs));
    const double rate = r.seconds > 0 ? double(r.trials + r.search.cases) / r.seconds : 0;
    std::string verdict;
    int held = 0, na = 0, broken = 0;
    std::vector<std::string> na_names;
    for (const auto& inv : r.invariants) {
      held += inv.status == InvariantStatus::passed;
      broken += inv.status == InvariantStatus::failed;
      if (inv.status == InvariantStatus::not_applicable) ++na, na_names.push_back(inv.name);
    }
    switch (r.status) {
      case RunStatus::passed:
        verdict = fmt::format("PASSED: {} invariant(s) held over {} checked cases", held, r.checked);
        if (na) verdict += fmt::format(" ({} n/a: {})", na, join(na_names));
        break;
      case RunStatus::failed:
        verdict = fmt::format("FAILED: {} of {} invariants broken", broken, r.invariants.size());
        if (r.stopped_at_failure) verdict += " (" + printable(r.detail) + ")";
        break;
      case RunStatus::gave_up: {
        std::vector<std::string> names;
        for (const auto& h : r.health)  // each check once: 18 invariants' `discarded` are one name
          if (std::find(names.begin(), names.end(), h.check) == names.end()) names.push_back(h.check);
        verdict = "HEALTH CHECK FAILED (" + join(names) + "): too little was checked to call this a pass";
        break;
      }
      case RunStatus::crashed:
        verdict = "CRASHED: " + printable(r.detail);
        break;
      case RunStatus::interrupted:
        verdict = fmt::format("INTERRUPTED after {} cases ({} finding(s) reported above)", r.trials,
                              r.findings().size());
        break;
      case RunStatus::skipped:
        verdict = "SKIPPED";
        break;
    }
    // Three digits below 100 (5 cases in 20 s is 0.25 cases/s, not 0).
    // The rate of cases drawn (the search's too), whatever became of them:
    // said so, next to a count of checked ones.
    out += fmt::format("{} in {:.2f} s ({} drawn/s){}; seed {}\n", verdict, r.seconds,
                       rate < 100 ? fmt::format("{:.3g}", rate) : fmt::format("{:.0f}", rate),
                       r.time_budget_hit ? ", stopped by the time budget" : "", r.seed);
    return out;
  }

  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    std::string out =
        fmt::format("kprop {} ({}): mutants, seed {}{}\n", spec.name, spec.family->name(),
                    rows.empty() ? 0 : rows[0].report.seed,
                    profile_note(spec.profile) + (rows.empty() ? "" : scope_note(rows[0].report)));
    out += fmt::format("  {:<26} {:<9} {:<26} {:>7} {:>8} {:>7}  {}\n", "mutant", "verdict", "killed by",
                       "trials", "seconds", "shrunk", "shrunk case");
    int killed = 0, gave_up = 0, unreached = 0;
    for (const auto& row : rows) {
      killed += row.killed;
      const std::string verdict = mutant_verdict(row);
      gave_up += verdict == "gave up";
      unreached += verdict == "unreached";
      // The killer's numbers (with --stats every invariant runs on, and
      // others may fail later: the last of them was shown beside its name).
      const InvariantReport* by = nullptr;
      for (const auto& r : row.report.invariants)
        if (r.status == InvariantStatus::failed && (!by || r.name == row.killed_by)) by = &r;
      if (row.report.status == RunStatus::skipped || (verdict == "interrupted" && row.report.trials == 0)) {
        std::string detail = row.report.detail;  // without the verdict said again ("skipped   skipped: ...")
        if (detail.rfind(std::string(verdict) + ": ", 0) == 0) detail.erase(0, verdict.size() + 2);
        out += fmt::format("  {:<26} {:<9} {}\n", row.mutant, verdict, printable(detail));
        continue;
      }
      // A mutant run under the profile its bug needs (profiles: {P: {mutants: [...]}}).
      // A run that gave up names its failed health checks there instead.
      std::string by_name = row.killed ? row.killed_by : "-";
      if (verdict == "gave up") by_name += " (" + failed_health_checks(row.report) + ")";
      if (row.report.profile != spec.profile) by_name += " [" + row.report.profile + "]";
      // The killing finding's shrunk case: the invariant's counterexample,
      // or the crash, hang or error the mutant was killed by.
      const Finding* shrunk = by && by->counterexample         ? &*by->counterexample
                              : row.killed && row.report.crash ? &*row.report.crash
                                                               : nullptr;
      out += fmt::format(
          "  {:<26} {:<9} {:<26} {:>7} {:>8.2f} {:>7}  {}\n", row.mutant,
          verdict == "killed"      ? verdict
          : verdict == "survived"  ? "SURVIVED"
          : verdict == "unreached" ? "UNREACHED"
          : verdict == "gave up"   ? "GAVE UP"
                                   : verdict,
          by_name, by ? by->trials_to_fail : row.report.trials, by ? by->seconds_to_fail : row.report.seconds,
          shrunk ? std::to_string(shrunk->stats.size) : "-", shrunk ? shrunk->stats.summary : "");
      // A kill whose stored case does not replay (a family's shrinker or
      // codec at fault, or state outside the case) says so under its row.
      if (shrunk)
        if (const std::string w = replay_warning(*shrunk); !w.empty()) out += "    " + w + "\n";
      if (const std::string why = domain_dropped(spec, row); !why.empty())
        out += fmt::format("    ran under profile {}'s domain as written: --domain does not fit it ({})\n",
                           row.report.profile, why);
      if (const std::string why = not_killed_note(row); !why.empty()) out += "    " + why + "\n";
    }
    if (stats_) out += kill_matrix_text(rows);
    const std::string verdict = mutants_verdict_name(rows);
    if (verdict == "SKIPPED")
      out += fmt::format("SKIPPED: none of the {} mutants could run here\n", rows.size());
    else
      out += fmt::format("{}: {} of {} mutants killed{}{}\n", verdict, killed, rows.size(),
                         unreached ? fmt::format("; {} unreached (no case drawn reached the bug: its outputs "
                                                 "were a correct implementation's on every case)",
                                                 unreached)
                                   : "",
                         gave_up ? fmt::format("; {} gave up (the health checks named beside each say too "
                                               "little was checked to call it)",
                                               gave_up)
                                 : "");
    return out;
  }

  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    std::string out = fmt::format("kprop {}: replaying {} corpus file(s)\n", spec.name, rows.size());
    int count[6] = {0, 0, 0, 0, 0, 0};  // by ReplayVerdict
    for (const auto& row : rows) {
      const ReplayVerdict v = replay_verdict(row);
      ++count[static_cast<int>(v)];
      if (v == ReplayVerdict::error) {
        out += fmt::format("  ERROR {}\n", row.error);
        continue;
      }
      if (v == ReplayVerdict::interrupted) {
        out += fmt::format("  -     {}  (not replayed: interrupted first)\n", row.path);
        continue;
      }
      const char* word = v == ReplayVerdict::passed    ? "ok"
                         : v == ReplayVerdict::skipped ? "skip"
                         : v == ReplayVerdict::crashed ? "CRASH"
                                                       : "FAIL";
      out += fmt::format("  {:<5} {}", word, row.path);
      if (!row.target_ok)
        out += "\n       target: " + printable(row.target_detail);
      else if (!row.target_detail.empty())
        out += "  (" + printable(row.target_detail) + ")";
      if (row.mutant_checked && !row.mutant_still_fails) out += "\n       " + printable(mutant_failure(row));
      out += "\n";
    }
    const auto n = [&](ReplayVerdict v) { return count[static_cast<int>(v)]; };
    out += fmt::format("{}: {} of {} corpus files passed", to_string(replay_verdict(rows)),
                       n(ReplayVerdict::passed), rows.size());
    if (n(ReplayVerdict::failed)) out += fmt::format(", {} failed", n(ReplayVerdict::failed));
    if (n(ReplayVerdict::crashed)) out += fmt::format(", {} crashed the target", n(ReplayVerdict::crashed));
    if (n(ReplayVerdict::error)) out += fmt::format(", {} could not be read", n(ReplayVerdict::error));
    if (n(ReplayVerdict::interrupted))
      out += fmt::format(", {} not replayed (interrupted)", n(ReplayVerdict::interrupted));
    // Other specs' cases in their folders of a corpus root, counted apart:
    // left to those specs, not declined or unobserved.
    std::vector<std::string> specs;
    int others = 0;
    for (const auto& row : rows)
      if (replay_verdict(row) == ReplayVerdict::skipped && !row.other_spec.empty()) {
        ++others;
        if (std::find(specs.begin(), specs.end(), row.other_spec) == specs.end())
          specs.push_back(row.other_spec);
      }
    if (n(ReplayVerdict::skipped) > others)
      // Declined, discarded or n/a for every invariant replayed, or for the
      // one that found it (its others may have held), or found by an
      // invariant of kprop.check's this run lacks: each file's line says.
      out += fmt::format(
          ", {} not checked (declined by the target, or discarded or n/a where it had to be checked; each "
          "file's line says which)",
          n(ReplayVerdict::skipped) - others);
    if (others > 0)
      out += fmt::format(
          ", {} not replayed (cases of spec{} {}, in {} folder{} of the corpus; each file's line says where "
          "to replay it)",
          others, specs.size() > 1 ? "s" : "", join(specs), specs.size() > 1 ? "their" : "its",
          specs.size() > 1 ? "s" : "");
    if (rows.empty()) out += " (no corpus files there: nothing was checked)";
    return out + "\n";
  }

 private:
  bool stats_;
};

// A stored case past this size is not embedded in the JSON report (null,
// with its size): a case that could not shrink at a real model's sizes is
// tens of megabytes, once per invariant it broke (five findings on one 2 x 1M
// case made a 248 MB report). corpus_path has it whole. A shrunk case is a
// few kilobytes; one stored nowhere is embedded whatever its size.
constexpr size_t kJsonCaseBytes = size_t(1) << 20;

nlohmann::json finding_json(const Finding& f) {
  nlohmann::json m = nlohmann::json::object();
  for (const auto& x : f.measured) m[x.name] = x.value;
  nlohmann::json j = {
      {"kind", f.kind},
      {"invariant", f.invariant},
      {"message", f.message},
      {"while_checking", f.while_checking},
      {"measured", m},
      {"summary", f.stats.summary},
      {"size", f.stats.size},
      {"original_size", f.original_size},
      {"shrink_steps", f.shrink_steps},
      {"shrink_seconds", f.shrink_seconds},
      {"shrink_interrupted", f.shrink_interrupted},
      {"case_yaml", f.case_yaml},
      {"corpus_path", f.corpus_path},
      {"in_corpus", f.in_corpus},
      {"replay", f.replay_command},
      {"replay_check",
       {{"status", f.replay_check.empty() ? "not_run" : f.replay_check}, {"detail", f.replay_check_detail}}}};
  if (!f.corpus_path.empty() && f.case_yaml.size() > kJsonCaseBytes) {
    j["case_yaml"] = nullptr;
    j["case_yaml_bytes"] = f.case_yaml.size();
  }
  if (!f.store_note.empty()) j["store_note"] = f.store_note;
  if (!f.drawing_text.empty()) j["drawing_text"] = f.drawing_text;
  if (!f.drawing_note.empty()) j["drawing_note"] = f.drawing_note;
  return j;
}

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j = {{"spec", r.spec},
                      {"spec_path", r.spec_path},
                      {"family", r.family},
                      {"target", r.target},
                      {"reference", r.reference},
                      {"seed", r.seed},
                      {"trials", r.trials},
                      {"trials_wanted", r.trials_wanted},
                      {"checked", r.checked},
                      {"discarded", r.discarded},
                      {"declined", r.declined},
                      {"decline_reasons", grouped_reason_counts(r.decline_reasons)},
                      {"size_reached", r.size_reached},
                      {"max_size", r.max_size},
                      {"largest_case", r.largest_case},
                      {"seconds", r.seconds},
                      {"status", run_status_name(r.status)},
                      {"exit_code", exit_code(r.status)},
                      {"time_budget_hit", r.time_budget_hit},
                      {"stopped_at_failure", r.stopped_at_failure}};
  if (r.outputs_compared + r.outputs_uncompared > 0)  // a mutant's run (RunOptions::compare_outputs)
    j["outputs_compared"] = {{"compared", r.outputs_compared},
                             {"differed", r.outputs_differed},
                             {"not_compared", r.outputs_uncompared}};
  if (!r.profile.empty()) j["profile"] = r.profile;
  if (!r.shard.empty()) j["shard"] = r.shard;  // trials_to_fail: the unsharded run's case index
  if (!r.domain.empty()) j["domain"] = r.domain;
  if (!r.focused.empty()) j["focused"] = r.focused;
  if (!r.detail.empty()) j["detail"] = r.detail;
  j["health_checks_failed"] = nlohmann::json::array();
  for (const auto& h : r.health)
    j["health_checks_failed"].push_back({{"check", h.check}, {"message", h.message}});
  if (r.crash) j["crash"] = finding_json(*r.crash);
  j["unchecked_outputs"] = r.unchecked_outputs;
  j["statistics"] = nlohmann::json::parse(stats_json(r));
  if (r.search.ran) {
    const SearchReport& s = r.search;
    nlohmann::json js = {{"budget", s.budget},
                         {"cases", s.cases},
                         {"checked", s.checked},
                         {"declined", s.declined},
                         {"rejected", s.rejected},
                         {"seconds", s.seconds},
                         {"time_budget_hit", s.time_budget_hit}};
    if (!s.note.empty()) js["note"] = s.note;
    js["invariants"] = nlohmann::json::array();
    for (const SearchInvariant& si : s.invariants)
      js["invariants"].push_back(
          {{"name", si.name},
           {"start_ratio", si.start_ratio},
           // null when a search case broke it (the text's "-> FAILED"):
           // no ratio under 1 stands for a failure.
           {"worst_ratio",
            si.failed ? nlohmann::json(nullptr) : nlohmann::json(std::max(si.start_ratio, si.worst_ratio))},
           // null when no search case passed (worst_ratio's -1 is "none").
           {"search_ratio", si.worst_ratio < 0 ? nlohmann::json(nullptr) : nlohmann::json(si.worst_ratio)},
           {"output_ratios", si.output_ratios},
           {"passed", si.passed},
           {"discarded", si.discarded},
           {"improvements", si.improvements},
           {"failed", si.failed}});
    j["search"] = js;
  }
  j["invariants"] = nlohmann::json::array();
  for (const auto& inv : r.invariants) {
    nlohmann::json ji = {{"name", inv.name},
                         {"status", invariant_status_name(inv.status)},
                         {"checked", inv.checked()},
                         {"passed", inv.passed},
                         {"discarded", inv.discarded},
                         {"declined", inv.declined},
                         {"not_applicable", inv.not_applicable},
                         {"discard_reasons", grouped_reason_counts(inv.discard_reasons)}};
    if (inv.max_error_ratio >= 0) ji["max_error_ratio"] = inv.max_error_ratio;
    if (!inv.output_ratios.empty()) ji["output_error_ratios"] = inv.output_ratios;
    if (inv.ratios.total() > 0)
      ji["error_ratio_histogram"] = {{"upper_edges", RatioHistogram::edges()}, {"counts", inv.ratios.counts}};
    if (inv.status == InvariantStatus::failed) {
      ji["trials_to_fail"] = inv.trials_to_fail;
      ji["seconds_to_fail"] = inv.seconds_to_fail;
      // A search case's failure: its index counts this run's drawn cases
      // first, so under --shard it is no unsharded index; search_case says so.
      if (inv.trials_to_fail > r.trials && r.search.ran)
        for (const SearchInvariant& si : r.search.invariants)
          if (si.name == inv.name && si.failed) ji["search_case"] = inv.trials_to_fail - r.trials;
    }
    if (!inv.last_discard.empty()) ji["reason"] = inv.last_discard;
    if (inv.counterexample) ji["counterexample"] = finding_json(*inv.counterexample);
    j["invariants"].push_back(ji);
  }
  return j;
}

class JsonReporter final : public Reporter {
 public:
  std::string error(const std::string& message, int exit_code) const override {
    const nlohmann::json j = {{"status", "error"}, {"exit_code", exit_code}, {"error", message}};
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string run(const RunReport& r) const override {
    return to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    nlohmann::json j = {{"spec", spec.name}, {"family", spec.family->name()}};
    if (!spec.profile.empty()) j["profile"] = spec.profile;
    j["mutants"] = nlohmann::json::array();
    bool all = true;
    for (const auto& row : rows) {
      all = all && row.killed;
      j["mutants"].push_back({{"mutant", row.mutant},
                              {"description", row.description},
                              {"killed", row.killed},
                              {"verdict", mutant_verdict(row)},
                              {"killed_by", row.killed_by},
                              {"run", to_json(row.report)}});
      if (const std::string why = domain_dropped(spec, row); !why.empty())
        j["mutants"].back()["domain_dropped"] = why;
    }
    j["all_killed"] = all;
    j["skipped"] = mutants_skipped(rows);  // no mutant could run here
    j["exit_code"] = mutants_exit_code(rows);
    if (!rows.empty()) j["seed"] = rows[0].report.seed;  // every mutant's run draws from it
    if (!rows.empty() && !rows[0].report.shard.empty()) j["shard"] = rows[0].report.shard;
    if (!rows.empty() && !rows[0].report.domain.empty()) j["domain"] = rows[0].report.domain;
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    // Lower case, as a run's "status" (docs/REPORT.md); the text says PASSED.
    const auto word = [](ReplayVerdict v) {
      std::string w = to_string(v);
      for (char& ch : w) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      return w;
    };
    nlohmann::json j = {{"spec", spec.name},
                        {"verdict", word(replay_verdict(rows))},
                        {"exit_code", interrupted() ? 130 : exit_code(replay_verdict(rows))},
                        {"files", nlohmann::json::array()}};
    for (const auto& row : rows)
      j["files"].push_back({{"path", row.path},
                            {"error", row.error},
                            {"declined", row.declined},
                            {"invariant", row.invariant},
                            {"found_against", row.found_against},
                            {"verdict", word(replay_verdict(row))},
                            {"target_ok", row.target_ok},
                            {"target_failure", row.target_failure},
                            {"target_detail", row.target_detail},
                            {"failed_invariant", row.failed_invariant},
                            {"checked", row.checked},
                            {"mutant_checked", row.mutant_checked},
                            {"mutant_still_fails", row.mutant_still_fails},
                            {"mutant_detail", row.mutant_detail},
                            {"mutant_stale", row.mutant_stale},
                            {"other_spec", row.other_spec}});
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
};

class JunitReporter final : public Reporter {
 public:
  static std::string finding_body(const Finding& f, uint64_t seed) {
    std::string body = f.message + "\n";
    if (!f.measured.empty()) body += "measured: " + measured_text(f.measured) + "\n";
    body += fmt::format("shrunk: {} (size {} -> {})\nseed {}\ncase:\n{}", f.stats.summary, f.original_size,
                        f.stats.size, seed, shown_case(f.case_yaml, f.corpus_path));
    if (!f.corpus_path.empty()) body += "stored: " + f.corpus_path + "\n";
    if (!f.replay_command.empty()) body += "replay: " + f.replay_command + "\n";
    if (const std::string w = replay_warning(f); !w.empty()) body += w + "\n";
    return svg::escape(body);
  }
  static std::string suite(const RunReport& r, const std::string& name) {
    int failures = 0, errors = 0, skipped = 0;
    std::string cases;
    for (const auto& inv : r.invariants) {
      cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n", svg::escape(name),
                           svg::escape(inv.name),
                           inv.status == InvariantStatus::failed ? inv.seconds_to_fail : r.seconds);
      if (r.status == RunStatus::skipped) {
        ++skipped;
        cases += fmt::format("      <skipped message=\"{}\"/>\n", svg::escape(r.detail));
      } else if (inv.status == InvariantStatus::not_applicable) {
        ++skipped;
        cases += fmt::format("      <skipped message=\"n/a: {}\"/>\n", svg::escape(inv.last_discard));
      } else if (inv.status == InvariantStatus::not_run) {
        ++skipped;
        cases += fmt::format(
            "      <skipped message=\"not run to the end: {}; it held on the {} case(s) it checked\"/>\n",
            r.stopped_at_failure ? svg::escape(r.detail)
                                 : std::string("the run ") + run_status_name(r.status) + " first",
            inv.passed);
      } else if (inv.status == InvariantStatus::failed && inv.counterexample) {
        ++failures;
        cases +=
            fmt::format("      <failure message=\"{}\" type=\"invariant\">{}</failure>\n",
                        svg::escape(inv.counterexample->message), finding_body(*inv.counterexample, r.seed));
      } else if (inv.status == InvariantStatus::gave_up) {
        ++failures;
        cases += fmt::format(
            "      <failure message=\"gave up: {} checked, {} discarded, {} declined\" "
            "type=\"gave_up\">{}</failure>\n",
            inv.passed, inv.discarded, inv.declined, svg::escape(inv.last_discard));
      }
      cases += "    </testcase>\n";
    }
    int extra = 0;
    if (r.crash) {
      ++errors, ++extra;
      cases += fmt::format(
          "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n      <error message=\"{}\" "
          "type=\"{}\">{}</error>\n    </testcase>\n",
          svg::escape(name), svg::escape("target " + r.crash->kind), r.seconds, svg::escape(r.crash->message),
          svg::escape(r.crash->kind), finding_body(*r.crash, r.seed));
    }
    if (r.status == RunStatus::interrupted) {  // a run cut short is no pass: its own error
      ++errors, ++extra;
      cases += fmt::format(
          "    <testcase classname=\"{}\" name=\"run interrupted\" time=\"{:.3f}\">\n      <error "
          "message=\"{}\" type=\"interrupted\"/>\n    </testcase>\n",
          svg::escape(name), r.seconds, svg::escape(r.detail));
    }
    for (const auto& h : r.health) {
      if (h.check == "discarded") continue;  // reported on its invariant
      ++failures, ++extra;
      cases += fmt::format(
          "    <testcase classname=\"{}\" name=\"health check {}\" time=\"0\">\n      <failure "
          "message=\"{}\" "
          "type=\"health_check\"/>\n    </testcase>\n",
          svg::escape(name), svg::escape(h.check), svg::escape(h.message));
    }
    return fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
        "time=\"{:.3f}\">\n"
        "    <properties><property name=\"seed\" value=\"{}\"/><property name=\"target\" "
        "value=\"{}\"/><property name=\"cases_checked\" value=\"{}\"/>{}</properties>\n{}"
        "  </testsuite>\n",
        svg::escape(name), r.invariants.size() + extra, failures, errors, skipped, r.seconds, r.seed,
        svg::escape(r.target), r.checked, scope_properties(r), cases);
  }
  // The profile, shard and --domain a run had, as properties: shards'
  // suites are told apart by name too (kprop.dflash.shard1of2).
  static std::string scope_properties(const RunReport& r) {
    std::string out;
    for (const auto& [key, value] : {std::pair<const char*, const std::string&>{"profile", r.profile},
                                     {"shard", r.shard},
                                     {"domain", r.domain}})
      if (!value.empty()) out += fmt::format("<property name=\"{}\" value=\"{}\"/>", key, svg::escape(value));
    return out;
  }
  static std::string shard_suffix(const RunReport& r) {
    const auto slash = r.shard.find('/');
    return slash == std::string::npos
               ? ""
               : ".shard" + r.shard.substr(0, slash) + "of" + r.shard.substr(slash + 1);
  }
  std::string run(const RunReport& r) const override {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n" +
           suite(r, "kprop." + r.spec + shard_suffix(r)) + "</testsuites>\n";
  }
  // A suite's header carries its counts, as a run's does: CI tools read
  // them, not the testcases (a suite of survivors said 0 failures).
  // `seed`: the mutants' runs' (their cases are drawn from it), as a run's
  // suite carries it; none for a replay (each file records its own).
  static std::string counted_suite(const std::string& name, size_t tests, int failures, int errors,
                                   int skipped, const std::string& cases,
                                   std::optional<uint64_t> seed = std::nullopt) {
    return fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"{}\" tests=\"{}\" "
        "failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n{}{}  </testsuite>\n</testsuites>\n",
        name, tests, failures, errors, skipped,
        seed ? fmt::format("    <properties><property name=\"seed\" value=\"{}\"/></properties>\n", *seed)
             : "",
        cases);
  }
  std::string error(const std::string& message, int exit_code) const override {
    return fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"kprop\" tests=\"1\" "
        "failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0\">\n    <testcase classname=\"kprop\" "
        "name=\"run\">"
        "<error message=\"exit {}: {}\"/></testcase>\n  </testsuite>\n</testsuites>\n",
        exit_code, svg::escape(message));
  }
  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    const std::string name = "kprop." + svg::escape(spec.name) + ".mutants";
    std::string cases;
    int failures = 0, errors = 0, skipped = 0;
    // One mutant skipped where others ran is no kill (exit 1, as the text
    // says): a failure; all of them skipped (no device here) is a skip.
    const bool all_skipped = mutants_skipped(rows);
    for (const auto& row : rows) {
      cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">", name,
                           svg::escape(row.mutant), row.report.seconds);
      const std::string verdict = mutant_verdict(row);
      if (verdict == "skipped" && all_skipped)
        ++skipped, cases += fmt::format("<skipped message=\"{}\"/>", svg::escape(row.report.detail));
      else if (verdict == "skipped")
        ++failures, cases += fmt::format("<failure message=\"mutant not killed: its run was skipped ({})\"/>",
                                         svg::escape(row.report.detail));
      else if (verdict == "gave up" || verdict == "interrupted")
        ++errors, cases += fmt::format("<error message=\"mutant not killed: its run {} ({})\"/>", verdict,
                                       svg::escape(verdict == "gave up" ? "health checks failed: " +
                                                                              failed_health_checks(row.report)
                                                                        : row.report.detail));
      else if (!row.killed)
        ++failures, cases += fmt::format(
                        "<failure message=\"mutant {}: {}{}\"/>", verdict, svg::escape(row.description),
                        svg::escape(not_killed_note(row).empty() ? "" : "; " + not_killed_note(row)));
      cases += "</testcase>\n";
    }
    return counted_suite(name, rows.size(), failures, errors, skipped, cases,
                         rows.empty() ? std::nullopt : std::optional<uint64_t>(rows[0].report.seed));
  }
  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    const std::string name = "kprop." + svg::escape(spec.name) + ".replay";
    std::string cases;
    int failures = 0, errors = 0, skipped = 0;
    for (const auto& row : rows) {
      cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\">", name, svg::escape(row.path));
      const ReplayVerdict v = replay_verdict(row);
      if (v == ReplayVerdict::error)
        ++errors, cases += fmt::format("<error message=\"{}\"/>", svg::escape(row.error));
      else if (v == ReplayVerdict::crashed)
        ++errors, cases += fmt::format("<error message=\"{}\"/>", svg::escape(row.target_detail));
      else if (v == ReplayVerdict::interrupted)
        ++errors, cases += "<error message=\"not replayed: the run was interrupted first\"/>";
      else if (!row.target_ok)
        ++failures, cases += fmt::format("<failure message=\"{}\"/>", svg::escape(row.target_detail));
      else if (!row.mutant_still_fails)
        ++failures, cases += fmt::format("<failure message=\"{}\"/>", svg::escape(mutant_failure(row)));
      else if (v == ReplayVerdict::skipped)
        ++skipped, cases += fmt::format("<skipped message=\"{}\"/>", svg::escape(row.target_detail));
      cases += "</testcase>\n";
    }
    // No files: SKIPPED, as the text and JSON say, never an empty suite
    // (tests="0" skipped="0", which a dashboard shows green). One testcase,
    // skipped, as a skipped run's invariants are.
    if (rows.empty())
      return counted_suite(
          name, 1, 0, 0, 1,
          fmt::format("    <testcase classname=\"{}\" name=\"replay\"><skipped "
                      "message=\"no corpus files there: nothing was checked\"/></testcase>\n",
                      name));
    return counted_suite(name, rows.size(), failures, errors, skipped, cases);
  }
};

}  // namespace

std::string KillCell::text() const {
  if (state == State::killed) return std::to_string(trials);
  static constexpr const char* kMarks[] = {"", "-", ".", "?", "n/a", "crash", "x"};  // killed: its trials
  static_assert(std::size(kMarks) == size_t(State::absent) + 1);
  return enum_name(state, kMarks);
}

KillMatrix kill_matrix(const std::vector<MutantRow>& rows) {
  KillMatrix m;
  for (const auto& row : rows)
    for (const auto& inv : row.report.invariants)
      if (std::find(m.invariants.begin(), m.invariants.end(), inv.name) == m.invariants.end())
        m.invariants.push_back(inv.name);
  for (const auto& row : rows) {
    m.mutants.push_back(row.mutant);
    std::vector<KillCell> cells(m.invariants.size());
    for (const auto& inv : row.report.invariants) {
      const size_t k = static_cast<size_t>(std::find(m.invariants.begin(), m.invariants.end(), inv.name) -
                                           m.invariants.begin());
      KillCell& c = cells[k];
      switch (inv.status) {
        case InvariantStatus::failed:
          c = {KillCell::State::killed, inv.trials_to_fail};
          break;
        case InvariantStatus::passed:
          c = {KillCell::State::held, inv.passed};
          break;
        case InvariantStatus::gave_up:
          c = {KillCell::State::gave_up, inv.passed};
          break;
        case InvariantStatus::not_applicable:
          c = {KillCell::State::not_applicable, 0};
          break;
        case InvariantStatus::not_run:
          c = {row.report.status == RunStatus::crashed ? KillCell::State::crashed
                                                       : KillCell::State::not_reached,
               inv.passed};
          break;
      }
    }
    m.cells.push_back(std::move(cells));
  }
  return m;
}

std::vector<std::string> reporter_names() {
  return {"text", "json", "junit", "html"};
}

std::unique_ptr<Reporter> make_reporter(const std::string& name, bool stats) {
  if (name == "text") return std::make_unique<TextReporter>(stats);
  if (name == "html") return make_html_reporter();
  if (name == "json") return std::make_unique<JsonReporter>();
  if (name == "junit") return std::make_unique<JunitReporter>();
  return nullptr;
}

namespace {
class ProgressLine final : public RunListener {
 public:
  ProgressLine() : on_(isatty(2)) {}
  void run_started(const RunReport& header) override {
    spec_ = header.spec;
    target_ = header.target;
  }
  void case_done(int64_t index, int64_t done, int64_t trials, int size, double seconds) override {
    const auto now = std::chrono::steady_clock::now();
    if (!on_ || now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    // Done of wanted, not drawn of wanted: the drawn count passes `trials`
    // when cases are discarded or declined ("case 2/1" said nothing true).
    fmt::print(stderr, "\r\033[K[{}] {} {}/{} checked (case {}, size {})  {:.1f} s", spec_, target_, done,
               trials, index, size, seconds);
  }
  // The first case, and each after one that took a second or more: a long
  // case says which it is and since when (at a model's sizes the line stood
  // on the case before for minutes).
  void case_started(int64_t index, int64_t done, int64_t trials, int size, double seconds) override {
    const bool slow = index == 1 || seconds - started_ >= 1.0;
    started_ = seconds;
    if (!on_ || !slow) return;
    last_ = std::chrono::steady_clock::now();
    fmt::print(stderr, "\r\033[K[{}] {} {}/{} checked (checking case {}, size {}, since {:.1f} s)", spec_,
               target_, done, trials, index, size, seconds);
  }
  void shrinking(const std::string& what, int64_t from, int64_t to, double seconds) override {
    if (on_)
      fmt::print(stderr, "\r\033[K[{}] shrinking {}: size {} → {}, {:.1f} s", spec_, what, from, to, seconds);
  }
  void failure(const Finding&) override { clear(); }
  void run_finished(const RunReport&) override { clear(); }

 private:
  void clear() {
    if (on_) fmt::print(stderr, "\r\033[K");
  }
  bool on_;
  std::string spec_, target_;
  double started_ = 0;  // the run's seconds when the last case started
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};
}  // namespace

std::unique_ptr<RunListener> make_progress_line() {
  return std::make_unique<ProgressLine>();
}

}  // namespace kprop
