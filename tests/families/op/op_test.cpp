// The op family (a kernel declared in the spec, issue 19): one load-time
// error per error class of the `op:` declaration, at its file:line:col; the
// generic shrinker stays inside the declared domain and reaches the minimal
// dims of a bug that needs D >= 3; the YAML corpus codec round-trips every
// value bit for bit; every byte string decodes to a case in the domain.
#include "kernels/op/op.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "kprop/listing.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/op/family.h"

namespace kprop::op {
namespace {

// A declaration using every kind of constraint the shrinker must respect:
// plain ranges, multiple_of (H), one_of (K), a real and an integer attr
// range, an input with its own dtype (v) and two outputs.
const char* const kDomainSpec = R"(spec: shrink
family: op
op:
  dims:
    T: [1, 8]
    D: [1, 24]
    H: {range: [2, 16], multiple_of: 2}
    K: {one_of: [7, 3, 5]}
  attrs:
    eps: {range: [1.0e-6, 1.0e-3]}
    n: {range: [2, 9], int: true}
  inputs:
    x: {shape: [T, D], dtype: [f32, f64], values: [normal, integer, large, small, constant_rows]}
    w: {shape: [D], values: {normal: {mean: 1, std: 0.1}}}
    v: {shape: [H, K], dtype: [f64]}
  outputs:
    y: {shape: [T, D]}
    z: {shape: [H, K]}
  reference:
    y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w
    z: v * n
target: reference
invariants:
  - matches_reference
)";

const Case& as_case(const AnyCase& c) {
  return *static_cast<const Case*>(c.get());
}

const OpFamily& op_family(const Spec& spec) {
  const auto* f = dynamic_cast<const OpFamily*>(spec.family);
  if (!f) throw std::logic_error("spec " + spec.name + " is not an op spec");
  return *f;
}

// ---------------------------------------------------------------- load-time errors
// The loader's message for `text`, or "" when it loads.
std::string load_error(const std::string& text) {
  try {
    parse_spec(text, "op.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A valid rmsnorm-like spec; each error test replaces one line of it:
// line 4 the dims, 7 input x, 8 the outputs, 10 the reference.
std::string base_spec(
    const std::string& dims = "{T: [1, 8], D: [1, 16]}",
    const std::string& x = "{shape: [T, D], dtype: [f32, f64]}",
    const std::string& outputs = "{y: {shape: [T, D]}}",
    const std::string& reference = "y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps)") {
  return fmt::format(R"(spec: t
family: op
op:
  dims: {}
  attrs: {{eps: {{one_of: [1.0e-5, 1.0e-6]}}}}
  inputs:
    x: {}
  outputs: {}
  reference:
    {}
target: reference
)",
                     dims, x, outputs, reference);
}

// Asserts the message starts with `prefix` (file:line:col: message...).
#define EXPECT_LOAD_ERROR(text, prefix)                                                                  \
  do {                                                                                                   \
    const std::string message_ = load_error(text);                                                       \
    EXPECT_EQ(message_.substr(0, std::string(prefix).size()), (prefix)) << "full message: " << message_; \
  } while (0)

TEST(OpDecl, TheBaseSpecLoads) {
  EXPECT_EQ(load_error(base_spec()), "");
  EXPECT_EQ(load_error(kDomainSpec), "");
}

TEST(OpDecl, UnknownKeyNamesTheKeyAndTheValidOnes) {
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], dtyp: f32}"),
      "op.yaml:7:24: unknown key 'dtyp' in input x (did you mean 'dtype'?); valid: shape, dtype, "
      "values");
  // A key of the op section itself.
  std::string s = base_spec();
  s.replace(s.find("  attrs:"), 8, "  atrs:");
  EXPECT_LOAD_ERROR(s, "op.yaml:5:3: unknown key 'atrs' in op (did you mean 'attrs'?)");
  // A key of a dim.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [1, 16], multiple: 2}}"),
                    "op.yaml:4:41: unknown key 'multiple' in dim D (did you mean 'multiple_of'?)");
}

TEST(OpDecl, ShapeNamingAnUndeclaredDim) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, E]}"),
                    "op.yaml:7:20: input x: shape names undeclared dim 'E' (did you mean 'T'?); valid: T, D");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, Dd]}}"),
                    "op.yaml:8:28: output y: shape names undeclared dim 'Dd' (did you mean 'D'?)");
}

TEST(OpDecl, BadRanges) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [16, 1]}"),
                    "op.yaml:4:24: dim D is an inverted range [16, 1]: lo must be <= hi");
  EXPECT_LOAD_ERROR(base_spec("{T: [0, 8], D: [1, 16]}"), "op.yaml:4:13: dim T: extents start at 1 (got 0)");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [5, 7], multiple_of: 8}}"),
                    "op.yaml:4:24: dim D: no value in [5, 7] is a multiple of 8");
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: {range: [1, 16], one_of: [4, 32]}}"),
                    "op.yaml:4:49: dim D: one_of value 32 is outside [1, 16] or not a multiple of 1");
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D], values: {uniform: {lo: 2, hi: 1}}}"),
      "op.yaml:7:42: input x.values.uniform: lo must be <= hi (got 2 > 1)");
}

