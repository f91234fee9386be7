#include "kprop/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "kprop/external.h"

namespace kprop {
namespace {

using Clock = std::chrono::steady_clock;
// Declined cases in a row, from the start, after which the target is skipped.
constexpr int64_t kDeclinedBeforeSkip = 20;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::atomic<int> g_interrupts{0};

void on_interrupt(int) {
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
  static const char msg[] =
      "\nkprop: interrupted; finishing with the best case so far (Ctrl-C again to quit)\n";
  [[maybe_unused]] auto n = write(2, msg, sizeof msg - 1);
}

// ------------------------------------------------------------ crash guard
// While a target runs, a fatal signal or a hang must not lose the case: the
// handler (or the watchdog thread) stores it in the corpus and exits 3, as
// libFuzzer does with its crash files.
struct GuardState {
  const Spec* spec = nullptr;
  size_t target = 0;
  const AnyCase* input = nullptr;
  const RunOptions* options = nullptr;
  uint64_t seed = 0;
  std::atomic<bool> armed{false};
  std::atomic<int64_t> deadline_ns{0};
};
GuardState g_guard;
std::once_flag g_watchdog_once;

std::string save_case(const Spec& spec, size_t target, const RunOptions& options, uint64_t seed,
                      const AnyCase& input, const std::string& why, const std::string& found_by) {
  CorpusEntry e;
  e.spec = spec.name;
  e.family = spec.family->name();
  e.invariant = found_by;
  e.found_against = spec.family->implementations()[target].name;
  e.found_by = found_by;
  e.seed = seed;
  e.message = why;
  e.case_node = spec.family->to_yaml(input);
  if (!options.write_corpus) {
    fmt::print(stderr, "case:\n{}", emit_yaml(e.case_node));
    return "";
  }
  return write_entry(options.corpus_dir + "/" + spec.name, e);
}

std::string save_crash(const std::string& why, const char* found_by) {
  const GuardState& g = g_guard;
  if (!g.spec || !g.input) return "";
  return save_case(*g.spec, g.target, *g.options, g.seed, *g.input, why, found_by);
}

[[noreturn]] void die_with_case(const std::string& why, const char* found_by) {
  fmt::print(stderr, "\nkprop: target '{}' {}; saving the case\n",
             g_guard.spec->family->implementations()[g_guard.target].name, why);
  const std::string path = save_crash(why, found_by);
  if (!path.empty())
    fmt::print(stderr, "kprop: saved {}\nkprop: replay: prop_runner --spec {} --target {} --replay {}\n",
               path, g_guard.spec->path, g_guard.spec->family->implementations()[g_guard.target].name, path);
  std::fflush(stderr);
  _exit(3);
}

void on_fatal_signal(int sig) {
  if (!g_guard.armed.load()) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_guard.armed = false;
  die_with_case(fmt::format("crashed with signal {} ({})", sig, strsignal(sig)), "crash");
}

void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t deadline = g_guard.deadline_ns.load();
    if (g_guard.armed.load() && deadline != 0 && Clock::now().time_since_epoch().count() > deadline) {
      g_guard.armed = false;
      die_with_case(
          fmt::format("hung (no result within case_timeout_s = {:g} s)", g_guard.spec->run.case_timeout_s),
          "hang");
    }
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
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

// Arms the guard for the duration of one trial.
class CaseGuard {
 public:
  CaseGuard(const Spec& spec, size_t target, const AnyCase& c, const RunOptions& options, uint64_t seed) {
    install_fatal_handlers();
    std::call_once(g_watchdog_once, [] { std::thread(watchdog).detach(); });
    g_guard.spec = &spec;
    g_guard.target = target;
    g_guard.input = &c;
    g_guard.options = &options;
    g_guard.seed = seed;
    // An external target's transport enforces case_timeout_s per call and
    // keeps the runner alive; the watchdog guards in-process targets.
    const auto timeout =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.run.case_timeout_s));
    const bool external = external::is_external_target(spec.family->implementations()[target].name);
    g_guard.deadline_ns = external ? 0 : (Clock::now() + timeout).time_since_epoch().count();
    g_guard.armed = true;
  }
  ~CaseGuard() {
    g_guard.armed = false;
    g_guard.deadline_ns = 0;
  }
  CaseGuard(const CaseGuard&) = delete;
  CaseGuard& operator=(const CaseGuard&) = delete;
};

