// The findings pipeline: one exception policy for checking a case
// (check_one), one way from a failure to a shrunk, stored, replayable case
// (record_finding), and the crash guard that keeps a case when an in-process
// target dies. Runs, replays, fuzz imports and the fuzz harness all go
// through here, so the same event gets the same verdict everywhere.
#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <thread>

#include "kprop/clock.h"
#include "kprop/drawing.h"
#include "kprop/external.h"
#include "kprop/jobs.h"
#include "kprop/output_reads.h"
#include "kprop/process.h"
#include "kprop/report.h"
#include "kprop/runner.h"
#include "kprop/sanitizer.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

std::atomic<int> g_interrupts{0};
std::atomic<int64_t> g_first_interrupt_ns{0};

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void on_interrupt(int) {
  // A second Ctrl-C quits at once; one within half a second of the first is
  // the same interrupt delivered twice (coreutils' `timeout -s INT` signals
  // the process and its group), which must not lose the report.
  const int64_t now = monotonic_ns();
  if (g_interrupts.fetch_add(1) >= 1) {
    if (now - g_first_interrupt_ns.load() > 500000000) {
      static const char quit[] =
          "\nkprop: quit at the second Ctrl-C: no report; cases already stored stay where the run put them\n";
      [[maybe_unused]] auto n = write(2, quit, sizeof quit - 1);
      _exit(130);
    }
    return;
  }
  g_first_interrupt_ns = now;
  static const char msg[] =
      "\nkprop: interrupted; finishing with the best case so far (Ctrl-C again to quit)\n";
  [[maybe_unused]] auto n = write(2, msg, sizeof msg - 1);
}

// The temp folder for cases when neither the corpus nor the scratch folder
// can be written (e.g. a read-only checkout).
std::string temp_fallback(const std::string& spec) {
  const char* tmp = std::getenv("TMPDIR");
  return (fs::path(tmp && *tmp ? tmp : "/tmp") / fmt::format("kprop-findings-{}", getuid()) / spec).string();
}

CorpusEntry entry_for(const RunContext& ctx, const AnyCase& c, const std::string& invariant,
                      const std::string& message, const std::string& found_by) {
  CorpusEntry e;
  e.spec = ctx.spec.name;
  e.profile = ctx.spec.profile;
  e.family = ctx.spec.family->name();
  e.invariant = invariant;
  e.found_against = ctx.target_name;
  e.found_by = found_by;
  e.seed = ctx.seed;
  e.message = message;
  e.case_node = ctx.spec.family->to_yaml(c);
  return e;
}

}  // namespace

std::string replay_command(const RunContext& ctx, const std::string& path, const std::string& invariant) {
  // A Python function (kprop.check in process) is no target prop_runner
  // knows: its replay is the Python call.
  if (ctx.target_name.rfind("python:", 0) == 0)
    return fmt::format("kprop.replay('{}', {}, '{}'{})", ctx.spec.path, ctx.target_name.substr(7), path,
                       invariant.empty() ? "" : ", invariants=['" + invariant + "']");
  if (std::string cmd = ctx.options.replay_command; !cmd.empty()) {
    for (size_t at = cmd.find("{path}"); at != std::string::npos; at = cmd.find("{path}", at + 1))
      cmd.replace(at, 6, shell_quote(path));
    return cmd;
  }
  std::string cmd;
  for (const auto& word : replay_argv(ctx, path, invariant))
    cmd += (cmd.empty() ? "" : " ") + shell_quote(word);
  return cmd;
}

