// The generator at its domain's extremes: every case it draws there passes
// the family's own validation (the case codec, which validates) and, where
// small enough, runs through the reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "kprop/spec.h"

namespace kprop {
namespace {

// The schema's keys of `kind` (int_range or real_range), maps walked into.
void range_keys(const Schema& schema, const std::string& prefix, FieldKind kind,
                std::vector<const Field*>& fields, std::vector<std::string>& keys) {
  for (const Field& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    if (f.kind == FieldKind::map) range_keys(f.children, key, kind, fields, keys);
    if (f.kind == kind) fields.push_back(&f), keys.push_back(key);
  }
}

// Cases drawn at the domain's extremes: the minima, and each int_range key
// at its schema maximum (halved until the domain fits a budget and the
// family's cross-key limits), the others at their defaults.

void expect_valid_cases(const Family& f, const Values& d, const std::string& what, bool run_reference,
                        int cases) {
  for (int i = 0; i < cases; ++i) {
    const AnyCase c = f.generator(d)(rc::Random(uint64_t(7 + i)), 100).value();
    EXPECT_EQ(f.in_domain(c, d), "") << f.name() << " " << what;
    // The codec validates what it decodes. Node to node: the text round trip
    // of cases is the FamilyContract tests' (here it was 80% of the time,
    // all in yaml-cpp's emitter and scanner).
    EXPECT_NO_THROW(f.from_yaml(f.to_yaml(c))) << f.name() << " " << what;
    if (!run_reference || f.case_bytes(c) > 8.0 * 1024 * 1024) continue;
    const size_t ref = size_t(f.find_implementation("reference"));
    try {
      f.begin_trial(c, ref, ref)->check(0, Values::defaults(f.invariants()[0].params));
    } catch (const std::exception& e) {
      ADD_FAILURE() << f.name() << " " << what << ": the reference threw: " << e.what();
    }
  }
}

void check_extremes(const Family& f) {
  std::vector<const Field*> fields;
  std::vector<std::string> keys;
  range_keys(f.domain_schema(), "", FieldKind::int_range, fields, keys);
  // The maxima are taken within 64 MB rather than the default 1024 MB to keep
  // the test short (the YAML round trip of a 1 GB case takes minutes); every
  // count limit of the validators is still reached through the keys alone.
  const double budget = 64.0 * 1024 * 1024;
  // Minima.
  Values lo = Values::defaults(f.domain_schema());
  for (size_t i = 0; i < keys.size(); ++i)
    lo.set(keys[i], IntRange{int64_t(fields[i]->min), int64_t(fields[i]->min)});
  expect_valid_cases(f, lo, "at the schema minima", true, 5);
  // Each key at its maximum.
  for (size_t i = 0; i < keys.size(); ++i) {
    Values d = Values::defaults(f.domain_schema());
    const IntRange fallback = d.int_range(keys[i]);
    for (int64_t hi = int64_t(fields[i]->max); hi >= fallback.hi; hi /= 2) {
      d.set(keys[i], IntRange{fallback.lo, hi});
      if (f.max_case_bytes(d).bytes <= budget && f.check_domain(d).empty()) break;
    }
    expect_valid_cases(f, d, keys[i] + " = " + std::to_string(d.int_range(keys[i]).hi), false, 1);
  }
}

// Every real range (the values' magnitudes, scales, rates) at its schema
// maximum at once, all lowered together in tenths of their spans until the
// family's cross-key limits (check_domain) accept the domain; then each
// choice (a dtype, a values kind, a mask) alone in its key, so every kind
// meets the maxima. Magnitude keys compound (ternary: a scale of 1e9 times
// an outlier factor of 1e11; attention: key_growth 1e6 past f16's 65504):
// each alone at its maximum drew valid cases, together they drew cases
// outside the contract.
void check_real_maxima(const Family& f) {
  std::vector<const Field*> fields, choice_fields;
  std::vector<std::string> keys, choice_keys;
  range_keys(f.domain_schema(), "", FieldKind::real_range, fields, keys);
  range_keys(f.domain_schema(), "", FieldKind::choices, choice_fields, choice_keys);
  if (keys.empty()) return;
  Values d = Values::defaults(f.domain_schema());
  for (size_t i = 0; i < choice_keys.size(); ++i) d.set(choice_keys[i], Choices(choice_fields[i]->allowed));
  const Values defaults = d;
  for (int tenth = 10; tenth >= 0; --tenth) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const double lo = defaults.real_range(keys[i]).lo, top = std::max(lo, fields[i]->max);
      const double at = lo + (top - lo) * tenth / 10;
      d.set(keys[i], RealRange{at, at});
    }
    if (f.check_domain(d).empty()) break;
  }
  if (!f.check_domain(d).empty()) return;  // only the defaults' own ranges fit: the other checks have them
  for (size_t i = 0; i < choice_keys.size(); ++i)
    for (const std::string& one : choice_fields[i]->allowed) {
      Values only = d;
      only.set(choice_keys[i], Choices{one});
      if (f.check_domain(only).empty())
        expect_valid_cases(f, only, "every real range at its largest, " + choice_keys[i] + " = " + one, false,
                           8);
    }
}

// One test over the registry (families register at static initialisation,
// so they are not known yet when parameterized tests are instantiated).
TEST(Extremes, GeneratedCasesPassTheFamilysValidation) {
  for (const Family* f : Registry::instance().families())
    if (std::string(f->name()).rfind("toy", 0) != 0) check_extremes(*f);
}

TEST(Extremes, RealRangesAtTheirMaximaTogetherDrawValidCases) {
  for (const Family* f : Registry::instance().families())
    if (std::string(f->name()).rfind("toy", 0) != 0) check_real_maxima(*f);
}

}  // namespace
}  // namespace kprop