TEST(OpDecl, ReferenceThatDoesNotTypeCheck) {
  // An unknown name: the column points into the expression, at the name.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: x / sqrt(mean(x * x, axis=-1, keepdims=true) + eps) * w"),
                    "op.yaml:10:62: reference.y: unknown name 'w' (did you mean 'x'?); valid: x, T, D, eps");
  // Shapes that do not broadcast.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: x / sqrt(mean(x * x, axis=-1) + eps)"),
                    "op.yaml:10:8: reference.y: shapes [T, D] and [T] do not broadcast (D vs T)");
  // A boolean is no output value.
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}", "y: x > 0"),
      "op.yaml:10:8: reference.y: is boolean; a reference computes the output's values");
}

TEST(OpDecl, ReferenceShapeNotTheDeclaredOutputShape) {
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}",
                              "y: mean(x * x, axis=-1)"),
                    "op.yaml:10:8: reference.y: has shape [T], but output y is declared [T, D]");
}

TEST(OpDecl, MissingReferenceForAnOutput) {
  EXPECT_LOAD_ERROR(
      base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}, s: {shape: [T]}}"),
      "op.yaml:10:5: output 's' has no reference expression");
  // And a reference for an output that is not declared.
  EXPECT_LOAD_ERROR(base_spec("{T: [1, 8], D: [1, 16]}", "{shape: [T, D]}", "{y: {shape: [T, D]}}", "z: x"),
                    "op.yaml:10:5: reference for 'z', which is not a declared output (did you mean 'y'?)");
}

TEST(OpDecl, OpSectionUnderAnotherFamily) {
  EXPECT_LOAD_ERROR("spec: t\nfamily: layernorm\nop:\n  dims: {T: [1, 2]}\n",
                    "op.yaml:3:1: 'op:' belongs to family: op, not layernorm");
  // And family: op without one.
  EXPECT_LOAD_ERROR("spec: t\nfamily: op\ntarget: reference\n",
                    "op.yaml:2:9: family op needs its 'op:' section declaring the kernel");
}

// ---------------------------------------------------------------- shrinking
double at(const Case& c, const std::string& input, size_t k) {
  for (size_t i = 0; i < c.decl->inputs.size(); ++i)
    if (c.decl->inputs[i].name == input) return c.inputs[i][k];
  throw std::logic_error("no input " + input);
}

int64_t dim(const Case& c, const std::string& name) {
  return c.dims[static_cast<size_t>(c.decl->dim_index(name))];
}

// A case drawn from the generator (as a run draws it) that `pred` accepts.
template <typename Pred>
Case drawn_case(const OpFamily& f, const Values& domain, Pred pred) {
  for (uint64_t seed = 1; seed < 1000; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(domain, seed, 100);
    const AnyCase c = f.from_bytes(bytes.data(), bytes.size(), domain);
    if (pred(as_case(c))) return as_case(c);
  }
  throw std::logic_error("no drawn case satisfies the predicate");
}

// The raw shrinker (before FamilyDef filters by in_domain) proposes only
// cases inside the declaration, and greedy shrinking of a failure that
// needs D >= 3 and x[.., 2] != 0 ends at every dim's smallest valid value
// (H's least multiple of 2, K's least one_of) with D = 3.
TEST(OpShrink, StaysInTheDomainAndReachesTheMinimalDims) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  auto fails = [](const Case& c) {
    const int64_t d = dim(c, "D");
    if (d < 3) return false;
    for (int64_t t = 0; t < dim(c, "T"); ++t)
      if (at(c, "x", static_cast<size_t>(t * d + 2)) != 0) return true;
    return false;
  };
  const Case start = drawn_case(f, spec.domain, [&](const Case& c) { return fails(c) && dim(c, "D") > 8; });
  ASSERT_EQ(Traits::in_domain(start, spec.domain), "");
  Case c = start;
  int steps = 0, candidates = 0;
  for (bool progress = true; progress && steps < 10000;) {
    progress = false;
    // Every candidate of every step is checked, not only those up to the
    // first that still fails.
    std::optional<Case> first;
    rc::Seq<Case> seq = Traits::shrinks(c, spec.domain);
    while (auto next = seq.next()) {
      ++candidates;
      const std::string why = Traits::in_domain(*next, spec.domain);
      ASSERT_EQ(why, "") << "candidate " << candidates << " outside the domain";
      if (!first && fails(*next)) first = std::move(*next);
    }
    if (first) {
      c = std::move(*first);
      ++steps, progress = true;
    }
  }
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, 10000) << "shrinking did not reach a fixed point";
  EXPECT_EQ(dim(c, "T"), 1);
  EXPECT_EQ(dim(c, "D"), 3);
  EXPECT_EQ(dim(c, "H"), 2);
  EXPECT_EQ(dim(c, "K"), 3);
  // Values: the one element that matters is 1, everything else 0.
  EXPECT_EQ(at(c, "x", 0), 0);
  EXPECT_EQ(at(c, "x", 1), 0);
  EXPECT_EQ(at(c, "x", 2), 1);
  for (size_t i = 1; i < c.inputs.size(); ++i)
    for (double v : c.inputs[i]) EXPECT_EQ(v, 0) << c.decl->inputs[i].name;
  // Attrs: toward the low end of their range.
  EXPECT_EQ(c.attrs[0], 1e-6);
  EXPECT_EQ(c.attrs[1], 2);
}