namespace {

// A mutant registered out_of_bounds fails by reading past a buffer: a
// replay fails or not by what lies there, so its cases stay out of the
// corpus, whose replay must give one verdict.
bool kept_out_of_corpus(const RunContext& ctx) {
  return ctx.options.write_corpus && ctx.target.info.out_of_bounds;
}

// The spec's folder in the scratch folder (cases kept out of the corpus).
std::string scratch_dir(const RunContext& ctx) {
  return (fs::path(ctx.options.scratch_dir) / ctx.spec.name).string();
}

// Where a finding goes: the corpus when it is written (and may take it),
// else the scratch folder.
std::string primary_dir(const RunContext& ctx) {
  return ctx.options.write_corpus && !kept_out_of_corpus(ctx)
             ? (fs::path(ctx.options.corpus_dir) / ctx.spec.name).string()
             : scratch_dir(ctx);
}
std::string fallback_dir(const RunContext& ctx) {
  return ctx.options.write_corpus ? scratch_dir(ctx) : temp_fallback(ctx.spec.name);
}

// ------------------------------------------------------------ crash guard
// While an in-process target runs, a fatal signal or a hang must not lose the
// case: the handler (or the watchdog thread) stores it and exits 3, as
// libFuzzer does with its crash files. External targets run in their own
// processes, whose transport enforces the timeout and keeps the runner alive.
// `armed` is claimed once, by whichever comes first: the check's end (the
// guard's destructor), a fatal signal or the watchdog. The watchdog saves the
// case from its own thread while the checking thread runs on, so a check that
// ends after the watchdog claimed it waits for the save (and the exit) rather
// than destroy the case being written.
struct GuardState {
  const RunContext* ctx = nullptr;
  const AnyCase* input = nullptr;
  std::atomic<bool> armed{false};
  std::atomic<bool> saving{false};  // the watchdog claimed the case: the process ends when it is stored
  // What one target call may take (0: not timed here; an external target's
  // transport times its own calls); TargetCall sets the deadline below.
  std::atomic<int64_t> call_timeout_ns{0};
};
GuardState g_guard;
// The deadline of the target call in progress (steady clock, ns; 0: no call),
// where a forked isolated child shares it with its parent (in_child), which
// times the child's target calls as the watchdog times this process's.
struct CallDeadline {
  std::atomic<int64_t> ns{0};
};
CallDeadline g_local_deadline;
CallDeadline* g_call_deadline = &g_local_deadline;
thread_local bool t_watchdog = false;  // this thread is the watchdog
// The process whose watchdog thread runs: a forked --jobs worker has none
// (threads do not survive fork) and starts its own.
pid_t g_watchdog_pid = 0;
std::mutex g_watchdog_mutex;
// In an isolated child the parent is the guard: a crash kills the child with
// its signal, a hang is timed out by the parent, and only the parent stores.
bool g_isolated_child = false;
// A --jobs worker (kprop/jobs.h): a crash or a hang ends it without storing
// anything; its caller redoes the case under its own guard.
bool g_worker = false;

[[noreturn]] void die_with_case(const std::string& why, const char* found_by) {
  if (g_worker) _exit(3);
  const RunContext& ctx = *g_guard.ctx;
  if (!ctx.options.crash_guard_stores) {
    fmt::print(stderr, "\nkprop: target '{}' {} on the case replayed (run with --isolate to report it)\n",
               ctx.target_name, why);
    std::fflush(stderr);
    _exit(3);
  }
  fmt::print(stderr, "\nkprop: target '{}' {}; saving the case\n", ctx.target_name, why);
  // The case is printed after it is stored, cut short where it is long (a
  // real model's case is megabytes; the file holds it whole), and whole
  // where it could not be stored.
  std::string text;
  try {
    const CorpusEntry e = entry_for(ctx, *g_guard.input, "", why, found_by);
    text = emit_yaml(e.case_node);
    const Stored s = store_entry(primary_dir(ctx), e, fallback_dir(ctx));
    fmt::print(stderr, "kprop: case:\n{}", shown_case(text, s.path));
    if (!s.note.empty()) fmt::print(stderr, "kprop: {}\n", s.note);
    if (!s.path.empty())
      fmt::print(stderr, "kprop: saved {}\nkprop: replay: {}\n", s.path, replay_command(ctx, s.path, ""));
  } catch (const std::exception& e) {
    if (!text.empty()) fmt::print(stderr, "kprop: case:\n{}", text);
    fmt::print(stderr, "kprop: could not save the case: {}\n", e.what());
  } catch (...) {
    if (!text.empty()) fmt::print(stderr, "kprop: case:\n{}", text);
    fmt::print(stderr, "kprop: could not save the case\n");
  }
  std::fflush(stderr);
  _exit(3);
}

// The handlers that were installed before ours (libFuzzer's, Python's
// faulthandler): a fatal signal outside a guarded check goes to them.
struct sigaction g_previous[NSIG];

// While the watchdog stores the case it claimed (it then calls _exit).
// `saving` also stands for a moment while the watchdog loses the claim to the
// check's end; async-signal-safe.
void wait_while_watchdog_saves() {
  while (g_guard.saving.load() && !t_watchdog) {
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
}

void on_fatal_signal(int sig) {
  // The check crashed while the watchdog stores its case: that case is the
  // one to keep, and the watchdog exits 3 once it is stored.
  wait_while_watchdog_saves();
  if (!g_guard.armed.exchange(false)) {
    sigaction(sig, &g_previous[sig], nullptr);
    raise(sig);
    return;
  }
  // Saving the case allocates, formats and writes, which a crash that left
  // the heap's lock held (the runner's own, in a check) would deadlock: a
  // save that has not ended in 30 s is ended by the default SIGALRM (both
  // calls are async-signal-safe).
  signal(SIGALRM, SIG_DFL);
  alarm(30);
  die_with_case(fmt::format("crashed with signal {} ({})", sig, strsignal(sig)), "crash");
}

bool past(const CallDeadline& d) {
  const int64_t deadline = d.ns.load();
  return deadline != 0 && Clock::now().time_since_epoch().count() > deadline;
}

std::string hang_message(double timeout_s) {
  return fmt::format("hung (a call ran past case_timeout_s = {:g} s; --case-timeout S allows a slower case)",
                     timeout_s);
}

void watchdog() {
  t_watchdog = true;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!past(*g_call_deadline)) continue;
    // saving before armed is given up: a check ending now sees one of them.
    g_guard.saving = true;
    if (!g_guard.armed.exchange(false)) {
      g_guard.saving = false;
      continue;
    }
    die_with_case(hang_message(g_guard.ctx->run.case_timeout_s), "hang");
  }
}

