// Where a property run draws its cases. Some invariants observe only part of
// the domain: a check of how f16/bf16 stores round discards every f32 and
// f64 case before the target runs (InvariantInfo::observes). Once the other
// invariants have their trials, such an invariant alone keeps the run
// drawing, and a run that draws from the whole domain builds every case it
// then discards (attention_bwd: 17,202 cases built for 500 trials of
// dq_dk_rounded_to_nearest, 8,506 of them f32 or f64).
//
// While every invariant still checking declares where it observes, the run
// draws from there instead: the spec's domain with each declared field
// narrowed to the values some live invariant observes (a field one of them
// does not narrow stays whole). That region holds every case a live
// invariant can observe, and a family picks such a field uniformly and
// independently of the rest (InvariantInfo::observes), so each invariant
// sees the cases it would have kept from the whole domain, in the same
// proportions; only the discards it never sees are fewer. Which domain case
// i comes from depends only on which invariants are live after the cases
// before it, so it is the same whatever the number of jobs.
//
// While every invariant still checking also discards cases on their header
// alone (InvariantInfo::discards_header: a softmax scale that is not a power
// of two, say), the run draws from that domain's hollow twin: the same draws,
// but a case every one of them discards on its header is left without its
// bulk values (Family::build_hollow). They discard it just the same, reading
// only the header, so the cases, verdicts and report are those of the full
// draw; what is saved is filling values no check reads (attention_bwd: a
// sixth of a run went to values only discarded).
#pragma once

#include <rapidcheck.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kprop/family.h"
#include "kprop/spec.h"

namespace kprop {

class CaseDomains {
 public:
  struct Domain {
    Values values;
    rc::Gen<AnyCase> generator;
    // The narrowed fields as YAML flow ("{dtypes: [f16, bf16]}"); "" for
    // the spec's own domain.
    std::string focus;
  };
  // `uses` empty: always the whole domain (RunOptions::focus false).
  CaseDomains(const Family& family, const Values& domain, std::vector<const InvariantUse*> uses);
  // The domain to draw from while the uses `live` (indices into `uses`) are
  // checking: the spec's, unless every one of them declares where it
  // observes and together they leave part of the domain out.
  // Remembered per live set: a run asks once per case (and a --jobs worker
  // once per case it draws), and the live set changes a few times a run.
  const Domain& for_live(const std::vector<size_t>& live);

 private:
  const Domain& choose(const std::vector<size_t>& live);
  const Domain& narrowed(const std::vector<size_t>& live);
  const Domain& hollowed(const Domain& base, const std::vector<size_t>& live);

  const Family& family_;
  std::vector<const InvariantUse*> uses_;
  std::vector<std::unique_ptr<Domain>> domains_;  // [0]: the spec's; then each focus met, once
  std::vector<std::string> refused_;              // foci the family's check_domain refused
  std::map<std::vector<size_t>, const Domain*> chosen_;
  struct Hollowed {
    const Domain* base;
    std::vector<size_t> invariants;  // the family's invariants whose header discards it combines
    std::unique_ptr<Domain> domain;
  };
  std::vector<Hollowed> hollowed_;
};

}  // namespace kprop
