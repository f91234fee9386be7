// Packed lists (kprop/case_yaml.h): a long list of numbers is one node in
// memory and the same flow sequence in a corpus file; loading packs it back
// without touching anything else of the file, and its items keep their
// columns for errors.
#include "kprop/case_yaml.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <string>
#include <vector>

#include "kprop/corpus.h"
#include "kprop/errors.h"
#include "kprop/float_type.h"
#include "kprop/rng.h"

namespace kprop {
namespace {

using case_yaml::for_each_item;
using case_yaml::is_packed;
using case_yaml::Item;
using case_yaml::kPackMin;
using case_yaml::pack_flow_lists;

using case_yaml::text_list;

YAML::Node load(const std::string& text) {
  return case_yaml::load_packed(text, [](const std::string& t) { return YAML::Load(t); });
}

std::vector<std::string> texts(const YAML::Node& list) {
  std::vector<std::string> out;
  for_each_item(list, [&](const Item& x) { out.emplace_back(x.text); });
  return out;
}

YAML::Node sequence(const std::vector<std::string>& items) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& t : items) n.push_back(t);
  return n;
}

// Number-like texts of every shape a codec writes (and some it does not).
std::vector<std::string> random_items(uint64_t seed, size_t count) {
  static const char* const pool[] = {
      "0",    "-0",    "1",    "-1", "0.5",  ".5",  "-.5",   "1e+05",         "1e-07", "-2.5e-310",
      ".inf", "-.inf", ".nan", "+1", "0x10", "1_0", "65504", "3.4028235e+38", "-7",    "010"};
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng::hash(seed, 1, i);
    out.emplace_back(pool[r % std::size(pool)]);
    if (r % 7 == 0) out.back() += std::to_string(r % 1000);
  }
  return out;
}

TEST(PackedLists, AreWrittenAsTheSequenceTheyStandFor) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto items = random_items(seed, kPackMin + seed * 3);
    const YAML::Node packed = text_list(items.size(), [&](size_t i) { return items[i]; });
    ASSERT_TRUE(is_packed(packed)) << seed;
    EXPECT_EQ(texts(packed), items);
    // In every place a list sits: a block map's value, a flow map's value,
    // a block sequence's item, beside a short list.
    auto tree = [&](const YAML::Node& list) {
      YAML::Node root(YAML::NodeType::Map);
      root["dtype"] = "f32";
      root["x"] = list;
      YAML::Node flat(YAML::NodeType::Map);
      flat["a"] = 1;
      flat["b"] = list;
      root["flat"] = flat;
      YAML::Node rows(YAML::NodeType::Sequence);
      rows.push_back(list);
      rows.push_back(sequence({"1", "2"}));
      rows.push_back(list);
      root["rows"] = rows;
      return root;
    };
    const std::string want = emit_yaml(tree(sequence(items)));
    EXPECT_EQ(emit_yaml(tree(packed)), want) << seed;
    // Read back, it packs again, to the same items and the same text.
    const YAML::Node loaded = load(want);
    EXPECT_TRUE(is_packed(loaded["x"]));
    EXPECT_TRUE(is_packed(loaded["flat"]["b"]));
    EXPECT_TRUE(is_packed(loaded["rows"][2]));
    EXPECT_FALSE(is_packed(loaded["rows"][1]));
    EXPECT_EQ(texts(loaded["rows"][0]), items);
    EXPECT_EQ(emit_yaml(loaded), want) << seed;
    EXPECT_EQ(case_hash(loaded), case_hash(tree(sequence(items))));
  }
}

TEST(PackedLists, OnlyItemsYamlWritesPlainArePacked) {
  for (const std::string odd : {"~", "null", "true", "a b", "", "-", "x1", "'1'", "1:2"}) {
    std::vector<std::string> items(kPackMin, "1");
    items[5] = odd;
    const YAML::Node n = text_list(items.size(), [&](size_t i) { return items[i]; });
    EXPECT_FALSE(is_packed(n)) << odd;
    EXPECT_EQ(texts(n), items);
  }
  const YAML::Node short_list = text_list(kPackMin - 1, [](size_t) { return std::string("1"); });
  EXPECT_TRUE(short_list.IsSequence());
}