std::vector<const InvariantUse*> selected_uses(const Spec& spec, const RunOptions& options) {
  std::vector<const InvariantUse*> uses;
  if (options.only_invariants.empty()) {
    for (const auto& u : spec.invariants) uses.push_back(&u);
    return uses;
  }
  std::vector<std::string> names;
  for (const auto& u : spec.invariants) names.push_back(u.name);
  for (const auto& want : options.only_invariants) {
    const InvariantUse* found = nullptr;
    for (const auto& u : spec.invariants)
      if (u.name == want) found = &u;
    if (!found) {
      const std::string close = closest_match(want, names);
      throw InputError({},
                       fmt::format("--invariant {}: not in spec {}{}; the spec checks: {}", want, spec.name,
                                   close.empty() ? "" : " (did you mean '" + close + "'?)", join(names)));
    }
    uses.push_back(found);
  }
  return uses;
}

std::string shell_quote(const std::string& s) {
  if (s.find_first_of(" '\"$\\") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}
bool interrupted() {
  return g_interrupts.load() > 0;
}

const char* invariant_status_name(InvariantStatus s) {
  switch (s) {
    case InvariantStatus::passed:
      return "passed";
    case InvariantStatus::failed:
      return "FAILED";
    case InvariantStatus::gave_up:
      return "GAVE UP";
    case InvariantStatus::not_run:
      return "not run";
    case InvariantStatus::not_applicable:
      return "n/a";
  }
  return "?";
}

const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::passed:
      return "passed";
    case RunStatus::failed:
      return "failed";
    case RunStatus::gave_up:
      return "gave up";
    case RunStatus::crashed:
      return "crashed";
    case RunStatus::skipped:
      return "skipped";
    case RunStatus::interrupted:
      return "interrupted";
  }
  return "?";
}

int exit_code(RunStatus s) {
  switch (s) {
    case RunStatus::passed:
    case RunStatus::skipped:
      return 0;
    case RunStatus::failed:
      return 1;
    case RunStatus::gave_up:
      return 2;
    case RunStatus::crashed:
      return 3;
    case RunStatus::interrupted:
      return 130;
  }
  return 3;
}

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  uint64_t s = (static_cast<uint64_t>(device()) << 32 ^ device() ^ t * 0x9e3779b97f4a7c15ULL);
  s &= (1ULL << 53) - 1;  // exact in JSON and in any YAML reader
  return s ? s : 1;
}

size_t resolve_target(const Spec& spec, const std::string& name) {
  const int i = spec.family->find_implementation(name);
  if (i >= 0) return static_cast<size_t>(i);
  if (external::is_external_target(name)) {
    external::TransportOptions o;
    o.family = spec.family->name();
    o.ops = spec.family->external_ops();
    o.call_timeout_s = spec.run.case_timeout_s;
    return spec.family->attach_external(name, external::open_target(name, o));
  }
  const auto names = spec.family->implementation_names();
  const std::string close = closest_match(name, names);
  throw InputError({},
                   fmt::format("unknown target '{}' for family {}{}; valid: {}", name, spec.family->name(),
                               close.empty() ? "" : " (did you mean '" + close + "'?)", join(names)));
}

Verdict check_case(const Spec& spec, size_t target, const InvariantUse& use, const AnyCase& c) {
  const size_t reference = resolve_target(spec, spec.reference);
  return spec.family->begin_trial(c, target, reference)->check(use.index, use.params);
}

