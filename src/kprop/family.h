// The family interface: what a kernel family provides and how it registers.
//
// A family author writes a traits struct and registers it once:
//
//   struct MyTraits {
//     // kprop/family_traits.h: Case, Result, name, description and the
//     // functions below, for the family to define
//     KPROP_FAMILY_TRAITS(my::Case, my::Result, "my", "one line");
//   };
//
// KPROP_FAMILY_TRAITS declares:
//     using Case = my::Case;                       // plain data
//     using Result = my::Result;                   // what an implementation returns
//     static Schema domain_schema();               // keys of the spec's `domain:`
//     static Case build(Draw&, const Values& domain);  // kprop/draw.h: the one builder for
//                                                  // RapidCheck, fuzz bytes and seed corpora
//     // One step, boldest first (lazy). Candidates outside `domain` are
//     // dropped by FamilyDef (in_domain); the family uses `domain` to move
//     // coupled dims together (e.g. Nq with Nk when the domain ties them).
//     static rc::Seq<Case> shrinks(const Case&, const Values& domain);
//     // "" when the generator could have drawn this case from `domain` (its
//     // ranges, choice lists and coupled constraints), else why not.
//     static std::string in_domain(const Case&, const Values& domain);
//     // Peak memory of one trial (inputs, outputs, reference, intermediates),
//     // and the largest that `domain` allows (kprop::CaseSize).
//     static double case_bytes(const Case&);
//     static CaseSize max_case_bytes(const Values& domain);
//     static YAML::Node to_yaml(const Case&);
//     static Case from_yaml(const YAML::Node&);    // throws CaseFormatError
//     static CaseStats stats(const Case&);
// Optional, declared by the family itself:
//     // constraints across domain keys the schema cannot state, "" when
//     // fine (checked when a spec loads)
//     static std::string check_domain(const Values& domain);
//     static uint64_t content_hash(const Case&);   // see FamilyDef::content_hash
// and named tensors and transforms (KPROP_FAMILY_EXPRESSIONS(); HasTensors,
// HasTransforms below).
//
//   KPROP_REGISTER_FAMILY(MyTraits, [](FamilyDef<MyTraits>& f) {
//     f.reference("double, obvious", my::reference);  // or implementation({name, kind, ...}, fn)
//     f.mutant("off_by_one", "loop stops one early", my::off_by_one);
//     f.invariant({"matches_reference", "...", {field::atol(1e-9)}},
//                 [](Trial<MyTraits>& t, const Values& p) { ... return Verdict::pass(); });
//   });
//
// Nothing in src/ needs to change to add a family.
#pragma once

#include <rapidcheck.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kprop/draw.h"
#include "kprop/errors.h"
#include "kprop/expr.h"
#include "kprop/external.h"
#include "kprop/family_traits.h"
#include "kprop/once.h"
#include "kprop/rng.h"
#include "kprop/target_call.h"
#include "kprop/values.h"

namespace kprop {

namespace detail {
// Bitwise equal (-0 and 0 differ: an order-dependent sum gives either), but
// any NaN equals any NaN: IEEE 754 leaves the sign and payload of a NaN
// result unspecified, and NumPy's SIMD sum of a NaN gives +nan or -nan with
// the input buffer's alignment (a correct kernel failed on one run in four).
// `deterministic` compares a target's two runs so, and --mutants a mutant's
// outputs with the correct implementations' (FamilyDef::differs).
inline bool same_run_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(double)) == 0;
}
}  // namespace detail

// ---------------------------------------------------------------- verdicts
// not_applicable: the invariant cannot observe this target (e.g. the
// workspace of a kernel built elsewhere); reported as n/a, never as passed.
enum class Outcome { pass, fail, discard, not_applicable };

struct Measured {
  std::string name;
  double value;
};

// The measured name of a held tolerance check's margin: its largest
// |target - reference| over what the policy allowed (1 = at the bound). The
// runner reports the largest seen per invariant.
inline constexpr const char* kErrorRatio = "error_ratio";

struct Verdict {
  Outcome outcome = Outcome::pass;
  std::string message;             // why it failed or was discarded
  std::vector<Measured> measured;  // the numbers behind a failure

  static Verdict pass() { return {}; }
  // A pass with its numbers: a tolerance check reports
  // {kErrorRatio, error / allowed} so a run can say how close it came.
  static Verdict pass(std::vector<Measured> measured) { return {Outcome::pass, {}, std::move(measured)}; }
  static Verdict discard(std::string why) { return {Outcome::discard, std::move(why), {}}; }
  static Verdict not_applicable(std::string why) { return {Outcome::not_applicable, std::move(why), {}}; }
  static Verdict fail(std::string why, std::vector<Measured> measured = {}) {
    return {Outcome::fail, std::move(why), std::move(measured)};
  }
};

// Both checks: the first failure (or discard) as it is, else a pass with the
// larger kErrorRatio of the two.
Verdict both(Verdict a, Verdict b);

// ---------------------------------------------------------------- metadata
enum class ImplKind { reference, optimized, mutant, external };
const char* impl_kind_name(ImplKind kind);

struct ImplInfo {
  std::string name;
  ImplKind kind = ImplKind::optimized;
  std::string description;
  std::string device = "cpu";  // "cpu" or "cuda"
  // false: repeated runs may differ in rounding by design (atomics); the
  // `deterministic` invariant then reports n/a instead of failing.
  bool deterministic = true;
  // A mutant whose bug reads or writes outside its buffers: under
  // AddressSanitizer its cases are checked in forked children whatever
  // --isolate says, so the sanitizer's report kills a child and the run
  // reports the crash (a fork of an ASan process is too dear to isolate
  // every target by default there).
  bool out_of_bounds = false;
  // A registered implementation that runs in a program of its own (a
  // declared op's op.mutants: exec:/plugin:): its crashes and hangs are its
  // transport's to catch, so --isolate does not fork for it (the fork would
  // start the program afresh for every case).
  bool own_process = false;
};

// An implementation as a run uses it: one the family registered (by index),
// or a kernel built elsewhere behind a transport (plugin, worker, in-process
// entry points, a Python function), which lives with the run that opened it:
// the family itself never changes at run time.
struct Impl {
  int index = -1;                                 // a registered implementation; -1: external
  std::shared_ptr<external::Transport> external;  // set when index < 0
  ImplInfo info;
};

