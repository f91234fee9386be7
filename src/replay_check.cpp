// A finding's replay command, re-run in a fresh process before the finding
// is reported: the printed replay must reproduce the failure by itself. A
// failure that needs the run's history (uninitialised memory, a race, state
// the target keeps between calls) passes there, and the report says so
// instead of handing the user a replay that shows nothing.
#include <fmt/format.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "kprop/process.h"
#include "kprop/runner.h"

namespace kprop {

std::vector<std::string> replay_argv(const RunContext& ctx, const std::string& path,
                                     const std::string& invariant) {
  std::vector<std::string> argv = {
      ctx.options.replay_program, "--spec", ctx.spec.path, "--target", ctx.target_name, "--replay", path};
  // The spec as the run loaded it: its profile, --domain and --max-case-mb
  // decide which invariants exist and the case's budget and timeout.
  if (!ctx.spec.profile.empty()) argv.insert(argv.end(), {"--profile", ctx.spec.profile});
  if (!ctx.spec.domain_overrides.empty()) argv.insert(argv.end(), {"--domain", ctx.spec.domain_overrides});
  if (ctx.spec.max_case_mb_override > 0)
    argv.insert(argv.end(), {"--max-case-mb", std::to_string(ctx.spec.max_case_mb_override)});
  if (ctx.spec.padded_tensors_override) argv.push_back("--padded-tensors");
  if (!ctx.options.reference.empty()) argv.insert(argv.end(), {"--reference", ctx.options.reference});
  if (!invariant.empty()) argv.insert(argv.end(), {"--invariant", invariant});
  if (ctx.options.case_timeout_s)
    argv.insert(argv.end(), {"--case-timeout", fmt::format("{:g}", *ctx.options.case_timeout_s)});
  return argv;
}

void check_replay(const RunContext& ctx, Finding& f) {
  auto not_run = [&](const std::string& why) { f.replay_check_detail = "not re-run: " + why; };
  if (ctx.options.replay_checker.empty())
    return not_run(ctx.options.no_replay_check_reason.empty() ? "no prop_runner to re-run it with"
                                                              : ctx.options.no_replay_check_reason);
  if (f.corpus_path.empty() || ctx.target_name.rfind("python:", 0) == 0) return not_run("no replay command");
  if (ctx.options.replay_check_corpus_only && !(f.in_corpus && f.corpus_new))
    return not_run("--mutants: a planted mutant's finding is a kill");
  if (interrupted()) return not_run("the run was interrupted");
  std::vector<std::string> argv = replay_argv(ctx, f.corpus_path, f.invariant);
  argv[0] = ctx.options.replay_checker;
  argv.insert(argv.end(), {"--format", "json", "--no-corpus"});  // a crash in it stores nothing in the corpus
  // A crash, hang or error is re-run with each check in a forked child, so
  // that the re-run reports it instead of dying of it (external targets run
  // in their own process anyway).
  const bool target_failure = f.kind != "invariant";
  if (target_failure) argv.push_back("--isolate");
  // Loading the spec and one case's checks: the case's own timeout (for the
  // target, and again for a recorded mutant) plus a minute for the rest.
  ProcessOptions options;
  options.stderr_too = false;
  options.timeout_s = 2 * ctx.run.case_timeout_s + 60;
  std::string out;
  ProcessResult r;
  try {
    r = run_process(argv, options, [&](const std::string& line) { out += line + "\n"; });
  } catch (const std::exception& e) {
    return not_run(e.what());
  }
  if (interrupted()) return not_run("the run was interrupted");
  auto set = [&](const char* status, const std::string& what) {
    f.replay_check = status;
    f.replay_check_detail = what;
  };
  // The command itself did not run through: kprop's fault or the
  // machine's, not evidence about the target.
  if (r.timed_out) return set("error", fmt::format("it did not finish in {:g} s", options.timeout_s));
  const int code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(out).at("files").at(0);
  } catch (const std::exception&) {
    return set("error", fmt::format("it exited {} without a report", code));
  }
  const std::string detail = row.value("target_detail", "");
  const std::string error = row.value("error", "");
  if (!error.empty()) return set("error", "it could not read the case: " + error);
  if (target_failure) {
    // The re-run's failure must be of the finding's own kind: a target that
    // died of a signal is not reproduced by one that only throws, nor back.
    const std::string got = row.value("target_failure", "");
    const std::string& want = f.failure_kind.empty() ? f.kind : f.failure_kind;
    if (got == want) return set("reproduced", detail);
  } else if (!row.value("target_ok", true) && detail.rfind(f.invariant + ": ", 0) == 0) {
    return set("reproduced", detail);
  }
  // It ran the case and the target did not fail this invariant there.
  set("not_reproduced", row.value("target_ok", true) ? (detail.empty() ? "the case passed" : detail)
                                                     : "it failed otherwise: " + detail);
}

}  // namespace kprop
