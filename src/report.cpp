#include "kprop/report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kprop {
namespace {

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

std::string measured_text(const std::vector<Measured>& m) {
  std::string out;
  for (const auto& x : m) out += fmt::format("{}{} = {:.17g}", out.empty() ? "" : ", ", x.name, x.value);
  return out;
}

std::string invariant_line(const InvariantReport& r) {
  std::string what;
  switch (r.status) {
    case InvariantStatus::passed:
      what = fmt::format("{} trials", r.passed);
      break;
    case InvariantStatus::failed:
      what = fmt::format("after {} trials ({:.2f} s)", r.trials_to_fail, r.seconds_to_fail);
      break;
    case InvariantStatus::gave_up:
      what = fmt::format("{} passed, {} discarded (last: {})", r.passed, r.discarded, r.last_discard);
      break;
    case InvariantStatus::not_run:
      what = fmt::format("{} trials before the run stopped", r.passed);
      break;
    case InvariantStatus::not_applicable:
      what = r.last_discard;
      break;
  }
  if (r.discarded && r.status != InvariantStatus::gave_up) what += fmt::format(", {} discarded", r.discarded);
  return fmt::format("  {:<26} {:<8} {}\n", r.name, invariant_status_name(r.status), what);
}

class TextReporter final : public Reporter {
 public:
  std::string run(const RunReport& r) const override {
    std::string out = fmt::format("kprop {} ({}): target {}, reference {}, seed {}\n", r.spec, r.family,
                                  r.target, r.reference, r.seed);
    if (r.status == RunStatus::skipped) return out + r.detail + "\n";
    for (const auto& inv : r.invariants) out += invariant_line(inv);
    if (r.unsupported > 0)
      out += fmt::format("  ({} of {} cases declined by the target, not checked: {})\n", r.unsupported,
                         r.trials, r.unsupported_reason);
    for (const auto& inv : r.invariants) {
      if (!inv.counterexample) continue;
      const auto& cx = *inv.counterexample;
      out += fmt::format("\nCounterexample: {} broken by target {}\n", inv.name, r.target);
      out += fmt::format("  {}\n", cx.message);
      if (!cx.measured.empty()) out += fmt::format("  measured: {}\n", measured_text(cx.measured));
      out += fmt::format("  shrunk: {} (size {} -> {} in {} steps, {:.2f} s{})\n", cx.stats.summary,
                         cx.original_size, cx.stats.size, cx.shrink_steps, cx.shrink_seconds,
                         cx.shrink_interrupted ? ", budget reached: best so far" : "");
      out += "  case:\n" + indent(cx.case_yaml, "    ");
      if (!cx.corpus_path.empty())
        out +=
            fmt::format("  stored: {}{}\n", cx.corpus_path, cx.corpus_new ? "" : " (already in the corpus)");
    }
    if (!r.replay_command.empty()) out += fmt::format("\nreplay: {}\n", r.replay_command);
    const double rate = r.seconds > 0 ? r.trials / r.seconds : 0;
    std::string verdict;
    switch (r.status) {
      case RunStatus::passed:
        verdict = fmt::format("PASSED: {} invariants held over {} cases", r.invariants.size(), r.trials);
        break;
      case RunStatus::failed: {
        int n = 0;
        for (const auto& inv : r.invariants) n += inv.status == InvariantStatus::failed;
        verdict = fmt::format("FAILED: {} of {} invariants broken", n, r.invariants.size());
        break;
      }
      case RunStatus::gave_up:
        verdict = "GAVE UP: too many discarded cases; widen the domain";
        break;
      case RunStatus::crashed:
        verdict = "CRASHED: " + r.detail;
        break;
      case RunStatus::interrupted:
        verdict = "INTERRUPTED";
        break;
      case RunStatus::skipped:
        verdict = "SKIPPED";
        break;
    }
    out += fmt::format("{} in {:.2f} s ({:.0f} cases/s){}; seed {}\n", verdict, r.seconds, rate,
                       r.time_budget_hit ? ", stopped by the time budget" : "", r.seed);
    return out;
  }

  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    std::string out = fmt::format("kprop {} ({}): mutants, seed {}\n", spec.name, spec.family->name(),
                                  rows.empty() ? 0 : rows[0].report.seed);
    out += fmt::format("  {:<26} {:<8} {:<26} {:>7} {:>8} {:>7}  {}\n", "mutant", "verdict", "killed by",
                       "trials", "seconds", "shrunk", "shrunk case");
    int killed = 0;
    for (const auto& row : rows) {
      killed += row.killed;
      const InvariantReport* by = nullptr;
      for (const auto& r : row.report.invariants)
        if (r.status == InvariantStatus::failed) by = &r;
      if (row.report.status == RunStatus::skipped) {
        out += fmt::format("  {:<26} {:<8} {}\n", row.mutant, "skipped", row.report.detail);
        continue;
      }
      out += fmt::format("  {:<26} {:<8} {:<26} {:>7} {:>8.2f} {:>7}  {}\n", row.mutant,
                         row.killed ? "killed" : "SURVIVED", row.killed ? row.killed_by : "-",
                         by ? by->trials_to_fail : row.report.trials,
                         by ? by->seconds_to_fail : row.report.seconds,
                         by && by->counterexample ? std::to_string(by->counterexample->stats.size) : "-",
                         by && by->counterexample ? by->counterexample->stats.summary : "");
    }
    out += fmt::format("{}: {} of {} mutants killed\n",
                       killed == static_cast<int>(rows.size()) ? "PASSED" : "FAILED", killed, rows.size());
    return out;
  }

  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    std::string out = fmt::format("kprop {}: replaying {} corpus file(s)\n", spec.name, rows.size());
    int bad = 0;
    for (const auto& row : rows) {
      const bool ok = row.target_ok && row.mutant_still_fails;
      bad += !ok;
      out += fmt::format("  {:<4} {}", ok ? "ok" : "FAIL", row.path);
      if (!row.target_ok)
        out += "\n       target: " + row.target_detail;
      else if (!row.target_detail.empty())
        out += "  (" + row.target_detail + ")";
      if (row.mutant_checked && !row.mutant_still_fails)
        out += fmt::format("\n       mutant {} no longer fails {}: {}", row.found_against, row.invariant,
                           row.mutant_detail);
      out += "\n";
    }
    out += fmt::format("{}: {} of {} corpus files\n", bad ? "FAILED" : "PASSED",
                       rows.size() - static_cast<size_t>(bad), rows.size());
    return out;
  }
};

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j = {{"spec", r.spec},
                      {"spec_path", r.spec_path},
                      {"family", r.family},
                      {"target", r.target},
                      {"reference", r.reference},
                      {"seed", r.seed},
                      {"trials", r.trials},
                      {"seconds", r.seconds},
                      {"status", run_status_name(r.status)},
                      {"exit_code", exit_code(r.status)},
                      {"time_budget_hit", r.time_budget_hit}};
  if (!r.detail.empty()) j["detail"] = r.detail;
  if (r.unsupported > 0)
    j["unsupported_cases"] = {{"count", r.unsupported}, {"last_reason", r.unsupported_reason}};
  if (!r.replay_command.empty()) j["replay"] = r.replay_command;
  j["invariants"] = nlohmann::json::array();
  for (const auto& inv : r.invariants) {
    nlohmann::json ji = {{"name", inv.name},
                         {"status", invariant_status_name(inv.status)},
                         {"passed", inv.passed},
                         {"discarded", inv.discarded}};
    if (inv.status == InvariantStatus::failed) {
      ji["trials_to_fail"] = inv.trials_to_fail;
      ji["seconds_to_fail"] = inv.seconds_to_fail;
    }
    if (inv.counterexample) {
      const auto& cx = *inv.counterexample;
      nlohmann::json m = nlohmann::json::object();
      for (const auto& x : cx.measured) m[x.name] = x.value;
      ji["counterexample"] = {{"message", cx.message},
                              {"measured", m},
                              {"summary", cx.stats.summary},
                              {"size", cx.stats.size},
                              {"original_size", cx.original_size},
                              {"shrink_steps", cx.shrink_steps},
                              {"shrink_seconds", cx.shrink_seconds},
                              {"case_yaml", cx.case_yaml},
                              {"corpus_path", cx.corpus_path}};
    }
    j["invariants"].push_back(ji);
  }
  return j;
}