struct InvariantInfo {
  std::string name;
  std::string description;
  Schema params;  // typed parameters, set per use in the spec
  // What the invariant needs of the domain to observe any case: "" when the
  // domain (with these params) can produce cases it observes, else the end
  // of "invariant NAME needs ...", e.g. "f64 cases but domain.dtypes is
  // [f32]; add f64 or drop the invariant". Checked when a spec loads.
  std::function<std::string(const Values& domain, const Values& params)> needs;
  // Where the invariant can observe anything, as choices fields of the
  // domain and the values it observes of each: it discards (or finds not
  // applicable) every case whose choice of such a field is another, whatever
  // the target (FamilyContract.InvariantsObserveNothingOutsideTheirFocus
  // checks this on every registered family). E.g. {"dtypes", {"f16",
  // "bf16"}} for a check of the half types' rounding. A run whose invariants
  // still checking all declare one draws its cases from there
  // (kprop/focus.h) instead of building cases only to discard them. The
  // family's builder must pick such a field's value uniformly from the
  // domain's list (Draw::pick) and draw nothing else from it, so that drawing
  // from the narrowed list gives the cases of the whole domain that lie
  // there, in the same proportions. Empty: none declared.
  std::map<std::string, Choices> observes;
  InvariantInfo& observing(const std::string& field, Choices values) {
    observes[field] = std::move(values);
    return *this;
  }
  // The outputs of the kernel under test whose value the verdict depends on
  // (names of the family's external ops' outputs, external::PluginOp::
  // outputs; "*" = all of them; empty = none, e.g. a workspace measure).
  // Unset: not declared. What output coverage counts statically (prop_runner
  // --list, "unchecked outputs" at the end of a run); --output-coverage
  // checks it against what corrupting each output really trips.
  std::optional<std::vector<std::string>> reads;
  InvariantInfo& reading(std::vector<std::string> outputs) {
    reads = std::move(outputs);
    return *this;
  }
  // Cases the invariant discards (or finds not applicable), whatever their
  // bulk values and whatever the target, on what a case's header holds:
  // everything a family's builder draws before it fills the bulk values (its
  // shape, dtype, scale, value kind and seed; Family::build_hollow). True:
  // discarded, and the invariant's check must reach that verdict reading
  // only the header (it calls the same test first). A run whose invariants
  // still checking all discard a header leaves its values out
  // (kprop/focus.h): the same cases, verdicts and report, without the bulk
  // of what they cost to draw. Unset: none declared.
  // FamilyContract.HeaderDiscardsAreTheInvariantsOwn checks every declared
  // one against the invariant's verdicts on full cases.
  std::function<bool(const std::shared_ptr<const void>& header)> discards_header;
  template <typename Case>
  InvariantInfo& discarding_header(bool (*discards)(const Case&)) {
    discards_header = [discards](const std::shared_ptr<const void>& c) {
      return discards(*static_cast<const Case*>(c.get()));
    };
    return *this;
  }
};

// "" when `key` (a choices field of the domain) lists `choice`, else the
// message for InvariantInfo::needs ("<what> but domain.<key> is [...]; add
// <choice> or drop the invariant").
std::string needs_choice(const Values& domain, const std::string& key, const std::string& choice,
                         const std::string& what);

// Helpers for Traits::in_domain: "" when inside, else "key = v is outside
// [lo, hi]" / "key does not list 'v'".
std::string outside_int_range(const Values& domain, const std::string& key, int64_t v);
std::string outside_real_range(const Values& domain, const std::string& key, double v);
std::string outside_choices(const Values& domain, const std::string& key, const std::string& v);
// The first non-empty message, or "".
std::string first_problem(std::initializer_list<std::string> problems);

// True while a shrink (the runner's) is past its time budget or was
// interrupted: candidates outside the domain, which the shrinker skips
// unseen, are let through then so that it stops at once (a family's edits
// all outside a pinned domain kept it 40 s past a 2 s budget, each built
// and dropped in turn). False outside a shrink.
bool shrink_should_stop();

// A hash of a case's YAML tree (FNV-1a over its scalars and its shape; a
// packed list as the sequence it stands for): FamilyDef::content_hash.
uint64_t tree_hash(const YAML::Node& tree);

// The memory of a case (Traits::max_case_bytes): bytes, the dims that give
// them ("B 2 x Hq 9 x Nq 40 x Nk 40 x D 24") and the domain keys that drive
// them ("nq, nk or dim"), for the spec loader's message.
struct CaseSize {
  double bytes = 0;
  std::string dims;
  std::string keys;
  // The named tensors' symbolic dims at that case ("Nq" -> 1024), where the
  // family gives them: the spec's expression invariants are estimated from
  // them (kprop::largest_case). Empty: not counted.
  std::map<std::string, double> extents;
};

struct CaseStats {
  int64_t size = 0;     // the shrinker's measure (e.g. tree nodes): smaller is simpler
  std::string summary;  // one line, e.g. "2-node tree (2 roots), vocab 3, prompt 1"
  // The dims a run's statistics histogram (kprop/stats.h), declared by the
  // family's stats() one line each: .dim("nodes", n).kind("mask", "causal").
  struct Dim {
    std::string name;
    double value = 0;
    std::string kind;  // categorical dims: the value's name ("" for numeric)
  };
  std::vector<Dim> dims;
  CaseStats& dim(std::string name, double value) {
    dims.push_back({std::move(name), value, {}});
    return *this;
  }
  CaseStats& kind(std::string name, std::string value) {
    dims.push_back({std::move(name), 0, std::move(value)});
    return *this;
  }
};

// Seconds one trial spent inside the target and the reference (derived
// cases of metamorphic invariants included): the runner's time split.
struct TrialTimes {
  double target = 0, reference = 0;  // seconds in the target's and the oracle's runs
  int64_t target_runs = 0;           // the target's runs (on the case and on derived cases)
  TrialTimes& operator+=(const TrialTimes& o) {
    target += o.target, reference += o.reference, target_runs += o.target_runs;
    return *this;
  }
};

// RunOptions::compare_outputs (--mutants): the correct implementations a
// target's outputs are compared with, bit for bit (any NaN equal to any
// NaN), and the tensors that hold them (output_tensors, kprop/output_reads.h).
struct OutputComparison {
  std::vector<Impl> correct;       // the family's reference and optimized ones on the target's device
  std::vector<std::string> names;  // target.* tensors; empty: nothing can be compared
  mutable size_t hint = 0;         // the one that matched last: tried first
};
// Two cases' comparison states, folded: 1 (some output differed from every
// correct implementation's) wins over -1 (not compared), which wins over 0.
inline int fold_differ(int a, int b) {
  return a == 1 || b == 1 ? 1 : a < 0 || b < 0 ? -1 : 0;
}

