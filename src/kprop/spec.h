// The spec model and its loader. Every key of a spec is declared in
// spec_schema() (top level and `run:`) or by the family (`domain:`) and the
// invariants (their parameters); docs/SPEC.md and `prop_runner --list`
// describe the same declarations.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kprop/errors.h"
#include "kprop/expr.h"
#include "kprop/family.h"
#include "kprop/values.h"

namespace kprop {

struct RunConfig {
  int64_t trials = 100;         // cases per run
  int64_t max_size = 100;       // RapidCheck size reached by the last trial
  uint64_t seed = 0;            // 0: a fresh seed, printed
  double time_budget_s = 60;    // stop drawing cases after this long
  double shrink_budget_s = 20;  // per counterexample
  // Candidate cases one counterexample's shrink may check (0: no limit).
  // Unlike the seconds above, a shrink it stops ends at the same case on
  // any machine: what a profile of costly cases should bound its shrink by.
  int64_t shrink_budget_checks = 0;
  int64_t max_discard_ratio = 10;                  // give up when discards > ratio × trials
  double case_timeout_s = 30;                      // a target call longer than this is a hang (exit 3)
  std::vector<std::string> suppress_health_check;  // health checks that do not fail the run
  int64_t max_case_mb = 1024;  // a case's peak memory (Family::case_bytes) may be at most this
  // run.search (kprop/search.h): the targeted search after the random phase.
  bool search = false;               // search.enabled (prop_runner --search)
  int64_t search_trials = 200;       // search.trials: cases the search may run
  double search_time_budget_s = 60;  // search.time_budget_s (0: no limit)
  // A plugin target's tensors of two or more dimensions arrive with their
  // rows padded (kprop_tensor strides), so a kernel that ignores strides fails.
  bool padded_tensors = false;
};

// ---- expression invariants: `{name: N, expect: EXPR, when: EXPR}` in a
// spec's invariants (kprop/expr.h, docs/SPEC.md "Invariants as expressions").
struct ExpressionInvariant {
  expr::Expression expect;               // boolean; holds when every element is true
  std::optional<expr::Expression> when;  // boolean; the case is discarded unless all true
  std::string description;
  Mark mark;                       // where the spec states it
  std::vector<std::string> names;  // tensors both read, sorted
  // A metamorphic relation: `transform: {NAME: {params}}` derives a second
  // case whose tensors the expressions read as "transformed.*".
  struct Transform {
    size_t index = 0;  // into family->transforms()
    std::string name;
    Values params;
    // The name and every parameter's value: relations with one key derive
    // the same case, which a trial builds and runs once for all of them.
    std::string key;
  };
  std::optional<Transform> transform;
};

// ---- invariants given as code by the caller (kprop.check's
// @kprop.invariant functions, docs/PYTHON.md): a function of the trial's
// named tensors, which are computed (and the target and reference run) only
// as far as `names` needs.
struct CallbackInvariant {
  std::vector<std::string> names;  // the tensors it reads
  std::string description;
  std::function<Verdict(const expr::TensorMap&)> check;
};

struct InvariantUse {
  size_t index = 0;  // into family->invariants() (unused for an expression or callback)
  std::string name;
  Values params;
  // Set for an invariant written in the spec: evaluated on the family's
  // named tensors instead of a registered C++ invariant.
  std::shared_ptr<const ExpressionInvariant> expression;
  // Set for an invariant given as code by the caller.
  std::shared_ptr<const CallbackInvariant> callback;
  // Why nothing can be observed: a listed invariant whose needs the domain
  // that --domain narrowed no longer meets (the spec's own domain met them).
  // Checked as not applicable, with this reason, on every case.
  std::string unobservable;
};

// Checks one invariant of a trial: the family's C++ invariant, or the
// spec's expression on the trial's named tensors. What every caller of
// AnyTrial::check for an InvariantUse goes through.
Verdict check_invariant(AnyTrial& trial, const InvariantUse& use);

struct Spec {
  std::string path;
  std::string name;
  const Family* family = nullptr;
  // A family declared by the spec itself (DeclaredFamily): owns *family.
  std::shared_ptr<const Family> declared_family;
  std::string target;
  std::string reference;
  RunConfig run;
  Values domain;
  std::vector<InvariantUse> invariants;
  // `profiles:` (docs/SPEC.md "Profiles"): the names the spec declares, the
  // one in effect ("" = the base spec) and each one's run.max_case_mb (a
  // corpus case found under a profile replays within that budget).
  std::string profile;
  // prop_runner --domain: domain keys overridden for this run (a YAML map,
  // applied after the profile's), "" when none.
  std::string domain_overrides;
  // prop_runner --max-case-mb where it replaced this spec's run.max_case_mb
  // (0: none): a printed replay passes it on, as it does --domain.
  int64_t max_case_mb_override = 0;
  // run.padded_tensors was set for this run (prop_runner --padded-tensors),
  // not by the spec or its profile: a printed replay passes the flag on.
  bool padded_tensors_override = false;
  // A profile that --domain does not fit (its memory budget, a domain the
  // family refuses) runs as written when it is not the selected one (a
  // mutant's under --mutants): why, for the report; "" when it fits.
  std::string domain_dropped;
  std::vector<std::string> profiles;
  std::map<std::string, int64_t> profile_case_mb;
  // Mutants whose bug only the sizes or values of a profile reach (a
  // profile's `mutants: [NAME, ...]`, e.g. a 16-bit index that wraps past
  // 65535): --mutants and the spec suite run each under its profile.
  std::map<std::string, std::shared_ptr<const Spec>> mutant_profiles;
};

// ---- families declared in the spec (`family: op` + an `op:` section): the
// loader builds a Family per spec from the section and the Spec owns it
// (Spec::declared_family; Spec::family points at it). Errors in the section
// are InputErrors naming file:line:col; `mark(node, offset)` gives the
// position of a node, or of byte `offset` inside a scalar (an expression).
struct DeclaredFamilyContext {
  std::string spec_name;
  std::function<Mark(const YAML::Node&, size_t offset)> mark;
  // The selected profile's domain: (undefined when none; its nodes are the
  // spec's, marked by `mark`), then prop_runner --domain (a map; undefined
  // when none): keys of the section replaced for this run, as the family
  // defines them, and where the option's nodes stand in its text.
  YAML::Node profile_domain;
  YAML::Node domain;
  std::function<Mark(const YAML::Node&, size_t offset)> domain_mark;
  // The spec's `let:` names (expr::TensorInfo::definition), which the
  // section's expressions may use too; checked by the loader once the
  // family is built.
  expr::TensorInfos lets;
  YAML::Node let_section;  // where they stand (their keys and expressions), for errors
};
// One key of a declared section, for `prop_runner --list` and the docs.
struct DeclaredKey {
  std::string key;   // e.g. "dims"
  std::string form;  // what it takes, e.g. "{DIM: [lo, hi] | {range: [lo, hi], multiple_of: M}}"
  std::string doc;
};
struct DeclaredFamily {
  std::string family;  // the `family:` value, e.g. "op"
  std::string key;     // its top-level section, e.g. "op"
  std::string description;
  std::function<std::shared_ptr<const Family>(const YAML::Node& section, const DeclaredFamilyContext&)> build;
  std::vector<DeclaredKey> keys;  // the section's keys
  // A small section (YAML) that --list builds to show the invariants,
  // tensors and transforms every declaration gets.
  std::string example;
};
// Registered at static-initialisation time by the declaring family's code.
bool register_declared_family(DeclaredFamily declared);
const std::vector<DeclaredFamily>& declared_families();

// Shipped specs that were renamed, old stem -> new stem (flash_fwd ->
// attention_fwd: a spec file is named after its family, '.' -> '_').
const std::vector<std::pair<std::string, std::string>>& renamed_specs();
// The file a spec path names under its new name, where the path is a
// missing old name (specs/flash_fwd.yaml -> specs/attention_fwd.yaml) and
// that file exists; "" otherwise.
std::string renamed_spec_file(const std::string& path);

// Loads and validates a spec and every profile it declares; throws
// InputError naming file:line:col. `profile` (prop_runner --profile)
// selects one: its domain:/run: keys replace the base spec's. A missing
// file whose name is an old name of renamed_specs() loads the new file
// beside it, with a one-line note on stderr.
// domain_overrides: a YAML map of domain keys that replace the spec's (and
// the profile's) for this run, e.g. "{dtypes: [f32]}"; errors in it name
// "--domain". max_case_mb (prop_runner --max-case-mb; 0: the spec's)
// replaces run.max_case_mb of the spec and every profile: the memory one
// case may take on this machine.
Spec load_spec(const std::string& path, const std::string& profile = "",
               const std::string& domain_overrides = "", int64_t max_case_mb = 0);
// Same, from text (tests, the spec-loader fuzzer); `path` names it in errors.
Spec parse_spec(const std::string& text, const std::string& path, const std::string& profile = "",
                const std::string& domain_overrides = "", int64_t max_case_mb = 0);

// The memory of the domain's largest case: the family's estimate
// (Family::max_case_bytes) plus what the spec's expression invariants hold
// while one is evaluated, where the family gives its tensors' extents
// (CaseSize::extents). What run.max_case_mb, --list and --jobs read.
CaseSize largest_case(const Spec& spec);

// "" when the case fits the spec's memory budget (run.max_case_mb), else a
// one-line message "case needs ~N MB, over run.max_case_mb = M of SPEC; ..."
// (corpus replay reports it as bad input, exit 2).
// `found_in_profile`: the profile a corpus case records (its budget applies).
std::string check_case_budget(const Spec& spec, const AnyCase& c, const std::string& found_in_profile = "");

// Documentation of the top-level and `run:` keys.
const Schema& run_schema();
std::string describe_spec_keys();

}  // namespace kprop
