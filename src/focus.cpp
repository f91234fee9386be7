#include "kprop/focus.h"

#include <fmt/format.h>

#include <algorithm>

#include "kprop/errors.h"

namespace kprop {

namespace {
// A use of one of the family's own invariants, observable with the target:
// the only kind that declares where it observes and what it discards on a
// header (an expression or a callback declares neither).
bool declares(const InvariantUse& use) {
  return !use.expression && !use.callback && use.unobservable.empty();
}
}  // namespace

CaseDomains::CaseDomains(const Family& family, const Values& domain, std::vector<const InvariantUse*> uses)
    : family_(family), uses_(std::move(uses)) {
  domains_.push_back(std::make_unique<Domain>(Domain{domain, family.generator(domain), ""}));
}

const CaseDomains::Domain& CaseDomains::for_live(const std::vector<size_t>& live) {
  const auto it = chosen_.find(live);
  if (it != chosen_.end()) return *it->second;
  const Domain& d = choose(live);
  chosen_.emplace(live, &d);
  return d;
}

const CaseDomains::Domain& CaseDomains::choose(const std::vector<size_t>& live) {
  return hollowed(narrowed(live), live);
}

const CaseDomains::Domain& CaseDomains::hollowed(const Domain& base, const std::vector<size_t>& live) {
  if (live.empty() || uses_.empty()) return base;  // no uses given: the plain draw
  std::vector<size_t> invariants;
  for (const size_t k : live) {
    const InvariantUse& use = *uses_[k];
    if (!declares(use)) return base;
    if (!family_.invariants()[use.index].discards_header) return base;
    invariants.push_back(use.index);
  }
  std::sort(invariants.begin(), invariants.end());
  invariants.erase(std::unique(invariants.begin(), invariants.end()), invariants.end());
  for (const Hollowed& h : hollowed_)
    if (h.base == &base && h.invariants == invariants) return *h.domain;
  std::vector<std::function<bool(const AnyCase&)>> discards;
  for (const size_t i : invariants) discards.push_back(family_.invariants()[i].discards_header);
  Family::Hollow all = [discards](const AnyCase& header) {
    return std::all_of(discards.begin(), discards.end(), [&header](const auto& d) { return d(header); });
  };
  hollowed_.push_back({&base, invariants,
                       std::make_unique<Domain>(
                           Domain{base.values, family_.generator(base.values, std::move(all)), base.focus})});
  return *hollowed_.back().domain;
}

const CaseDomains::Domain& CaseDomains::narrowed(const std::vector<size_t>& live) {
  const Domain& whole = *domains_.front();
  if (live.empty() || uses_.empty()) return whole;  // no uses given: no focus (RunOptions::focus)
  // Per field, the values the live invariants observe: the domain's list
  // filtered, in its order; a live invariant that does not narrow the field
  // keeps it whole.
  std::vector<const std::map<std::string, Choices>*> observes;
  for (const size_t k : live) {
    const InvariantUse& use = *uses_[k];
    if (!declares(use)) return whole;
    const auto& o = family_.invariants()[use.index].observes;
    if (o.empty()) return whole;
    observes.push_back(&o);
  }
  std::map<std::string, Choices> narrowed;
  for (const auto* o : observes)
    for (const auto& [field, values] : *o) narrowed.emplace(field, Choices{});
  for (auto& entry : narrowed) {
    const std::string& field = entry.first;
    Choices& kept = entry.second;
    const Choices& all = whole.values.choices(field);
    for (const std::string& v : all) {
      const bool observed = std::any_of(observes.begin(), observes.end(), [&](const auto* o) {
        const auto it = o->find(field);
        return it == o->end() || std::find(it->second.begin(), it->second.end(), v) != it->second.end();
      });
      if (observed) kept.push_back(v);
    }
    // No live invariant observes any of the field's values: they discard
    // every case, as they would from the whole domain.
    if (kept.empty()) return whole;
  }
  std::string focus;
  Values values = whole.values;
  for (const auto& [field, kept] : narrowed) {
    if (kept.size() == whole.values.choices(field).size()) continue;
    focus += fmt::format("{}{}: [{}]", focus.empty() ? "" : ", ", field, join(kept));
    values.set(field, kept);
  }
  if (focus.empty()) return whole;
  focus = "{" + focus + "}";
  for (const auto& d : domains_)
    if (d->focus == focus) return *d;
  // A narrowed domain the family refuses (a coupled constraint between
  // fields) is not drawn from.
  if (std::find(refused_.begin(), refused_.end(), focus) != refused_.end()) return whole;
  if (!family_.check_domain(values).empty()) {
    refused_.push_back(focus);
    return whole;
  }
  domains_.push_back(std::make_unique<Domain>(Domain{values, family_.generator(values), focus}));
  return *domains_.back();
}

}  // namespace kprop
