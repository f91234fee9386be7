// The property runner: draws cases, checks invariants with honest
// accounting (checked / discarded / declined / n/a), runs the health checks,
// and hands every failure to the findings pipeline (src/findings.cpp).
#include "kprop/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "kprop/clock.h"
#include "kprop/enum_names.h"
#include "kprop/external.h"
#include "kprop/focus.h"
#include "kprop/jobs.h"
#include "kprop/output_reads.h"
#include "kprop/reasons.h"

namespace kprop {
namespace {

// Sizes ramp from 0 to max_size over a cycle of this many cases and then
// start again (as RapidCheck's sizes do), so more trials or a time budget
// never lower the sizes reached: the largest cases come within the first
// cycle, whatever the budget.
constexpr int64_t kSizeCycle = 100;
// More than half of the drawn cases declined fails the `declined` health
// check, beyond chance: the lower end of the declined share's Wilson score
// interval at z = 4 must be above 1/2, or the share above 3/4. A plain
// `share > 1/2` was a coin flip for the commonest kernel that declines (one
// that takes 2 of a spec's 4 dtypes declines half the cases: 487 of 969
// failed, 472 of 973 passed, by seed). At share 1/2 a run now fails with
// probability ~3e-5 at 1000 drawn cases and under 1% at 20 (that is the
// 3/4, which keeps a short run that declined most of its cases from
// passing: its interval is wide); at 2/3 (1 of 3 dtypes taken) it fails
// from about 150 drawn cases up.
constexpr double kDeclinedZ = 4;

// A time-limited run must draw at least this share of its trials.
constexpr double kMinTrialShare = 0.1;

int size_for(int64_t i, int64_t trials, int64_t max_size) {
  const int64_t cycle = std::min(trials, kSizeCycle);
  if (cycle <= 1) return static_cast<int>(max_size);
  return static_cast<int>((i % cycle) * max_size / (cycle - 1));
}

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
      // Under a profile the list is the profile's (which may leave out one
      // the spec's own list has): say so, not just "not in spec".
      throw InputError(
          {}, fmt::format("--invariant {}: not in spec {}{}{}; the spec checks{}: {}", want, spec.name,
                          spec.profile.empty() ? "" : " under profile " + spec.profile,
                          did_you_mean(want, names), spec.profile.empty() ? "" : " there", join(names)));
    }
    uses.push_back(found);
  }
  return uses;
}

RunListener& listener_of(const RunOptions& options) {
  static RunListener none;
  return options.listener ? *options.listener : none;
}

}  // namespace

bool most_declined(int64_t declined, int64_t drawn) {
  if (drawn <= 0) return false;
  const double n = double(drawn), p = double(declined) / n, z2 = kDeclinedZ * kDeclinedZ;
  const double lower =
      (p + z2 / (2 * n) - kDeclinedZ * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n);
  return lower > 0.5 || p > 0.75;
}

// How a failed health check is turned off: in the spec, or for one run
// (the Python package says its keyword instead of the flag).
std::string suppress_advice(const char* check) {
  return fmt::format(
      "add run: {{suppress_health_check: [{0}]}} to the spec (--suppress-health-check {0} "
      "for one run)",
      check);
}

bool suppressed(const RunConfig& run, const char* check) {
  return std::find(run.suppress_health_check.begin(), run.suppress_health_check.end(), check) !=
         run.suppress_health_check.end();
}

const std::vector<HealthCheckInfo>& health_checks() {
  static const std::vector<HealthCheckInfo> checks = {
      {"declined",
       "more than half of the drawn cases were declined by the target, beyond chance (the share's 4-sigma "
       "Wilson lower bound over 1/2, or the share over 3/4; reasons listed)"},
      {"discarded",
       "an invariant discarded more than run.max_discard_ratio x trials cases (it cannot observe most of "
       "them)"},
      {"too_slow",
       "the time budget stopped the run before it reached both max_size and 10% of its trials (either one "
       "short fails it)"},
  };
  return checks;
}

const std::vector<HealthCheckInfo>& unsuppressible_health_checks() {
  static const std::vector<HealthCheckInfo> checks = {
      {"nothing_checked", "no invariant checked any case (every one was n/a for the target and domain)"},
      {"unavailable",
       "the target became unavailable (a CUDA device lost) after it had checked cases: the rest of the run "
       "was not checked"},
  };
  return checks;
}

std::vector<const Finding*> RunReport::findings() const {
  std::vector<const Finding*> out;
  for (const auto& inv : invariants)
    if (inv.counterexample) out.push_back(&*inv.counterexample);
  if (crash) out.push_back(&*crash);
  return out;
}

const char* invariant_status_name(InvariantStatus s) {
  static constexpr const char* kNames[] = {"passed", "FAILED", "GAVE UP", "not run", "n/a"};
  static_assert(std::size(kNames) == size_t(InvariantStatus::not_applicable) + 1);
  return enum_name(s, kNames);
}