// Type-erased case and result: the core never looks inside.
using AnyCase = std::shared_ptr<const void>;
using AnyResult = std::shared_ptr<const void>;

// The state of one trial: a case checked against several invariants, with the
// target's and reference's results computed once and shared.
class AnyTrial {
 public:
  virtual ~AnyTrial() = default;
  virtual Verdict check(size_t invariant, const Values& params) = 0;
  // Runs the target on the case (once: the invariants share its result).
  // check_one calls it before it counts a pass, so a case the target
  // declines, crashes on or throws on is that whatever the invariant read:
  // an invariant of the reference or the inputs alone never passes a case
  // the target was not run on.
  virtual void run_target() = 0;
  virtual TrialTimes times() const { return {}; }

  // ---- named tensors (expression invariants, kprop/expr.h)
  // This trial's tensors, holding at least `names` that the family publishes
  // for this case (the target and reference run only if a name needs them),
  // cached for the trial's other invariants. nullptr: the family publishes
  // no tensors.
  virtual const expr::TensorMap* tensors(const std::vector<std::string>& names) {
    (void)names;
    return nullptr;
  }

  // ---- metamorphic relations (Family::transforms())
  // The tensors of this trial together with those of its case after
  // transform `index` with `params`: "transformed.X" is X computed on the
  // derived case (same target and reference), "transform.*" what the
  // transform drew (e.g. a permutation). `names` may mix all three kinds.
  // The derived case is built once per `key` and trial: relations that
  // name the same transform and parameters (one key, ExpressionInvariant::
  // Transform::key) share it, its target and reference runs and tensors.
  virtual const expr::TensorMap* transformed_tensors(const std::string& key, size_t index,
                                                     const Values& params,
                                                     const std::vector<std::string>& names) {
    (void)key, (void)index, (void)params, (void)names;
    return nullptr;
  }
  // Frees every derived case but the one of `keep` ("": all of them), their
  // trials, results and tensors, keeping their times: check_invariant calls
  // it before each check, so a derived case lives while the relations that
  // share it are checked one after another and no other invariant's
  // evaluation holds it (a spec with eight relations held eight derived
  // cases to the trial's end).
  virtual void release_derived(const std::string& keep) { (void)keep; }

  // ---- --mutants: did the target's outputs differ from a correct kernel's?
  // From now on, compare the target's outputs on each case derived from this
  // one (metamorphic invariants) with `with`'s implementations.
  virtual void compare_outputs(const OutputComparison* with) { (void)with; }
  // 1 when on this case (its target run) or a case derived from it the
  // target's outputs differed from every correct implementation's; 0 when
  // they were one's on each; -1 when something was not compared (the target
  // did not run on the case, no correct implementation ran it).
  virtual int outputs_differ() { return -1; }
};

// A metamorphic relation a family exports: a named change of the case whose
// effect on the outputs a spec states as an expression, e.g. permuting the
// keys together with their values leaves O unchanged:
//   transform: {permute_keys: {}}
//   expect: close(transformed.target.o, target.o, k=2)
// Its randomness is a function of the case (a hash of the case as YAML), so a
// shrunk, stored case replays the same derived case.
struct TransformInfo {
  std::string name;
  std::string description;
  Schema params;              // typed parameters, set per use in the spec
  expr::TensorInfos tensors;  // "transform.*" tensors it publishes
  // Dims whose extent the derived case may change (a slice keeps a run of
  // one dim's indices): in expressions, the derived case's tensors and the
  // transform's own have the dim "transformed.DIM" there, never the base
  // case's DIM, so an expression that equates the two is refused at load.
  std::vector<std::string> changes_dims{};
  // What the domain must allow for the transform to ever apply ("" when it
  // does; else the need, completing "needs ..."): a relation over a
  // transform that cannot apply is the spec's error in its own domain and
  // not applicable to a run whose --domain starved it, as a built-in
  // invariant's InvariantInfo::needs. Empty: every domain can feed it.
  std::function<std::string(const Values& domain)> needs{};
  // `shape` as an expression sees it on the derived case: each dim of
  // changes_dims as transformed.DIM.
  std::vector<std::string> derived_shape(std::vector<std::string> shape) const {
    for (std::string& d : shape)
      if (std::find(changes_dims.begin(), changes_dims.end(), d) != changes_dims.end())
        d = "transformed." + d;
    return shape;
  }
  // The tensors it publishes, as expressions see them (derived_shape): what
  // the loader compiles against and --list shows.
  expr::TensorInfos published() const {
    expr::TensorInfos out = tensors;
    for (auto& t : out) t.shape = derived_shape(t.shape);
    return out;
  }
};

// A transform that can leave a case as it is (a permutation of one element)
// publishes the boolean scalar "transform.applies"; where it is false the
// invariant using the transform discards the case, never passes it.
// `when_false` completes "false when ..." in its description.
inline expr::TensorInfo transform_applies_info(const std::string& when_false) {
  return {"transform.applies",
          {},
          expr::DType::boolean,
          "false when " + when_false + ": the invariant is discarded, not passed"};
}
inline void put_transform_applies(expr::TensorMap& out, bool applies) {
  out.put("transform.applies", expr::Tensor::scalar(applies ? 1 : 0, expr::DType::boolean));
}