void install_fatal_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, &g_previous[sig]);
}

int64_t nanoseconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)).count();
}

// Arms the guard for the duration of one check.
class CaseGuard {
 public:
  CaseGuard(const RunContext& ctx, const AnyCase& c) {
    if (g_isolated_child || !ctx.options.crash_guard) return;
    if (!g_worker) install_fatal_handlers();
    {
      const std::lock_guard<std::mutex> lock(g_watchdog_mutex);
      if (g_watchdog_pid != getpid()) {
        g_watchdog_pid = getpid();
        std::thread(watchdog).detach();
      }
    }
    g_guard.ctx = &ctx;
    g_guard.input = &c;
    const bool external = external::is_external_target(ctx.target_name);
    g_guard.call_timeout_ns = external ? 0 : nanoseconds(ctx.run.case_timeout_s);
    g_guard.armed = true;
  }
  ~CaseGuard() {
    // Claimed by the watchdog (a hang): the case must outlive its save.
    if (!g_guard.armed.exchange(false)) wait_while_watchdog_saves();
    g_guard.call_timeout_ns = 0;
  }
  CaseGuard(const CaseGuard&) = delete;
  CaseGuard& operator=(const CaseGuard&) = delete;
};

// Greedy descent over the family's one structural shrinker, as a RapidCheck
// Shrinkable: the same shrink tree for generated cases, fuzz crashes, corpus
// files and target failures. `reproduces` returns the candidate's verdict
// when it still shows the failure being shrunk.
// The deadline of the shrink in progress on this thread (0: none).
thread_local Clock::time_point t_shrink_deadline{};
thread_local bool t_shrinking = false;

ShrinkResult shrink_with(const Family& family, const Values& domain, AnyCase failing, Verdict verdict,
                         double budget_s, int64_t budget_checks,
                         const std::function<std::optional<Verdict>(const AnyCase&)>& reproduces,
                         const ShrinkProgress& progress = {}) {
  const auto t0 = Clock::now();
  struct Shrinking {
    explicit Shrinking(Clock::time_point deadline) {
      t_shrink_deadline = deadline;
      t_shrinking = true;
    }
    ~Shrinking() { t_shrinking = false; }
  } shrinking(t0 + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(std::clamp(budget_s, 0.0, 1e9))));  // (no overflow)
  const int64_t from = family.stats(failing).size;
  ShrinkResult result{std::move(failing), std::move(verdict), 0, false};
  // Candidates stay inside the spec's domain (the family filters them).
  auto shrinkable = rc::shrinkable::shrinkRecur(
      result.best, [&family, &domain](const AnyCase& c) { return family.shrinks(c, domain); });
  // In a family whose shrink_resumes(), each pass resumes at the position
  // of the candidate the last one took: those before it failed on the case
  // it improved on, and mostly fail on the new one too (the same cuts, the
  // other elements' simpler values). Starting every pass at the first
  // candidate re-ran them after each step, quadratic in the case's
  // elements: an RMSNorm row of 41 bf16 elements took 57 steps and 19 s
  // through a NumPy worker. A pass that resumed and found nothing is
  // followed by one from the first candidate, and the shrink ends only when
  // such a pass finds nothing: the result is a local minimum over every
  // candidate, as before.
  const bool resumes = family.shrink_resumes();
  size_t resume = 0;
  // Candidates checked: run.shrink_budget_checks stops the shrink at the
  // same candidate on every machine (the seconds stop it where the clock says).
  int64_t checks = 0;
  for (;;) {
    bool progressed = false;
    size_t at = 0;
    auto candidates = shrinkable.shrinks();
    while (auto candidate = candidates.next()) {
      if (at++ < resume) continue;
      if (interrupted() || since(t0) > budget_s || (budget_checks > 0 && checks >= budget_checks)) {
        result.interrupted = true;
        return result;
      }
      ++checks;
      if (auto v = reproduces(candidate->value())) {
        result.best = candidate->value();
        result.verdict = std::move(*v);
        ++result.steps;
        shrinkable = std::move(*candidate);
        progressed = true;
        resume = resumes ? at - 1 : 0;
        if (progress) progress(from, family.stats(result.best).size, since(t0));
        break;
      }
    }
    if (progressed) continue;
    if (resume == 0) break;  // a pass from the first candidate found nothing
    resume = 0;
  }
  return result;
}

}  // namespace

bool shrink_should_stop() {
  return t_shrinking && (interrupted() || Clock::now() > t_shrink_deadline);
}

TargetCall::TargetCall() {
  const int64_t timeout = g_guard.call_timeout_ns.load();
  if (timeout > 0) g_call_deadline->ns = Clock::now().time_since_epoch().count() + timeout;
}
TargetCall::~TargetCall() {
  g_call_deadline->ns = 0;
}
TransportedCall::TransportedCall() {
  if (const int64_t deadline = g_call_deadline->ns.exchange(0); deadline != 0)
    left_ns_ = std::max<int64_t>(deadline - Clock::now().time_since_epoch().count(), 1);
}
TransportedCall::~TransportedCall() {
  if (left_ns_ != 0) g_call_deadline->ns = Clock::now().time_since_epoch().count() + left_ns_;
}