TEST(PackedLists, LoadingPacksOnlyFlowListsOfNumbers) {
  const std::string ones = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16";
  // Lists inside scalars, comments and block scalars are text, kept as is.
  const std::string text = "message: \"a: [" + ones + "]\"\n" +                                     //
                           "quoted: 'b: [" + ones + "]'\n" +                                        //
                           "plain: c [" + ones + "]\n" +                                            //
                           "# d: [" + ones + "]\n" +                                                //
                           "block: |\n  e: [" + ones + "]\n" +                                      //
                           "short: [1, 2]\n" +                                                      //
                           "words: [" + ones + ", true]\n" +                                        //
                           "multi: [1, 2, 3, 4, 5, 6, 7, 8,\n  9, 10, 11, 12, 13, 14, 15, 16]\n" +  //
                           "x: [" + ones + "]  # a comment\n" +                                     //
                           "nested: {a: [[" + ones + "], [" + ones + "]]}\n";
  const YAML::Node plain = YAML::Load(text), loaded = load(text);
  for (const char* key : {"message", "quoted", "plain", "block"})
    EXPECT_EQ(loaded[key].Scalar(), plain[key].Scalar());
  for (const char* key : {"short", "words", "multi"}) EXPECT_TRUE(loaded[key].IsSequence()) << key;
  EXPECT_TRUE(is_packed(loaded["x"]));
  EXPECT_TRUE(is_packed(loaded["nested"]["a"][1]));
  EXPECT_EQ(emit_yaml(loaded), emit_yaml(plain));
  // Text it does not follow is left whole.
  const std::string top = "[" + ones + "]\n";
  EXPECT_EQ(pack_flow_lists(top), top);
  // Also after a list it had packed: nothing of it is kept.
  const std::string late = "x: [" + ones + "]\n? [1, 2]\n: 3\n";
  std::vector<size_t> at;
  EXPECT_EQ(pack_flow_lists(late, &at), late);
  EXPECT_TRUE(at.empty());
  EXPECT_FALSE(is_packed(load(late)["x"]));
}

// Where packing would change what the text means, it does not pack.
TEST(PackedLists, LoadingLeavesScalarsTagsAndAnchorsAlone) {
  const std::string ones = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16";
  for (const std::string& text : {
           "message: hello\n  - [" + ones + "]\nx: 1\n",          // a plain value going on past its line
           "- hello\n  - [" + ones + "]\n",                       // the same in a sequence
           "b: |\r\n  a\r\n\r\n  x: [" + ones + "]\r\nc: 1\r\n",  // a block scalar with a blank CRLF line
           "t: !!seq [" + ones + "]\n",                           // a tag of its own
           "a: &g [" + ones + "]\nb: *g\n",                       // an anchor and its alias
       }) {
    const YAML::Node plain = YAML::Load(text), loaded = load(text);
    EXPECT_EQ(emit_yaml(loaded), emit_yaml(plain)) << text;
    for (auto it = loaded.begin(); loaded.IsMap() && it != loaded.end(); ++it)
      EXPECT_FALSE(is_packed(it->second)) << text;
  }
  // A byte-order mark and CRLF line ends: still packed, in place.
  const YAML::Node bom = load("\xEF\xBB\xBFx: [" + ones + "]\r\ny: [" + ones + "]\r\n");
  EXPECT_TRUE(is_packed(bom["x"]));
  EXPECT_TRUE(is_packed(bom["y"]));
}

// Spacing inside a hand-edited list is not part of the case: the same case
// has one text and one hash.
TEST(PackedLists, SpacingInsideAListDoesNotChangeTheCase) {
  std::string tight = "x: [1";
  std::string loose = "x: [ 1";
  for (int i = 2; i <= 20; ++i) tight += "," + std::to_string(i), loose += " ,\t" + std::to_string(i);
  tight += "]\n", loose += " ]\n";
  const YAML::Node a = load(tight), b = load(loose);
  ASSERT_TRUE(is_packed(a["x"]) && is_packed(b["x"]));
  EXPECT_EQ(emit_yaml(a), emit_yaml(YAML::Load(tight)));
  EXPECT_EQ(emit_yaml(a), emit_yaml(b));
  EXPECT_EQ(case_hash(a), case_hash(b));
}