// A planted bug that needs D >= 3, through the whole runner: the kernel's
// sum of squares stops after two elements (a tail loop never run). Found,
// and shrunk to T = 1, D = 3 with the other dims at their least values.
TEST(OpShrink, RunnerShrinksABugNeedingThreeColumnsToTheMinimalDims) {
  Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& loaded = op_family(spec);
  // The same declaration (aliasing the loaded family's), with a mutant.
  auto f = std::make_shared<OpFamily>(std::shared_ptr<const Decl>(spec.declared_family, &loaded.decl()));
  f->mutant("sum_two_columns", "the sum of squares stops after two elements", [](const Case& c) {
    Result r = op::reference(c);
    const int64_t T = dim(c, "T"), D = dim(c, "D");
    if (D < 3) return r;
    const double eps = c.attrs[0];
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t j = 0; j < 2; ++j)
        ss += at(c, "x", static_cast<size_t>(t * D + j)) * at(c, "x", t * D + j);
      for (int64_t j = 0; j < D; ++j)
        r.outputs[0][static_cast<size_t>(t * D + j)] = at(c, "x", static_cast<size_t>(t * D + j)) /
                                                       std::sqrt(ss / static_cast<double>(D) + eps) *
                                                       at(c, "w", static_cast<size_t>(j));
    }
    return r;
  });
  spec.declared_family = f;
  spec.family = f.get();
  RunOptions o;
  o.target = "sum_two_columns";
  o.seed = 20261122;
  o.trials = 200;
  o.write_corpus = false;
  o.scratch_dir = (std::filesystem::temp_directory_path() / "kprop_op_test_findings").string();
  const RunReport report = run_spec(spec, o);
  ASSERT_EQ(report.status, RunStatus::failed);
  ASSERT_EQ(report.invariants.size(), 1u);
  ASSERT_TRUE(report.invariants[0].counterexample);
  const Finding& found = *report.invariants[0].counterexample;
  YAML::Node n = YAML::Load(found.case_yaml);
  if (n["case"]) n = n["case"];
  EXPECT_EQ(n["dims"]["T"].as<int>(), 1) << found.case_yaml;
  EXPECT_EQ(n["dims"]["D"].as<int>(), 3) << found.case_yaml;
  EXPECT_EQ(n["dims"]["H"].as<int>(), 2) << found.case_yaml;
  EXPECT_EQ(n["dims"]["K"].as<int>(), 3) << found.case_yaml;
  // The case decodes, lies in the domain and still fails the same way.
  const AnyCase back = f->from_yaml(n);
  EXPECT_EQ(f->in_domain(back, spec.domain), "");
  // Control: the correct kernel passes the same run.
  o.target = "reference";
  EXPECT_EQ(run_spec(spec, o).status, RunStatus::passed);
}

// ---------------------------------------------------------------- corpus codec
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

Case round_trip(const OpFamily& f, const Case& c) {
  YAML::Emitter out;
  out << Traits::to_yaml(c);
  return as_case(f.from_yaml(YAML::Load(out.c_str())));
}