// What the core sees of a family.
class Family {
 public:
  virtual ~Family() = default;
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  virtual const Schema& domain_schema() const = 0;
  // The domain as --domain names its keys, one "KEY  VALUE" line each, a
  // map's keys indented under "KEY:" (prop_runner --list --spec): from the
  // schema and `domain`; a family that draws from elsewhere (op: its
  // declaration's dtypes and dims) says its own.
  virtual std::vector<std::pair<std::string, std::string>> domain_lines(const Values& domain) const;
  // Rules between the domain's keys that every draw keeps and --domain
  // cannot replace (op: the declaration's relations, as the spec writes
  // them), one per element; none by default.
  virtual std::vector<std::string> domain_rules() const { return {}; }
  // The one way a family makes cases: from a Draw (kprop/draw.h), so
  // RapidCheck generation, fuzz-byte decoding and fuzz seed corpora are the
  // same code. The three below derive from it (registry.cpp).
  virtual AnyCase build(Draw& draw, const Values& domain) const = 0;
  // The same draws as build; where the family can and `hollow` holds for
  // the case's header (InvariantInfo::discards_header), the header alone,
  // its bulk values left out (empty). Such a case is only for invariants
  // that discard it on its header: nothing else may read it. By default, or
  // for a family whose builder has no header stage, build's case.
  using Hollow = std::function<bool(const AnyCase& header)>;
  virtual AnyCase build_hollow(Draw& draw, const Values& domain, const Hollow& hollow) const {
    (void)hollow;
    return build(draw, domain);
  }
  // `hollow` set: build_hollow's cases (kprop/focus.h).
  rc::Gen<AnyCase> generator(const Values& domain, Hollow hollow = {}) const;
  // libFuzzer bytes: the first is the size (BytesDraw), the rest the draws.
  AnyCase from_bytes(const uint8_t* data, size_t size, const Values& domain) const;
  // A generated case (RapidCheck seed and size) as the bytes from_bytes
  // decodes back to it: fuzz seed corpora.
  std::vector<uint8_t> seed_bytes(const Values& domain, uint64_t seed, int size) const;
  // One shrink step, boldest candidate first; lazy so that expensive
  // candidates are only built when the cheap ones did not reproduce. Every
  // candidate lies inside `domain` (in_domain).
  virtual rc::Seq<AnyCase> shrinks(const AnyCase& c, const Values& domain) const = 0;
  // Whether each shrink pass resumes at the candidate the last step took
  // instead of the first (src/findings.cpp, shrink_with). Worth it where
  // most steps are one element's, cheap to build and many (the declared
  // ops' inputs); where bold candidates become possible after small steps
  // (ternary's large-profile cuts), starting over finds them sooner.
  virtual bool shrink_resumes() const { return false; }
  // "" when the case lies inside the domain (one the generator could draw).
  virtual std::string in_domain(const AnyCase& c, const Values& domain) const = 0;
  // Peak memory of one trial on this case, and the largest the domain allows.
  virtual double case_bytes(const AnyCase& c) const = 0;
  virtual CaseSize max_case_bytes(const Values& domain) const = 0;
  // Constraints across domain keys: "" when fine.
  virtual std::string check_domain(const Values& domain) const = 0;
  virtual YAML::Node to_yaml(const AnyCase& c) const = 0;
  virtual AnyCase from_yaml(const YAML::Node& node) const = 0;
  // A hash of what the case's YAML keeps (equal for a case and its stored
  // copy read back): a transform's randomness derives from it.
  virtual uint64_t content_hash(const AnyCase& c) const = 0;
  virtual CaseStats stats(const AnyCase& c) const = 0;

  virtual const std::vector<ImplInfo>& implementations() const = 0;
  virtual const std::vector<InvariantInfo>& invariants() const = 0;
  virtual std::unique_ptr<AnyTrial> begin_trial(const AnyCase& c, const Impl& target,
                                                const Impl& reference) const = 0;
  // One run of `impl` on the case, result dropped (benchmarks: the cost of
  // checking against the cost of the kernels).
  virtual void run_once(const Impl& impl, const AnyCase& c) const = 0;
  // Registered implementations by index (tests, benchmarks).
  std::unique_ptr<AnyTrial> begin_trial(const AnyCase& c, size_t target, size_t reference) const {
    return begin_trial(c, registered(target), registered(reference));
  }
  Impl registered(size_t index) const;

  // External targets (kprop/external.h): the ops a plugin or worker must
  // serve (empty: the family has no external interface), and a run-local
  // implementation of kind `external` named `name` that drives `transport`.
  virtual const std::vector<external::PluginOp>& external_ops() const = 0;
  Impl external_impl(const std::string& name, std::shared_ptr<external::Transport> transport) const;

  // ---- named tensors (expression invariants, kprop/expr.h)
  // What expressions in a spec may name: inputs, target.* and reference.*
  // outputs and reference intermediates, with symbolic shapes. Empty: this
  // family publishes no tensors.
  virtual const expr::TensorInfos& tensor_infos() const {
    static const expr::TensorInfos none;
    return none;
  }
  // Named tensors target.X computed from the kernel's outputs rather than
  // being one (X -> the outputs it is computed from; "*": all): what an
  // expression reading target.X reads, for output coverage
  // (kprop/output_reads.h). A target.X whose X is an output needs no entry.
  virtual const std::map<std::string, std::vector<std::string>>& tensor_outputs() const {
    static const std::map<std::string, std::vector<std::string>> none;
    return none;
  }
  // The metamorphic transforms it exports (empty: none).
  virtual const std::vector<TransformInfo>& transforms() const {
    static const std::vector<TransformInfo> none;
    return none;
  }
  // Case `c` after transform `index` with `params`, its randomness drawn
  // from `seed` (what transformed_tensors derives, without a trial).
  virtual AnyCase transform_case(const AnyCase& c, size_t index, const Values& params, uint64_t seed) const {
    (void)c, (void)params, (void)seed;
    throw std::logic_error(std::string(name()) + ": no transform " + std::to_string(index));
  }

  // How a run's header and report name the implementation `name` (or an
  // external target) as the reference: the name itself, or for a
  // registered one that only runs a program of the spec's (a declared op's
  // reference whose op.reference is exec:/plugin:) that program, as
  // --reference would name it.
  virtual std::string reference_shown(const std::string& name) const { return name; }

  // Lookups by name; -1 when absent.
  int find_implementation(const std::string& name) const;
  int find_invariant(const std::string& name) const;
  std::vector<std::string> implementation_names() const;
  std::vector<std::string> invariant_names() const;
};

// ---------------------------------------------------------------- registry
class Registry {
 public:
  static Registry& instance();
  void add(std::unique_ptr<Family> family);
  const Family* find(const std::string& name) const;
  std::vector<const Family*> families() const;  // sorted by name
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Family>> families_;
};

// ---------------------------------------------------------------- typed side

// ---- named tensors: a family that publishes tensors adds to its traits
//   static expr::TensorInfos tensor_infos();   // names, symbolic shapes, meanings
//                                              // (called once: FamilyDef keeps them)
//   static void tensors(const Case&, const Result* target, const Result* reference,
//                       expr::TensorMap& out);         // put() what out.wanted();
//                                                      // target/reference null unless needed
template <typename Traits>
concept HasTensors = requires(const typename Traits::Case& c, const typename Traits::Result* r,
                              expr::TensorMap& m) {
  { Traits::tensor_infos() } -> std::convertible_to<expr::TensorInfos>;
  Traits::tensors(c, r, r, m);
};