TEST(PackedLists, ItemsKeepTheirColumns) {
  const std::string line = "x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1.2.3]";
  const YAML::Node doc = load("dtype: f32\n" + line + "\n");
  ASSERT_TRUE(is_packed(doc["x"]));
  try {
    case_yaml::read_real_list(doc["x"], "'x'");
    FAIL() << "1.2.3 read as a number";
  } catch (const CaseFormatError& e) {
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.col, static_cast<int>(line.find("1.2.3")) + 1);
  }
  // So does everything after a packed list on its line.
  const std::string ones = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16";
  const std::string two = "- {tokens: [" + ones + "], parents: [" + ones + ", x7]}";
  const YAML::Node cycles = load("cycles:\n" + two + "\n");
  ASSERT_TRUE(is_packed(cycles["cycles"][0]["tokens"]));
  try {
    case_yaml::read_real_list(cycles["cycles"][0]["parents"], "'parents'");
    FAIL() << "x7 read as a number";
  } catch (const CaseFormatError& e) {
    EXPECT_EQ(e.line, 2);
    EXPECT_EQ(e.col, static_cast<int>(two.find("x7")) + 1);
  }
  const std::string key = "- {tokens: [" + ones + "], parentz: [1]}";
  const YAML::Node k = load("cycles:\n" + key + "\n");
  for (auto it = k["cycles"][0].begin(); it != k["cycles"][0].end(); ++it) {
    if (it->first.Scalar() == "parentz") {
      EXPECT_EQ(it->first.Mark().column, static_cast<int>(key.find("parentz")));
    }
  }
  // And a sequence's items theirs.
  const YAML::Node seq = YAML::Load("x:\n  - 1\n  - 1.2.3\n");
  try {
    case_yaml::read_real_list(seq["x"], "'x'");
    FAIL();
  } catch (const CaseFormatError& e) {
    EXPECT_EQ(e.line, 3);
    EXPECT_EQ(e.col, 5);
  }
}

TEST(PackedLists, NumbersReadAsYamlCppReadsThem) {
  for (const std::string t : {"0",
                              "-0",
                              "1",
                              "010",
                              "0x10",
                              "+1",
                              "1.",
                              ".5",
                              "-.5",
                              "1e5",
                              "1E-5",
                              "1e400",
                              "-1e400",
                              "1e-400",
                              "4.9e-324",
                              "5e",
                              "1_0",
                              ".inf",
                              "-.Inf",
                              "+.INF",
                              ".NaN",
                              "nan",
                              "inf",
                              "1.2.3",
                              "",
                              "-",
                              "9223372036854775807",
                              "9223372036854775808",
                              "-9223372036854775808",
                              "00",
                              "-007",
                              "3000000000"}) {
    const YAML::Node n(t);
    std::optional<double> want_real;
    try {
      want_real = n.as<double>();
    } catch (const YAML::Exception&) {
    }
    const std::optional<double> got_real = case_yaml::yaml_real(t);
    ASSERT_EQ(got_real.has_value(), want_real.has_value()) << t;
    if (got_real) {
      EXPECT_EQ(std::isnan(*got_real), std::isnan(*want_real)) << t;
      if (!std::isnan(*got_real)) {
        EXPECT_EQ(*got_real, *want_real) << t;
        EXPECT_EQ(std::signbit(*got_real), std::signbit(*want_real)) << t;
      }
    }
    std::optional<long long> want_int;
    try {
      want_int = n.as<long long>();
    } catch (const YAML::Exception&) {
    }
    EXPECT_EQ(case_yaml::yaml_integer(t), want_int) << t;
  }
}

TEST(PackedLists, UnpackedIsTheSameTreeWithSequences) {
  const auto items = random_items(7, 40);
  YAML::Node root(YAML::NodeType::Map);
  root["x"] = text_list(items.size(), [&](size_t i) { return items[i]; });
  root["k"] = 3;
  const YAML::Node plain = case_yaml::unpacked(root);
  EXPECT_TRUE(plain["x"].IsSequence());
  EXPECT_EQ(texts(plain["x"]), items);
  EXPECT_EQ(emit_yaml(plain), emit_yaml(root));
}

// A NaN keeps its sign through a case file (-.nan, which YAML itself does
// not have): a sort orders -NaN last like NaN, and a radix-key sort that
// puts it first is only caught if a stored case replays it as drawn.
TEST(CaseValues, ANegativeNanIsWrittenAndReadWithItsSign) {
  EXPECT_EQ(case_yaml::real(-std::nan("")).Scalar(), "-.nan");
  EXPECT_EQ(case_yaml::real(std::nan("")).Scalar(), ".nan");
  for (const FloatType t : {FloatType::f32, FloatType::f64, FloatType::f16, FloatType::bf16})
    EXPECT_EQ(value_text(t, -std::nan("")), "-.nan");
  const std::optional<double> v = case_yaml::yaml_real("-.nan");
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(std::isnan(*v) && std::signbit(*v));
  const YAML::Node doc = load("x: [-.nan, .nan, -0]\n");
  const std::vector<double> x = case_yaml::read_real_list(doc["x"], "'x'");
  ASSERT_EQ(x.size(), 3u);
  EXPECT_TRUE(std::isnan(x[0]) && std::signbit(x[0]));
  EXPECT_TRUE(std::isnan(x[1]) && !std::signbit(x[1]));
  EXPECT_TRUE(x[2] == 0 && std::signbit(x[2]));
}

}  // namespace
}  // namespace kprop