const char* run_status_name(RunStatus s) {
  static constexpr const char* kNames[] = {"passed",  "failed",  "gave up",
                                           "crashed", "skipped", "interrupted"};
  static_assert(std::size(kNames) == size_t(RunStatus::interrupted) + 1);
  return enum_name(s, kNames);
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

bool fresh_seed_wanted(const Spec& spec, const RunOptions& options) {
  return options.seed.value_or(spec.run.seed) == 0;
}

uint64_t resolve_seed(const Spec& spec, const RunOptions& options) {
  return fresh_seed_wanted(spec, options) ? fresh_seed() : options.seed.value_or(spec.run.seed);
}

std::string reference_name(const Spec& spec, const RunOptions& options) {
  return options.reference.empty() ? spec.reference : options.reference;
}

void check_run_names(const Spec& spec, const RunOptions& options) {
  const auto in_process = [&](const std::string& name, bool as_reference) {
    if (name.empty()) return;
    if (spec.family->find_implementation(name) >= 0) {
      if (as_reference) resolve_target(spec, name, {}, true);  // throws for a mutant
      return;
    }
    if (external::is_external_target(name))
      external::check_target_name(name);
    else
      resolve_target(spec, name, {}, as_reference);  // throws the unknown-name error
  };
  in_process(options.target, false);
  in_process(reference_name(spec, options), true);
  (void)selected_uses(spec, options);
}

Impl resolve_target(const Spec& spec, const std::string& name, std::optional<double> case_timeout_s,
                    bool as_reference) {
  const int i = spec.family->find_implementation(name);
  if (i >= 0) {
    Impl impl = spec.family->registered(static_cast<size_t>(i));
    // A mutant is a planted bug: as the oracle it would fail the correct
    // target and store that as a finding.
    if (as_reference && impl.info.kind == ImplKind::mutant)
      throw InputError({},
                       fmt::format("reference '{}' is a mutant of family {} (a planted bug), not an oracle; "
                                   "pick a correct implementation or plugin:/exec:",
                                   name, spec.family->name()));
    return impl;
  }
  if (external::is_external_target(name)) {
    external::TransportOptions o;
    o.family = spec.family->name();
    o.ops = spec.family->external_ops();
    o.call_timeout_s = case_timeout_s.value_or(spec.run.case_timeout_s);
    if (as_reference) o.role = "reference";
    o.padded_tensors =
        spec.run.padded_tensors && !as_reference;  // the reference is an oracle, not under test
    auto transport = external::open_target(name, o);
    if (as_reference) transport = external::widened_to_f64(std::move(transport));
    return spec.family->external_impl(name, std::move(transport));
  }
  // A shared library or a command without its scheme (or a misspelt one):
  // say which one it takes.
  const std::string role = as_reference ? "reference" : "target";
  const size_t colon = name.find(':');
  if (colon != std::string::npos && colon > 0 &&
      std::all_of(name.begin(), name.begin() + long(colon),
                  [](char ch) { return std::isalpha(uint8_t(ch)); }))
    throw InputError({}, fmt::format("unknown {} '{}' for family {}: no scheme '{}:' (an external {} is "
                                     "plugin:PATH or exec:COMMAND)",
                                     role, name, spec.family->name(), name.substr(0, colon), role));
  const auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool library = ends_with(".so") || name.find(".so.") != std::string::npos;
  const bool script = ends_with(".py") && name.find(' ') == std::string::npos;  // a bare script path
  if (library || script || name.find('/') != std::string::npos || name.find(' ') != std::string::npos)
    throw InputError({}, fmt::format("unknown {} '{}' for family {} (did you mean '{}'? an external {} is "
                                     "named with its scheme)",
                                     role, name, spec.family->name(),
                                     library  ? "plugin:" + name
                                     : script ? "exec:python3 " + name
                                              : "exec:" + name,
                                     role));
  // A reference is never a mutant: those are not offered.
  std::vector<std::string> names;
  for (const auto& impl : spec.family->implementations())
    if (!as_reference || impl.kind != ImplKind::mutant) names.push_back(impl.name);
  throw InputError({}, fmt::format("unknown {} '{}' for family {}{}", as_reference ? "reference" : "target",
                                   name, spec.family->name(), suggestion(name, names)));
}

namespace {
// A report's header: what names the run, before it draws anything.
RunReport report_header(const Spec& spec, const RunOptions& options) {
  RunReport r;
  r.spec = spec.name;
  r.spec_path = spec.path;
  r.profile = spec.profile;
  r.domain = spec.domain_overrides;
  r.family = spec.family->name();
  // A declared op's reference that runs the spec's exec:/plugin: program is
  // named by that program (it read "reference" while the worker judged).
  r.reference = spec.family->reference_shown(reference_name(spec, options));
  return r;
}

RunReport run_cases(const Spec& spec, const RunOptions& options, RunListener& events);
}  // namespace

RunReport run_spec(const Spec& spec, const RunOptions& options) {
  // Statistics come from the events (src/stats.cpp); the collector passes
  // every event on to the caller's listener.
  StatsCollector events(listener_of(options));
  RunReport report = run_cases(spec, options, events);
  report.stats = events.result(report);
  events.run_finished(report);
  return report;
}

namespace {
RunReport run_cases(const Spec& spec, const RunOptions& options, RunListener& events) {
  const Family& family = *spec.family;
  RunReport report = report_header(spec, options);
  report.seed = resolve_seed(spec, options);
  const RunContext ctx = make_context(spec, options, report.seed);
  report.target = ctx.target_name;
  report.unchecked_outputs = unchecked_outputs(spec, options.only_invariants);
  events.run_started(report);
  const RunConfig& run = ctx.run;
  report.max_size = run.max_size;
  const int64_t all_trials = run.trials;
  // prop_runner and Python refuse these first; a C++ caller's RunOptions
  // is told in its own words (not "--shard 0/1: ... 0 trial(s)").
  if (all_trials < 1)
    throw InputError(
        {}, fmt::format("trials = {}: a run needs at least 1 (RunOptions::trials, --trials)", all_trials));
  const int64_t shards = std::max<int64_t>(1, options.shard_count), shard = options.shard_index;
  // Cases this shard must pass per invariant: indices i < all_trials with i % shards == shard.
  if (shard >= all_trials)
    throw InputError({}, fmt::format("--shard {}/{}: the run has {} trial(s), so shard {} would check none "
                                     "(use at most {} shards)",
                                     shard, shards, all_trials, shard, all_trials));
  const int64_t trials = std::max<int64_t>(1, (all_trials - shard + shards - 1) / shards);
  report.trials_wanted = trials;
  if (shards > 1) report.shard = fmt::format("{}/{}", shard, shards);
  const auto uses = selected_uses(spec, options);

  for (const auto* u : uses) report.invariants.push_back({u->name});
  std::vector<bool> alive(uses.size(), true);
  auto any_alive = [&] { return std::find(alive.begin(), alive.end(), true) != alive.end(); };
  // Progress: the checks of the invariant still checking that is furthest
  // from its trials; when none is, the run ends, short of them where one
  // failed or gave up (one n/a for the target checked nothing by design).
  auto progress = [&] {
    const bool ended = !any_alive();
    int64_t done = trials;
    for (size_t k = 0; k < uses.size(); ++k)
      if (alive[k] || (ended && report.invariants[k].status != InvariantStatus::not_applicable))
        done = std::min(done, report.invariants[k].checked());
    return done;
  };

  Search search(ctx, uses);  // kprop/search.h: after the random phase, when enabled
  // The spec's domain, or where the invariants still checking observe
  // (kprop/focus.h): chosen per case from the live invariants.
  CaseDomains domains(family, spec.domain, options.focus ? uses : std::vector<const InvariantUse*>{});
  auto draw = [&](const rc::Random& random, int size, const CaseDomains::Domain& domain) {
    try {
      return domain.generator(random, size).value();
    } catch (const rc::GenerationFailure& e) {
      throw InputError({spec.path, 0, 0}, std::string("the domain cannot be generated: ") + e.what());
    }
  };
  rc::Random stream(report.seed);
  const auto t0 = Clock::now();
  const int64_t max_cases = all_trials * (1 + std::max<int64_t>(run.max_discard_ratio, 0));
  auto finish = [&]() -> RunReport& {
    report.seconds = since(t0);
    if (interrupted()) {
      report.status = RunStatus::interrupted;
      report.detail = "interrupted (Ctrl-C); what was found so far is reported and stored";
    }
    return report;
  };

  // --jobs: the n-th case of this shard is checked by whichever worker
  // claims it, ahead of this loop, which takes the results in order
  // (kprop/jobs.h).
  const int64_t shard_cases = max_cases > shard ? (max_cases - shard + shards - 1) / shards : 0;
  auto job_setup = [&]() -> WorkerPool::Work {
    // An external target or reference is opened again: one worker process per job.
    const bool external = ctx.target.index < 0 || ctx.reference.index < 0;
    auto own = std::make_shared<RunContext>(external ? make_context(spec, options, report.seed) : ctx);
    return [&, own, stream = rc::Random(report.seed), next = int64_t(0)](
               int64_t n, const std::string& live_note) mutable -> std::string {
      const int64_t i = shard + n * shards;
      for (; next < i; ++next) stream.split();
      const rc::Random case_random = stream.split();
      ++next;
      std::vector<const InvariantUse*> live_uses;
      // The case's statistics travel with the results, so the caller need
      // not draw the case again (it does only to record a finding).
      CaseOutcome out;
      for (size_t k = 0; k < uses.size(); ++k)
        if (live_note[k] == '1') live_uses.push_back(uses[k]), out.uses.push_back(k);
      const auto generation_start = Clock::now();
      const AnyCase c = draw(case_random, size_for(i, all_trials, run.max_size), domains.for_live(out.uses));
      out.generation_seconds = since(generation_start);
      out.stats = family.stats(c);
      try {
        out.results = check_uses(*own, live_uses, c, options.compare_outputs);
      } catch (const InputError& e) {
        out.input_error = e;  // raised by the caller (from_job)
      }
      return encode_case_outcome(out);
    };
  };
  auto alive_note = [&] {
    std::string note;
    for (const bool a : alive) note += a ? '1' : '0';
    return note;
  };
  // The results a job sent for the live invariants, as this loop would have
  // computed them; false when they cannot stand for them (a dead invariant
  // the job still checked declined, crashed or, under --mutants, failed
  // first; or the job drew the case from another domain than the live
  // invariants' own, kprop/focus.h): the loop checks the case.
  auto from_job = [&options, &domains, n = uses.size()](
                      const std::string& payload, const std::vector<size_t>& live,
                      const CaseDomains::Domain& domain, std::vector<CheckResult>& out, CaseStats& stats,
                      double& generation_s) {
    CaseOutcome job;
    if (!decode_case_outcome(payload, job) || job.uses.size() < job.results.size() ||
        std::any_of(job.uses.begin(), job.uses.end(), [n](size_t k) { return k >= n; }))
      return false;                               // garbled: checked here instead
    if (job.input_error) throw *job.input_error;  // the spec's error, as checking the case here would raise
    if (&domains.for_live(job.uses) != &domain) return false;
    stats = std::move(job.stats);
    generation_s = job.generation_seconds;
    for (size_t m = 0; m < job.results.size(); ++m) {
      CheckResult& r = job.results[m];
      const bool stop = r.kind != CheckResult::Kind::verdict ||
                        (options.stop_on_first_failure && r.verdict.outcome == Outcome::fail);
      const bool is_live = std::find(live.begin(), live.end(), job.uses[m]) != live.end();
      if (is_live) out.push_back(std::move(r));
      if (stop) return is_live;
    }
    return out.size() == live.size();
  };
  const int jobs =
      options.target_transport || options.reference_transport || in_process_cuda() ? 1 : options.jobs;
  std::optional<WorkerPool> pool;
  if (jobs > 1) pool.emplace(jobs, shard_cases, std::max(64 * jobs, 256), job_setup, alive_note());

  int64_t nth = -1;                 // the case's index in this shard
  std::optional<std::string> lost;  // why the target became unavailable mid-run
  int64_t discarded_unseen = 0;     // cases every invariant discarded before the target ran
  for (int64_t i = 0; any_alive() && i < max_cases; ++i) {
    const rc::Random case_random = stream.split();
    if (i % shards != shard) continue;
    ++nth;
    if (interrupted()) break;
    if (run.time_budget_s > 0 && since(t0) > run.time_budget_s) {
      report.time_budget_hit = true;
      break;
    }
    const int size = size_for(i, all_trials, run.max_size);
    events.case_started(i + 1, progress(), trials, size, since(t0));
    std::vector<size_t> live;
    std::vector<const InvariantUse*> live_uses;
    for (size_t k = 0; k < uses.size(); ++k)
      if (alive[k]) live.push_back(k), live_uses.push_back(uses[k]);
    const CaseDomains::Domain& domain = domains.for_live(live);
    // Drawn here when this process checks the case, records a finding or
    // describes it in the run's statistics (which cover every drawn case).
    AnyCase drawn;
    double generation_seconds = 0;
    auto the_case = [&]() -> const AnyCase& {
      if (!drawn) {
        const auto generation_start = Clock::now();
        drawn = draw(case_random, size, domain);
        generation_seconds = since(generation_start);
      }
      return drawn;
    };
    std::vector<CheckResult> results;
    CaseStats case_stats;
    std::optional<std::string> payload;
    if (pool) {
      pool->broadcast(alive_note());
      payload = pool->take(nth);
      if (interrupted()) break;
    }
    if (!payload || !from_job(*payload, live, domain, results, case_stats, generation_seconds)) {
      results = check_uses(ctx, live_uses, the_case(), options.compare_outputs);
      case_stats = family.stats(the_case());
    }
    ++report.trials;
    if (!domain.focus.empty()) ++report.focused[domain.focus];
    report.size_reached = std::max<int64_t>(report.size_reached, size);
    report.largest_case = std::max(report.largest_case, case_stats.size);
    events.case_checked({i + 1, size, case_stats, generation_seconds, live_uses, results});
    bool checked = false, declined_or_stopped = false, recorded = false;
    for (size_t n = 0; n < results.size(); ++n) {
      // Ctrl-C: the finding being recorded was stored; the case's other
      // failures are not shrunk and stored one by one (each a write of the
      // whole case: a minute and a half at a real model's sizes).
      if (recorded && interrupted()) break;
      const size_t k = live[n];
      InvariantReport& ir = report.invariants[k];
      const CheckResult& r = results[n];
      if (r.kind == CheckResult::Kind::declined) {
        // A declined case is not a verdict: counted apart, with its reason.
        // (One the reference could not run was not the target's to decline:
        // the run ends on it below, its detail naming the reference.)
        declined_or_stopped = true;
        if (!r.reference_unavailable) {
          ++report.declined;
          ++report.decline_reasons[r.reason];
          // For every live invariant but those with a result on this case
          // already (one that discarded it before the target was asked).
          for (size_t j = 0; j < uses.size(); ++j)
            if (alive[j] && std::find(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(n), j) ==
                                live.begin() + static_cast<std::ptrdiff_t>(n))
              ++report.invariants[j].declined;
        }
        // (An invariant that passed on this case already checked it: not
        // counted in report.checked until the case is done.)
        if (r.unavailable && report.checked == 0 && !checked && report.status != RunStatus::failed) {
          report.status = RunStatus::skipped;
          report.detail = "skipped: " + r.reason;
          return finish();
        }
        // Unavailable after it ran (a device lost mid-run): the run ends
        // here, and what it checked before is no pass (a failure stays one).
        if (r.unavailable) lost = r.reason;
        break;
      }
      if (r.kind == CheckResult::Kind::target_failure && r.failure_kind == "interrupted") {
        declined_or_stopped = true;  // Ctrl-C
        break;
      }
      if (r.kind == CheckResult::Kind::target_failure) {
        // The target crashed, hung or reported an error; the runner lives
        // on: the smallest case that repeats it is stored with its replay.
        report.status = RunStatus::crashed;
        pool.reset();  // the run ends here: the workers' cases are not needed
        report.crash = record_finding(ctx, uses[k], the_case(), r, [&](int64_t from, int64_t to, double s) {
          events.shrinking(r.failure_kind, from, to, s);
        });
        events.failure(*report.crash);
        report.detail = report.crash->message;
        if (report.crash->shrink_steps > 0)
          report.detail += fmt::format(" (shrunk in {} steps from size {} to {})", report.crash->shrink_steps,
                                       report.crash->original_size, report.crash->stats.size);
        return finish();
      }
      const Verdict& v = r.verdict;
      switch (v.outcome) {
        case Outcome::pass:
          checked = true;
          note_ratios(ir, v);
          if (++ir.passed >= trials) {
            ir.status = InvariantStatus::passed;
            alive[k] = false;
          }
          break;
        case Outcome::not_applicable:
          ++ir.not_applicable;
          ir.status = InvariantStatus::not_applicable;
          ir.last_discard = v.message;
          alive[k] = false;
          break;
        case Outcome::discard:
          ir.last_discard = v.message;
          ++ir.discard_reasons[v.message];
          if (++ir.discarded > run.max_discard_ratio * trials) {
            ir.status = InvariantStatus::gave_up;
            alive[k] = false;
          }
          break;
        case Outcome::fail:
          checked = true;
          ir.status = InvariantStatus::failed;
          ir.trials_to_fail = i + 1;
          ir.seconds_to_fail = since(t0);
          alive[k] = false;
          // The workers wait while this shrinks; they are stopped at once
          // when this failure ends the run (--mutants: the first kill).
          if (options.stop_on_first_failure) pool.reset();
          const WorkerPool::Pause hold(pool ? &*pool : nullptr);
          ir.counterexample = record_finding(
              ctx, uses[k], the_case(), r,
              [&](int64_t from, int64_t to, double s) { events.shrinking(ir.name, from, to, s); });
          recorded = true;
          events.failure(*ir.counterexample);
          report.status = RunStatus::failed;
          if (options.stop_on_first_failure) std::fill(alive.begin(), alive.end(), false);
          break;
      }
      // --mutants: one finding, the first invariant that failed, is the kill;
      // the others failing on the same case are not shrunk too.
      if (report.status == RunStatus::failed && options.stop_on_first_failure) break;
    }
    report.checked += checked;
    report.discarded += !checked && !declined_or_stopped;
    if (options.compare_outputs) count_compared_outputs(report, results);
    // Discarded before the target saw it: what "declined every case it was
    // given" may leave out (one the target answered is no decline).
    if (!checked && !declined_or_stopped &&
        std::all_of(results.begin(), results.end(), [](const CheckResult& r) { return r.target_runs == 0; }))
      ++discarded_unseen;
    if (lost) break;
    if (search.enabled()) search.offer(case_random, size, the_case(), live, results, domain.focus.empty());
    events.case_done(i + 1, progress(), trials, size, since(t0));
  }
  finish();
  if (report.status == RunStatus::interrupted) return report;
  if (lost) {
    end_unavailable(report, *lost, "");
    return report;
  }

  // Nothing checked, and every case the run did not discard was declined
  // (a metamorphic invariant discards a case it cannot transform before the
  // target sees it: with those, a target with no device failed `declined`
  // and `discarded` where without them it was SKIPPED).
  if (report.trials > 0 && report.checked == 0 && report.declined > 0 &&
      report.declined + discarded_unseen == report.trials && report.status == RunStatus::passed) {
    report.status = RunStatus::skipped;
    report.detail =
        "skipped: the target declined every case" +
        (discarded_unseen > 0 ? fmt::format(" it was given ({} more were discarded by every invariant before "
                                            "the target saw them)",
                                            discarded_unseen)
                              : std::string()) +
        ": " + reasons_summary(report.decline_reasons, 5);
    for (auto& r : report.invariants) r.status = InvariantStatus::not_run;
    return report;
  }
  // Invariants still alive ran out of time or cases: they held on what they
  // checked (the too_slow health check judges how much time left them);
  // one that checked nothing did not pass. Except where the cases the
  // target declined took the place of checked ones (out of cases, not of
  // time): short of `trials`, it did not pass (a run declining 10% of a
  // max_discard_ratio 0 run's cases passed on 90% of its trials). (A shard
  // may run out a little short on its own discards: its share of the
  // run's cases is rounded.)
  for (size_t k = 0; k < uses.size(); ++k) {
    auto& r = report.invariants[k];
    const bool declines_took_cases = !report.time_budget_hit && r.declined > 0;
    if (alive[k] && r.status == InvariantStatus::not_run)
      r.status = r.passed > 0 && !declines_took_cases ? InvariantStatus::passed : InvariantStatus::gave_up;
    if (r.status == InvariantStatus::gave_up && r.last_discard.empty())
      r.last_discard = r.declined == 0 ? "no case reached it"
                       : r.passed == 0 ? "every case it saw was declined by the target"
                                       : fmt::format("{} of {} trials checked", r.passed, trials);
  }
  // --fail-fast (and a mutant's run): what the first counterexample left
  // undone, said in the report (text, JSON, JUnit, HTML).
  if (report.status == RunStatus::failed && options.stop_on_first_failure) {
    const auto unfinished = std::count_if(report.invariants.begin(), report.invariants.end(),
                                          [](const auto& r) { return r.status == InvariantStatus::not_run; });
    std::vector<std::string> undone;
    if (unfinished > 0) undone.push_back(fmt::format("{} invariant(s) not run to the end", unfinished));
    if (search.enabled()) undone.push_back("no search");
    if (!undone.empty()) {
      report.stopped_at_failure = true;
      report.detail = "the first counterexample ended the run: " + join(undone);
    }
  }
  if (search.enabled() && (report.status == RunStatus::passed ||
                           (report.status == RunStatus::failed && !options.stop_on_first_failure))) {
    search.run(report, events);
    if (finish().status == RunStatus::interrupted || report.status != RunStatus::passed) return report;
  }
  if (report.status != RunStatus::passed) return report;

  // Health checks: a green run must have checked what it claims.
  // How to narrow the domain to what the target takes (for the advice of a
  // failed check only): the example names this family's dtype key when it
  // has one.
  auto narrow_example = [&] {
    std::string key;
    for (const char* k : {"dtypes", "dtype"})
      for (const auto& f : spec.family->domain_schema())
        if (key.empty() && f.key == k) key = k;
    return key.empty() ? std::string("--domain '{KEY: VALUE}'")
                       : fmt::format("--domain '{{{}: [...]}}'", key);
  };
  const double declined_share = report.trials ? double(report.declined) / double(report.trials) : 0;
  // A shard's share estimates the whole run's (its cases are every Nth of
  // the same sequence), and it is the whole run that passes or not: judged on
  // its evidence, N times the shard's draws. On the shard's own, four shards
  // of a run that failed this check (87 of 127 declined) each passed it.
  const bool too_many_declined =
      most_declined(report.declined * shards, report.trials * shards) && !suppressed(run, "declined");
  if (too_many_declined) {
    report.health.push_back(
        {"declined",
         fmt::format(
             "{:.1f}% of cases were declined by the target ({} of {}): {}; narrow the domain to what "
             "the target supports (e.g. prop_runner {}; --list --spec shows the keys), or {}{}",
             100 * declined_share, report.declined, report.trials, reasons_summary(report.decline_reasons, 5),
             narrow_example(), suppress_advice("declined"),
             shards > 1 ? fmt::format(" (judged as the share of the unsharded run, {} shards)", shards)
                        : "")});
  }
  // The time budget stopped the run short: one too_slow check says so, not
  // one `discarded` per invariant that it stopped before any case reached.
  const bool too_slow = report.time_budget_hit && !suppressed(run, "too_slow") &&
                        (report.size_reached < run.max_size || report.trials < kMinTrialShare * trials);
  for (auto& r : report.invariants) {
    if (r.status != InvariantStatus::gave_up) continue;
    if (too_slow && r.discarded == 0 && r.declined == 0) continue;
    const bool over_ratio = double(r.discarded) > run.max_discard_ratio * double(trials);
    // Checked some, short of trials, with its discards inside the budget:
    // the cases the target declined took the rest of the run's cases. Its
    // own health check (under `declined`), unless the one above said it.
    if (r.passed > 0 && r.declined > 0 && !over_ratio && !report.time_budget_hit) {
      if (suppressed(run, "declined")) {
        r.status = InvariantStatus::passed;
      } else if (!too_many_declined) {
        report.health.push_back(
            {"declined",
             fmt::format(
                 "invariant {} checked {} of {} trials: the {} case(s) the target declined ({}) used "
                 "up the run's cases ({} with run.max_discard_ratio {}); narrow the domain to what the "
                 "target takes (prop_runner {}), raise run.max_discard_ratio, or {}",
                 r.name, r.passed, trials, r.declined, reasons_summary(report.decline_reasons, 5),
                 report.trials, run.max_discard_ratio, narrow_example(), suppress_advice("declined"))});
      }
      continue;
    }
    if (r.passed > 0 && suppressed(run, "discarded")) {
      r.status = InvariantStatus::passed;
      continue;
    }
    // Gave up on its discards, or the run ended (time budget, case cap)
    // before it checked anything: the advice differs.
    std::string advice = over_ratio ? "widen the domain or raise run.max_discard_ratio"
                         : report.time_budget_hit
                             ? "the time budget ended the run first: raise run.time_budget_s (--time) or "
                               "widen the domain"
                             : "the run's cases ran out first: widen the domain so more cases reach it";
    // Nothing checked while the target declined cases: those may be the
    // only ones this invariant observes (e.g. f16 stores, on a target that
    // takes f32 only). Then no domain feeds it on this target; narrowed to
    // what the target takes, the invariant is reported n/a with the reason.
    if (r.passed == 0 && r.declined > 0)
      advice += fmt::format(
          "; if the {} case(s) the target declined ({}) are the ones it observes, narrow the domain to what "
          "the target takes (prop_runner {}), and it is reported n/a",
          r.declined, reasons_summary(report.decline_reasons, 5), narrow_example());
    // Suppressing the check passes an invariant that checked too few cases,
    // never one that checked none.
    const std::string suppress =
        r.passed > 0 ? ", or " + suppress_advice("discarded")
        : suppressed(run, "discarded")
            ? " (suppress_health_check: [discarded] passes an invariant that checked "
              "too few cases, not one that checked none)"
            : "";
    report.health.push_back(
        {"discarded",
         fmt::format("invariant {} checked {} case(s) and discarded {} ({}); {}{}", r.name, r.passed,
                     r.discarded,
                     r.discard_reasons.empty() ? r.last_discard : reasons_summary(r.discard_reasons, 3),
                     advice, suppress)});
  }
  if (too_slow)
    report.health.push_back(
        {"too_slow",
         fmt::format("the time budget ({:g} s) stopped the run {}; raise run.time_budget_s (--time), lower "
                     "trials or max_size, or {}",
                     run.time_budget_s,
                     report.size_reached < 0
                         ? fmt::format("before the first of its {} cases", trials)
                         : fmt::format("after {} of {} cases, at size {} of max_size {}", report.trials,
                                       trials, report.size_reached, run.max_size),
                     suppress_advice("too_slow"))});
  bool any_passed = false;
  for (const auto& r : report.invariants) any_passed = any_passed || r.status == InvariantStatus::passed;
  if (!any_passed && report.health.empty())
    report.health.push_back({"nothing_checked", "no invariant checked any case (every one was n/a)"});
  if (!report.health.empty()) report.status = RunStatus::gave_up;
  return report;
}

}  // namespace

bool mutants_skipped(const std::vector<MutantRow>& rows) {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const MutantRow& r) {
    return r.report.status == RunStatus::skipped;
  });
}