void enter_worker_process() {
  g_worker = true;
  g_guard.armed = false;
  g_guard.call_timeout_ns = 0;
  g_call_deadline->ns = 0;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
}

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}
bool interrupted() {
  return g_interrupts.load() > 0;
}
void clear_interrupt() {
  g_interrupts = 0;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" '\"$\\`!*?;&|<>(){}[]#~") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

RunConfig effective_run(const Spec& spec, const RunOptions& o) {
  RunConfig run = spec.run;
  if (o.seed) run.seed = *o.seed;
  if (o.trials) run.trials = *o.trials;
  if (o.time_budget_s) run.time_budget_s = *o.time_budget_s;
  if (o.case_timeout_s) run.case_timeout_s = *o.case_timeout_s;
  if (o.search) run.search = *o.search;
  if (o.search_trials) run.search_trials = *o.search_trials;
  if (o.search_time_budget_s) run.search_time_budget_s = *o.search_time_budget_s;
  return run;
}

RunContext make_context(const Spec& spec, const RunOptions& options, uint64_t seed) {
  RunContext ctx{spec, options};
  ctx.run = effective_run(spec, options);
  ctx.target_name = options.target.empty() ? spec.target : options.target;
  ctx.target = options.target_transport
                   ? spec.family->external_impl(ctx.target_name, options.target_transport)
                   : resolve_target(spec, ctx.target_name, ctx.run.case_timeout_s);
  ctx.reference_name = reference_name(spec, options);
  ctx.reference = options.reference_transport
                      ? spec.family->external_impl(ctx.reference_name,
                                                   external::widened_to_f64(options.reference_transport))
                      : resolve_target(spec, ctx.reference_name, ctx.run.case_timeout_s, true);
  ctx.seed = seed;
  // The correct implementations a mutant's outputs are compared with: the
  // family's reference and optimized ones on the target's device (a CUDA
  // one run beside a CPU mutant would start CUDA in a process that forks).
  if (options.compare_outputs && !options.target_transport) {
    auto compare = std::make_shared<OutputComparison>();
    compare->names = output_tensors(*spec.family);
    for (const auto& impl : spec.family->implementations())
      if ((impl.kind == ImplKind::reference || impl.kind == ImplKind::optimized) &&
          impl.device == ctx.target.info.device)
        compare->correct.push_back(resolve_target(spec, impl.name, ctx.run.case_timeout_s));
    ctx.compare = std::move(compare);
  }
  return ctx;
}

namespace {

// The reference failed on c: no finding of the target (the run stops, exit
// 2), but the case is what the user needs to fix the reference, so it is
// stored in the scratch folder (never the corpus) with its re-run command.
// Not in a replay, whose case is the file replayed.
std::string with_stored_case(const RunContext& ctx, const InvariantUse& use, const AnyCase& c,
                             const std::string& message) {
  if (!ctx.options.crash_guard_stores) return message;
  const CorpusEntry entry = entry_for(ctx, c, use.name, message, "reference_failure");
  const Stored stored = store_entry(scratch_dir(ctx), entry, temp_fallback(ctx.spec.name));
  if (stored.path.empty()) return message;
  return fmt::format("{}; the case is in {} (re-run it: {})", message, stored.path,
                     replay_command(ctx, stored.path, use.name));
}

}  // namespace

CheckResult check_one(const RunContext& ctx, AnyTrial& trial, const InvariantUse& use, const AnyCase& c) {
  CheckResult r;
  const auto t0 = Clock::now();
  const TrialTimes before = trial.times();
  try {
    const CaseTimeout timeout(ctx.run.case_timeout_s);
    const PaddedTensors padded(ctx.run.padded_tensors);
    CaseGuard guard(ctx, c);
    try {
      r.verdict = check_invariant(trial, use);
    } catch (const DerivedDeclined& e) {
      // Declined: something this invariant alone needed (the target on a
      // case it derived, the reference). Unless the target declines the case
      // itself too (its run here throws that, and the case is declined for
      // every invariant, below), this invariant cannot check the case, a
      // discard with that reason, and the others still do.
      const std::string why = e.what();
      trial.run_target();
      r.verdict = Verdict::discard(why);
    }
    // A pass needs the target run on the case, whatever the invariant read:
    // one of the inputs or the reference alone must not pass a case the
    // target declines or crashes on. (A discard or n/a needs nothing: the
    // target is not run for it.)
    if (r.verdict.outcome == Outcome::pass) trial.run_target();
  } catch (const ReferenceFailure& e) {
    // A transport stopped by Ctrl-C while the reference ran is an interrupt.
    if (!interrupted()) throw ReferenceFailure(with_stored_case(ctx, use, c, e.bare_message()));
    r.kind = CheckResult::Kind::target_failure;
    r.reason = "interrupted while the reference ran";
    r.failure_kind = "interrupted";
  } catch (const InputError&) {
    throw;  // the spec's error (an expression that cannot be evaluated): exit 2, not the target's
  } catch (const TargetUnavailable& e) {
    r.kind = CheckResult::Kind::declined;
    r.reason = e.what();
    r.unavailable = true;
    r.reference_unavailable = dynamic_cast<const ReferenceUnavailable*>(&e) != nullptr;
  } catch (const Unsupported& e) {
    r.kind = CheckResult::Kind::declined;
    r.reason = e.what();
  } catch (const external::TargetFailure& e) {
    r.kind = CheckResult::Kind::target_failure;
    r.reason = e.what();
    r.failure_kind = e.kind();
  } catch (const std::exception& e) {
    r.kind = CheckResult::Kind::target_failure;
    r.reason = fmt::format("target threw: {}", e.what());
    r.failure_kind = "threw";
  }
  // The time split (kprop/stats.h): every way out of the check above ends here.
  const TrialTimes after = trial.times();
  r.seconds = since(t0);
  r.target_seconds = after.target - before.target;
  r.reference_seconds = after.reference - before.reference;
  r.target_runs = after.target_runs - before.target_runs;
  return r;
}

