// Spec loader: a valid spec, and each class of invalid spec names
// file:line:col and the valid choices.
#include "kprop/spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kprop/family.h"
#include "kprop/values.h"
#include "tests/support/spec_error.h"

namespace kprop {
namespace {

const char* kValid = R"(spec: toy
family: toy.sum
target: reference
run: {trials: 50, seed: 7}
domain:
  length: [1, 5]
  value: 3
  mode: [plain, wide]
invariants:
  - name: matches_reference
    slack: 2
)";

std::string error_of(const std::string& text) {
  return testing::spec_load_error(text, "t.yaml");
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(SpecLoader, LoadsAValidSpec) {
  const Spec s = parse_spec(kValid, "t.yaml");
  EXPECT_EQ(s.name, "toy");
  EXPECT_STREQ(s.family->name(), "toy.sum");
  EXPECT_EQ(s.run.trials, 50);
  EXPECT_EQ(s.run.seed, 7u);
  EXPECT_EQ(s.run.max_size, 100);  // default
  EXPECT_EQ(s.domain.int_range("length"), (IntRange{1, 5}));
  EXPECT_EQ(s.domain.int_range("value"), (IntRange{3, 3}));  // scalar = [v, v]
  EXPECT_EQ(s.domain.choices("mode"), (Choices{"plain", "wide"}));
  ASSERT_EQ(s.invariants.size(), 1u);
  EXPECT_EQ(s.invariants[0].params.integer("slack"), 2);
}

TEST(SpecLoader, InvariantsDefaultToAllWithDefaults) {
  const Spec s = parse_spec("spec: toy\nfamily: toy.sum\n", "t.yaml");
  EXPECT_EQ(s.invariants.size(), 6u);
  EXPECT_EQ(s.invariants[0].params.integer("slack"), 0);
  EXPECT_EQ(s.target, "reference");
}

struct BadSpec {
  const char* what;
  std::string from, to;
  std::string expect;  // substring of the error
};

class SpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(SpecErrors, NameFileLineColumnAndChoices) {
  const BadSpec& b = GetParam();
  const std::string err = error_of(replace(kValid, b.from, b.to));
  EXPECT_NE(err.find(b.expect), std::string::npos) << b.what << ": " << err;
  EXPECT_EQ(err.rfind("t.yaml:", 0), 0u) << err;
}

INSTANTIATE_TEST_SUITE_P(
    All, SpecErrors,
    ::testing::Values(
        BadSpec{"unknown top key",
                "run:", "runs:", "t.yaml:4:1: unknown top-level key 'runs' (did you mean 'run'?)"},
        BadSpec{"unknown domain key", "  length:", "  lenght:",
                "t.yaml:6:3: unknown key 'lenght' in domain (did you mean 'length'?)"},
        BadSpec{"wrong type", "trials: 50", "trials: many", "'trials' must be an integer, got 'many'"},
        BadSpec{"inverted range", "[1, 5]", "[5, 1]", "t.yaml:6:11: 'length' is an inverted range [5, 1]"},
        BadSpec{"out of bounds", "[1, 5]", "[1, 5000]", "out of bounds"},
        BadSpec{"range shape", "[1, 5]", "[1, 2, 3]", "must be a range [lo, hi]"},
        // A number past an integer's range is out of the key's bounds (it
        // read "must be an integer"), in a range, a one_of and a plain key.
        BadSpec{"integer past int64", "[1, 5]", "[1, 99999999999999999999]",
                "t.yaml:6:15: 'length' = 99999999999999999999 is out of bounds [0, 1000]"},
        BadSpec{"integer past int64 in one_of", "[1, 5]", "{one_of: [1, -99999999999999999999]}",
                "t.yaml:6:24: 'length.one_of' = -99999999999999999999 is out of bounds [0, 1000]"},
        BadSpec{"seed past int64", "seed: 7", "seed: 99999999999999999999",
                "t.yaml:4:25: 'seed' = 99999999999999999999 is out of bounds [0, "},
        BadSpec{"empty choices", "[plain, wide]", "[]", "'mode' is empty"},
        BadSpec{"bad choice", "[plain, wide]", "[plain, wdie]",
                "unknown choice 'wdie' (did you mean 'wide'?)"},
        // Case alone: by edit distance 'Wide' was as near as any other.
        BadSpec{"a choice in another case", "[plain, wide]", "[plain, WIDE]",
                "unknown choice 'WIDE' (did you mean 'wide'?)"},
        BadSpec{"unknown family", "family: toy.sum", "family: toy.summ",
                "unknown family 'toy.summ' (did you mean 'toy.sum'?)"},
        BadSpec{"unknown target", "target: reference", "target: referense",
                "unknown implementation 'referense' for family toy.sum (did you mean 'reference'?); valid: "
                "reference, drops_last"},
        BadSpec{"unknown invariant", "name: matches_reference", "name: matches_ref",
                "unknown invariant 'matches_ref'"},
        BadSpec{"unknown param", "slack: 2", "slak: 2",
                "unknown key 'slak' in invariant matches_reference (did you mean 'slack'?)"},
        BadSpec{"duplicate key", "run: {trials: 50, seed: 7}", "run: {trials: 50, trials: 7}",
                "duplicate key 'trials'"},
        BadSpec{"yaml syntax", "domain:\n", "domain: [\n", "t.yaml:"},
        BadSpec{"missing family", "family: toy.sum\n", "", "missing required key 'family'"},
        BadSpec{"bad spec name", "spec: toy", "spec: ../x", "spec name '../x'"},
        BadSpec{"spec name too long", "spec: toy", "spec: " + std::string(101, 'a'), "at most 100 of them"},
        // YAML is UTF-8: a Latin-1 byte would reach names, reports and JSON.
        BadSpec{"not UTF-8", "  value: 3", "  value: 3 # caf\xe9",
                "t.yaml:7:17: byte 0xE9 is not UTF-8; the text must be UTF-8"},
        BadSpec{"a second document", "    slack: 2\n", "    slack: 2\n---\nspec: other\n",
                "t.yaml:13:1: a second YAML document; a spec file holds one"},
        // yaml-cpp's LoadAll yields empty documents forever on a stray ','
        // at block level; the loader stops with an error (it used to grow
        // until killed, found by fuzz_spec_loader).
        BadSpec{"a stray comma after ---", "    slack: 2\n", "    slack: 2\n---\n, x\n",
                "t.yaml:13:1: invalid YAML: unexpected ','"},
        // yaml-cpp's own words for it are "bad file".
        BadSpec{"nested too deeply", "[1, 5]", std::string(3000, '[') + std::string(3000, ']'),
                "invalid YAML: lists and maps nested too deeply for the YAML parser"},
        // An external target without its command: where the spec says so.
        BadSpec{"exec: without a command", "target: reference", "target: 'exec:  '",
                "t.yaml:3:9: exec: needs a command"}));

TEST(SpecLoader, AStrayCommaIsAnErrorNotAnEndlessLoad) {
  for (const std::string text : {", x\n", "# note\n\n  , x\n", "- 1\n,\n"})
    EXPECT_NE(error_of(text).find("invalid YAML: unexpected ','"), std::string::npos) << text;
  EXPECT_EQ(error_of("# note\n\n  , x\n").rfind("t.yaml:3:3: invalid YAML: unexpected ','", 0), 0u);
  EXPECT_EQ(testing::spec_load_error("family: toy.sum\n", "t.yaml", "", ", x")
                .rfind("--domain:1:1: invalid YAML: unexpected ','", 0),
            0u);
}

// A spec that is no map, with --domain: the spec's own error, not yaml-cpp's.
TEST(SpecLoader, ASpecThatIsNoMapWithADomainOverrideIsItsOwnError) {
  EXPECT_EQ(testing::spec_load_error("hello\n", "t.yaml", "", "{length: [1, 2]}")
                .rfind("t.yaml:1:1: a spec must be a map", 0),
            0u);
}

TEST(SpecLoader, Utf8IsCheckedByRfc3629) {
  EXPECT_FALSE(invalid_utf8_at("plain, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80"));
  EXPECT_EQ(invalid_utf8_at("ab\xc0\xaf"), 2u);        // an overlong '/'
  EXPECT_EQ(invalid_utf8_at("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(invalid_utf8_at("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(invalid_utf8_at("ok \xe2\x82"), 3u);       // cut short
  EXPECT_EQ(valid_utf8("bad \xff\xfe!"), "bad \xef\xbf\xbd\xef\xbf\xbd!");
}

// Columns count from after a byte-order mark, as yaml-cpp's do (the first
// line's non-UTF-8 byte was 3 columns further right with a mark before it).
TEST(SpecLoader, ANonUtf8BytesColumnDoesNotCountAByteOrderMark) {
  for (const std::string& bom : {std::string(), std::string("\xEF\xBB\xBF")})
    EXPECT_EQ(error_of(bom + "spec: caf\xe9\nfamily: toy.sum\n"),
              "t.yaml:1:10: byte 0xE9 is not UTF-8; the text must be UTF-8")
        << bom.size();
}

TEST(SpecLoader, MissingFileIsAnInputError) {
  EXPECT_THROW(load_spec("/nonexistent/spec.yaml"), InputError);
}

// specs/flash_fwd.yaml was renamed specs/attention_fwd.yaml (a spec file is
// named after its family): the old path still loads, the new file.
TEST(SpecLoader, ARenamedSpecLoadsUnderItsOldName) {
  const auto dir = std::filesystem::temp_directory_path() / ("kprop_renamed_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream((dir / "attention_fwd.yaml").string()) << kValid;
  EXPECT_EQ(load_spec((dir / "flash_fwd.yaml").string()).name, "toy");
  EXPECT_THROW(load_spec((dir / "flash_bwd.yaml").string()), InputError);  // no attention_bwd.yaml there
  std::filesystem::remove_all(dir);
}

// layernorm's and softmax_topk's domain key `dtype` is now `dtypes`, as in
// every other family: the old name still reads, in a spec, a profile and
// --domain, and either name overrides the other; a map giving both is an
// error at the second.
TEST(SpecLoader, ARenamedDomainKeyReadsUnderEitherName) {
  using testing::spec_load_error;
  const std::string old_name =
      "spec: t\nfamily: layernorm\ndomain: {dtype: [f32, f64], rows: [1, 2]}\n"
      "profiles:\n  half: {domain: {dtypes: [f16]}}\n";
  EXPECT_EQ(parse_spec(old_name, "t.yaml").domain.choices("dtypes"), (Choices{"f32", "f64"}));
  EXPECT_EQ(parse_spec(old_name, "t.yaml", "half").domain.choices("dtypes"), (Choices{"f16"}));
  EXPECT_EQ(parse_spec(old_name, "t.yaml", "", "{dtypes: [f64]}").domain.choices("dtypes"), (Choices{"f64"}));
  const std::string new_name = "spec: t\nfamily: softmax_topk\ndomain: {dtypes: [f32]}\n";
  EXPECT_EQ(parse_spec(new_name, "t.yaml", "", "{dtype: [bf16]}").domain.choices("dtypes"),
            (Choices{"bf16"}));
  EXPECT_EQ(
      spec_load_error("spec: t\nfamily: layernorm\ndomain: {dtype: [f32], dtypes: [f64]}\n", "t.yaml"),
      "t.yaml:3:24: 'dtype' and 'dtypes' name one key ('dtype' is the old name of 'dtypes'); give it once");
  EXPECT_EQ(
      spec_load_error(new_name, "t.yaml", "", "{dtypes: [f16], dtype: [f64]}"),
      "--domain:1:17: 'dtypes' and 'dtype' name one key ('dtype' is the old name of 'dtypes'); give it once");
  // The listing names the old key.
  const Family* f = Registry::instance().find("layernorm");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(describe_schema(f->domain_schema(), 0).find("(formerly dtype)"), std::string::npos);
}

// run.search's trials and time_budget_s are the budget of a search that
// runs (enabled: true or --search), not its switch (unlike the options
// --search-trials/--search-time): the listing says so, as it says what a
// shrink budget of 0 does (no shrinking, where 0 is no limit elsewhere).
TEST(SpecLoader, TheListingSaysSearchBudgetsDoNotRunTheSearchAndWhatShrinkZeroDoes) {
  const Spec s =
      parse_spec("spec: t\nfamily: toy.sum\nrun: {search: {trials: 7, time_budget_s: 5}}\n", "t.yaml");
  EXPECT_FALSE(s.run.search);
  EXPECT_EQ(s.run.search_trials, 7);
  const std::string keys = describe_spec_keys();
  EXPECT_NE(keys.find("cases the search may run (a budget: only enabled or --search runs it)"),
            std::string::npos)
      << keys;
  EXPECT_NE(keys.find("(0: no shrinking, the case is kept as found)"), std::string::npos) << keys;
}

TEST(SpecLoader, EmptyInvariantListIsAnError) {
  EXPECT_NE(error_of("spec: toy\nfamily: toy.sum\ninvariants: []\n").find("'invariants' is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace kprop

namespace kprop {
namespace {
// Found by fuzz_spec_loader: an escape in a quoted scalar put a raw newline
// into the message.
TEST(SpecLoader, ErrorsStayOnOneLine) {
  for (const char* text :
       {"spec: \"a\\\nb\"\n", "\"we\\nird\": 1\n", "spec: toy\nfamily: \"toy.\\tsum\"\n"}) {
    const std::string err = error_of(text);
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    EXPECT_EQ(err.find('\t'), std::string::npos) << err;
  }
}
}  // namespace
}  // namespace kprop