const char* mutant_verdict(const MutantRow& row) {
  if (row.killed) return "killed";
  switch (row.report.status) {
    case RunStatus::skipped:
      return "skipped";
    case RunStatus::interrupted:
      return "interrupted";
    case RunStatus::gave_up:
      return "gave up";
    default: {
      // Every case it passed was compared, and on each its outputs were a
      // correct implementation's: no invariant could have told it apart.
      const RunReport& r = row.report;
      return r.outputs_compared > 0 && r.outputs_differed == 0 && r.outputs_uncompared == 0 ? "unreached"
                                                                                            : "survived";
    }
  }
}

int mutants_exit_code(const std::vector<MutantRow>& rows) {
  // Ctrl-C: whatever the rows say, some run ended early (a shrink at least).
  if (interrupted()) return 130;
  if (mutants_skipped(rows)) return 0;
  int code = 0;
  for (const auto& r : rows) {
    const std::string_view v = mutant_verdict(r);
    if (v == "interrupted") return 130;
    // One skipped where others ran (no device for it) is no kill either.
    if (v == "survived" || v == "unreached" || v == "skipped") code = 1;
    if (v == "gave up" && code == 0) code = 2;
  }
  return code;
}

const char* mutants_verdict_name(const std::vector<MutantRow>& rows) {
  if (mutants_skipped(rows) && !interrupted()) return "SKIPPED";
  switch (mutants_exit_code(rows)) {
    case 0:
      return "PASSED";
    case 1:
      return "FAILED";
    case 2:
      return "HEALTH CHECK FAILED";
    default:
      return "INTERRUPTED";
  }
}