namespace {

bool isolated(const RunContext& ctx) {
  return (ctx.options.isolate || (kAddressSanitizer && ctx.target.info.out_of_bounds)) &&
         ctx.target.index >= 0 && !ctx.target.info.own_process;
}

std::vector<CheckResult> check_uses_here(const RunContext& ctx, const std::vector<const InvariantUse*>& uses,
                                         const AnyCase& c, bool compare_outputs) {
  const auto trial = ctx.spec.family->begin_trial(c, ctx.target, ctx.reference);
  if (compare_outputs && ctx.compare) trial->compare_outputs(ctx.compare.get());
  std::vector<CheckResult> out;
  for (const auto* use : uses) {
    out.push_back(check_one(ctx, *trial, *use, c));
    if (out.back().kind != CheckResult::Kind::verdict) break;
    // --mutants and --fail-fast: the first failure ends the run, so the
    // invariants after it are not checked on this case (their results would
    // be thrown away).
    if (ctx.options.stop_on_first_failure && out.back().verdict.outcome == Outcome::fail) break;
  }
  // A case no invariant failed: did it reach the target's bug, if it has one?
  const bool verdicts = std::all_of(out.begin(), out.end(), [](const CheckResult& r) {
    return r.kind == CheckResult::Kind::verdict && !r.failed();
  });
  if (compare_outputs && ctx.compare && verdicts) {
    int differ = -1;
    try {
      differ = trial->outputs_differ();
    } catch (const InputError&) {
      throw;
    } catch (const std::exception&) {
      // the outputs could not be made into tensors: not compared
    }
    for (auto& r : out) r.outputs_differ = differ;
  }
  return out;
}

}  // namespace

void count_compared_outputs(RunReport& report, const std::vector<CheckResult>& results) {
  if (std::any_of(results.begin(), results.end(), [](const CheckResult& r) { return r.failed(); })) return;
  const int differ = results.empty() ? -1 : results.front().outputs_differ;
  if (differ < 0)
    ++report.outputs_uncompared;
  else
    ++report.outputs_compared, report.outputs_differed += differ;
}

nlohmann::json check_result_json(const CheckResult& r) {
  nlohmann::json measured = nlohmann::json::array();
  // JSON has no NaN or infinity: those travel as their names.
  for (const auto& m : r.verdict.measured)
    measured.push_back({m.name, std::isfinite(m.value) ? nlohmann::json(m.value)
                                                       : nlohmann::json(fmt::format("{}", m.value))});
  return {{"kind", static_cast<int>(r.kind)},
          {"outcome", static_cast<int>(r.verdict.outcome)},
          {"message", r.verdict.message},
          {"measured", measured},
          {"reason", r.reason},
          {"failure_kind", r.failure_kind},
          {"unavailable", r.unavailable},
          {"reference_unavailable", r.reference_unavailable},
          {"seconds", {r.seconds, r.target_seconds, r.reference_seconds}},
          {"target_runs", r.target_runs},
          {"outputs_differ", r.outputs_differ}};
}

CheckResult check_result_from_json(const nlohmann::json& j) {
  CheckResult r;
  r.kind = static_cast<CheckResult::Kind>(j.at("kind").get<int>());
  r.verdict.outcome = static_cast<Outcome>(j.at("outcome").get<int>());
  r.verdict.message = j.at("message").get<std::string>();
  for (const auto& m : j.at("measured"))
    r.verdict.measured.push_back({m[0].get<std::string>(), m[1].is_string()
                                                               ? std::stod(m[1].get<std::string>())
                                                               : m[1].get<double>()});
  r.reason = j.at("reason").get<std::string>();
  r.failure_kind = j.at("failure_kind").get<std::string>();
  r.unavailable = j.at("unavailable").get<bool>();
  r.reference_unavailable = j.at("reference_unavailable").get<bool>();
  const auto& t = j.at("seconds");
  r.seconds = t[0].get<double>(), r.target_seconds = t[1].get<double>(),
  r.reference_seconds = t[2].get<double>();
  r.target_runs = j.value("target_runs", int64_t(0));
  r.outputs_differ = j.value("outputs_differ", -1);
  return r;
}