// ---- a header stage: a family whose builder draws everything before it
// fills its bulk values may add to its traits
//   static Case build(Draw& draw, const Values& domain,
//                     const std::function<bool(const Case&)>& hollow);
// making the same draws as build(draw, domain) and returning the case before
// its bulk values where hollow(that case) holds (Family::build_hollow).
template <typename Traits>
concept HasHeaderStage = requires(Draw& d, const Values& v,
                                  const std::function<bool(const typename Traits::Case&)>& h) {
  { Traits::build(d, v, h) } -> std::same_as<typename Traits::Case>;
};

// ---- metamorphic transforms: a family that exports them adds to its traits
//   static const std::vector<TransformInfo>& transforms();
//   static Case transform(const std::string& name, const Case& c, const Values& params,
//                         uint64_t seed, expr::TensorMap& out);
// returning the derived case; `seed` (a hash of the case and the invariant)
// feeds kprop::rng for any randomness, and the transform put()s the
// "transform.*" tensors it declared when out.wanted() them.
template <typename Traits>
concept HasTransforms = requires(const typename Traits::Case& c, const Values& v, expr::TensorMap& m) {
  { Traits::transforms() } -> std::convertible_to<const std::vector<TransformInfo>&>;
  { Traits::transform(std::string(), c, v, uint64_t{}, m) } -> std::same_as<typename Traits::Case>;
};

template <typename Traits>
concept HasContentHash = requires(const typename Traits::Case& c) {
  { Traits::content_hash(c) } -> std::convertible_to<uint64_t>;
};
template <typename Traits>
concept HasDomainCheck = requires(const Values& v) {
  { Traits::check_domain(v) } -> std::convertible_to<std::string>;
};

template <typename Traits>
class FamilyDef;

// A trial as an invariant sees it: the case, and results computed on demand
// and cached, so five invariants cost one target run.
template <typename Traits>
class Trial {
 public:
  using Case = typename Traits::Case;
  using Result = typename Traits::Result;

  Trial(const FamilyDef<Traits>& family, const Case& c, const Impl& target, const Impl& reference)
      : family_(family), case_(c), target_impl_(target), reference_impl_(reference) {}

  const Case& input() const { return case_; }
  const ImplInfo& target_info() const { return target_impl_.info; }
  const Result& target() {
    if (!target_) target_ = timed(times_.target, target_impl_, case_);
    return *target_;
  }
  // The reference's result. Its failures are not the target's: a decline
  // or an unavailable reference says so in its reason, anything else it
  // throws is a ReferenceFailure (kprop/errors.h).
  const Result& reference() {
    if (same_impl()) return target();
    if (!reference_) reference_ = run_oracle(reference_impl_);
    return *reference_;
  }
  // Whether the run's oracle is the family's own reference (not one given by
  // --reference or reference=).
  bool oracle_is_own() const {
    const int own = family_.find_implementation("reference");
    return own < 0 || reference_impl_.index == own || same_impl();
  }
  // The family's own reference on this case: reference() unless the run has
  // another oracle. The naive baseline's error, which sets the tolerance of
  // the comparisons with the oracle, is measured against this one: measured
  // against another oracle, whatever that oracle computes differently from
  // the family's formula widened the tolerance by as much, and a reference
  // returning 0.123 everywhere passed every kernel.
  const Result& own_reference() {
    if (oracle_is_own()) return reference();
    if (!own_reference_)
      own_reference_ =
          run_oracle(family_.registered(static_cast<size_t>(family_.find_implementation("reference"))));
    return *own_reference_;
  }
  // For metamorphic invariants: run the implementations on a derived case.
  // A decline of it is a DerivedDeclined: a discard of the invariant that
  // derived the case (check_one), not a decline of the case.
  Result run_target(const Case& c) const {
    try {
      Result r = timed(times_.target, target_impl_, c);
      // --mutants: a derived case may reach a bug the case itself does not.
      if (compare_ && &c != &case_)
        derived_differ_ = fold_differ(derived_differ_, family_.differs(c, r, *compare_));
      return r;
    } catch (const TargetUnavailable&) {
      throw;
    } catch (const Unsupported& e) {
      throw DerivedDeclined(std::string("the target declined the derived case: ") + e.what());
    }
  }
  // AnyTrial::compare_outputs: the target's runs on derived cases are
  // compared from now on, folded into derived_differ() (0 before any).
  void compare_derived_with(const OutputComparison* with) { compare_ = with; }
  int derived_differ() const { return derived_differ_; }
  // Whether the target has run on the case itself.
  bool target_ran() const { return target_.has_value(); }
  const TrialTimes& times() const { return times_; }
  // Fn(input()), computed once per trial: what several invariants derive
  // from the same case (tolerance scales, same-precision baselines), e.g.
  // t.once<naive_forward>(). Fn must be a pure function of the case.
  template <auto Fn>
  const auto& once() {
    return once_.template get<Fn>(case_);
  }
  // Fn(*this), computed once per trial: what several invariants derive from
  // the case through the trial's oracles (its reference() run, or its
  // once() values), never from the target's runs. Fn must read only those.
  template <auto Fn>
  const auto& once_with_oracles() {
    return once_.template get<Fn>(*this);
  }
  // The store once() keeps its values in; the trial's named tensors read it
  // too (TensorMap::once_store).
  OnceStore& once_store() { return once_; }

 private:
  bool same_impl() const {
    return target_impl_.index >= 0 ? target_impl_.index == reference_impl_.index
                                   : target_impl_.external == reference_impl_.external;
  }
  // An oracle's run on the case. Its failures are not the target's.
  Result run_oracle(const Impl& impl) const {
    const std::string who = "the reference '" + impl.info.name + "' ";
    try {
      return timed(times_.reference, impl, case_);
    } catch (const TargetUnavailable& e) {
      throw ReferenceUnavailable(who + "cannot run here: " + e.what());
    } catch (const Unsupported& e) {
      throw DerivedDeclined(who + "declined the case: " + e.what());
    } catch (const InputError&) {
      throw;  // the spec's error (a declared op's reference expression), not the reference's failure
    } catch (const std::exception& e) {
      throw ReferenceFailure(
          who + "failed on a case, so the case cannot judge the target (fix the reference): " + e.what());
    }
  }
  Result timed(double& seconds, const Impl& impl, const Case& c) const {
    const auto t0 = std::chrono::steady_clock::now();
    struct Add {  // counted when the implementation throws too
      double& s;
      std::chrono::steady_clock::time_point t0;
      ~Add() { s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    } add{seconds, t0};
    if (&impl != &target_impl_) return family_.run(impl, c);
    ++times_.target_runs;
    const TargetCall call;  // the case timeout times target calls only
    return family_.run(impl, c);
  }
  mutable TrialTimes times_;
  const FamilyDef<Traits>& family_;
  const Case& case_;
  const Impl& target_impl_;
  const Impl& reference_impl_;
  std::optional<Result> target_, reference_, own_reference_;
  OnceStore once_;
  const OutputComparison* compare_ = nullptr;
  mutable int derived_differ_ = 0;
};

template <typename Traits>
class FamilyDef : public Family {
 public:
  using Case = typename Traits::Case;
  using Result = typename Traits::Result;
  using ImplFn = std::function<Result(const Case&)>;
  using InvariantFn = std::function<Verdict(Trial<Traits>&, const Values&)>;