class JsonReporter final : public Reporter {
 public:
  std::string run(const RunReport& r) const override { return to_json(r).dump(2) + "\n"; }
  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    nlohmann::json j = {{"spec", spec.name}, {"family", spec.family->name()}};
    j["mutants"] = nlohmann::json::array();
    bool all = true;
    for (const auto& row : rows) {
      all = all && row.killed;
      j["mutants"].push_back({{"mutant", row.mutant},
                              {"description", row.description},
                              {"killed", row.killed},
                              {"killed_by", row.killed_by},
                              {"run", to_json(row.report)}});
    }
    j["all_killed"] = all;
    return j.dump(2) + "\n";
  }
  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    nlohmann::json j = {{"spec", spec.name}, {"files", nlohmann::json::array()}};
    for (const auto& row : rows)
      j["files"].push_back({{"path", row.path},
                            {"invariant", row.invariant},
                            {"found_against", row.found_against},
                            {"target_ok", row.target_ok},
                            {"target_detail", row.target_detail},
                            {"mutant_checked", row.mutant_checked},
                            {"mutant_still_fails", row.mutant_still_fails},
                            {"mutant_detail", row.mutant_detail}});
    return j.dump(2) + "\n";
  }
};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

class JunitReporter final : public Reporter {
 public:
  static std::string suite(const RunReport& r, const std::string& name) {
    int failures = 0, skipped = 0;
    std::string cases;
    for (const auto& inv : r.invariants) {
      cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n", xml_escape(name),
                           xml_escape(inv.name),
                           inv.status == InvariantStatus::failed ? inv.seconds_to_fail : r.seconds);
      if (r.status == RunStatus::skipped || inv.status == InvariantStatus::not_applicable) {
        ++skipped;
        cases += fmt::format("      <skipped message=\"{}\"/>\n",
                             xml_escape(r.status == RunStatus::skipped ? r.detail : inv.last_discard));
      } else if (inv.status == InvariantStatus::failed || inv.status == InvariantStatus::gave_up) {
        ++failures;
        std::string body = inv.counterexample ? inv.counterexample->case_yaml : inv.last_discard;
        std::string message = inv.counterexample ? inv.counterexample->message : "gave up: too many discards";
        cases += fmt::format("      <failure message=\"{}\">{}\nseed {}\n{}</failure>\n", xml_escape(message),
                             xml_escape(r.replay_command), r.seed, xml_escape(body));
      }
      cases += "    </testcase>\n";
    }
    if (r.status == RunStatus::crashed) {
      ++failures;
      cases +=
          fmt::format("    <testcase classname=\"{}\" name=\"crash\"><error message=\"{}\"/></testcase>\n",
                      xml_escape(name), xml_escape(r.detail));
    }
    return fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3f}\">\n"
        "    <properties><property name=\"seed\" value=\"{}\"/><property name=\"target\" "
        "value=\"{}\"/></properties>\n{}"
        "  </testsuite>\n",
        xml_escape(name), r.invariants.size() + (r.status == RunStatus::crashed), failures, skipped,
        r.seconds, r.seed, xml_escape(r.target), cases);
  }
  std::string run(const RunReport& r) const override {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n" + suite(r, "kprop." + r.spec) +
           "</testsuites>\n";
  }
  std::string mutants(const Spec& spec, const std::vector<MutantRow>& rows) const override {
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n";
    out += fmt::format("  <testsuite name=\"kprop.{}.mutants\" tests=\"{}\">\n", xml_escape(spec.name),
                       rows.size());
    for (const auto& row : rows) {
      out += fmt::format("    <testcase classname=\"kprop.{}.mutants\" name=\"{}\" time=\"{:.3f}\">",
                         xml_escape(spec.name), xml_escape(row.mutant), row.report.seconds);
      if (row.report.status == RunStatus::skipped)
        out += fmt::format("<skipped message=\"{}\"/>", xml_escape(row.report.detail));
      else if (!row.killed)
        out += fmt::format("<failure message=\"mutant survived: {}\"/>", xml_escape(row.description));
      out += "</testcase>\n";
    }
    return out + "  </testsuite>\n</testsuites>\n";
  }
  std::string replay(const Spec& spec, const std::vector<ReplayRow>& rows) const override {
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n";
    out += fmt::format("  <testsuite name=\"kprop.{}.replay\" tests=\"{}\">\n", xml_escape(spec.name),
                       rows.size());
    for (const auto& row : rows) {
      out += fmt::format("    <testcase classname=\"kprop.{}.replay\" name=\"{}\">", xml_escape(spec.name),
                         xml_escape(row.path));
      if (!row.target_ok)
        out += fmt::format("<failure message=\"{}\"/>", xml_escape(row.target_detail));
      else if (!row.mutant_still_fails)
        out += fmt::format("<failure message=\"mutant {} no longer fails\"/>", xml_escape(row.found_against));
      out += "</testcase>\n";
    }
    return out + "  </testsuite>\n</testsuites>\n";
  }
};

}  // namespace

std::vector<std::string> reporter_names() {
  return {"text", "json", "junit"};
}

std::unique_ptr<Reporter> make_reporter(const std::string& name) {
  if (name == "text") return std::make_unique<TextReporter>();
  if (name == "json") return std::make_unique<JsonReporter>();
  if (name == "junit") return std::make_unique<JunitReporter>();
  return nullptr;
}

}  // namespace kprop
