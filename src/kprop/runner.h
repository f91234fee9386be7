// The property runner: draws cases, checks invariants, shrinks failures,
// stores counterexamples, replays the corpus. Reporters render its reports.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kprop/corpus.h"
#include "kprop/external.h"
#include "kprop/interrupt.h"
#include "kprop/search.h"
#include "kprop/spec.h"
#include "kprop/stats.h"

namespace kprop {

struct RunReport;
struct Finding;
struct CaseEvent;

// What a run tells as it goes, as google-benchmark's reporters are told:
// the progress line of prop_runner is one such listener (report.h). Every
// event has a default that does nothing.
class RunListener {
 public:
  virtual ~RunListener() = default;
  // The report's header (spec, family, target, reference, seed) is filled.
  virtual void run_started(const RunReport& header) { (void)header; }
  // Drawn case `index` (1-based) was handled: checked, declined or
  // discarded; drawn at RapidCheck size `size`. The run ends when every
  // invariant has checked `trials` cases: `done` is how many the one still
  // furthest from that has (a discarded or declined case is drawn but not
  // checked, so `index` can pass `trials`; `done` cannot). In the search
  // phase (kprop/search.h): `done` of its `trials` cases were tried.
  virtual void case_done(int64_t index, int64_t done, int64_t trials, int size, double seconds) {
    (void)index, (void)done, (void)trials, (void)size, (void)seconds;
  }
  // Drawn case `index` is about to be checked (or its results, under
  // --jobs, waited for), `done` as case_done has it: what the progress line
  // shows while a case takes long (a real model's sizes: minutes).
  virtual void case_started(int64_t index, int64_t done, int64_t trials, int size, double seconds) {
    (void)index, (void)done, (void)trials, (void)size, (void)seconds;
  }
  // Drawn case `event.index` was checked (before the runner accounts for the
  // results): what statistics are made of (kprop/stats.h).
  virtual void case_checked(const CaseEvent& event) { (void)event; }
  // A shrink step of the failure of `what` (an invariant, or crash/hang/error).
  virtual void shrinking(const std::string& what, int64_t from_size, int64_t to_size, double seconds) {
    (void)what, (void)from_size, (void)to_size, (void)seconds;
  }
  // A failure, shrunk and stored.
  virtual void failure(const Finding& finding) { (void)finding; }
  // The run ended (every return of run_spec, interrupted ones included).
  virtual void run_finished(const RunReport& report) { (void)report; }
};

// How a run is set up. Every override of the spec's `run:` settings that a
// command line or a caller makes goes through here (never into the Spec),
// except the two that decide whether the spec loads at all: --domain and
// --max-case-mb (load_spec's arguments), since the memory budget and the
// domain's constraints are checked when it loads.
struct RunOptions {
  std::string target;  // empty: the spec's target
  // The oracle of comparative invariants; empty: the spec's reference. An
  // external one (plugin:/exec:) is called with f64 tensors
  // (external::widened_to_f64).
  std::string reference;
  // Kernels the caller opened itself (in-process entry points, a Python
  // function): the run's target / reference instead of resolving the names
  // above, which then only name them in reports. The reference's transport
  // is widened to f64 by the run.
  std::shared_ptr<external::Transport> target_transport, reference_transport;
  std::optional<uint64_t> seed;                // overrides run.seed (0: a fresh seed)
  std::optional<int64_t> trials;               // overrides run.trials
  std::optional<double> time_budget_s;         // overrides run.time_budget_s (0: no limit)
  std::optional<double> case_timeout_s;        // overrides run.case_timeout_s
  std::optional<bool> search;                  // overrides run.search.enabled (--search)
  std::optional<int64_t> search_trials;        // overrides run.search.trials (--search-trials)
  std::optional<double> search_time_budget_s;  // overrides run.search.time_budget_s (--search-time)
  std::vector<std::string> only_invariants;    // empty: all in the spec
  std::string corpus_dir = "corpus";           // counterexamples go to corpus_dir/<spec>/
  bool write_corpus = true;
  // Where a case goes when it is not stored in the corpus (--no-corpus, or
  // the corpus cannot be written): scratch_dir/<spec>/<hash>.yaml, so every
  // failure can be replayed from a file.
  std::string scratch_dir = ".kprop/findings";
  bool stop_on_first_failure = false;  // --mutants: the first kill is enough
  // Draw from where the invariants still checking observe, once they all
  // declare it (kprop/focus.h); false (--no-focus): always the whole domain.
  bool focus = true;
  // --mutants: check every invariant on every mutant (the kill matrix of
  // --stats and --format html) instead of stopping at the first kill.
  bool kill_matrix = false;
  // Run each in-process check in a forked child (--isolate; default for
  // --mutants): a target that corrupts its heap, crashes or hangs takes only
  // the child down, and the runner, which holds the case, reports it.
  bool isolate = false;
  // The in-process crash guard (fatal signals and hangs store the case and
  // exit 3). Off where another guard owns the process (a libFuzzer harness).
  bool crash_guard = true;
  // Whether the guard stores the case it saves from a crash or hang in the
  // corpus (or the scratch folder). Off for a replay: its case is the file
  // replayed, and a replay writes nothing into the corpus.
  bool crash_guard_stores = true;
  RunListener* listener = nullptr;  // events of the run (nullptr: none)
  std::string found_by = "rapidcheck";
  // --shard I/N: check only cases whose index is I mod N. Every shard draws
  // the same case sequence, so without discards the union of the N shards
  // checks exactly the cases of the unsharded run.
  int64_t shard_index = 0, shard_count = 1;
  // --jobs N: processes checking cases (runs) or files (folder replays);
  // the same cases, verdicts and findings whatever N (kprop/jobs.h). 1 with
  // a caller-opened transport, which cannot be opened again per job.
  int jobs = 1;
  // A prop_runner binary that re-runs each invariant finding's replay
  // command in a fresh process before the finding is reported
  // (Finding::replay_check). Empty: not re-run (a Python function or a test
  // binary has no prop_runner of its own; --mutants and --no-replay-check).
  std::string replay_checker;
  // Why replay_checker is empty, for the report's not_run; empty: "no
  // prop_runner to re-run it with".
  std::string no_replay_check_reason;
  // --mutants: re-run only a finding newly stored in the corpus, and move it
  // to the scratch folder unless it fails again. (A planted mutant's
  // finding is a kill either way; a corpus file whose failure does not come
  // back, a read past a buffer, made the corpus's replay fail at random.)
  bool replay_check_corpus_only = false;
  // How to replay a stored case where no prop_runner can (a kernel linked
  // into a GoogleTest binary, kprop/testing.h): printed for each finding,
  // `{path}` standing for the stored file. Empty: the prop_runner command.
  std::string replay_command;
  // The program that command starts: prop_runner as it was invoked
  // (build/prop_runner), so that a printed replay runs when pasted where the
  // run was started; "prop_runner" (found on PATH) by default.
  std::string replay_program = "prop_runner";
  // --mutants: on each case the target passed, compare its outputs with
  // those of the family's correct implementations (kinds reference and
  // optimized, on the target's device), so that a mutant whose outputs equal
  // one of theirs bit for bit on every such case is reported unreached (no
  // case drawn reaches its bug), not survived (RunReport::outputs_*).
  bool compare_outputs = false;
};

// The spec's run settings with the options' overrides applied (one place).
RunConfig effective_run(const Spec& spec, const RunOptions& options);

// One failure, as the user gets it: an invariant broken, or the target
// crashed, hung or reported an error. Every finding has its own case file and
// its own replay command, which reproduces exactly this failure.
struct Finding {
  std::string invariant;           // the invariant broken ("" for a target failure)
  std::string kind = "invariant";  // invariant, crash, hang, error
  // A target failure's kind as the check saw it: threw (an exception),
  // crash (a signal), hang, or an external transport's kind; what its
  // replay must fail with again. "" for an invariant.
  std::string failure_kind;
  std::string message;
  // A target failure's invariant: the one being checked when the target
  // crashed, hung or raised. An invariant may call the target on cases of
  // its own, derived from this one (a relation's, a split's): a call on the
  // stored case alone need not fail, its replay does. "" for an invariant.
  std::string while_checking;
  std::vector<Measured> measured;
  std::string case_yaml;
  CaseStats stats;
  int64_t original_size = 0;
  int shrink_steps = 0;
  double shrink_seconds = 0;
  bool shrink_interrupted = false;  // budget or Ctrl-C: best so far
  std::string corpus_path;          // the case file (corpus or scratch); empty if none could be written
  bool in_corpus = false;           // stored in the corpus (not a scratch or fallback folder)
  bool corpus_new = false;
  std::string store_note;  // why the case is not where it was meant to go
  std::string replay_command;
  // The replay command, re-run in a fresh process (RunOptions::replay_checker):
  // "reproduced" when it fails the same invariant again; "not_reproduced"
  // when it does not, so the failure depends on state outside the stored
  // case (uninitialised memory, a race, state the target keeps between
  // calls) and replaying the file alone does not show it; "error" when the
  // command did not run through (no report, a timeout); "" when not re-run.
  // The detail says what the re-run gave, or why there was none.
  std::string replay_check, replay_check_detail;
  // The shrunk case drawn by its family (kprop/drawing.h): SVG for the HTML
  // report, a text map for the terminal (attention), a note when missing.
  std::string drawing_svg, drawing_text, drawing_note;
};
using Counterexample = Finding;

enum class InvariantStatus { passed, failed, gave_up, not_run, not_applicable };
const char* invariant_status_name(InvariantStatus status);

struct InvariantReport {
  std::string name;
  InvariantStatus status = InvariantStatus::not_run;
  int64_t passed = 0;           // cases checked and held
  int64_t discarded = 0;        // cases the invariant could not observe
  int64_t declined = 0;         // cases the target declined while this invariant was live
  int64_t not_applicable = 0;   // n/a verdicts (the target hides what it reads)
  int64_t trials_to_fail = 0;   // 1-based index of the failing trial in the unsharded sequence
                                // (a search case: this run's drawn cases + its index in the search)
  double seconds_to_fail = 0;   // from the start of the run
  std::string last_discard;     // why, for gave_up and n/a
  double max_error_ratio = -1;  // largest kErrorRatio of a pass (-1: none reported)