  FamilyDef() : schema_(Traits::domain_schema()) {
    if constexpr (HasTensors<Traits>) tensor_infos_ = Traits::tensor_infos();
  }

  // -- registration
  void implementation(ImplInfo info, ImplFn fn) {
    // Names select implementations (--target, corpus found_against): a
    // second one of a name would never run.
    for (const auto& impl : impls_)
      if (impl.name == info.name)
        throw std::logic_error(std::string(Traits::name) + " registers implementation " + info.name +
                               " twice");
    impls_.push_back(std::move(info));
    impl_fns_.push_back(std::move(fn));
  }
  // The family's oracle (ImplKind::reference), named "reference".
  void reference(std::string description, ImplFn fn) {
    implementation({"reference", ImplKind::reference, std::move(description)}, std::move(fn));
  }
  // A CPU kernel under test (ImplKind::optimized).
  void optimized(std::string name, std::string description, ImplFn fn) {
    implementation({std::move(name), ImplKind::optimized, std::move(description)}, std::move(fn));
  }
  // The CUDA kernel under test, named "cuda", on device "cuda"; `fn`:
  // KPROP_CUDA_IMPL(...), which is skipped where there is no device.
  void cuda(std::string description, ImplFn fn) {
    implementation({"cuda", ImplKind::optimized, std::move(description), "cuda"}, std::move(fn));
  }
  void mutant(std::string name, std::string description, ImplFn fn, bool out_of_bounds = false,
              bool own_process = false) {
    ImplInfo info{std::move(name), ImplKind::mutant, std::move(description)};
    info.out_of_bounds = out_of_bounds;
    info.own_process = own_process;
    implementation(std::move(info), std::move(fn));
  }
  // Every mutant of a kernel's table (kernels/<f>/mutants.cpp: a range of
  // kprop::Mutant rows).
  template <typename Table>
  void mutants(const Table& table) {
    for (const auto& m : table) {
      bool out_of_bounds = false;
      if constexpr (requires { m.out_of_bounds; }) out_of_bounds = m.out_of_bounds;
      mutant(m.name, m.description, m.run, out_of_bounds);
    }
  }

  // An implementation that cannot run here: every case raises
  // TargetUnavailable(why), so the run is skipped, never passed.
  static ImplFn unavailable(std::string why) {
    return [why = std::move(why)](const Case&) -> Result { throw TargetUnavailable(why); };
  }
  // `run` where `device_count()` finds a CUDA device, else unavailable.
  static ImplFn on_cuda_device(int (*device_count)(), ImplFn run) {
    return [device_count, run = std::move(run)](const Case& c) -> Result {
      if (device_count() <= 0) throw TargetUnavailable("no CUDA device");
      note_in_process_cuda();  // no fork after this: kprop/target_call.h
      return run(c);
    };
  }
  // Returns the registered info, for `.reading({...})`.
  InvariantInfo& invariant(InvariantInfo info, InvariantFn fn) {
    invariant_infos_.push_back(std::move(info));
    invariant_fns_.push_back(std::move(fn));
    return invariant_infos_.back();
  }
  // Family::tensor_outputs.
  void tensor_outputs(std::map<std::string, std::vector<std::string>> table) {
    tensor_outputs_ = std::move(table);
  }
  const std::map<std::string, std::vector<std::string>>& tensor_outputs() const override {
    return tensor_outputs_;
  }
  // What each named invariant reads (InvariantInfo::reads), as one table
  // per family: the family's output-coverage audit in one place.
  void reads(const std::vector<std::pair<std::string, std::vector<std::string>>>& table) {
    for (const auto& entry : table) {
      const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one
      const std::vector<std::string>& outputs = entry.second;
      auto it = std::find_if(invariant_infos_.begin(), invariant_infos_.end(),
                             [&](const InvariantInfo& i) { return i.name == name; });
      if (it == invariant_infos_.end())
        throw std::logic_error(std::string(Traits::name) + ": reads() of unknown invariant " + name);
      it->reads = outputs;
    }
  }

  // Kernels built elsewhere: `ops` says how a plugin serves each request,
  // `drive` runs one case through a Transport (requests out, Result back).
  using ExternalFn = std::function<Result(const Case&, external::Transport&)>;
  void external(std::vector<external::PluginOp> ops, ExternalFn drive) {
    external_ops_ = std::move(ops);
    external_drive_ = std::move(drive);
  }

  Result run(size_t impl, const Case& c) const { return impl_fns_.at(impl)(c); }
  Result run(const Impl& impl, const Case& c) const {
    if (impl.index >= 0) return run(static_cast<size_t>(impl.index), c);
    if (!impl.external || !external_drive_)
      throw std::logic_error("an external implementation of a family without an external interface");
    return external_drive_(c, *impl.external);
  }

  // -- Family
  const char* name() const override { return Traits::name; }
  const char* description() const override { return Traits::description; }
  const Schema& domain_schema() const override { return schema_; }
  AnyCase build(Draw& draw, const Values& domain) const override { return box(Traits::build(draw, domain)); }
  AnyCase build_hollow(Draw& draw, const Values& domain, const Hollow& hollow) const override {
    if constexpr (HasHeaderStage<Traits>) {
      return box(Traits::build(draw, domain, [&hollow](const Case& header) {
        return hollow(AnyCase(AnyCase(), &header));  // borrowed: the builder's case, for the call
      }));
    } else {
      (void)hollow;
      return build(draw, domain);
    }
  }
  rc::Seq<AnyCase> shrinks(const AnyCase& c, const Values& domain) const override {
    // `c` rides along so the family's Seq may refer to the case it shrinks.
    auto inside = rc::seq::filter(Traits::shrinks(unbox(c), domain), [domain](const Case& s) {
      return Traits::in_domain(s, domain).empty() || shrink_should_stop();
    });
    return rc::seq::map(std::move(inside), [keep = c](Case s) { return box(std::move(s)); });
  }
  std::string in_domain(const AnyCase& c, const Values& domain) const override {
    return Traits::in_domain(unbox(c), domain);
  }
  double case_bytes(const AnyCase& c) const override { return Traits::case_bytes(unbox(c)); }
  CaseSize max_case_bytes(const Values& domain) const override { return Traits::max_case_bytes(domain); }
  std::string check_domain(const Values& domain) const override {
    if constexpr (HasDomainCheck<Traits>)
      return Traits::check_domain(domain);
    else
      return "";
  }
  YAML::Node to_yaml(const AnyCase& c) const override { return Traits::to_yaml(unbox(c)); }
  AnyCase from_yaml(const YAML::Node& node) const override { return box(Traits::from_yaml(node)); }

