// Shrinking stays inside the spec's domain: for every spec in specs/, with
// its domain narrowed (lower bounds of every range raised to the midpoint,
// the first of several choices dropped), every generated case is in_domain
// and so is every shrink candidate, at the first level and a few levels down
// a greedy path. Coupled dims shrink together.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kprop/spec.h"
#include "tests/support/registered.h"

namespace kprop {
namespace {

namespace fs = std::filesystem;

// The shipped specs whose family this build has (-DKPROP_FAMILIES builds some).
std::vector<std::string> spec_files() {
  return testing::shipped_specs([](const Family&) { return true; });
}

// A family a test names by hand: skipped in a build without it.
#define KPROP_NEEDS_FAMILY(name) \
  if (!Registry::instance().find(name)) GTEST_SKIP() << "family " name " is not built (KPROP_FAMILIES)"

void narrow(const Schema& schema, const std::string& prefix, Values& d) {
  for (const Field& f : schema) {
    const std::string key = prefix.empty() ? f.key : prefix + "." + f.key;
    switch (f.kind) {
      case FieldKind::map:
        narrow(f.children, key, d);
        break;
      case FieldKind::int_range: {
        IntRange r = d.int_range(key);
        r.lo = (r.lo + r.hi + 1) / 2;
        d.set(key, r);
        break;
      }
      case FieldKind::real_range: {
        RealRange r = d.real_range(key);
        r.lo = (r.lo + r.hi) / 2;
        d.set(key, r);
        break;
      }
      case FieldKind::choices: {
        Choices c = d.choices(key);
        if (c.size() > 1) c.erase(c.begin());
        d.set(key, c);
        break;
      }
      default:
        break;
    }
  }
}

// Cases per spec: 1,000 where a first level is cheap; fewer where every
// case has thousands of value-level candidates (layernorm, softmax_topk,
// ternary), copies every tensor per candidate (attention) or re-drafts trees
// under the model (dflash), to keep the test within a minute.
int cases_for(const Family& f) {
  const std::string name = f.name();
  if (name.rfind("attention", 0) == 0) return 150;
  if (name == "dflash") return 20;
  if (name == "layernorm" || name == "softmax_topk" || name == "ternary") return 250;
  return 1000;
}

class ShrinkDomain : public ::testing::TestWithParam<std::string> {};

TEST_P(ShrinkDomain, CandidatesStayInsideANarrowedDomain) {
  const Spec spec = load_spec(GetParam());
  const Family& f = *spec.family;
  Values domain = spec.domain;
  narrow(f.domain_schema(), "", domain);
  const int n = cases_for(f);
  int failures = 0;
  for (int i = 0; i < n && failures < 5; ++i) {
    AnyCase c = f.generator(domain)(rc::Random(uint64_t(1000 + i)), i % 101).value();
    if (const std::string why = f.in_domain(c, domain); !why.empty()) {
      ADD_FAILURE() << spec.name << " case " << i
                    << ": the generator drew a case outside the domain: " << why;
      ++failures;
      continue;
    }
    // The first level, then greedily down the first candidate, 3 levels.
    for (int level = 0; level < 4 && failures < 5; ++level) {
      auto seq = f.shrinks(c, domain);
      std::optional<AnyCase> next;
      int count = 0;
      while (auto s = seq.next()) {
        if (const std::string why = f.in_domain(*s, domain); !why.empty()) {
          ADD_FAILURE() << spec.name << " case " << i << " level " << level << ": candidate "
                        << f.stats(*s).summary << " is outside the domain: " << why;
          ++failures;
          break;
        }
        if (!next) next = *s;
        if (level > 0 && ++count >= 64) break;  // below the first level: a sample
      }
      if (!next) break;
      c = *next;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, ShrinkDomain, ::testing::ValuesIn(spec_files()),
                         [](const auto& info) { return fs::path(info.param).stem().string(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ShrinkDomain);

// Greedy descent that accepts every candidate: the smallest case the
// shrinker reaches inside the domain.
AnyCase shrink_fully(const Family& f, AnyCase c, const Values& domain) {
  for (int step = 0; step < 10000; ++step) {
    auto seq = f.shrinks(c, domain);
    auto s = seq.next();
    if (!s) return c;
    c = *s;
  }
  return c;
}

Spec spec_with(const std::string& file, const std::string& replace, const std::string& by) {
  std::ifstream in(fs::path(KPROP_SOURCE_DIR) / "specs" / file);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const size_t at = s.find(replace);
  EXPECT_NE(at, std::string::npos) << replace;
  s.replace(at, replace.size(), by);
  return parse_spec(s, file);
}

TEST(ShrinkCoupled, LayernormNeverShrinksBelowTheRanges) {
  KPROP_NEEDS_FAMILY("layernorm");
  const Spec spec =
      spec_with("layernorm.yaml", "  rows: [1, 8]\n  dim: [1, 64]\n", "  rows: [2, 3]\n  dim: [3, 4]\n");
  for (int i = 0; i < 20; ++i) {
    const AnyCase c = spec.family->generator(spec.domain)(rc::Random(uint64_t(i)), 100).value();
    const AnyCase s = shrink_fully(*spec.family, c, spec.domain);
    EXPECT_EQ(spec.family->in_domain(s, spec.domain), "");
    const YAML::Node n = spec.family->to_yaml(s);
    EXPECT_EQ(n["x"].size(), 2u) << spec.family->stats(s).summary;
    EXPECT_EQ(n["gamma"].size(), 3u) << spec.family->stats(s).summary;
  }
}

TEST(ShrinkCoupled, AttentionShrinksNqWithNkWhenTheDomainTiesThem) {
  KPROP_NEEDS_FAMILY("attention.fwd");
  const Spec spec = spec_with("attention_fwd.yaml", "  nq: [1, 40]\n  nk: [1, 40]\n  same_length_rate: 0.25",
                              "  nq: [3, 8]\n  nk: [3, 8]\n  same_length_rate: 1");
  for (int i = 0; i < 10; ++i) {
    const AnyCase c = spec.family->generator(spec.domain)(rc::Random(uint64_t(i)), 100).value();
    const AnyCase s = shrink_fully(*spec.family, c, spec.domain);
    const YAML::Node shape = spec.family->to_yaml(s)["shape"];
    EXPECT_EQ(shape["nq"].as<int>(), 3) << spec.family->stats(s).summary;
    EXPECT_EQ(shape["nk"].as<int>(), 3) << spec.family->stats(s).summary;
  }
}

}  // namespace
}  // namespace kprop
