// Contract checks run on every registered family, so a new family is held to
// them without writing a test (and families keep no copies of them): the
// YAML codec round-trips generated cases, every byte string decodes to a
// valid case, seed bytes decode back to the generated case, shrink
// candidates are valid, inside the domain and different from the case,
// transforms give valid cases, a reference implementation exists, and every
// invariant says which outputs it reads. A family a spec declares (family:
// op) is held to them too, on shipped specs of specs/ops/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "kprop/corpus.h"
#include "kprop/family.h"
#include "kprop/rng.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "tests/support/registered.h"

namespace kprop {
namespace {

std::vector<const Family*> all() {
  return Registry::instance().families();
}

// The families shipped op specs declare, each owned by its spec, which
// lives as long as the test program (none in a build without the op
// family). One family's code serves every declaration, so these six cover
// what a declaration can hold, on small cases: index inputs and masks
// (embedding_bag), specials and a boolean mask (masked_softmax),
// integer-valued weights (dequant_matmul), attrs (top_p), an exec:
// reference (sort), sentinels in an index tensor (cross_entropy's -100).
// The elementwise ops (rmsnorm, swiglu, ...) add only larger cases: 45 s
// more.
const std::vector<Spec>& declaring_specs() {
  static const std::vector<Spec> specs = [] {
    std::vector<Spec> out;
    const auto& kinds = declared_families();
    if (std::none_of(kinds.begin(), kinds.end(), [](const auto& d) { return d.family == "op"; })) return out;
    for (const char* name :
         {"cross_entropy", "dequant_matmul", "embedding_bag", "masked_softmax", "sort", "top_p"})
      out.push_back(
          load_spec((std::filesystem::path(KPROP_SOURCE_DIR) / "specs/ops" / name).string() + ".yaml"));
    return out;
  }();
  return specs;
}
std::vector<const Family*> declared() {
  std::vector<const Family*> out;
  for (const Spec& s : declaring_specs()) out.push_back(s.family);
  return out;
}

std::string text(const Family& f, const AnyCase& c) {
  return emit_yaml(f.to_yaml(c));
}

// Two case trees with the same shape and scalars (what emit_yaml would
// print the same), without printing them.
bool same_tree(const YAML::Node& a, const YAML::Node& b) {
  if (a.Type() != b.Type()) return false;
  if (a.IsScalar()) return a.Scalar() == b.Scalar();
  if (a.size() != b.size()) return false;
  if (a.IsSequence()) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_tree(a[i], b[i])) return false;
    return true;
  }
  for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y)
    if (!same_tree(x->first, y->first) || !same_tree(x->second, y->second)) return false;
  return true;
}

class FamilyContract : public ::testing::TestWithParam<const Family*> {};

TEST_P(FamilyContract, HasAReferenceImplementation) {
  EXPECT_GE(GetParam()->find_implementation("reference"), 0);
}

// ... and its content hash (a transform's randomness) is the stored case's
// too, so a replay derives the same transformed case; cases that print
// differently hash differently (the hash reads what the file keeps).
TEST_P(FamilyContract, YamlRoundTripsGeneratedCases) {
  const Family& f = *GetParam();
  const Values domain = Values::defaults(f.domain_schema());
  const auto gen = f.generator(domain);
  rc::Random random(99);
  std::map<uint64_t, std::string> seen;
  for (int i = 0; i < 20; ++i) {
    const AnyCase c = gen(random.split(), i * 5).value();
    const AnyCase back = f.from_yaml(YAML::Load(text(f, c)));
    EXPECT_EQ(text(f, back), text(f, c));
    EXPECT_EQ(f.content_hash(back), f.content_hash(c)) << f.name() << ":\n" << text(f, c);
    const auto [at, fresh] = seen.emplace(f.content_hash(c), text(f, c));
    if (!fresh) {
      EXPECT_EQ(at->second, text(f, c)) << f.name() << ": two cases, one hash";
    }
  }
}