  CaseStats stats(const AnyCase& c) const override { return Traits::stats(unbox(c)); }
  const std::vector<ImplInfo>& implementations() const override { return impls_; }
  const std::vector<InvariantInfo>& invariants() const override { return invariant_infos_; }
  const std::vector<external::PluginOp>& external_ops() const override { return external_ops_; }
  const expr::TensorInfos& tensor_infos() const override { return tensor_infos_; }
  const std::vector<TransformInfo>& transforms() const override {
    if constexpr (HasTransforms<Traits>)
      return Traits::transforms();
    else
      return Family::transforms();
  }
  AnyCase transform_case(const AnyCase& c, size_t index, const Values& params, uint64_t seed) const override {
    if constexpr (HasTransforms<Traits>) {
      expr::TensorMap drawn;
      return box(Traits::transform(Traits::transforms().at(index).name, unbox(c), params, seed, drawn));
    } else {
      return Family::transform_case(c, index, params, seed);
    }
  }
  void run_once(const Impl& impl, const AnyCase& c) const override { (void)run(impl, unbox(c)); }
  // `mine` (the target's result on c) against each correct implementation's
  // result on c, compared on `with.names` (OutputComparison): 0 when one's
  // equals it bit for bit, 1 when every one that ran differs, -1 when none
  // ran c or nothing can be compared.
  int differs(const Case& c, const Result& mine, const OutputComparison& with) const {
    if constexpr (HasTensors<Traits>) {
      if (with.names.empty()) return -1;
      const auto outputs = [&](const Result& r) {
        auto m = std::make_unique<expr::TensorMap>();
        for (const auto& n : with.names) m->want(n);
        Traits::tensors(c, &r, nullptr, *m);
        return m;
      };
      const auto theirs_equal = [&](const expr::TensorMap& a, const expr::TensorMap& b) {
        for (const auto& n : with.names) {
          const expr::Tensor *x = a.find(n), *y = b.find(n);
          if (!x || !y || x->shape != y->shape || x->data.size() != y->data.size()) return false;
          for (size_t i = 0; i < x->data.size(); ++i)
            if (!detail::same_run_value(x->data[i], y->data[i])) return false;
        }
        return true;
      };
      std::unique_ptr<expr::TensorMap> mine_outputs;
      bool compared = false;
      for (size_t k = 0; k < with.correct.size(); ++k) {
        const size_t at = (with.hint + k) % with.correct.size();
        try {
          const Result theirs = run(with.correct[at], c);
          if (!mine_outputs) mine_outputs = outputs(mine);
          compared = true;
          if (theirs_equal(*mine_outputs, *outputs(theirs))) {
            with.hint = at;
            return 0;
          }
        } catch (const InputError&) {
          throw;
        } catch (const std::exception&) {
          // This one declined c or cannot run it: the others may.
        }
      }
      return compared ? 1 : -1;
    } else {
      (void)c, (void)mine, (void)with;
      return -1;
    }
  }
  using Family::begin_trial;
  std::unique_ptr<AnyTrial> begin_trial(const AnyCase& c, const Impl& target,
                                        const Impl& reference) const override {
    struct Erased final : AnyTrial {
      Erased(const FamilyDef& f, const AnyCase& c, const Impl& t, const Impl& r)
          : keep(c), family(f), target(t), reference(r), trial(f, unbox(keep), target, reference) {}
      Verdict check(size_t invariant, const Values& params) override {
        return family.invariant_fns_.at(invariant)(trial, params);
      }
      void run_target() override { (void)trial.target(); }
      TrialTimes times() const override {
        TrialTimes t = trial.times();
        t += released;
        for (const auto& [key, d] : derived_)
          if (d.trial) t += d.trial->times();  // null where the transform threw
        return t;
      }
      const expr::TensorMap* tensors(const std::vector<std::string>& names) override {
        if constexpr (HasTensors<Traits>) {
          // The family's own reference's tensors (expr::kOwnPrefix): the
          // trial's own when the oracle is the family's reference (the map
          // finds "own:X" as X), else a map of their own, computed from
          // Trial::own_reference().
          const bool self = trial.oracle_is_own();
          for (const auto& n : names) {
            if (n.compare(0, expr::kOwnPrefix.size(), expr::kOwnPrefix) != 0) {
              named.want(n);
              continue;
            }
            if (!self && !own_linked) named.link(expr::kOwnPrefix, &own_named, true), own_linked = true;
            (self ? named : own_named).want(n.substr(expr::kOwnPrefix.size()));
          }
          if (!named.missing().empty()) {
            const Result* t = named.wants_prefix("target.") ? &trial.target() : nullptr;
            const Result* r = named.wants_prefix("reference.") ? &trial.reference() : nullptr;
            named.set_once_store(&trial.once_store());
            Traits::tensors(trial.input(), t, r, named);
          }
          if (!self && !own_named.missing().empty()) {
            own_named.set_once_store(&trial.once_store());
            Traits::tensors(trial.input(), nullptr, &trial.own_reference(), own_named);
          }
          return &named;
        } else {
          (void)names;
          return nullptr;
        }
      }
      const expr::TensorMap* transformed_tensors(const std::string& key, size_t index, const Values& params,
                                                 const std::vector<std::string>& names) override {
        if constexpr (HasTensors<Traits> && HasTransforms<Traits>) {
          static const std::string derived = "transformed.", drawn = "transform.";
          std::vector<std::string> own, theirs;
          for (const auto& n : names) {
            if (n.compare(0, derived.size(), derived) == 0)
              theirs.push_back(n.substr(derived.size()));
            else if (n.compare(0, drawn.size(), drawn) != 0)
              own.push_back(n);
          }
          Derived& d = derived_[key];
          if (!d.trial) {
            const TransformInfo& info = Traits::transforms().at(index);
            auto sub = std::make_unique<expr::TensorMap>();
            for (const auto& t : info.tensors) sub->want(t.name);
            AnyCase c =
                box(Traits::transform(info.name, trial.input(), params, transform_seed(info.name), *sub));
            d.trial = std::make_unique<Erased>(family, c, target, reference);
            d.trial->derived_case = true;
            d.trial->compare_outputs(compare);
            d.drawn = std::move(sub);
            d.view.link(derived, &d.trial->named, true);
            d.view.link(drawn, d.drawn.get(), false);
            d.view.link("", &named, false);
          }
          if (!own.empty()) tensors(own);
          try {
            if (!theirs.empty()) d.trial->tensors(theirs);
          } catch (const TargetUnavailable&) {
            throw;
          } catch (const Unsupported& e) {
            throw DerivedDeclined(std::string("on the transformed case, ") + e.what());
          }
          return &d.view;
        } else {
          (void)key, (void)index, (void)params, (void)names;
          return nullptr;
        }
      }
      void release_derived(const std::string& keep) override {
        for (auto it = derived_.begin(); it != derived_.end();) {
          if (it->first == keep) {
            ++it;
            continue;
          }
          if (it->second.trial) {
            released += it->second.trial->times();
            released_differ = fold_differ(released_differ, it->second.trial->derived_outputs_differ());
          }
          it = derived_.erase(it);
        }
      }
      void compare_outputs(const OutputComparison* with) override {
        compare = with;
        trial.compare_derived_with(with);
      }
      int outputs_differ() override {
        if (!compare || !trial.target_ran()) return -1;
        const int derived = derived_outputs_differ();
        if (derived == 1) return 1;
        return fold_differ(derived, family.differs(trial.input(), trial.target(), *compare));
      }
      // What the cases derived from this one showed (0: none, or none the
      // target ran on: a case the target never ran on reaches nothing), and
      // for a derived case its own run of the target (a relation's
      // transformed.target.*).
      int derived_outputs_differ() {
        if (!compare) return -1;
        int state = fold_differ(released_differ, trial.derived_differ());
        for (auto& [key, d] : derived_)
          if (d.trial) state = fold_differ(state, d.trial->derived_outputs_differ());
        if (state != 1 && derived_case && trial.target_ran())
          state = fold_differ(state, family.differs(trial.input(), trial.target(), *compare));
        return state;
      }
      // A transform's randomness: the case's content hash (once per trial)
      // mixed with the transform's name.
      uint64_t transform_seed(const std::string& transform) {
        if (!content) content = family.content_hash(keep);
        uint64_t h = *content;
        for (const char ch : transform) h = rng::mix(h ^ uint8_t(ch));
        return h;
      }
      std::optional<uint64_t> content;
      struct Derived {
        std::unique_ptr<Erased> trial;
        std::unique_ptr<expr::TensorMap> drawn;
        expr::TensorMap view;
      };
      expr::TensorMap named;
      expr::TensorMap own_named;  // the family's own reference's tensors, under another oracle
      bool own_linked = false;    // named finds "own:X" in own_named
      AnyCase keep;
      const FamilyDef& family;
      Impl target, reference;  // copies: the trial outlives no one's Impl
      Trial<Traits> trial;
      std::map<std::string, Derived> derived_;
      TrialTimes released;  // the released derived cases' (release_derived)
      // --mutants (compare_outputs): what to compare with, the released
      // derived cases' comparison state, and whether this is a derived case.
      const OutputComparison* compare = nullptr;
      int released_differ = 0;
      bool derived_case = false;
    };
    return std::make_unique<Erased>(*this, c, target, reference);
  }

