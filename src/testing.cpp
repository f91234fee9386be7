#include "kprop/testing.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "kprop/external.h"

namespace kprop::testing {
namespace {

// KPROP_REPLAY=FILE|FOLDER: the stored cases, checked as prop_runner --replay
// checks them, on this binary's kernel; the replay's table goes to stderr
// and its verdict is the report's status (a file that cannot be read, or a
// kernel that crashes on one, fails the test, as a failing case does).
RunReport replay_in_process(const Spec& spec, const RunOptions& options, const std::string& path) {
  RunReport report;
  report.replay = true;
  report.spec = spec.name;
  report.spec_path = spec.path;
  report.family = spec.family->name();
  report.target = options.target;
  const std::vector<ReplayRow> rows = replay_corpus(spec, path, options);
  fmt::print(stderr, "{}", make_reporter("text")->replay(spec, rows));
  switch (replay_verdict(rows)) {
    case ReplayVerdict::passed:
      report.status = RunStatus::passed;
      break;
    case ReplayVerdict::skipped:
      report.status = RunStatus::skipped;
      break;
    case ReplayVerdict::crashed:
      report.status = RunStatus::crashed;
      break;
    case ReplayVerdict::interrupted:
      report.status = RunStatus::interrupted;
      break;
    case ReplayVerdict::failed:
    case ReplayVerdict::error:
      report.status = RunStatus::failed;
      break;
  }
  // The file that decided the verdict (a failing one before a skipped one).
  const ReplayVerdict verdict = replay_verdict(rows);
  for (const auto& row : rows) {
    if (verdict == ReplayVerdict::passed || replay_verdict(row) != verdict) continue;
    const std::string why = !row.error.empty()           ? row.error
                            : !row.target_detail.empty() ? row.target_detail
                            : !row.mutant_still_fails    ? mutant_failure(row)
                                                         : to_string(verdict);
    report.detail = fmt::format("KPROP_REPLAY {}: {}", row.path, why);
    break;
  }
  if (report.detail.empty())
    report.detail = fmt::format("KPROP_REPLAY {}: {}", path, run_status_name(report.status));
  fmt::print(stderr, "kprop: spec {} target {} replay {}: {}\n", spec.name, options.target, path,
             run_status_name(report.status));
  return report;
}

}  // namespace

RunReport run_in_process(const std::string& spec_path, const EntryPoints& entry_points, RunOptions options,
                         const std::string& domain, const std::string& profile) {
  const Spec spec = load_spec(spec_path, profile, domain);
  external::TransportOptions o;
  o.family = spec.family->name();
  o.ops = spec.family->external_ops();
  o.call_timeout_s = spec.run.case_timeout_s;
  o.padded_tensors = spec.run.padded_tensors;
  // The entry points are this run's target (run-local: the family is unchanged).
  const std::string name = "in-process";
  options.target = name;
  options.target_transport = external::in_process(entry_points, o);
  if (const char* seed = std::getenv("KPROP_SEED"); seed && !options.seed)
    options.seed = std::strtoull(seed, nullptr, 10);
  // prop_runner cannot load a kernel linked into this binary: a stored
  // case is replayed by this test, run again with KPROP_REPLAY.
  if (options.replay_command.empty()) {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::string cmd =
        "KPROP_REPLAY={path} " + shell_quote(ec ? std::string("<this test binary>") : exe.string());
    if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info())
      cmd += " " + shell_quote(fmt::format("--gtest_filter={}.{}", test->test_suite_name(), test->name()));
    options.replay_command = cmd;
  }
  if (const char* replay = std::getenv("KPROP_REPLAY"); replay && *replay)
    return replay_in_process(spec, options, replay);
  RunReport report = run_spec(spec, options);
  // The counts, as prop_runner's "cases:" line gives them: a pass that
  // declined half its cases is not the same pass as one that checked all.
  std::string counts = fmt::format("{} drawn, {} checked", report.trials, report.checked);
  if (report.discarded > 0) counts += fmt::format(", {} discarded by every invariant", report.discarded);
  if (report.declined > 0) counts += fmt::format(", {} declined by the target", report.declined);
  fmt::print(stderr, "kprop: spec {}{} target {} seed {}: {} ({})\n", spec.name,
             profile.empty() ? "" : " profile " + profile, name, report.seed, run_status_name(report.status),
             counts);
  return report;
}

}  // namespace kprop::testing