TEST_P(FamilyContract, EveryByteStringDecodes) {
  const Family& f = *GetParam();
  const Values domain = Values::defaults(f.domain_schema());
  for (size_t len = 0; len < 400; len += 7) {
    std::vector<uint8_t> bytes(len);
    for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + len);
    const AnyCase c = f.from_bytes(bytes.data(), bytes.size(), domain);
    // from_yaml validates: the decoded case keeps the family's contract.
    EXPECT_NO_THROW(f.from_yaml(YAML::Load(text(f, c)))) << f.name() << " len " << len;
    EXPECT_EQ(f.in_domain(c, domain), "") << f.name() << " len " << len;
  }
}

TEST_P(FamilyContract, SeedBytesDecodeToTheGeneratedCase) {
  const Family& f = *GetParam();
  const Values domain = Values::defaults(f.domain_schema());
  for (uint64_t seed = 1; seed <= 10; ++seed)
    for (int size : {0, 30, 100}) {
      const auto bytes = f.seed_bytes(domain, seed, size);
      const AnyCase generated = f.generator(domain)(rc::Random(seed), size).value();
      const AnyCase decoded = f.from_bytes(bytes.data(), bytes.size(), domain);
      EXPECT_EQ(text(f, decoded), text(f, generated)) << f.name() << " seed " << seed << " size " << size;
    }
}

// Every shrink candidate of generated cases (five, of growing size) is a
// valid case (from_yaml validates it against the contract), inside the
// domain, and not the case itself (a step that changes nothing would loop).
// Node to node: printing and parsing each candidate's text was 60% of the
// test (yaml-cpp's emitter and scanner); the text round trip is
// YamlRoundTripsGeneratedCases'. A candidate differs from the case in what
// its file keeps, often in one value: its content hash differs too (a hash
// that skipped a tensor would give a transform the same randomness on both);
// read back from its YAML, it hashes the same (a replay derives the same
// transformed case).
TEST_P(FamilyContract, ShrinkCandidatesAreValidAndDifferent) {
  const Family& f = *GetParam();
  const Values domain = Values::defaults(f.domain_schema());
  rc::Random random(5);
  for (int k = 0; k < 5; ++k) {
    const AnyCase c = f.generator(domain)(random.split(), 20 + 20 * k).value();
    const YAML::Node original = f.to_yaml(c);
    auto seq = f.shrinks(c, domain);
    int n = 0;
    while (auto s = seq.next()) {
      const YAML::Node candidate = f.to_yaml(*s);
      EXPECT_NO_THROW(f.from_yaml(candidate)) << f.name() << ":\n" << emit_yaml(candidate);
      EXPECT_EQ(f.in_domain(*s, domain), "") << f.name();
      EXPECT_FALSE(same_tree(candidate, original)) << f.name() << ": a shrink candidate equal to the case:\n"
                                                   << emit_yaml(candidate);
      EXPECT_NE(f.content_hash(*s), f.content_hash(c))
          << f.name() << ": a shrink candidate hashes as the case:\n"
          << emit_yaml(candidate);
      // A shrunk counterexample is what gets stored: read back, it hashes the same.
      EXPECT_EQ(f.content_hash(f.from_yaml(candidate)), f.content_hash(*s)) << f.name() << ":\n"
                                                                            << emit_yaml(candidate);
      if (++n >= 100) break;
    }
  }
}

// Every transform of the family, on 50 cases of each shipped spec of it (of
// its default domain when it has none), gives a valid case (from_yaml
// validates): a metamorphic relation is only as good as its derived case.
TEST_P(FamilyContract, TransformsGiveValidCases) {
  const Family& f = *GetParam();
  if (f.transforms().empty()) GTEST_SKIP() << f.name() << " exports no transforms";
  std::vector<Values> domains;
  for (const std::string& path : testing::shipped_specs([&](const Family& g) { return &g == &f; }))
    domains.push_back(load_spec(path).domain);
  if (domains.empty()) domains.push_back(Values::defaults(f.domain_schema()));
  for (const Values& domain : domains)
    for (uint64_t seed = 1; seed <= 50; ++seed) {
      const auto bytes = f.seed_bytes(domain, seed, 1 + seed % 60);
      const AnyCase c = f.from_bytes(bytes.data(), bytes.size(), domain);
      for (size_t i = 0; i < f.transforms().size(); ++i) {
        const TransformInfo& t = f.transforms()[i];
        const AnyCase derived = f.transform_case(c, i, Values::defaults(t.params), rng::mix(seed));
        EXPECT_NO_THROW(f.from_yaml(YAML::Load(text(f, derived))))
            << f.name() << " " << t.name << " on case " << seed << ":\n"
            << text(f, derived);
      }
    }
}