  // A hash of the case's content (its YAML tree, walked without emitting
  // it): what a transform's randomness derives from, so replaying a stored
  // case derives the same transformed case. A family whose cases hold
  // tensors (building their YAML tree, a text per number, cost more than
  // checking them) gives its own, Traits::content_hash, over exactly what
  // its corpus files keep (rng::ContentHash; FamilyContract tests that a
  // case read back hashes the same and a shrink candidate differently).
  uint64_t content_hash(const AnyCase& c) const override {
    if constexpr (HasContentHash<Traits>) return Traits::content_hash(unbox(c));
    return tree_hash(to_yaml(c));
  }

  static AnyCase box(Case c) { return std::make_shared<const Case>(std::move(c)); }
  static const Case& unbox(const AnyCase& c) { return *static_cast<const Case*>(c.get()); }

 private:
  Schema schema_;
  std::vector<ImplInfo> impls_;
  std::vector<ImplFn> impl_fns_;
  std::vector<external::PluginOp> external_ops_;
  ExternalFn external_drive_;
  std::vector<InvariantInfo> invariant_infos_;
  std::map<std::string, std::vector<std::string>> tensor_outputs_;
  std::vector<InvariantFn> invariant_fns_;
  expr::TensorInfos tensor_infos_;  // Traits::tensor_infos(), or none
};

// A family's CUDA implementation (FamilyDef::implementation's function):
// the run function given after `device_count` (a kernel's CUDA entry point,
// or a lambda around it) where a device is present. Built without CUDA
// (KPROP_HAVE_CUDA unset) neither is named, and the target is skipped
// ("built without CUDA"), never passed; so is a run with no device.
#if KPROP_HAVE_CUDA
#define KPROP_CUDA_IMPL(Traits, device_count, ...) \
  ::kprop::FamilyDef<Traits>::on_cuda_device(device_count, __VA_ARGS__)
#else
#define KPROP_CUDA_IMPL(Traits, device_count, ...) \
  ::kprop::FamilyDef<Traits>::unavailable("built without CUDA")
#endif

namespace detail {
template <typename Traits, typename Setup>
bool register_family(Setup&& setup) {
  auto family = std::make_unique<FamilyDef<Traits>>();
  setup(*family);
  Registry::instance().add(std::move(family));
  return true;
}
}  // namespace detail

#define KPROP_CONCAT_INNER(a, b) a##b
#define KPROP_CONCAT(a, b) KPROP_CONCAT_INNER(a, b)
// Registers a family at static-initialisation time. Family code is linked
// whole-archive (see CMakeLists.txt), so the registrar is never dropped.
#define KPROP_REGISTER_FAMILY(Traits, ...)                                       \
  [[maybe_unused]] static const bool KPROP_CONCAT(kprop_registered_, __LINE__) = \
      ::kprop::detail::register_family<Traits>(__VA_ARGS__)

}  // namespace kprop