std::vector<MutantRow> run_mutants(const Spec& spec, const RunOptions& options) {
  std::vector<MutantRow> rows;
  for (const auto& impl : spec.family->implementations()) {
    if (impl.kind != ImplKind::mutant) continue;
    RunOptions o = options;
    o.target = impl.name;
    o.stop_on_first_failure = !options.kill_matrix;
    o.compare_outputs = true;
    // A mutant only a profile's sizes reach runs under that profile.
    const auto own = spec.mutant_profiles.find(impl.name);
    const Spec& s = own != spec.mutant_profiles.end() ? *own->second : spec;
    // --invariant under a profile's own list: the names it has. A mutant
    // whose profile checks none of them is not run, and says so (it ended
    // the whole run with "not in spec ... under profile P").
    std::vector<std::string> not_there;
    if (&s != &spec && !options.only_invariants.empty()) {
      o.only_invariants.clear();
      for (const auto& want : options.only_invariants)
        (std::any_of(s.invariants.begin(), s.invariants.end(),
                     [&](const InvariantUse& u) { return u.name == want; })
             ? o.only_invariants
             : not_there)
            .push_back(want);
    }
    if (interrupted() || (!options.only_invariants.empty() && o.only_invariants.empty())) {
      // Listed, not left out: "k of k killed" would read as every mutant.
      MutantRow row{impl.name, impl.description, report_header(s, o), false, ""};
      RunReport& r = row.report;
      r.target = impl.name;
      r.seed = options.seed.value_or(s.run.seed);
      if (interrupted()) {
        r.status = RunStatus::interrupted;
        r.detail = "not run: interrupted before it started";
      } else {
        r.status = RunStatus::skipped;
        r.detail = fmt::format("not run: profile {} (where its bug shows) checks no --invariant {}",
                               s.profile, join(not_there));
      }
      rows.push_back(std::move(row));
      continue;
    }
    MutantRow row{impl.name, impl.description, run_spec(s, o), false, ""};
    // The kill is the first failure: the earliest case, then the spec's
    // order, as a run that stops at it reports. (With the kill matrix every
    // invariant runs on, and the last one that failed was named.)
    int64_t first = INT64_MAX;
    for (const auto& r : row.report.invariants)
      if (r.status == InvariantStatus::failed && r.trials_to_fail < first)
        row.killed = true, row.killed_by = r.name, first = r.trials_to_fail;
    // A target failure kills by its kind: crash, hang or error (a hang read
    // "killed by crash" in the table).
    if (row.report.status == RunStatus::crashed)
      row.killed = true, row.killed_by = row.report.crash ? row.report.crash->kind : "crash";
    rows.push_back(std::move(row));
  }
  return rows;
}