// Output coverage counts on these declarations (kprop/output_reads.h): an
// invariant that does not say what it reads, or names no output of the
// family's contract, would make "unchecked outputs" lie.
TEST_P(FamilyContract, EveryInvariantDeclaresTheOutputsItReads) {
  const Family& f = *GetParam();
  std::vector<std::string> outputs;
  for (const auto& op : f.external_ops()) outputs.insert(outputs.end(), op.outputs.begin(), op.outputs.end());
  if (!f.external_ops().empty()) {
    ASSERT_FALSE(outputs.empty()) << f.name() << ": its external ops declare no outputs";
  }
  for (const auto& inv : f.invariants()) {
    ASSERT_TRUE(inv.reads.has_value())
        << f.name() << " invariant " << inv.name << " does not declare its reads";
    // A family without external ops has no outputs to audit (coverage is
    // of an external target's outputs): its names are its own.
    if (f.external_ops().empty()) continue;
    for (const auto& r : *inv.reads)
      EXPECT_TRUE(r == "*" || std::find(outputs.begin(), outputs.end(), r) != outputs.end())
          << f.name() << " invariant " << inv.name << " reads '" << r
          << "', not an output of the family's external ops";
  }
}

// The schema field at a dotted key ("tree.nodes"), or nullptr.
const Field* field_at(const Schema& schema, const std::string& key) {
  const size_t dot = key.find('.');
  for (const Field& f : schema)
    if (f.key == key.substr(0, dot))
      return dot == std::string::npos ? &f : field_at(f.children, key.substr(dot + 1));
  return nullptr;
}

// Each declared focus (InvariantInfo::observes) as (invariant, field, the
// field's values it observes).
struct Focus {
  size_t invariant;
  std::string field;
  const Choices* observed;
};
std::vector<Focus> foci(const Family& f) {
  std::vector<Focus> out;
  for (size_t i = 0; i < f.invariants().size(); ++i)
    for (const auto& [field, observed] : f.invariants()[i].observes) out.push_back({i, field, &observed});
  return out;
}

// A run draws from where its live invariants observe (kprop/focus.h), so an
// invariant must observe nothing elsewhere: on cases whose field takes any
// other value the schema allows, it discards or finds not applicable, on
// every implementation of the family, mutants too (a bug must not make an
// unobserved case observable). Checked with a shipped spec's reference.
TEST_P(FamilyContract, InvariantsObserveNothingOutsideTheirFocus) {
  const Family& f = *GetParam();
  if (foci(f).empty()) GTEST_SKIP() << f.name() << " declares no focus";
  const auto paths = testing::shipped_specs([&](const Family& g) { return &g == &f; });
  ASSERT_FALSE(paths.empty()) << f.name() << ": no shipped spec to check its focus with";
  const Spec spec = load_spec(paths.front());
  for (const Focus& focus : foci(f)) {
    const InvariantInfo& info = f.invariants()[focus.invariant];
    const Field* field = field_at(f.domain_schema(), focus.field);
    ASSERT_NE(field, nullptr) << f.name() << " " << info.name << " observes unknown field " << focus.field;
    ASSERT_EQ(field->kind, FieldKind::choices) << f.name() << " " << info.name << ": " << focus.field;
    Choices rest;
    for (const std::string& v : field->allowed)
      if (std::find(focus.observed->begin(), focus.observed->end(), v) == focus.observed->end())
        rest.push_back(v);
    ASSERT_FALSE(rest.empty()) << f.name() << " " << info.name << " observes every value of " << focus.field;
    Values domain = spec.domain;
    domain.set(focus.field, rest);
    ASSERT_EQ(f.check_domain(domain), "") << f.name();
    InvariantUse use;
    use.index = focus.invariant;
    use.name = info.name;
    use.params = Values::defaults(info.params);
    const auto gen = f.generator(domain);
    rc::Random random(17);
    // 400 cases: the cases an invariant observes can be rare
    // (dq_dk_rounded_to_nearest: about one f16/bf16 case of attention_bwd's
    // in seventeen), and the cases it discards cost no target run.
    bool observed = false;
    for (int n = 0; n < 400 && !observed; ++n) {
      const AnyCase c = gen(random.split(), n % 101).value();
      for (const ImplInfo& impl : f.implementations()) {
        const Outcome o = check_case(spec, resolve_target(spec, impl.name), use, c).outcome;
        if (o == Outcome::discard || o == Outcome::not_applicable) continue;
        ADD_FAILURE() << f.name() << " " << info.name << " gave a verdict on target " << impl.name
                      << " outside " << focus.field << " [" << join(*focus.observed) << "]:\n"
                      << text(f, c);
        observed = true;
        break;
      }
    }
  }
}

