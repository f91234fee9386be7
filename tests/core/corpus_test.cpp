// Corpus store: round trip, content-addressed dedup, atomic writes, and
// corrupt files reported with file:line:col.
#include "kprop/corpus.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "kprop/errors.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kprop_corpus_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CorpusEntry entry() const {
    CorpusEntry e;
    e.spec = "toy";
    e.family = "toy.sum";
    e.invariant = "matches_reference";
    e.found_against = "drops_last";
    e.seed = 1234567;
    e.message = "sum 0 != 1: \"quoted\" # not a comment";
    e.case_node = YAML::Load("{xs: [0, 0, 1]}");
    return e;
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(CorpusTest, RoundTrip) {
  fs::create_directories(dir_);
  const std::string path = write_entry(dir_.string(), entry());
  const CorpusEntry back = read_entry(path);
  EXPECT_EQ(back.spec, "toy");
  EXPECT_EQ(back.family, "toy.sum");
  EXPECT_EQ(back.invariant, "matches_reference");
  EXPECT_EQ(back.found_against, "drops_last");
  EXPECT_EQ(back.found_by, "rapidcheck");
  EXPECT_EQ(back.seed, 1234567u);
  EXPECT_EQ(back.message, entry().message);
  EXPECT_EQ(emit_yaml(back.case_node), emit_yaml(entry().case_node));
  EXPECT_EQ(fs::path(path).filename().string(), case_hash(entry().case_node) + ".yaml");
}

TEST_F(CorpusTest, SameCaseIsStoredOnce) {
  bool created = false;
  const std::string a = write_entry(dir_.string(), entry(), &created);
  EXPECT_TRUE(created);
  CorpusEntry other = entry();
  other.found_against = "another_mutant";
  const std::string b = write_entry(dir_.string(), other, &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(a, b);
  EXPECT_EQ(read_entry(a).found_against, "drops_last");  // the first finding is kept
  EXPECT_EQ(list_corpus(dir_.string()).size(), 1u);
}

TEST_F(CorpusTest, WritesLeaveNoTemporaryFiles) {
  for (int i = 0; i < 5; ++i) {
    CorpusEntry e = entry();
    e.case_node = YAML::Load("{xs: [" + std::to_string(i) + "]}");
    write_entry(dir_.string(), e);
  }
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir_)) {
    EXPECT_EQ(f.path().extension(), ".yaml") << f.path();
    EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos);
    ++files;
  }
  EXPECT_EQ(files, 5);
}