// Every value, special ones included, comes back bit for bit in both dtypes
// (the shortest text that reads back in the dtype, .nan/.inf, -0).
TEST(OpCorpus, RoundTripIsExactInBothDtypesWithSpecialValues) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> specials = {0.0,
                                        -0.0,
                                        1.0,
                                        -1.0,
                                        inf,
                                        -inf,
                                        nan,
                                        0.1,
                                        1.0 / 3,
                                        std::nextafter(1.0, 2.0),
                                        std::numeric_limits<double>::denorm_min(),
                                        -std::numeric_limits<double>::denorm_min(),
                                        std::numeric_limits<double>::min(),
                                        std::numeric_limits<double>::max(),
                                        -std::numeric_limits<double>::max(),
                                        1e-310,
                                        123456789.123456789,
                                        -2.5e-8};
  for (DType dt : {DType::f32, DType::f64}) {
    Case c = drawn_case(f, spec.domain, [&](const Case& k) { return k.dtype == dt && dim(k, "D") >= 5; });
    // x: the specials (rounded to x's dtype), then drawn values; v (f64): the specials in f64.
    for (size_t k = 0; k < c.inputs[0].size(); ++k)
      c.inputs[0][k] = round_to(dt, k < specials.size() ? specials[k] : c.inputs[0][k] * 1.0000001);
    for (size_t k = 0; k < c.inputs[2].size() && k < specials.size(); ++k) c.inputs[2][k] = specials[k];
    c.attrs[0] = 1.2345678901234567e-4;
    const Case back = round_trip(f, c);
    EXPECT_EQ(back.dims, c.dims);
    EXPECT_EQ(back.dtype, c.dtype);
    EXPECT_EQ(back.dtypes, c.dtypes);
    EXPECT_TRUE(same_bits(back.attrs, c.attrs));
    ASSERT_EQ(back.inputs.size(), c.inputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i)
      EXPECT_TRUE(same_bits(back.inputs[i], c.inputs[i])) << dtype_name(dt) << " input " << i;
    // f32 denormals survive in f32: the smallest one is 2^-149.
    if (dt == DType::f32) {
      c.inputs[0][0] = std::ldexp(1.0, -149);
      EXPECT_TRUE(same_bits(round_trip(f, c).inputs[0], c.inputs[0]));
    }
  }
}

// ---------------------------------------------------------------- fuzz decoding
// The libFuzzer path: any byte string (short ones run out and read zeros)
// decodes to a case the declaration could have drawn, which the reference
// evaluates and the codec stores.
TEST(OpFuzz, EveryByteStringDecodesToAValidCase) {
  const Spec spec = parse_spec(kDomainSpec, "shrink.yaml");
  const OpFamily& f = op_family(spec);
  std::mt19937 rng(20261122);
  for (size_t len = 0; len <= 400; len += 7) {
    for (int fill = 0; fill < 3; ++fill) {
      std::vector<uint8_t> bytes(len);
      for (auto& b : bytes) b = fill == 0 ? 0x00 : fill == 1 ? 0xff : static_cast<uint8_t>(rng());
      const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
      const Case& c = as_case(any);
      ASSERT_EQ(f.in_domain(any, spec.domain), "") << "length " << len << " fill " << fill;
      for (size_t i = 0; i < c.inputs.size(); ++i)
        for (double v : c.inputs[i]) ASSERT_EQ(v, round_to(c.dtypes[i], v)) << "not exact in its dtype";
      const Result r = op::reference(c);
      ASSERT_EQ(r.outputs.size(), 2u);
      EXPECT_EQ(round_trip(f, c), c) << "length " << len;
    }
  }
}

}  // namespace
}  // namespace kprop::op

namespace kprop::op {
namespace {

// ---------------------------------------------------------------- --list
// prop_runner --list shows the declared family, the keys of its section and
// what every declaration gets (built from the example section), in text and
// in JSON; the registered families' listing is unchanged by it.
TEST(OpList, ListShowsTheDeclaredFamilyAndItsSectionKeys) {
  const std::string text = list_text();
  const size_t at = text.find("\nDeclared families (");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string declared = text.substr(at);
  for (const char* want :
       {"\n  op — a kernel declared in the spec itself\n", "\n    section op:\n",
        "\n      dims: {DIM: [lo, hi]", "\n      reference: {OUTPUT: EXPR}", "\n      matches_reference ",
        "\n      rows_independent ", "\n      permute_T ", "\n      floor.y "})
    EXPECT_NE(declared.find(want), std::string::npos) << want;
  // No line of the block starts with "family " (scripts/gen_families_md.py
  // reads those as registered families).
  EXPECT_EQ(declared.find("\nfamily "), std::string::npos);

  const auto json = nlohmann::json::parse(list_json());
  ASSERT_EQ(json["declared_families"].size(), 1u);
  const auto& op = json["declared_families"][0];
  EXPECT_EQ(op["name"], "op");
  EXPECT_EQ(op["section"], "op");
  std::vector<std::string> keys;
  for (const auto& k : op["keys"]) keys.push_back(k["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "dims", "attrs", "inputs", "outputs", "reference"}));
  std::vector<std::string> invariants;
  for (const auto& i : op["example_family"]["invariants"]) invariants.push_back(i["name"]);
  EXPECT_EQ(invariants, (std::vector<std::string>{"matches_reference", "finite_outputs", "deterministic",
                                                  "rows_independent"}));
  for (const auto& f : json["families"]) EXPECT_NE(f["name"], "op");
}

}  // namespace
}  // namespace kprop::op