// Drawing from the focus gives the cases of the whole domain that lie there,
// in the same proportions: what a run draws from it stands for what the
// whole domain would have given the invariant (the family picks the field
// uniformly and independently of the rest, InvariantInfo::observes). A
// builder that drew the field by RapidCheck's size, say, would give the
// focus's cases other sizes than the whole domain's cases there. Compared
// per dim of the family's statistics (and its size measure) by a
// two-sample Kolmogorov-Smirnov test: the whole domain's 2,000 cases kept
// where they lie in the focus (n, about 500 where the focus keeps one value
// of four) against 800 drawn from the focus (m), with sizes cycling
// alike; a statistic above c(α)·sqrt((n + m)/(n·m)), c(α) =
// sqrt(-ln(α/2)/2) = 2.69 at α = 1e-6, rejects them as one distribution.
// (Seeds are fixed: the test gives the same answer on every run.)
TEST_P(FamilyContract, FocusDrawsTheWholeDomainsCasesThere) {
  const Family& f = *GetParam();
  if (foci(f).empty()) GTEST_SKIP() << f.name() << " declares no focus";
  const Values whole = Values::defaults(f.domain_schema());
  // Each case's dims (numeric, or a categorical one's name as its rank
  // among the names seen) and its size, by name.
  using Sample = std::map<std::string, std::vector<double>>;
  std::map<std::string, std::map<std::string, double>> ranks;
  auto add = [&](Sample& sample, const AnyCase& c) {
    const CaseStats st = f.stats(c);
    sample["size"].push_back(double(st.size));
    for (const auto& d : st.dims) {
      if (d.kind.empty()) {
        sample[d.name].push_back(d.value);
      } else {
        auto& r = ranks[d.name];
        sample[d.name].push_back(r.emplace(d.kind, double(r.size())).first->second);
      }
    }
  };
  for (const Focus& focus : foci(f)) {
    Values narrowed = whole;
    Choices kept;
    for (const std::string& v : whole.choices(focus.field))
      if (std::find(focus.observed->begin(), focus.observed->end(), v) != focus.observed->end())
        kept.push_back(v);
    if (kept.empty() || kept.size() == whole.choices(focus.field).size()) continue;
    narrowed.set(focus.field, kept);
    Sample from_whole, from_focus;
    const auto gen = f.generator(whole), focused = f.generator(narrowed);
    rc::Random a(31), b(32);
    for (int n = 0; n < 2000; ++n) {
      const AnyCase c = gen(a.split(), n % 101).value();
      if (f.in_domain(c, narrowed).empty()) add(from_whole, c);
    }
    for (int n = 0; n < 800; ++n) add(from_focus, focused(b.split(), n % 101).value());
    const double nw = double(from_whole["size"].size()), nf = double(from_focus["size"].size());
    ASSERT_GE(nw, 300) << f.name();  // the test keeps its power
    const double critical = std::sqrt(-std::log(1e-6 / 2) / 2) * std::sqrt((nw + nf) / (nw * nf));
    for (auto& [dim, xs] : from_whole) {
      std::vector<double>& ys = from_focus[dim];
      ASSERT_EQ(xs.size(), size_t(nw)) << dim;
      ASSERT_EQ(ys.size(), size_t(nf)) << dim;
      std::sort(xs.begin(), xs.end());
      std::sort(ys.begin(), ys.end());
      double worst = 0;
      for (size_t i = 0, j = 0; i < xs.size() || j < ys.size();) {
        const double v = j == ys.size() || (i < xs.size() && xs[i] <= ys[j]) ? xs[i] : ys[j];
        while (i < xs.size() && xs[i] == v) ++i;
        while (j < ys.size() && ys[j] == v) ++j;
        worst = std::max(worst, std::fabs(double(i) / nw - double(j) / nf));
      }
      EXPECT_LE(worst, critical) << f.name() << " " << f.invariants()[focus.invariant].name << ": dim " << dim
                                 << " of the focus " << focus.field << " [" << join(kept)
                                 << "] differs from the whole domain's cases there";
    }
  }
}