  // The largest "error_ratio.<output>" of a pass, per output (kprop/search.h).
  std::map<std::string, double> output_ratios;
  // Every pass's kErrorRatio (random phase and search).
  RatioHistogram ratios;

  std::map<std::string, int64_t> discard_reasons;
  std::optional<Finding> counterexample;

  // Cases it checked: those it held on and the one it failed on.
  int64_t checked() const { return passed + (status == InvariantStatus::failed ? 1 : 0); }
};

// Health checks (as Hypothesis has them): a run that checked too little
// fails with exit 2 instead of passing. Each can be turned off per spec with
// run: {suppress_health_check: [NAME]}.
struct HealthCheckInfo {
  const char* name;
  const char* description;
};
const std::vector<HealthCheckInfo>& health_checks();
// The health checks no spec may suppress (nothing was checked at all).
const std::vector<HealthCheckInfo>& unsuppressible_health_checks();
// The `declined` check's rule: `declined` of `drawn` cases is most of them,
// beyond chance (runner.cpp says how).
bool most_declined(int64_t declined, int64_t drawn);
// Whether the run turns `check` off (run.suppress_health_check), and the
// advice that says how to.
bool suppressed(const RunConfig& run, const char* check);
std::string suppress_advice(const char* check);
struct HealthFailure {
  std::string check;
  std::string message;
};

enum class RunStatus { passed, failed, gave_up, crashed, skipped, interrupted };
const char* run_status_name(RunStatus status);
// 0 passed or skipped, 1 failed, 2 gave up (a health check failed), 3 crashed, 130 interrupted.
int exit_code(RunStatus status);

struct RunReport {
  // A replay of stored cases (kprop::testing under KPROP_REPLAY), not a
  // run: no case was drawn, and `detail` says what the replay found.
  bool replay = false;
  std::string spec;
  std::string spec_path;
  std::string profile;  // the spec's profile in effect ("" = none)
  std::string domain;   // --domain's overrides as given ("" = none)
  std::string family;
  std::string target;
  std::string reference;
  uint64_t seed = 0;
  std::string shard;          // "I/N" under --shard, else ""
  int64_t trials = 0;         // cases drawn (this shard)
  int64_t trials_wanted = 0;  // cases each invariant had to pass (this shard)
  int64_t checked = 0;        // cases on which at least one invariant gave a verdict
  // Cases every invariant still checking discarded (or found n/a): neither
  // checked nor declined. drawn (+ the search's) = checked + declined (+
  // the search's) + discarded, less a case a crash, Ctrl-C or the loss of
  // the reference (it cannot run here) ended.
  int64_t discarded = 0;
  // Cases drawn from a focus, not the spec's whole domain, by its narrowed
  // fields ("{dtypes: [f16, bf16]}"): where the invariants still checking
  // all observe (kprop/focus.h).
  std::map<std::string, int64_t> focused;
  double seconds = 0;
  bool time_budget_hit = false;
  // RunOptions::stop_on_first_failure (--fail-fast, and each mutant's run of
  // --mutants): the first counterexample ended the run while invariants were
  // still unfinished (not_run) or a search was to follow; `detail` says what.
  bool stopped_at_failure = false;
  int64_t max_size = 0;       // the spec's run.max_size
  int64_t size_reached = -1;  // the largest size drawn (-1: none)
  int64_t largest_case = 0;   // the largest case drawn, by the family's size measure
  RunStatus status = RunStatus::passed;
  std::string detail;  // skip reason, crash message, interrupt note
  // Cases the target declined (Unsupported, e.g. a dtype it lacks): never
  // checked, counted with their reasons.
  int64_t declined = 0;
  std::map<std::string, int64_t> decline_reasons;
  std::vector<InvariantReport> invariants;
  std::optional<Finding> crash;  // the target crashed, hung or reported an error
  std::vector<HealthFailure> health;
  // "op.output" of each output of the kernel no invariant of the run reads
  // (kprop/output_reads.h): reported, not a failure.
  std::vector<std::string> unchecked_outputs;
  // RunOptions::compare_outputs (a mutant's run): cases whose outputs were
  // compared with the correct implementations', of them those where they
  // differed from every one, and cases drawn but not compared
  // (CheckResult::outputs_differ -1: declined, discarded before the target
  // ran, ...). A failure's case is in none.
  int64_t outputs_compared = 0, outputs_differed = 0, outputs_uncompared = 0;
  RunStats stats;       // what was drawn, the time split, error/bound ratios
  SearchReport search;  // the targeted search (run.search / --search); search.ran false when off
  // Every finding, in the order found (pointers into invariants/crash).
  std::vector<const Finding*> findings() const;
};

// Collects a run's statistics (kprop/stats.h) from its events and passes
// every event on to `next` (src/stats.cpp).
class StatsCollector final : public RunListener {
 public:
  explicit StatsCollector(RunListener& next) : next_(next) {}
  void run_started(const RunReport& header) override { next_.run_started(header); }
  void case_done(int64_t index, int64_t done, int64_t trials, int size, double seconds) override {
    next_.case_done(index, done, trials, size, seconds);
  }
  void case_started(int64_t index, int64_t done, int64_t trials, int size, double seconds) override {
    next_.case_started(index, done, trials, size, seconds);
  }
  void case_checked(const CaseEvent& event) override;
  void shrinking(const std::string& what, int64_t from, int64_t to, double seconds) override {
    next_.shrinking(what, from, to, seconds);
  }
  void failure(const Finding& finding) override;
  void run_finished(const RunReport& report) override { next_.run_finished(report); }
  // The statistics, with the time not accounted for as `other`.
  RunStats result(const RunReport& report) const;

