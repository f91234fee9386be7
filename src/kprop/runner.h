// The property runner: draws cases, checks invariants, shrinks failures,
// stores counterexamples, replays the corpus. Reporters render its reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kprop/corpus.h"
#include "kprop/spec.h"

namespace kprop {

struct RunOptions {
  std::string target;                        // empty: the spec's target
  std::optional<uint64_t> seed;              // overrides run.seed
  std::optional<int64_t> trials;             // overrides run.trials
  std::optional<double> time_budget_s;       // overrides run.time_budget_s
  std::vector<std::string> only_invariants;  // empty: all in the spec
  std::string corpus_dir = "corpus";         // counterexamples go to corpus_dir/<spec>/
  bool write_corpus = true;
  bool stop_on_first_failure = false;  // --mutants: the first kill is enough
  bool progress = false;               // live progress line on stderr
  std::string found_by = "rapidcheck";
  // --shard I/N: check only cases whose index is I mod N. Every shard draws
  // the same case sequence, so without discards the union of the N shards
  // checks exactly the cases of the unsharded run.
  int64_t shard_index = 0, shard_count = 1;
};

struct Counterexample {
  std::string invariant;
  std::string message;
  std::vector<Measured> measured;
  std::string case_yaml;
  CaseStats stats;
  int64_t original_size = 0;
  int shrink_steps = 0;
  double shrink_seconds = 0;
  bool shrink_interrupted = false;  // budget or Ctrl-C: best so far
  std::string corpus_path;          // empty when not stored
  bool corpus_new = false;
};

enum class InvariantStatus { passed, failed, gave_up, not_run, not_applicable };
const char* invariant_status_name(InvariantStatus status);

struct InvariantReport {
  std::string name;
  InvariantStatus status = InvariantStatus::not_run;
  int64_t passed = 0;
  int64_t discarded = 0;
  int64_t trials_to_fail = 0;  // 1-based index of the failing trial
  double seconds_to_fail = 0;  // from the start of the run
  std::string last_discard;    // why, for gave_up
  std::optional<Counterexample> counterexample;
};

enum class RunStatus { passed, failed, gave_up, crashed, skipped, interrupted };
const char* run_status_name(RunStatus status);
int exit_code(RunStatus status);

struct RunReport {
  std::string spec;
  std::string spec_path;
  std::string family;
  std::string target;
  std::string reference;
  uint64_t seed = 0;
  int64_t trials = 0;  // cases drawn
  double seconds = 0;
  bool time_budget_hit = false;
  RunStatus status = RunStatus::passed;
  std::string detail;  // skip reason, crash message
  // Cases the target declined (Unsupported, e.g. a dtype it lacks): they are
  // not checked and count for nothing; a run where every case is declined is
  // skipped.
  int64_t unsupported = 0;
  std::string unsupported_reason;
  std::vector<InvariantReport> invariants;
  std::string replay_command;  // reproduces a failure
};

// A fresh seed from the clock and the OS (seed: 0 in a spec).
uint64_t fresh_seed();

// Resolves the target name (with "did you mean") or throws InputError.
size_t resolve_target(const Spec& spec, const std::string& name);

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

// --replay: each corpus file on the spec's target (every invariant must hold)
// and, when found_against is a registered mutant, on that mutant (the
// recorded invariant must still fail).
struct ReplayRow {
  std::string path;
  std::string invariant;
  std::string found_against;
  bool target_ok = true;
  std::string target_detail;
  bool mutant_checked = false;     // at least one recorded mutant was re-run
  bool mutant_still_fails = true;  // every recorded mutant still fails
  std::string mutant_detail;       // the first that no longer does, and why
};
std::vector<ReplayRow> replay_corpus(const Spec& spec, const std::string& path, const RunOptions& options);

// Shrinks a failing case with the family's shrinker; public so that fuzz
// crashes and corpus files shrink exactly like generated cases.
struct ShrinkResult {
  AnyCase best;
  Verdict verdict;
  int steps = 0;
  bool interrupted = false;
};
ShrinkResult shrink_failure(const Spec& spec, size_t target, size_t invariant_use, AnyCase failing,
                            Verdict verdict, double budget_s);

// Checks one case against one invariant use; exceptions from the target
// propagate (the caller decides: crash report, or failed replay).
Verdict check_case(const Spec& spec, size_t target, const InvariantUse& use, const AnyCase& c);

// Ctrl-C: the first interrupt asks the runner to stop (keeping the best case
// found so far); a second one exits at once.
void install_interrupt_handler();
bool interrupted();

}  // namespace kprop