// The family's name; a declared one's, op_<its spec>.
// InvariantInfo::discards_header: where it holds on a case's header, the
// invariant discards the full case (or finds it not applicable), whatever
// the target, and reaches the same verdict on the hollow case (the header alone, Family::build_hollow).
// A run that leaves such cases' values out (kprop/focus.h) then gets the
// same verdicts, counts and reasons. Hollow and full cases come from the
// same draws (one Random, one size).
TEST_P(FamilyContract, HeaderDiscardsAreTheInvariantsOwn) {
  const Family& f = *GetParam();
  std::vector<size_t> declaring;
  for (size_t i = 0; i < f.invariants().size(); ++i)
    if (f.invariants()[i].discards_header) declaring.push_back(i);
  if (declaring.empty()) GTEST_SKIP() << f.name() << " declares no header discard";
  const auto paths = testing::shipped_specs([&](const Family& g) { return &g == &f; });
  ASSERT_FALSE(paths.empty()) << f.name() << ": no shipped spec to check its header discards with";
  const Spec spec = load_spec(paths.front());
  const auto full = f.generator(spec.domain);
  const auto hollow = f.generator(spec.domain, [](const AnyCase&) { return true; });
  for (const size_t i : declaring) {
    const InvariantInfo& info = f.invariants()[i];
    InvariantUse use;
    use.index = i;
    use.name = info.name;
    use.params = Values::defaults(info.params);
    rc::Random random(29);
    int discarded = 0, kept = 0;
    for (int n = 0; n < 300; ++n) {
      const rc::Random r = random.split();
      const AnyCase c = full(r, n % 101).value(), h = hollow(r, n % 101).value();
      ASSERT_EQ(f.stats(h).summary, f.stats(c).summary) << "not the same draws";
      const bool on_header = info.discards_header(h);
      ASSERT_EQ(on_header, info.discards_header(c)) << f.name() << " " << info.name << ":\n" << text(f, c);
      if (!on_header) {
        ++kept;
        continue;
      }
      ++discarded;
      EXPECT_NE(text(f, h), text(f, c)) << "the hollow case has its values: build_hollow is not wired";
      for (const ImplInfo& impl : f.implementations()) {
        const Impl target = resolve_target(spec, impl.name);
        const Verdict v = check_case(spec, target, use, c);
        ASSERT_TRUE(v.outcome == Outcome::discard || v.outcome == Outcome::not_applicable)
            << f.name() << " " << info.name << " on " << impl.name << " kept a case its header discards:\n"
            << text(f, c);
        const Verdict vh = check_case(spec, target, use, h);  // past the assertion: it could read no values
        EXPECT_EQ(vh.outcome, v.outcome) << impl.name;
        EXPECT_EQ(vh.message, v.message) << impl.name;
      }
    }
    EXPECT_GT(discarded, 0) << info.name << ": no header it discards in 300 draws";
    EXPECT_GT(kept, 0) << info.name << ": no header it keeps in 300 draws";
  }
}

std::string param_name(const ::testing::TestParamInfo<const Family*>& info) {
  std::string name = info.param->name();
  for (const Spec& s : declaring_specs())
    if (s.family == info.param) name += "_" + s.name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}
INSTANTIATE_TEST_SUITE_P(Registered, FamilyContract, ::testing::ValuesIn(all()), param_name);
INSTANTIATE_TEST_SUITE_P(Declared, FamilyContract, ::testing::ValuesIn(declared()), param_name);

}  // namespace
}  // namespace kprop