namespace {
// Greedy descent over the family's one structural shrinker, as a RapidCheck
// Shrinkable: the same shrink tree for generated cases, fuzz crashes, corpus
// files and external-target crashes. `reproduces` returns the candidate's
// verdict when it still shows the failure being shrunk.
ShrinkResult shrink_with(const Family& family, const Values& domain, AnyCase failing, Verdict verdict,
                         double budget_s,
                         const std::function<std::optional<Verdict>(const AnyCase&)>& reproduces) {
  const auto t0 = Clock::now();
  ShrinkResult result{std::move(failing), std::move(verdict), 0, false};
  auto shrinkable = rc::shrinkable::shrinkRecur(
      result.best, [&family, &domain](const AnyCase& c) { return family.shrinks(c, domain); });
  for (bool progressed = true; progressed;) {
    progressed = false;
    auto candidates = shrinkable.shrinks();
    while (auto candidate = candidates.next()) {
      if (interrupted() || since(t0) > budget_s) {
        result.interrupted = true;
        return result;
      }
      if (auto v = reproduces(candidate->value())) {
        result.best = candidate->value();
        result.verdict = std::move(*v);
        ++result.steps;
        shrinkable = std::move(*candidate);
        progressed = true;
        break;
      }
    }
  }
  return result;
}

// An external target that crashed or reported an error: the smallest case
// that still does the same (a hang is not shrunk: each try costs the timeout).
ShrinkResult shrink_target_failure(const Spec& spec, size_t target, const InvariantUse& use, AnyCase failing,
                                   const external::TargetFailure& failure) {
  const std::string kind = failure.kind();
  return shrink_with(*spec.family, spec.domain, std::move(failing), Verdict::fail(failure.what()),
                     spec.run.shrink_budget_s, [&](const AnyCase& c) -> std::optional<Verdict> {
                       try {
                         check_case(spec, target, use, c);
                       } catch (const external::TargetFailure& e) {
                         if (e.kind() == kind) return Verdict::fail(e.what());
                       } catch (const std::exception&) {
                       }
                       return std::nullopt;
                     });
}
}  // namespace

ShrinkResult shrink_failure(const Spec& spec, size_t target, size_t use_index, AnyCase failing,
                            Verdict verdict, double budget_s) {
  const InvariantUse& use = spec.invariants.at(use_index);
  return shrink_with(*spec.family, spec.domain, std::move(failing), std::move(verdict), budget_s,
                     [&](const AnyCase& c) -> std::optional<Verdict> {
                       try {
                         Verdict v = check_case(spec, target, use, c);
                         if (v.outcome == Outcome::fail) return v;
                       } catch (const std::exception&) {
                         // Unsupported, or a different failure (a crash): not the one being shrunk.
                       }
                       return std::nullopt;
                     });
}