TEST_F(CorpusTest, AtomicWriteReplacesWholeFile) {
  fs::create_directories(dir_);
  const std::string p = (dir_ / "report.txt").string();
  write_file_atomic(p, std::string(10000, 'a'));
  // A replaced file keeps its permissions (a private report became 0644).
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomic(p, "short");
  std::ifstream in(p);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "short");
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(CorpusTest, CorruptFilesAreClearErrors) {
  fs::create_directories(dir_);
  const std::pair<const char*, const char*> cases[] = {
      {"kprop_corpus: 1\nfamily: toy.sum\ncase: {xs: [1\n", "corrupt corpus file"},
      {"kprop_corpus: 1\nfamily: toy.sum\n", "missing 'case'"},
      {"kprop_corpus: 2\nfamily: toy.sum\ncase: {xs: []}\n", "unsupported corpus version '2'"},
      {"kprop_corpus: 1\nfamily: toy.sum\nsed: 3\ncase: {xs: []}\n",
       "bad.yaml:3:1: corrupt corpus file: unknown key 'sed'"},
      {"- just\n- a list\n", "expected a map"},
      {", x\n", "bad.yaml:1:1: corrupt corpus file: unexpected ','"},
      {"kprop_corpus: 1\nfamily: toy.sum\ncase: {xs: []}\n---\nkprop_corpus: 1\n",
       "bad.yaml:5:1: a second YAML document; a corpus file holds one"},
  };
  for (const auto& [text, expect] : cases) {
    write("bad.yaml", text);
    try {
      read_entry((dir_ / "bad.yaml").string());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.yaml"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CorpusTest, ListsFoldersRecursivelyAndSorted) {
  write_entry((dir_ / "b").string(), entry());
  CorpusEntry e = entry();
  e.case_node = YAML::Load("{xs: [9]}");
  write_entry((dir_ / "a").string(), e);
  const auto files = list_corpus(dir_.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_LT(files[0], files[1]);
  EXPECT_THROW(list_corpus((dir_ / "missing").string()), InputError);
}

// A .yaml link that loops is listed, and reading it says why (it was an
// internal error while listing the folder).
TEST_F(CorpusTest, ALinkThatLoopsIsListedAndCannotBeRead) {
  write_entry(dir_.string(), entry());
  std::filesystem::create_symlink("loop.yaml", dir_ / "loop.yaml");
  const auto files = list_corpus(dir_.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_THROW(read_entry((dir_ / "loop.yaml").string()), InputError);
}

// Written through a link (the link stays); a FIFO is no file to replace.
TEST_F(CorpusTest, AtomicWritesGoThroughALinkAndRefuseAFifo) {
  std::filesystem::create_directories(dir_);
  write_file_atomic((dir_ / "real.txt").string(), "old");
  std::filesystem::create_symlink("real.txt", dir_ / "link.txt");
  write_file_atomic((dir_ / "link.txt").string(), "new");
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / "link.txt"));
  std::ifstream in(dir_ / "real.txt");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "new");
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_THROW(write_file_atomic((dir_ / "fifo").string(), "x"), InputError);
  EXPECT_EQ(std::filesystem::status(dir_ / "fifo").type(), std::filesystem::file_type::fifo);
}

TEST(EmitYaml, ShortListsAndFlatMapsAreOneLine) {
  const std::string text = emit_yaml(YAML::Load("{a: [1, 2], b: {c: 1, d: [3]}, e: [{f: 1}]}"));
  EXPECT_NE(text.find("a: [1, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("b: {c: 1, d: [3]}"), std::string::npos) << text;
}

}  // namespace
}  // namespace kprop

namespace kprop {
namespace {
// A second finding on a stored case, recorded once in also_found_against;
// the first stays at the top.
void expect_recorded_once(const std::string& dir, const CorpusEntry& first, const CorpusEntry& other) {
  const std::string path = write_entry(dir, first);
  bool created = true;
  write_entry(dir, other, &created);
  EXPECT_FALSE(created);
  write_entry(dir, other, &created);  // recorded once
  write_entry(dir, first, &created);  // the first finding, not repeated
  const CorpusEntry back = read_entry(path);
  EXPECT_EQ(back.found_against, first.found_against);
  EXPECT_EQ(back.invariant, first.invariant);
  ASSERT_EQ(back.also.size(), 1u);
  EXPECT_EQ(back.also[0].found_against, other.found_against);
  EXPECT_EQ(back.also[0].invariant, other.invariant);
}

TEST_F(CorpusTest, SameCaseFoundAgainstAnotherMutantIsRecorded) {
  CorpusEntry other = entry();
  other.found_against = "second_mutant";
  other.invariant = "another_invariant";
  expect_recorded_once(dir_.string(), entry(), other);
}

// The same case failing another invariant against the same implementation
// (two pytest tests' extra invariants on one function) is a second finding:
// lost, its replay would never check the second invariant.
TEST_F(CorpusTest, SameCaseFailingAnotherInvariantIsRecorded) {
  CorpusEntry other = entry();
  other.invariant = "another_invariant";
  expect_recorded_once(dir_.string(), entry(), other);
}

// A finding kprop.check adds to a file prop_runner stored keeps its own
// found_by (python), so that a replay without that Python invariant skips
// it instead of calling it a typo; one by the file's own finder writes none.
TEST_F(CorpusTest, AnotherFindersRecordKeepsItsFoundBy) {
  CorpusEntry first = entry();
  first.found_by = "rapidcheck";
  const std::string path = write_entry(dir_.string(), first);
  CorpusEntry python = entry();
  python.found_against = "python:fn";
  python.invariant = "first_small";
  python.found_by = "python";
  write_entry(dir_.string(), python);
  CorpusEntry again = entry();
  again.invariant = "another_invariant";
  again.found_by = "rapidcheck";
  write_entry(dir_.string(), again);
  const CorpusEntry back = read_entry(path);
  ASSERT_EQ(back.also.size(), 2u);
  EXPECT_EQ(back.also[0].found_by, "python");
  EXPECT_EQ(back.also[1].found_by, "");
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("{found_against: python:fn, invariant: first_small, found_by: python}"),
            std::string::npos)
      << text;
}

// Runs storing the same case at once each keep their record: the
// read-modify-write of also_found_against is one at a time (3 concurrent
// runs lost 1-2 of 11 records in 3 of 11 tries).
TEST_F(CorpusTest, ConcurrentStoresOfOneCaseKeepEveryRecord) {
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i)
    writers.emplace_back([this, i] {
      for (int j = 0; j < 5; ++j) {
        CorpusEntry e = entry();
        e.found_against = fmt::format("m{}", i);
        e.invariant = fmt::format("inv{}", j);
        write_entry(dir_.string(), e);
      }
    });
  for (auto& w : writers) w.join();
  const auto files = list_corpus(dir_.string());
  ASSERT_EQ(files.size(), 1u);
  const CorpusEntry stored = read_entry(files[0]);
  EXPECT_EQ(stored.also.size() + 1, 40u);
}

// Every committed corpus file is named by its case's hash: a store of that
// case finds it (a hand-edited case moves the file when its old case is
// next found, writing into the tracked corpus).
TEST(CorpusFiles, EveryCommittedFileIsNamedByItsCase) {
  int n = 0;
  for (const auto& spec : fs::directory_iterator(fs::path(KPROP_SOURCE_DIR) / "corpus"))
    for (const std::string& file : list_corpus(spec.path().string())) {
      ++n;
      EXPECT_EQ(case_hash(read_entry(file).case_node) + ".yaml", fs::path(file).filename().string()) << file;
    }
  EXPECT_GT(n, 0);
}
}  // namespace
}  // namespace kprop
