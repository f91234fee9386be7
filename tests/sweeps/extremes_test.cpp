// The generator at its domain's extremes: every case it draws there passes
// the family's own validation (the case codec, which validates) and, where
// small enough, runs through the reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "kprop/spec.h"

namespace kprop {
namespace {

void int_range_keys(const Schema& schema, const std::string& prefix, std::vector<const Field*>& fields,
                    std::vector<std::string>& keys) {
  for (const Field& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    if (f.kind == FieldKind::map) int_range_keys(f.children, key, fields, keys);
    if (f.kind == FieldKind::int_range) fields.push_back(&f), keys.push_back(key);
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
  int_range_keys(f.domain_schema(), "", fields, keys);
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

// One test over the registry (families register at static initialisation,
// so they are not known yet when parameterized tests are instantiated).
TEST(Extremes, GeneratedCasesPassTheFamilysValidation) {
  for (const Family* f : Registry::instance().families())
    if (std::string(f->name()).rfind("toy", 0) != 0) check_extremes(*f);
}

}  // namespace
}  // namespace kprop
