// prop_runner --fuzz: continuous coverage-guided fuzzing from specs.
//
// For each spec, its libFuzzer harness (fuzz_<spec>, built by
// `scripts/dev.sh build-san`) runs in fork mode on the spec's target, seeded
// with cases from the spec's own generator encoded as bytes. Every crash
// input is decoded by the family, re-checked, shrunk with the family's
// shrinker and stored in corpus/<spec>/ (found_by: libfuzzer), deduplicated
// by content. The coverage corpus lives in a work folder and is merged at the
// end of each round.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kprop/runner.h"

namespace kprop {

struct FuzzOptions {
  std::string target;   // empty: each spec's target
  double time_s = 60;   // total; 0 = rotate until interrupted
  double slice_s = 60;  // per spec and round when time_s = 0
  int jobs = 1;         // libFuzzer -fork=N
  // The run's seed (printed): each spec's libFuzzer -seed of each round is
  // derived from it. It fixes libFuzzer's mutations, not what a time budget
  // lets them reach (the executions a slice gets vary run to run).
  uint64_t seed = 1;
  std::string work_dir = ".fuzz-work";
  std::string fuzzer_dir;   // where fuzz_<spec> lives
  std::string corpus_root;  // corpus/<spec>/ goes under it
  bool write_corpus = true;
  int seeds = 64;  // generated seed inputs per spec
  // Seconds one input may take (libFuzzer -timeout, and the re-check of a
  // crash input); unset: each spec's run.case_timeout_s.
  std::optional<double> case_timeout_s;
  std::string replay_program = "prop_runner";  // the program each finding's replay starts (RunOptions)
};

struct FuzzFinding {
  std::string spec, invariant, message, summary, corpus_path;  // invariant: the kind for a target failure
  bool is_new = false;
  std::string kind = "invariant";  // or the target failure's: crash, hang, error, ...
  std::string replay;              // the stored case's replay command (empty: not stored)
  std::string store_note;          // why the case is not where it was meant to go (Finding::store_note)
  // "matches_reference broken", "target failure (crash)".
  std::string what() const {
    return kind == "invariant" ? invariant + " broken" : "target failure (" + kind + ")";
  }
};

struct FuzzSpecStats {
  std::string spec;
  double seconds = 0;
  long long executions = 0;
  long long coverage = 0;
  long long crash_inputs = 0;
  // Crash inputs (libFuzzer's crash-* and leak-*: the harness aborted on
  // them) that did not fail again when re-checked on their own: the failure
  // depends on more than the input (state kept between inputs, a race,
  // uninitialised memory, a sanitizer only the harness has). Kept in the
  // work folder's crashes/imported; the run is no clean one (exit 1).
  // Timeouts and OOMs that did not recur are only said.
  std::vector<std::string> unreproduced;
  // Not fuzzed, and why: the target checked none of the seed inputs
  // (declined them all, or cannot run here).
  std::string skipped;
  // Fuzzed, but the target declined most of the seed inputs (the `declined`
  // health check of a property run, unless the spec suppresses it): why.
  std::string health;
};

struct FuzzReport {
  std::vector<FuzzSpecStats> stats;
  std::vector<FuzzFinding> findings;
  bool interrupted = false;
  int new_findings() const;
  bool all_skipped() const;    // no spec was fuzzed: SKIPPED, never a clean run
  bool health_failed() const;  // a spec's `declined` health check failed
};

FuzzReport run_fuzz(const std::vector<Spec>& specs, const FuzzOptions& options);

// Decodes one fuzzer input, re-checks it, shrinks it and stores it; returns
// nothing when the input no longer fails. Used by --fuzz and --import.
// What a fuzzer input shows on the spec: a finding, or none, with how
// many invariants checked it (0: nothing did, `not_checked` says why: the
// target declined it, or every invariant discarded it). Never a pass when
// nothing was checked.
struct FuzzImport {
  std::optional<FuzzFinding> finding;
  int checked = 0;
  std::string not_checked;
};
// `case_timeout_s` (--case-timeout) overrides run.case_timeout_s for the
// target's calls, as in a property run.
// The findings of one run (a --fuzz or an --import) by signature (spec,
// invariant or target failure kind, implementation): what --no-corpus
// dedupes against. Its scratch folder keeps earlier runs' findings too, and
// deduping against those called a bug still there "known" (exit 0).
struct FuzzSeen {
  struct Known {
    int64_t size = 0;
    std::string path, message, summary;
  };
  std::map<std::string, Known> by_signature;
};

// That `path` is a fuzzer input --import can read: a regular file (a folder,
// a FIFO or a missing path is an input error naming it).
void check_fuzz_input(const std::string& path);

// `seed`: the --fuzz run's (kprop fuzz: seed S), which a stored finding
// records; 0 for an input of unknown origin (--import).
FuzzImport import_fuzz_input(const Spec& spec, const Impl& target, const std::string& path,
                             const std::string& corpus_root, bool write_corpus,
                             std::optional<double> case_timeout_s,
                             const std::string& replay_program = "prop_runner", FuzzSeen* seen = nullptr,
                             uint64_t seed = 0);

// Writes `count` seed inputs for the spec (empty if the family has no
// Draw-based builder), drawn from `seed` (seed-000 .. from 1, 2, ... when
// none is given); returns how many were written.
int write_fuzz_seeds(const Spec& spec, const std::string& dir, int count,
                     std::optional<uint64_t> seed = std::nullopt);

}  // namespace kprop