namespace {

CheckResult child_failure(const std::string& kind, const std::string& message) {
  CheckResult r;
  r.kind = CheckResult::Kind::target_failure;
  r.failure_kind = kind;
  r.reason = message;
  return r;
}

// Runs `fn` in a forked child and collects what it writes: the parent holds
// the case and never runs target code, so whatever the target does to its
// own memory, the corpus and the report stay the parent's. The child is
// killed on Ctrl-C, or as hung: `per_call` (a check), when one of its target
// calls runs past `timeout_s` (their deadlines in memory the two share);
// otherwise when the whole of `fn` does.
struct ChildResult {
  std::string text;
  bool hung = false, stopped = false;
  int status = 0;  // waitpid's
  bool ok() const { return !hung && !stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};
// A CallDeadline in memory a forked child shares with its parent.
class SharedDeadline {
 public:
  SharedDeadline() {
    void* p = mmap(nullptr, sizeof(CallDeadline), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    d_ = new (p) CallDeadline;
  }
  ~SharedDeadline() { munmap(d_, sizeof(CallDeadline)); }
  SharedDeadline(const SharedDeadline&) = delete;
  SharedDeadline& operator=(const SharedDeadline&) = delete;
  CallDeadline& get() const { return *d_; }

 private:
  CallDeadline* d_;
};
ChildResult in_child(const std::function<std::string()>& fn, double timeout_s, bool per_call) {
  std::fflush(nullptr);
  const SharedDeadline call;
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  ForkSignals held;
  const pid_t pid = fork_on_this_cpu();
  if (pid > 0) held.release();  // the parent waits with Ctrl-C live
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    signal(SIGINT, SIG_IGN);  // the parent handles Ctrl-C
    signal(SIGTERM, SIG_DFL);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
    held.release();
    g_isolated_child = true;
    g_guard.armed = false;
    g_guard.call_timeout_ns = per_call ? nanoseconds(timeout_s) : 0;
    g_call_deadline = &call.get();
    const std::string text = fn();
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = write(fds[1], text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    std::fflush(nullptr);
    _exit(0);
  }
  close(fds[1]);
  ChildResult out;
  char buf[1 << 14];
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  // Per call, the child's calls each have the timeout; a child that runs no
  // call for far longer than any check's own work would take (stuck before
  // its first call: a lock another thread held at fork(), under ASan) was
  // waited for forever, which hung a sanitizer test for its 600 s.
  const auto outside_calls_limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(300.0, 10 * timeout_s)));
  auto outside_calls_since = Clock::now();
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 50);
    if (ready > 0) {
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        out.text.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) break;
      if (errno == EINTR) continue;
      break;
    }
    if (per_call && call.get().ns.load() != 0) outside_calls_since = Clock::now();
    const bool stuck = per_call && timeout_s > 0 && Clock::now() - outside_calls_since > outside_calls_limit;
    if (per_call ? past(call.get()) || stuck : Clock::now() > deadline) {
      out.hung = true;
      break;
    }
    if (interrupted()) break;  // Ctrl-C: the parent stops within a poll interval
  }
  close(fds[0]);
  out.stopped = !out.hung && interrupted();
  if (out.hung || out.stopped) kill(pid, SIGKILL);
  while (waitpid(pid, &out.status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

// The checks of one case in a forked child (in_child); results come back as JSON.
std::vector<CheckResult> check_uses_forked(const RunContext& ctx,
                                           const std::vector<const InvariantUse*>& uses, const AnyCase& c,
                                           bool compare_outputs) {
  const ChildResult child = in_child(
      [&] {
        nlohmann::json out = nlohmann::json::array();
        try {
          RunOptions o = ctx.options;
          o.isolate = false;
          for (const auto& r :
               check_uses_here(RunContext{ctx.spec, o, ctx.target, ctx.reference, ctx.target_name, ctx.seed,
                                          ctx.run, ctx.reference_name, ctx.compare},
                               uses, c, compare_outputs))
            out.push_back(check_result_json(r));
        } catch (const ReferenceFailure& e) {
          out = {{"reference_failure", e.bare_message()}};  // the parent raises it
        } catch (const SpecCaseError& e) {
          out = {{"input_error", e.what()}, {"spec_case", true}};  // the parent raises it
        } catch (const InputError& e) {
          out = {{"input_error", e.what()}};  // the parent raises it
        } catch (const std::exception& e) {
          out = nlohmann::json::array(
              {check_result_json(child_failure("threw", std::string("target threw: ") + e.what()))});
        }
        return out.dump();
      },
      ctx.run.case_timeout_s, /*per_call=*/true);
  const int status = child.status;
  if (child.stopped) return {child_failure("interrupted", "interrupted while the target ran; stopped it")};
  if (child.hung) return {child_failure("hang", hang_message(ctx.run.case_timeout_s))};
  // A signal is kind "crash", not "threw": the finding's replay must die of
  // one again, a throw alone does not reproduce it (replay_check.cpp).
  if (WIFSIGNALED(status))
    return {child_failure(
        "crash", fmt::format("crashed with signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status))))};
  nlohmann::json results;
  try {
    results = nlohmann::json::parse(child.text);
  } catch (const std::exception&) {
  }
  if (results.is_object() && results.contains("reference_failure"))
    throw ReferenceFailure(results["reference_failure"].get<std::string>());
  if (results.is_object() && results.contains("input_error")) {
    if (results.value("spec_case", false)) throw SpecCaseError({}, results["input_error"].get<std::string>());
    throw InputError({}, results["input_error"].get<std::string>());
  }
  try {
    std::vector<CheckResult> out;
    for (const auto& j : results) out.push_back(check_result_from_json(j));
    if (!out.empty()) return out;
  } catch (const std::exception&) {
  }
  return {child_failure("threw", fmt::format("the checking process exited with status {} and no result",
                                             WIFEXITED(status) ? WEXITSTATUS(status) : -1))};
}

}  // namespace

std::vector<CheckResult> check_uses(const RunContext& ctx, const std::vector<const InvariantUse*>& uses,
                                    const AnyCase& c, bool compare_outputs) {
  return isolated(ctx) ? check_uses_forked(ctx, uses, c, compare_outputs)
                       : check_uses_here(ctx, uses, c, compare_outputs);
}

CheckResult check_one(const RunContext& ctx, const InvariantUse& use, const AnyCase& c) {
  return check_uses(ctx, {&use}, c).front();
}

Stored store_entry(const std::string& dir, const CorpusEntry& entry, const std::string& fallback) {
  Stored s;
  try {
    s.path = write_entry(dir, entry, &s.created, &s.replaced);
    return s;
  } catch (const std::exception& e) {
    s.note = fmt::format("could not store the case in {} ({})", dir, e.what());
  }
  for (const std::string& other : {fallback, temp_fallback(entry.spec)}) {
    if (other.empty() || other == dir) continue;
    try {
      s.path = write_entry(other, entry, &s.created);
      s.note += "; stored in " + other + " instead";
      return s;
    } catch (const std::exception& e) {
      s.note += fmt::format("; nor in {} ({})", other, e.what());
    }
  }
  s.note += "; the case is printed above";
  return s;
}

namespace {

// Draws the shrunk case of a finding (kprop/drawing.h); an isolated run draws
// in a forked child, as it checks.
void draw_finding(const RunContext& ctx, const InvariantUse* use, const AnyCase& c, Finding& f) {
  DrawContext dc;
  dc.invariant = f.invariant;
  dc.measured = &f.measured;
  dc.params = use ? &use->params : nullptr;
  auto draw = [&] {
    const Drawing d = draw_case(*ctx.spec.family, c, ctx.target, ctx.reference, dc);
    return nlohmann::json{d.svg, d.text, d.note}.dump();
  };
  std::string json;
  try {
    if (isolated(ctx)) {
      const ChildResult child = in_child(draw, ctx.run.case_timeout_s, /*per_call=*/false);
      if (!child.ok()) throw std::runtime_error("the target died or hung while drawing");
      json = child.text;
    } else {
      json = draw();
    }
  } catch (const std::exception& e) {
    f.drawing_note = std::string("no drawing: ") + e.what();
    return;
  }
  const auto j = nlohmann::json::parse(json);
  f.drawing_svg = j[0].get<std::string>();
  f.drawing_text = j[1].get<std::string>();
  f.drawing_note = j[2].get<std::string>();
}

}  // namespace

Finding record_finding(const RunContext& ctx, const InvariantUse* use, const AnyCase& failing,
                       const CheckResult& first, const ShrinkProgress& progress) {
  const Family& family = *ctx.spec.family;
  const auto t0 = Clock::now();
  Finding f;
  f.original_size = family.stats(failing).size;
  ShrinkResult s{failing, first.verdict, 0, false};
  try {
    if (first.kind == CheckResult::Kind::verdict && use) {
      f.invariant = use->name;
      s = shrink_with(
          family, ctx.spec.domain, failing, first.verdict, ctx.run.shrink_budget_s,
          ctx.run.shrink_budget_checks,
          [&](const AnyCase& c) -> std::optional<Verdict> {
            const CheckResult r = check_one(ctx, *use, c);
            if (r.failed()) return r.verdict;
            return std::nullopt;  // holds, declined, or a different failure (a crash)
          },
          progress);
    } else {
      f.kind = first.failure_kind == "threw" ? "crash" : first.failure_kind;
      f.failure_kind = first.failure_kind;
      if (use) f.while_checking = use->name;
      s.verdict = Verdict::fail(first.reason);
      // A hang is not shrunk: each try would cost the timeout.
      if (first.failure_kind != "hang" && use)
        s = shrink_with(
            family, ctx.spec.domain, failing, s.verdict, ctx.run.shrink_budget_s,
            ctx.run.shrink_budget_checks,
            [&](const AnyCase& c) -> std::optional<Verdict> {
              try {
                const CheckResult r = check_one(ctx, *use, c);
                if (r.kind == CheckResult::Kind::target_failure && r.failure_kind == first.failure_kind)
                  return Verdict::fail(r.reason);
              } catch (const SpecCaseError&) {
                // The target ran through this smaller case and the spec's
                // expression could not judge it: not the target's failure
                // being shrunk, which stands whatever the spec says.
              }
              return std::nullopt;
            },
            progress);
    }
  } catch (const SpecCaseError& e) {
    // A smaller case the spec's own expressions cannot be evaluated on is
    // the spec's error, as on a drawn case (exit 2), and the failure being
    // shrunk may be its doing too: not a counterexample blamed on the
    // target with the error in a note. The seed draws the case again.
    throw SpecCaseError(e.mark(), fmt::format("{} (met while shrinking a failure of {} on another case: that "
                                              "failure may be the spec's error too; fix it and run seed {} "
                                              "again)",
                                              e.bare_message(), use ? use->name : ctx.target_name, ctx.seed));
  } catch (const std::exception& e) {
    // A shrinker or codec bug must not lose the failing case itself.
    f.store_note = fmt::format("shrinking stopped: {}", e.what());
  }
  f.message = s.verdict.message;
  f.measured = s.verdict.measured;
  f.stats = family.stats(s.best);
  f.shrink_steps = s.steps;
  f.shrink_interrupted = s.interrupted;
  f.shrink_seconds = since(t0);
  const std::string found_by =
      f.kind == "invariant" ? ctx.options.found_by : (f.kind == "crash" ? "crash" : f.kind);
  try {
    const CorpusEntry e = entry_for(ctx, s.best, f.invariant, f.message, found_by);
    f.case_yaml = emit_yaml(e.case_node);
    const bool keep_out = kept_out_of_corpus(ctx);
    auto note = [&](const std::string& text) { f.store_note += (f.store_note.empty() ? "" : "; ") + text; };
    // A shrink cut short (its budget, Ctrl-C) ends where the clock stopped
    // it, so each run of one seed reached another case and stored it: the
    // corpus grew by a near-copy a run. Where the corpus already holds a
    // case of this finding (its found_against and invariant), this one is
    // kept in the scratch folder (its printed replay still reproduces it).
    std::string standing;
    if (f.shrink_interrupted && ctx.options.write_corpus && !keep_out && !e.found_against.empty())
      standing = find_finding(primary_dir(ctx), e.found_against, e.invariant);
    {
      const Stored stored = standing.empty() ? store_entry(primary_dir(ctx), e, fallback_dir(ctx))
                                             : store_entry(scratch_dir(ctx), e, temp_fallback(ctx.spec.name));
      f.corpus_path = stored.path;
      f.corpus_new = stored.created;
      f.in_corpus = ctx.options.write_corpus && !keep_out && stored.note.empty() && standing.empty();
      if (!standing.empty())
        note(
            fmt::format("its shrink was cut short and the corpus already holds a case of this finding ({}): "
                        "this one is kept out of it",
                        standing));
      if (keep_out)
        note(
            "kept out of the corpus: the mutant reads past a buffer, so whether a replay fails depends on "
            "what lies there");
      if (!stored.note.empty()) note(stored.note);
      if (!stored.replaced.empty()) note(stored.replaced);
      if (!f.corpus_path.empty()) f.replay_command = replay_command(ctx, f.corpus_path, f.invariant);
      check_replay(ctx, f);
      if (f.in_corpus && f.corpus_new && (f.replay_check == "not_reproduced" || f.replay_check == "error")) {
        // A failure seen (the run still fails, and --mutants counts the
        // kill), but a corpus file whose failure does not come back passes
        // every later replay against the same buggy target (or makes it a
        // coin flip), and one whose replay does not run through (a case its
        // codec refuses) fails every later replay of the folder: it goes to
        // the scratch folder. (A file the corpus held before stays.)
        const Stored moved = store_entry(fallback_dir(ctx), e, "");
        if (!moved.path.empty()) {
          std::error_code ec;
          fs::remove(f.corpus_path, ec);
          f.corpus_path = moved.path;
          f.corpus_new = moved.created;
          f.in_corpus = false;
          f.replay_command = replay_command(ctx, f.corpus_path, f.invariant);
          note(f.replay_check == "error"
                   ? "kept out of the corpus: its replay, re-run in a fresh process, did not run through (" +
                         f.replay_check_detail + ")"
                   : "kept out of the corpus: re-run in a fresh process, it did not fail (" +
                         f.replay_check_detail + ")");
        }
      }
    }
  } catch (const std::exception& e) {
    f.store_note +=
        fmt::format("{}could not encode the case: {}", f.store_note.empty() ? "" : "; ", e.what());
  }
  // Only an invariant's failure is drawn with the target's results: a crash
  // or hang would repeat itself.
  if (f.kind == "invariant") draw_finding(ctx, use, s.best, f);
  return f;
}

Verdict check_case(const Spec& spec, const Impl& target, const InvariantUse& use, const AnyCase& c) {
  const Impl reference = resolve_target(spec, spec.reference);
  return check_invariant(*spec.family->begin_trial(c, target, reference), use);
}

}  // namespace kprop
