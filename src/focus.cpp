#include "kprop/focus.h"

#include <fmt/format.h>

#include <algorithm>

#include "kprop/errors.h"

namespace kprop {

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
  const Domain& whole = *domains_.front();
  if (live.empty() || uses_.empty()) return whole;  // no uses given: no focus (RunOptions::focus)
  // Per field, the values the live invariants observe: the domain's list
  // filtered, in its order; a live invariant that does not narrow the field
  // keeps it whole.
  std::vector<const std::map<std::string, Choices>*> observes;
  for (const size_t k : live) {
    const InvariantUse& use = *uses_[k];
    if (use.expression || use.callback || !use.unobservable.empty()) return whole;
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