RunReport run_spec(const Spec& spec, const RunOptions& options) {
  const Family& family = *spec.family;
  RunReport report;
  report.spec = spec.name;
  report.spec_path = spec.path;
  report.family = family.name();
  report.target = options.target.empty() ? spec.target : options.target;
  report.reference = spec.reference;
  const size_t target = resolve_target(spec, report.target);
  const size_t reference = resolve_target(spec, spec.reference);
  report.seed = options.seed.value_or(spec.run.seed);
  if (report.seed == 0) report.seed = fresh_seed();
  const int64_t all_trials = options.trials.value_or(spec.run.trials);
  const int64_t shards = std::max<int64_t>(1, options.shard_count), shard = options.shard_index;
  // Cases this shard must pass per invariant: indices i < all_trials with i % shards == shard.
  const int64_t trials = std::max<int64_t>(1, (all_trials - shard + shards - 1) / shards);
  const double time_budget = options.time_budget_s.value_or(spec.run.time_budget_s);
  const auto uses = selected_uses(spec, options);

  for (const auto* u : uses) {
    InvariantReport r;
    r.name = u->name;
    report.invariants.push_back(std::move(r));
  }
  std::vector<bool> alive(uses.size(), true);
  auto any_alive = [&] {
    for (bool a : alive)
      if (a) return true;
    return false;
  };

  const rc::Gen<AnyCase> generator = family.generator(spec.domain);
  rc::Random stream(report.seed);
  const auto t0 = Clock::now();
  auto last_progress = t0;
  const bool tty = options.progress && isatty(2);
  const int64_t max_cases = all_trials * (1 + std::max<int64_t>(spec.run.max_discard_ratio, 0));

  for (int64_t i = 0; any_alive() && i < max_cases; ++i) {
    const rc::Random case_random = stream.split();
    if (i % shards != shard) continue;
    if (interrupted()) {
      report.status = RunStatus::interrupted;
      break;
    }
    if (since(t0) > time_budget) {
      report.time_budget_hit = true;
      break;
    }
    const int size = all_trials <= 1 ? static_cast<int>(spec.run.max_size)
                                     : static_cast<int>(std::min<int64_t>(
                                           spec.run.max_size, i * spec.run.max_size / (all_trials - 1)));
    AnyCase c;
    try {
      c = generator(case_random, size).value();
    } catch (const rc::GenerationFailure& e) {
      throw InputError({spec.path, 0, 0}, std::string("the domain cannot be generated: ") + e.what());
    }
    ++report.trials;

    std::unique_ptr<AnyTrial> trial = family.begin_trial(c, target, reference);
    bool declined = false;
    for (size_t k = 0; k < uses.size() && !declined; ++k) {
      if (!alive[k]) continue;
      InvariantReport& ir = report.invariants[k];
      Verdict v;
      try {
        CaseGuard guard(spec, target, c, options, report.seed);
        v = trial->check(uses[k]->index, uses[k]->params);
      } catch (const Unsupported& e) {
        // One declined case is not a verdict; a target that declines the
        // first cases it sees (no device, no kernel at all) is skipped.
        ++report.unsupported;
        report.unsupported_reason = e.what();
        declined = true;
        if (report.unsupported == report.trials && report.trials >= kDeclinedBeforeSkip) {
          report.status = RunStatus::skipped;
          report.detail = std::string("skipped: ") + e.what();
          report.seconds = since(t0);
          for (auto& r : report.invariants) r.status = InvariantStatus::not_run;
          return report;
        }
      } catch (const external::TargetFailure& e) {
        // An external target crashed, hung or reported an error; the runner
        // lives on: shrink a crash or error to the smallest case that repeats it.
        report.status = RunStatus::crashed;
        AnyCase saved = c;
        report.detail = e.what();
        if (e.kind() != "hang") {
          ShrinkResult s = shrink_target_failure(spec, target, *uses[k], c, e);
          if (s.steps > 0)
            report.detail = fmt::format("{} (shrunk in {} steps from {} to {})", s.verdict.message, s.steps,
                                        family.stats(c).summary, family.stats(s.best).summary);
          saved = s.best;
        }
        const std::string path =
            save_case(spec, target, options, report.seed, saved, report.detail, e.kind());
        if (!path.empty()) {
          report.detail += "; case saved to " + path;
          report.replay_command = fmt::format("prop_runner --spec {} --target {} --replay {}",
                                              shell_quote(spec.path), shell_quote(report.target), path);
        }
        report.seconds = since(t0);
        return report;
      } catch (const std::exception& e) {
        // The guard is disarmed but still describes this case: save it.
        report.status = RunStatus::crashed;
        report.detail = fmt::format("target threw: {}", e.what());
        const std::string path = save_crash(report.detail, "crash");
        if (!path.empty()) {
          report.detail += "; case saved to " + path;
          report.replay_command = fmt::format("prop_runner --spec {} --target {} --replay {}",
                                              shell_quote(spec.path), shell_quote(report.target), path);
        }
        report.seconds = since(t0);
        return report;
      }
      if (v.outcome == Outcome::pass) {
        if (++ir.passed >= trials) {
          ir.status = InvariantStatus::passed;
          alive[k] = false;
        }
      } else if (v.outcome == Outcome::not_applicable) {
        ir.status = InvariantStatus::not_applicable;
        ir.last_discard = v.message;
        alive[k] = false;
      } else if (v.outcome == Outcome::discard) {
        ir.last_discard = v.message;
        if (++ir.discarded > spec.run.max_discard_ratio * trials) {
          ir.status = InvariantStatus::gave_up;
          alive[k] = false;
        }
      } else {
        ir.status = InvariantStatus::failed;
        ir.trials_to_fail = i + 1;
        ir.seconds_to_fail = since(t0);
        alive[k] = false;
        const auto shrink_t0 = Clock::now();
        const size_t use_index = static_cast<size_t>(uses[k] - spec.invariants.data());
        ShrinkResult s = shrink_failure(spec, target, use_index, c, v, spec.run.shrink_budget_s);
        Counterexample cx;
        cx.invariant = ir.name;
        cx.message = s.verdict.message;
        cx.measured = s.verdict.measured;
        cx.original_size = family.stats(c).size;
        cx.stats = family.stats(s.best);
        cx.shrink_steps = s.steps;
        cx.shrink_seconds = since(shrink_t0);
        cx.shrink_interrupted = s.interrupted;
        const YAML::Node case_node = family.to_yaml(s.best);
        cx.case_yaml = emit_yaml(case_node);
        if (options.write_corpus) {
          CorpusEntry e;
          e.spec = spec.name;
          e.family = family.name();
          e.invariant = ir.name;
          e.found_against = report.target;
          e.found_by = options.found_by;
          e.seed = report.seed;
          e.message = cx.message;
          e.case_node = case_node;
          cx.corpus_path = write_entry(options.corpus_dir + "/" + spec.name, e, &cx.corpus_new);
        }
        if (report.replay_command.empty())
          report.replay_command =
              cx.corpus_path.empty()
                  ? fmt::format("prop_runner --spec {} --target {} --seed {} --invariant {}",
                                shell_quote(spec.path), shell_quote(report.target), report.seed, ir.name)
                  : fmt::format("prop_runner --spec {} --target {} --replay {}", shell_quote(spec.path),
                                shell_quote(report.target), cx.corpus_path);
        ir.counterexample = std::move(cx);
        report.status = RunStatus::failed;
        if (options.stop_on_first_failure) {
          for (size_t j = 0; j < alive.size(); ++j) alive[j] = false;
        }
      }
    }
    if (tty && since(last_progress) > 0.2) {
      last_progress = Clock::now();
      fmt::print(stderr, "\r\033[K[{}] {} case {}/{}  {:.1f} s", spec.name, report.target, i + 1, all_trials,
                 since(t0));
    }
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  report.seconds = since(t0);
  if (report.trials > 0 && report.unsupported == report.trials && report.status != RunStatus::interrupted) {
    report.status = RunStatus::skipped;
    report.detail = "skipped: " + report.unsupported_reason;
    for (auto& r : report.invariants) r.status = InvariantStatus::not_run;
    return report;
  }
  if (report.status == RunStatus::interrupted) {
    bool failed = false;
    for (const auto& r : report.invariants) failed = failed || r.status == InvariantStatus::failed;
    if (failed) report.status = RunStatus::failed;
    return report;
  }
  // Invariants still alive ran out of time (or of cases): they held so far.
  for (size_t k = 0; k < uses.size(); ++k)
    if (alive[k] && report.invariants[k].status == InvariantStatus::not_run &&
        report.invariants[k].passed > 0)
      report.invariants[k].status = InvariantStatus::passed;
  if (report.status != RunStatus::failed)
    for (const auto& r : report.invariants)
      if (r.status == InvariantStatus::gave_up) report.status = RunStatus::gave_up;
  return report;
}

std::vector<MutantRow> run_mutants(const Spec& spec, const RunOptions& options) {
  std::vector<MutantRow> rows;
  for (const auto& impl : spec.family->implementations()) {
    if (impl.kind != ImplKind::mutant) continue;
    if (interrupted()) break;
    RunOptions o = options;
    o.target = impl.name;
    o.stop_on_first_failure = true;
    MutantRow row{impl.name, impl.description, run_spec(spec, o), false, ""};
    for (const auto& r : row.report.invariants)
      if (r.status == InvariantStatus::failed) row.killed = true, row.killed_by = r.name;
    if (row.report.status == RunStatus::crashed) row.killed = true, row.killed_by = "crash";
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<ReplayRow> replay_corpus(const Spec& spec, const std::string& path, const RunOptions& options) {
  const Family& family = *spec.family;
  const size_t target = resolve_target(spec, options.target.empty() ? spec.target : options.target);
  const auto uses = selected_uses(spec, options);
  std::vector<ReplayRow> rows;
  for (const auto& file : list_corpus(path)) {
    const CorpusEntry e = read_entry(file);
    if (e.family != family.name())
      throw InputError({file, 0, 0}, fmt::format("corpus case is for family '{}', the spec tests '{}'",
                                                 e.family, family.name()));
    AnyCase c;
    try {
      c = family.from_yaml(e.case_node);
    } catch (const CaseFormatError& err) {
      throw InputError({file, err.line, err.col}, std::string("bad case: ") + err.what());
    } catch (const YAML::Exception& err) {
      throw InputError({file, err.mark.line + 1, err.mark.column + 1}, "bad case: " + err.msg);
    }
    ReplayRow row;
    row.path = file;
    row.invariant = e.invariant;
    row.found_against = e.found_against;
    for (const auto* use : uses) {
      Verdict v;
      try {
        CaseGuard guard(spec, target, c, options, e.seed);
        v = check_case(spec, target, *use, c);
      } catch (const Unsupported& err) {
        row.target_detail = std::string("skipped: ") + err.what();
        break;
      } catch (const std::exception& err) {
        v = Verdict::fail(std::string("target threw: ") + err.what());
      }
      if (v.outcome == Outcome::fail) {
        row.target_ok = false;
        row.target_detail = use->name + ": " + v.message;
        break;
      }
    }
    // Each implementation the case was found against, if it is a registered
    // mutant, must still fail the recorded invariant.
    std::vector<AlsoFound> findings = {{e.found_against, e.invariant}};
    findings.insert(findings.end(), e.also.begin(), e.also.end());
    for (const auto& found : findings) {
      const int mutant = family.find_implementation(found.found_against);
      const int invariant = family.find_invariant(found.invariant);
      if (mutant < 0 || invariant < 0 ||
          family.implementations()[static_cast<size_t>(mutant)].kind != ImplKind::mutant)
        continue;
      row.mutant_checked = true;
      InvariantUse use{static_cast<size_t>(invariant), found.invariant,
                       Values::defaults(family.invariants()[static_cast<size_t>(invariant)].params)};
      for (const auto& u : spec.invariants)
        if (u.name == found.invariant) use = u;
      Verdict v;
      try {
        v = check_case(spec, static_cast<size_t>(mutant), use, c);
      } catch (const std::exception& err) {
        v = Verdict::fail(std::string("threw: ") + err.what());
      }
      if (v.outcome != Outcome::fail && row.mutant_still_fails) {
        row.mutant_still_fails = false;
        row.found_against = found.found_against;
        row.invariant = found.invariant;
        row.mutant_detail = v.outcome == Outcome::discard ? "discarded: " + v.message : "now passes";
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kprop