namespace {

// The line of a corpus file that names finding k (0: the top-level one,
// then its also_found_against entries), for a message that says to fix it.
std::string finding_line(const std::vector<AlsoFound>& found, size_t k) {
  return k == 0 ? std::string("invariant: line")
                : fmt::format("also_found_against entry {} (found_against: {}, invariant: {})", k,
                              found[k].found_against, found[k].invariant);
}

// A corpus file's invariants (quoted) that neither the spec nor its family
// has, with the spec's nearest to `first` (a typo in a hand-written file),
// `line` the file's line that names `first` (finding_line).
std::string no_such_invariant(const Spec& spec, const std::vector<std::string>& quoted,
                              const std::string& first, const std::string& line) {
  std::vector<std::string> spec_names;
  for (const InvariantUse& u : spec.invariants) spec_names.push_back(u.name);
  return fmt::format(
      "its invariant{} {} {} neither in the spec nor registered by family '{}'{} (renamed? fix the "
      "file's {})",
      quoted.size() > 1 ? "s" : "", fmt::join(quoted, ", "), quoted.size() > 1 ? "are" : "is",
      spec.family->name(), did_you_mean(first, spec_names), line);
}

// One corpus file of a replay; `stopped` when Ctrl-C stopped the target.
// `folder`: the folder --replay named, whose tree the file was listed from
// ("" for a file named itself).
ReplayRow replay_file(const RunContext& ctx, const std::vector<const InvariantUse*>& uses,
                      const std::string& file, const std::string& folder, bool& stopped) {
  const Spec& spec = ctx.spec;
  const Family& family = *spec.family;
  ReplayRow row;
  row.path = file;
  AnyCase c;
  CorpusEntry e;
  std::vector<AlsoFound> found;  // its findings: the top-level one, then also_found_against's
  const auto by_mutant = [&](const AlsoFound& f) {  // found against a registered mutant
    const int impl = family.find_implementation(f.found_against);
    return impl >= 0 && family.implementations()[static_cast<size_t>(impl)].kind == ImplKind::mutant;
  };
  // `invariant` as profile `profile` of this spec lists it (nullptr where it
  // does not, or the spec cannot be loaded under it): the spec loaded again
  // under that profile, with this run's --domain where it fits.
  std::shared_ptr<const Spec> profiled;
  const auto profile_use = [&](const std::string& profile,
                               const std::string& invariant) -> const InvariantUse* {
    if (profile.empty() || spec.path.empty()) return nullptr;
    for (const std::string& overrides : {spec.domain_overrides, std::string()}) {
      if (profiled) break;
      try {
        profiled =
            std::make_shared<const Spec>(load_spec(spec.path, profile, overrides, spec.max_case_mb_override));
      } catch (const InputError&) {
      }
    }
    if (!profiled) return nullptr;
    for (const auto& u : profiled->invariants)
      if (u.name == invariant) return &u;
    return nullptr;
  };
  // A file that cannot be read is reported and the folder goes on; the
  // run exits 2 at the end.
  try {
    e = read_entry(file);
    row.invariant = e.invariant;
    row.found_against = e.found_against;
    // A case of another spec in that spec's folder below the folder named
    // (--replay corpus/, a root holding dflash/, beam/, ...) is that spec's
    // to replay: a skip that says so. Named on its own, in the folder named
    // (--replay corpus/beam with dflash's spec) or in another folder (a file
    // misfiled into this spec's), it is an error, below.
    const auto renamed = [&](const std::string& old_name) {
      return std::any_of(renamed_specs().begin(), renamed_specs().end(),
                         [&](const auto& r) { return r.first == old_name && r.second == spec.name; });
    };
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    std::error_code same_error;
    if (!folder.empty() && !e.spec.empty() && e.spec != spec.name && !renamed(e.spec) &&
        parent.filename() == e.spec && !std::filesystem::equivalent(parent, folder, same_error)) {
      // Where to replay it: prop_runner with that spec, or, in a test
      // binary (kprop/testing.h, options.replay_command is KPROP_REPLAY's),
      // the test that runs that spec; from Python, kprop.replay of that spec.
      const bool python = ctx.target_name.rfind("python:", 0) == 0;
      const bool test_binary = !ctx.options.replay_command.empty() && !python;
      row.other_spec = e.spec;
      row.target_detail = fmt::format(
          "not replayed: spec {}'s case, in its folder of the corpus ({})", e.spec,
          test_binary ? fmt::format("replay it with KPROP_REPLAY in the test that runs spec {}", e.spec)
          : python    ? fmt::format("replay it with kprop.replay(\"{}\", ...)", e.spec)
                      : std::string("replay it with that spec's --spec"));
      return row;
    }
    if (e.family != family.name())
      throw InputError(e.at("family"), fmt::format("corpus case is for family '{}', the spec tests '{}'",
                                                   e.family, family.name()));
    // A case stored under a spec's old name (renamed_specs()) is still its own.
    if (e.spec.empty())
      throw InputError({file, 1, 1}, fmt::format("corpus case names no spec (add spec: {} if it is this "
                                                 "spec's): its domain and invariants are that spec's",
                                                 spec.name));
    if (e.spec != spec.name && !renamed(e.spec))
      throw InputError(e.at("spec"),
                       fmt::format("corpus case is for spec '{}', not '{}'", e.spec, spec.name));
    // The profile it was found under decides which invariants it may be
    // judged by (below): one the spec does not declare is no profile of it.
    if (!e.profile.empty() &&
        std::find(spec.profiles.begin(), spec.profiles.end(), e.profile) == spec.profiles.end())
      throw InputError(
          e.at("profile"),
          fmt::format("corpus case was found under profile '{}', which spec {} does not declare "
                      "({}){}",
                      e.profile, spec.name,
                      spec.profiles.empty() ? "it has none" : "its profiles: " + join(spec.profiles),
                      did_you_mean(e.profile, spec.profiles)));
    try {
      c = family.from_yaml(e.case_node);
    } catch (const CaseFormatError& err) {
      throw InputError({file, err.line, err.col}, std::string("bad case: ") + err.what());
    } catch (const YAML::Exception& err) {
      throw InputError({file, err.mark.line + 1, err.mark.column + 1}, "bad case: " + err.msg);
    }
    // A case larger than run.max_case_mb is bad input, not the target's fault.
    if (const std::string why = check_case_budget(spec, c, e.profile); !why.empty())
      throw InputError({file, 0, 0}, why);
    // Every invariant the file names must exist, whoever found it (a
    // registered mutant's file too: it was a FAIL, exit 1, with no
    // position): a typo, or an invariant renamed since, is not replayed as
    // if fine, also beside one this run has (the file passed on that one,
    // its own finding never checked). A file kprop.check found (found_by:
    // python) may name another test's extra invariants: it needs one this
    // run has. The row names the first finding this run replays, or the
    // stale one.
    found = {{e.found_against, e.invariant}};
    found.insert(found.end(), e.also.begin(), e.also.end());
    const auto known = [&](const AlsoFound& f) {
      const bool in_spec = std::any_of(spec.invariants.begin(), spec.invariants.end(),
                                       [&](const InvariantUse& u) { return u.name == f.invariant; });
      return f.invariant.empty() || in_spec || family.find_invariant(f.invariant) >= 0;
    };
    // A mutant's finding by kprop.check's own invariant is re-run on the
    // mutant below, and fails there as stale.
    const auto replayable = [&](const AlsoFound& f) { return by_mutant(f) || known(f); };
    std::vector<std::string> unknown, typos;  // quoted; typos: those not found by kprop.check
    Mark typo_at;
    size_t typo_first = 0;
    for (size_t k = 0; k < found.size(); ++k) {
      if (known(found[k])) continue;
      unknown.push_back("'" + found[k].invariant + "'");
      // An entry's own found_by, else the file's: one kprop.check added to
      // a file prop_runner stored says so.
      if ((k > 0 && !found[k].found_by.empty() ? found[k].found_by : e.found_by) == "python") continue;
      if (typos.empty()) {
        typo_at = k == 0 ? e.at("invariant") : e.at("also_found_against." + std::to_string(k - 1));
        typo_first = k;
      }
      typos.push_back(unknown.back());
    }
    const auto first = std::find_if(found.begin(), found.end(), replayable);
    if (!typos.empty()) {
      row.invariant = found[typo_first].invariant;
      row.found_against = found[typo_first].found_against;
      throw InputError(typo_at, no_such_invariant(spec, typos, found[typo_first].invariant,
                                                  finding_line(found, typo_first)));
    }
    if (first == found.end()) {
      // Found by kprop.check (found_by: python), whose extra_invariants are
      // Python functions no spec or family has: the runs that have them
      // replay the case (docs/PYTHON.md), so here it is a skip that says
      // why, not an unreadable file. A hand-written file's (no found_by:
      // python) typo is an error, above.
      row.target_detail = fmt::format(
          "not replayed: found by kprop.check's invariant{} {}, which this run does not have (a Python "
          "extra_invariants function: kprop.replay(..., extra_invariants=[...]) replays it)",
          unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "));
      return row;
    }
    row.invariant = first->invariant;
    row.found_against = first->found_against;
  } catch (const InputError& err) {
    row.error = err.what();
    return row;
  }
  RunContext file_ctx = ctx;
  file_ctx.seed = e.seed;
  // One trial for every invariant; in a forked child with --isolate, so a
  // case that crashes or hangs the target is this row's target failure (the
  // replay check of a hang re-runs with --isolate to see it reported).
  const std::vector<CheckResult> results = check_uses(file_ctx, uses, c);
  for (size_t k = 0; k < results.size(); ++k) {
    const InvariantUse* use = uses[k];
    const CheckResult& r = results[k];
    if (r.kind == CheckResult::Kind::declined) {
      row.declined = true;
      row.target_detail = "declined: " + r.reason;
      break;
    }
    if (r.kind == CheckResult::Kind::target_failure && r.failure_kind == "interrupted") {
      stopped = true;
      return row;
    }
    if (r.kind == CheckResult::Kind::target_failure) {
      row.target_ok = false;
      row.target_failure = r.failure_kind;
      row.target_detail = fmt::format("{} (while checking {}): {}", r.failure_kind, use->name, r.reason);
      row.failed_invariant = use->name;
      break;
    }
    if (r.failed()) {
      row.target_ok = false;
      row.target_detail = use->name + ": " + r.verdict.message;
      row.failed_invariant = use->name;
      break;
    }
    if (r.verdict.outcome == Outcome::pass) {
      ++row.checked;
    } else if (row.checked == 0) {
      // Why the file may go unchecked: the first invariant that did not check it.
      const bool na = r.verdict.outcome == Outcome::not_applicable;
      if (row.target_detail.empty())
        row.target_detail = fmt::format("{} {}: {}", use->name, na ? "n/a" : "discarded", r.verdict.message);
    }
  }
  if (row.checked > 0 && row.target_ok) row.target_detail.clear();
  // A case the target failed is kept to guard that invariant: when the
  // invariant it failed is in this run and no longer checks it (discards
  // it, or is n/a), the others passing is no pass of the file. (A mutant's
  // finding is checked on the mutant, below.)
  bool own_unchecked = false;
  if (row.checked > 0 && row.target_ok && !row.declined)
    for (const auto& f : found) {
      if (f.invariant.empty() || by_mutant(f)) continue;
      for (size_t k = 0; k < results.size(); ++k)
        if (uses[k]->name == f.invariant && results[k].kind == CheckResult::Kind::verdict &&
            results[k].verdict.outcome != Outcome::pass) {
          row.checked = 0;
          own_unchecked = true;
          row.target_detail =
              fmt::format("not checked by the invariant it failed: {} (against {}) {}: {}; the others held",
                          f.invariant, f.found_against,
                          results[k].verdict.outcome == Outcome::not_applicable ? "is n/a" : "discarded it",
                          results[k].verdict.message);
        }
    }
  // The same when no invariant it failed is in this run (the spec or
  // --invariant leaves them out): the others holding says nothing of the
  // failure it was kept for. (It was PASSED: an invariant the family
  // registers counted as the run's.)
  if (row.checked > 0 && row.target_ok && !row.declined) {
    std::vector<std::string> own;
    bool in_run = false;
    for (const auto& f : found) {
      if (f.invariant.empty() || by_mutant(f)) continue;
      own.push_back(f.invariant);
      in_run = in_run || std::any_of(uses.begin(), uses.end(),
                                     [&](const InvariantUse* u) { return u->name == f.invariant; });
    }
    if (!own.empty() && !in_run) {
      row.checked = 0;
      own_unchecked = true;
      row.target_detail = fmt::format(
          "not checked by the invariant it failed: {} (against {}) is not in this "
          "run; the others held",
          fmt::join(own, ", "), row.found_against);
    }
  }
  if (row.checked == 0 && row.target_ok && !row.declined && !own_unchecked)
    row.target_detail =
        "no invariant checked it" + (row.target_detail.empty() ? "" : " (" + row.target_detail + ")");
  // A found_against that names no implementation (a mutant renamed, or a
  // typo) would silently stop the file guarding anything: said, as a
  // renamed invariant is. (External targets, plugin:/exec:/python:, and a
  // test binary's in-process kernel are not this run's to check.)
  for (size_t k = 0; k < found.size(); ++k) {
    const std::string& name = found[k].found_against;
    if (name.empty() || name == "in-process" || name.find(':') != std::string::npos ||
        name == ctx.target_name || family.find_implementation(name) >= 0 || !row.mutant_still_fails)
      continue;
    row.mutant_checked = true;
    row.mutant_still_fails = false;
    row.mutant_stale = true;
    row.found_against = name;
    row.invariant = found[k].invariant;
    // The new name is none the file already names (its other findings').
    std::vector<std::string> others;
    for (const auto& n : family.implementation_names())
      if (std::none_of(found.begin(), found.end(), [&](const AlsoFound& f) { return f.found_against == n; }))
        others.push_back(n);
    row.mutant_detail = fmt::format(
        "found_against '{}' is no implementation of family '{}' (a mutant renamed? fix the file's {}){}",
        name, family.name(), k == 0 ? std::string("found_against: line") : finding_line(found, k),
        did_you_mean(name, others));
  }
  // Each implementation the case was found against, if it is a registered
  // mutant, must still fail the recorded invariant.
  for (const auto& finding : found) {
    if (!by_mutant(finding)) continue;
    const int mutant = family.find_implementation(finding.found_against);
    RunContext mctx = ctx;
    mctx.target = family.registered(static_cast<size_t>(mutant));
    mctx.target_name = finding.found_against;
    const auto no_longer_fails = [&](const std::string& detail) {
      if (!row.mutant_still_fails) return;
      row.mutant_still_fails = false;
      row.found_against = finding.found_against;
      row.invariant = finding.invariant;
      row.mutant_detail = detail;
    };
    if (finding.invariant.empty()) {
      // A crash or hang of the mutant (no invariant): every invariant of
      // this run re-checked on it, in a forked child as --mutants runs it,
      // must still end in a crash, hang or failure. (The file was replayed
      // against the invariant '' before, which no spec has: it failed forever.)
      RunOptions forked = ctx.options;
      forked.isolate = true;
      const std::vector<CheckResult> rs =
          check_uses(RunContext{spec, forked, mctx.target, mctx.reference, mctx.target_name, mctx.seed,
                                mctx.run, mctx.reference_name},
                     uses, c);
      if (std::any_of(rs.begin(), rs.end(),
                      [](const CheckResult& r) { return r.failure_kind == "interrupted"; })) {
        stopped = true;  // Ctrl-C: nothing was checked, as on the target above
        return row;
      }
      if (std::any_of(rs.begin(), rs.end(), [](const CheckResult& r) { return r.unavailable; })) continue;
      row.mutant_checked = true;
      if (std::none_of(rs.begin(), rs.end(), [](const CheckResult& r) {
            return r.failed() || r.kind == CheckResult::Kind::target_failure;
          }))
        no_longer_fails(rs.empty() || rs.back().kind != CheckResult::Kind::declined
                            ? "no longer crashes, hangs or fails an invariant"
                            : "declined: " + rs.back().reason);
      continue;
    }
    const int invariant = family.find_invariant(finding.invariant);
    // An expression invariant exists only in the spec: it is re-evaluated from there.
    const InvariantUse* in_spec = nullptr;
    for (const auto& u : spec.invariants)
      if (u.name == finding.invariant) in_spec = &u;
    // A mutant's case whose invariant nothing here has proves nothing:
    // said, never passed silently. (Only kprop.check's finding, found_by:
    // python, gets here; any other file naming such an invariant is an
    // error, above.)
    if (invariant < 0 && !in_spec) {
      row.mutant_checked = true;
      row.mutant_stale = row.mutant_still_fails;
      no_longer_fails(no_such_invariant(spec, {"'" + finding.invariant + "'"}, finding.invariant,
                                        finding_line(found, static_cast<size_t>(&finding - found.data()))));
      continue;
    }
    // Found under a profile whose list has it where this run's list has not
    // (an invariant the profile's domain lets observe something the base's
    // cannot): judged as that profile states it.
    const InvariantUse* in_profile =
        !in_spec && spec.profile.empty() ? profile_use(e.profile, finding.invariant) : nullptr;
    // One the family registers but neither the spec nor the file's profile
    // lists any more: checked with the family's defaults it could still
    // pass on a loosened bound that the spec never stated. (Under a
    // profile, which may list fewer, it is checked as before.)
    if (!in_spec && !in_profile && spec.profile.empty()) {
      row.mutant_checked = true;
      row.mutant_stale = row.mutant_still_fails;
      no_longer_fails(
          fmt::format("its invariant '{}' is no longer in spec {} (removed? restore it, or retire "
                      "the file if the mutant is now caught otherwise)",
                      finding.invariant, spec.name));
      continue;
    }
    InvariantUse use;
    if (in_spec)
      use = *in_spec;
    else if (in_profile)
      use = *in_profile;
    else
      use = {static_cast<size_t>(invariant), finding.invariant,
             Values::defaults(family.invariants()[static_cast<size_t>(invariant)].params)};
    const CheckResult r = check_one(mctx, use, c);
    if (r.failure_kind == "interrupted") {
      stopped = true;  // Ctrl-C: nothing was checked
      return row;
    }
    // A mutant, or the reference, that cannot run here (a GPU one on a
    // machine without a GPU) checks nothing: not a regression.
    if (r.unavailable) continue;
    row.mutant_checked = true;
    if (!r.failed() && r.kind != CheckResult::Kind::target_failure)
      no_longer_fails(r.kind == CheckResult::Kind::declined   ? "declined: " + r.reason
                      : r.verdict.outcome == Outcome::discard ? "discarded: " + r.verdict.message
                                                              : "now passes");
  }
  return row;
}

nlohmann::json replay_row_json(const ReplayRow& r) {
  return {r.path,          r.error,          r.declined,     r.invariant,        r.found_against,
          r.target_ok,     r.target_failure, r.checked,      r.mutant_checked,   r.mutant_still_fails,
          r.mutant_detail, r.target_detail,  r.mutant_stale, r.failed_invariant, r.other_spec};
}

ReplayRow replay_row_from_json(const nlohmann::json& j) {
  ReplayRow r;
  j.at(0).get_to(r.path), j.at(1).get_to(r.error), j.at(2).get_to(r.declined), j.at(3).get_to(r.invariant);
  j.at(4).get_to(r.found_against), j.at(5).get_to(r.target_ok), j.at(6).get_to(r.target_failure);
  j.at(7).get_to(r.checked), j.at(8).get_to(r.mutant_checked), j.at(9).get_to(r.mutant_still_fails);
  j.at(10).get_to(r.mutant_detail), j.at(11).get_to(r.target_detail), j.at(12).get_to(r.mutant_stale);
  j.at(13).get_to(r.failed_invariant), j.at(14).get_to(r.other_spec);
  return r;
}

}  // namespace

ReplayVerdict replay_verdict(const ReplayRow& row) {
  if (row.interrupted) return ReplayVerdict::interrupted;
  if (!row.error.empty()) return ReplayVerdict::error;
  if (!row.target_failure.empty()) return ReplayVerdict::crashed;
  if (!row.target_ok || !row.mutant_still_fails) return ReplayVerdict::failed;
  if (row.declined || row.checked == 0) return ReplayVerdict::skipped;
  return ReplayVerdict::passed;
}

ReplayVerdict replay_verdict(const std::vector<ReplayRow>& rows) {
  bool any_passed = false, any_error = false, any_failed = false;
  for (const auto& row : rows)
    if (row.interrupted) return ReplayVerdict::interrupted;
  for (const auto& row : rows) {
    const ReplayVerdict v = replay_verdict(row);
    if (v == ReplayVerdict::crashed) return v;
    any_failed = any_failed || v == ReplayVerdict::failed;
    any_error = any_error || v == ReplayVerdict::error;
    any_passed = any_passed || v == ReplayVerdict::passed;
  }
  return any_failed   ? ReplayVerdict::failed
         : any_error  ? ReplayVerdict::error
         : any_passed ? ReplayVerdict::passed
                      : ReplayVerdict::skipped;
}

// In ReplayVerdict's order: passed, skipped, failed, crashed, error, interrupted.
int exit_code(ReplayVerdict v) {
  static constexpr int codes[] = {0, 0, 1, 3, 2, 130};
  return codes[static_cast<int>(v)];
}

const char* to_string(ReplayVerdict v) {
  static constexpr const char* names[] = {"PASSED", "SKIPPED", "FAILED", "CRASHED", "ERROR", "INTERRUPTED"};
  return names[static_cast<int>(v)];
}

std::vector<ReplayRow> replay_corpus(const Spec& spec, const std::string& path, const RunOptions& given) {
  RunOptions options = given;
  options.crash_guard_stores = false;  // the case is the file: a replay stores nothing
  const RunContext ctx = make_context(spec, options, 0);
  const auto uses = selected_uses(spec, options);
  const std::vector<std::string> files = list_corpus(path);
  const std::string folder = std::filesystem::is_directory(path) ? path : "";
  // --jobs: file n is replayed by whichever worker claims it (kprop/jobs.h).
  const int jobs =
      options.target_transport || options.reference_transport || in_process_cuda() ? 1 : options.jobs;
  WorkerPool pool(jobs, int64_t(files.size()), std::max(4 * jobs, 16), [&]() -> WorkerPool::Work {
    const bool external = ctx.target.index < 0 || ctx.reference.index < 0;
    auto own = std::make_shared<RunContext>(external ? make_context(spec, options, 0) : ctx);
    return [&, own](int64_t n, const std::string&) {
      bool stopped = false;
      return replay_row_json(replay_file(*own, uses, files[size_t(n)], folder, stopped)).dump();
    };
  });
  std::vector<ReplayRow> rows;
  for (size_t n = 0; n < files.size(); ++n) {
    if (interrupted()) break;
    const std::optional<std::string> payload = pool.take(int64_t(n));
    if (interrupted()) break;
    bool stopped = false;
    rows.push_back(payload ? replay_row_from_json(nlohmann::json::parse(*payload))
                           : replay_file(ctx, uses, files[n], folder, stopped));
    if (stopped) {
      rows.pop_back();
      break;
    }
    rows.back().replay_command = replay_command(ctx, rows.back().path, rows.back().invariant);
  }
  // Ctrl-C: the files not replayed are listed as such, never left out (a
  // replay of 3 of 10 files is no pass of the folder).
  for (size_t n = rows.size(); n < files.size(); ++n) {
    ReplayRow row;
    row.path = files[n];
    row.interrupted = true;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kprop
