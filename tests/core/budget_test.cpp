// The memory budget (run.max_case_mb, Family::max_case_bytes). The
// generator at each domain's extremes is tests/sweeps/extremes_test.cpp's.
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

}  // namespace
}  // namespace kprop