 private:
  RunListener& next_;
  RunStats stats_;
};

// A fresh seed from the clock and the OS, in [1, 2^53) (seed: 0 in a spec).
uint64_t fresh_seed();
// Whether the run draws a fresh seed: --seed, else run.seed, is 0 (the one
// place that rule lives).
bool fresh_seed_wanted(const Spec& spec, const RunOptions& options);
// The run's seed: --seed, else run.seed; a fresh one where that is 0.
uint64_t resolve_seed(const Spec& spec, const RunOptions& options);

// Resolves the target name (with "did you mean") or throws InputError; an
// external target (plugin:/exec:) is opened with the given call timeout
// (default: the spec's run.case_timeout_s), widened to f64 when it is to be
// the reference. Resolve once per run.
Impl resolve_target(const Spec& spec, const std::string& name, std::optional<double> case_timeout_s = {},
                    bool as_reference = false);
// The run's reference: RunOptions::reference, else the spec's.
std::string reference_name(const Spec& spec, const RunOptions& options);
// The in-process target and reference names and --invariant names of a run
// exist (throws the run's own error otherwise): checked before the run
// prints its header, so a misspelt name is the one line of output.
void check_run_names(const Spec& spec, const RunOptions& options);

RunReport run_spec(const Spec& spec, const RunOptions& options);

// --mutants: runs every mutant of the spec's family.
struct MutantRow {
  std::string mutant;
  std::string description;
  RunReport report;
  bool killed = false;
  std::string killed_by;
};
std::vector<MutantRow> run_mutants(const Spec& spec, const RunOptions& options);
// No mutant could run here (each run skipped: no CUDA device for the
// reference, say): the mutants run is SKIPPED, not failed, and not passed.
bool mutants_skipped(const std::vector<MutantRow>& rows);
// A mutant's verdict: "killed", "survived" (its run checked what the spec
// asks and no invariant failed: the spec is too weak for it), "unreached"
// (survived, but on every case drawn, and every case its invariants derived
// from those, its outputs equal a correct implementation's bit for bit: the
// domain never reaches its bug), "gave up" (not
// killed, and its run's health checks say too little was checked to call
// it: a --time far below a case, say), "interrupted" or "skipped".
const char* mutant_verdict(const MutantRow& row);
// What --mutants exits with: 0 every mutant killed (or all skipped), 1 one
// survived (or was skipped while others ran), 2 none of those but one gave
// up, 130 interrupted (Ctrl-C at any point: the rest are listed, verdict
// "interrupted", not run).
int mutants_exit_code(const std::vector<MutantRow>& rows);
// The verdict word of that code: PASSED, FAILED, HEALTH CHECK FAILED,
// INTERRUPTED, or SKIPPED when none of the mutants could run here.
const char* mutants_verdict_name(const std::vector<MutantRow>& rows);

// --replay: each corpus file on the spec's target (every invariant must hold)
// and, when found_against is a registered mutant, on that mutant (the
// recorded invariant must still fail).
struct ReplayRow {
  std::string path;
  std::string error;      // the file could not be read or decoded (reported; the folder goes on)
  bool declined = false;  // the target declined the case: not checked
  std::string invariant;
  std::string found_against;
  bool target_ok = true;
  std::string target_failure;  // the target crashed, hung or threw: its kind (check_one's failure_kind)
  std::string target_detail;
  // The invariant the target failed, or was being checked for when it
  // crashed or hung, on the replay ("" when it did not fail): not always
  // the file's own (`invariant`), since every invariant of the run checks it.
  std::string failed_invariant;
  // Invariants that checked the case on the target and held. A discard or an
  // n/a is no check: a file no invariant checked is not counted as passed.
  int checked = 0;
  bool mutant_checked = false;     // at least one recorded mutant was re-run
  bool mutant_still_fails = true;  // every recorded mutant still fails
  std::string mutant_detail;       // the first that no longer does, and why
  // The file itself is stale (no mutant was re-run): its found_against names
  // no implementation, or its invariant is gone from the spec and family.
  bool mutant_stale = false;
  std::string replay_command;  // the file's replay, as a finding's (replay_command)
  bool interrupted = false;    // not replayed: Ctrl-C came first
  // Not replayed (skipped): the case of this other spec, in that spec's
  // folder below the folder --replay named (a corpus root): its to replay.
  std::string other_spec;
};
std::vector<ReplayRow> replay_corpus(const Spec& spec, const std::string& path, const RunOptions& options);

// A replayed file's verdict, and the replay's: interrupted when any file was
// not replayed (Ctrl-C), else the worst of its files' (crashed, then failed,
// then error), else passed when any file passed, else skipped (no files, or
// none checked: every one declined or unobserved).
enum class ReplayVerdict { passed, skipped, failed, crashed, error, interrupted };
ReplayVerdict replay_verdict(const ReplayRow& row);
ReplayVerdict replay_verdict(const std::vector<ReplayRow>& rows);
// Its exit code, as a run's: passed and skipped 0, failed 1, error 2, crashed 3, interrupted 130.
int exit_code(ReplayVerdict v);
const char* to_string(ReplayVerdict v);  // PASSED, SKIPPED, FAILED, CRASHED, ERROR, INTERRUPTED

// A run's resolved parts: the spec, its target and reference resolved once.
struct RunContext {
  const Spec& spec;
  const RunOptions& options;
  Impl target, reference;
  std::string target_name;
  uint64_t seed = 0;
  RunConfig run;  // effective settings
  std::string reference_name;
  // RunOptions::compare_outputs: the family's correct implementations on
  // the target's device and the tensors compared (make_context; null
  // otherwise).
  std::shared_ptr<const OutputComparison> compare;
};
RunContext make_context(const Spec& spec, const RunOptions& options, uint64_t seed);

// The one exception policy: what checking one case against one invariant
// gave. Used by runs, replays, fuzz imports and the fuzz harness alike.
struct CheckResult {
  enum class Kind { verdict, declined, target_failure };
  Kind kind = Kind::verdict;
  Verdict verdict;           // kind == verdict
  std::string reason;        // declined: the target's reason; target_failure: the message
  std::string failure_kind;  // target_failure: crash (a signal, or an external target died), hang,
                             // error (external) or threw (an exception in process)
  bool unavailable = false;  // declined because the target cannot run anything here
  // ... or because the reference cannot (unavailable too): the run ends, as
  // there, but the target declined nothing (not counted as its decline).
  bool reference_unavailable = false;
  // Seconds this check took, and of them inside the target and the
  // reference (a trial runs them once: the first check that needs them pays).
  double seconds = 0, target_seconds = 0, reference_seconds = 0;
  // Runs of the target this check made (0: it judged without the target, as
  // a metamorphic invariant discarding a case it cannot transform).
  int64_t target_runs = 0;
  // RunOptions::compare_outputs, on every result of a case whose results
  // are all verdicts and none a failure (AnyTrial::outputs_differ): 1 when
  // on the case or a case an invariant derived from it the target's outputs
  // differed from those of every correct implementation that ran it, 0 when
  // they equalled one's bit for bit on each, -1 when not compared (the
  // target did not run on the case, the family's outputs are not all
  // published as tensors, no correct implementation ran it).
  int outputs_differ = -1;
  bool failed() const { return kind == Kind::verdict && verdict.outcome == Outcome::fail; }
};
CheckResult check_one(const RunContext& ctx, AnyTrial& trial, const InvariantUse& use, const AnyCase& c);
CheckResult check_one(const RunContext& ctx, const InvariantUse& use, const AnyCase& c);

// One drawn case, checked: CaseEvent for RunListener::case_checked.
struct CaseEvent {
  int64_t index = 0;  // 1-based
  int size = 0;       // RapidCheck size
  const CaseStats& stats;
  double generation_seconds = 0;
  const std::vector<const InvariantUse*>& uses;  // the invariants still alive, in results' order
  const std::vector<CheckResult>& results;       // may be shorter: stops at a decline or target failure
};
// Every use on one case, sharing one trial (target and reference run once);
// stops at the first that is not a verdict (declined, target failure). With
// options.isolate (in-process targets), all of it runs in one forked child.
// With `compare_outputs` (and ctx.compare), the results carry
// CheckResult::outputs_differ.
std::vector<CheckResult> check_uses(const RunContext& ctx, const std::vector<const InvariantUse*>& uses,
                                    const AnyCase& c, bool compare_outputs = false);
// RunOptions::compare_outputs: a case's CheckResult::outputs_differ counted
// into RunReport::outputs_* (every case but one a failure ended: a declined
// case, or one the target did not run on, is not compared).
void count_compared_outputs(RunReport& report, const std::vector<CheckResult>& results);

// Shrinks a failure (an invariant verdict or a target failure) to the
// smallest case that shows the same failure, stores the case (corpus, or the
// scratch folder; a fallback folder when that cannot be written) and builds
// its replay command. Never throws: a finding always reaches the user.
using ShrinkProgress = std::function<void(int64_t from_size, int64_t to_size, double seconds)>;
Finding record_finding(const RunContext& ctx, const InvariantUse* use, const AnyCase& failing,
                       const CheckResult& first, const ShrinkProgress& progress = {});

// The replay of a stored finding as an argument list, argv[0] "prop_runner"
// (the printed replay command is these words, shell-quoted), and its re-run
// in a fresh process with options.replay_checker (fills f.replay_check).
std::vector<std::string> replay_argv(const RunContext& ctx, const std::string& path,
                                     const std::string& invariant);
void check_replay(const RunContext& ctx, Finding& f);
// The printed replay of a stored case (those words shell-quoted, or
// options.replay_command, or a Python function's kprop.replay call).
std::string replay_command(const RunContext& ctx, const std::string& path, const std::string& invariant);

// Stores an entry in dir (falling back to the scratch folder, then the temp
// folder); returns the path ("" if nothing could be written) and a note
// saying where it went instead of dir. Never throws.
struct Stored {
  std::string path;
  bool created = false;
  std::string note;
  std::string replaced;  // a same-named file that did not read, replaced: where the old one was kept
};
Stored store_entry(const std::string& dir, const CorpusEntry& entry, const std::string& fallback_dir);

// What a shrink gave: the smallest case that still showed the failure.
struct ShrinkResult {
  AnyCase best;
  Verdict verdict;
  int steps = 0;
  bool interrupted = false;
};

// Checks one case against one invariant use; exceptions from the target
// propagate (for callers that want them, e.g. tests).
Verdict check_case(const Spec& spec, const Impl& target, const InvariantUse& use, const AnyCase& c);

// The shell-quoted word, for printed commands.
std::string shell_quote(const std::string& s);

}  // namespace kprop
