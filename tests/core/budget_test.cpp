// The memory budget (run.max_case_mb, Family::max_case_bytes) and the
// generator at its domain's extremes: every case it draws there passes the
// family's own validation (the case codec, which validates) and, where small
// enough, runs through the reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <filesystem>

#include "kprop/spec.h"

namespace kprop {
namespace {

namespace fs = std::filesystem;

// A domain: the schema's defaults with every int_range at its schema maximum.
void at_maxima(const Schema& schema, const std::string& prefix, Values& d) {
  for (const Field& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    if (f.kind == FieldKind::map) at_maxima(f.children, key, d);
    if (f.kind == FieldKind::int_range) d.set(key, IntRange{int64_t(f.max), int64_t(f.max)});
  }
}

void int_range_keys(const Schema& schema, const std::string& prefix, std::vector<const Field*>& fields,
                    std::vector<std::string>& keys) {
  for (const Field& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    if (f.kind == FieldKind::map) int_range_keys(f.children, key, fields, keys);
    if (f.kind == FieldKind::int_range) fields.push_back(&f), keys.push_back(key);
  }
}

TEST(Budget, ADomainAtTheSchemaMaximaIsRejected) {
  for (const Family* f : Registry::instance().families()) {
    if (std::string(f->name()).rfind("toy", 0) == 0) continue;
    Values d = Values::defaults(f->domain_schema());
    at_maxima(f->domain_schema(), "", d);
    const bool over = f->max_case_bytes(d).bytes > 1024.0 * 1024 * 1024 || !f->check_domain(d).empty();
    EXPECT_TRUE(over) << f->name() << ": the schema maxima fit 1024 MB (" << f->max_case_bytes(d).dims << ")";
  }
  const std::string text =
      "spec: t\nfamily: attention.fwd\ndomain:\n  nq: [1, 4096]\n  nk: [1, 4096]\n  dim: [1, 1024]\n";
  try {
    parse_spec(text, "t.yaml");
    FAIL() << "loaded";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("t.yaml:4:3: the largest case of this domain needs ~"), std::string::npos) << what;
    EXPECT_NE(what.find("over run.max_case_mb = 1024; narrow batch, heads_kv, group, nq, nk or dim or raise "
                        "run.max_case_mb"),
              std::string::npos)
        << what;
  }
  // The budget is the spec's own.
  EXPECT_NO_THROW(parse_spec(text + "run: {max_case_mb: 1000000}\n", "t.yaml"));
}

TEST(Budget, KvcacheTokenLimitIsCheckedAtLoad) {
  EXPECT_THROW(
      parse_spec("spec: t\nfamily: kvcache\ndomain: {batch: [1, 256], prompt_len: [1, 4096]}\n", "t.yaml"),
      InputError);
}

TEST(Budget, ShippedSpecsLoadAndCasesOverTheBudgetAreNamed) {
  for (const auto& e : fs::directory_iterator(fs::path(KPROP_SOURCE_DIR) / "specs")) {
    if (e.path().extension() == ".yaml") {
      EXPECT_NO_THROW(load_spec(e.path().string())) << e.path();
    }
  }
  Spec spec = load_spec((fs::path(KPROP_SOURCE_DIR) / "specs" / "attention_fwd.yaml").string());
  const AnyCase c = spec.family->generator(spec.domain)(rc::Random(3), 100).value();
  EXPECT_EQ(check_case_budget(spec, c), "");
  spec.run.max_case_mb = 1;
  Values big = spec.domain;
  big.set("nq", IntRange{400, 400});
  big.set("nk", IntRange{400, 400});
  const AnyCase large = spec.family->generator(big)(rc::Random(3), 100).value();
  const std::string why = check_case_budget(spec, large);
  EXPECT_NE(why.find("over run.max_case_mb = 1"), std::string::npos) << why;
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
