#include "kprop/corpus.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kprop/case_yaml.h"
#include "kprop/errors.h"
#include "kprop/yaml_load.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

bool is_scalar_list(const YAML::Node& n) {
  if (case_yaml::is_packed(n)) return true;
  if (!n.IsSequence()) return false;
  for (const auto& item : n)
    if (!item.IsScalar() || case_yaml::is_packed(item)) return false;
  return true;
}

// A map whose values are all scalars or scalar lists reads best on one line.
bool is_flat_map(const YAML::Node& n) {
  if (!n.IsMap() || n.size() > 8) return false;
  for (auto it = n.begin(); it != n.end(); ++it)
    if (!it->second.IsScalar() && !is_scalar_list(it->second)) return false;
  return true;
}

// A packed list (kprop/case_yaml.h) is written as the flow sequence it
// stands for: the emitter writes a placeholder, replaced by "[text]" after,
// so that its items are not one emitter call each. The placeholder carries
// a random word, which no scalar of the tree holds (drawn once a process:
// emit_yaml runs for every case hashed).
struct PackedLists {
  const std::string& word = random_word();
  std::vector<YAML::Node> lists;
  static const std::string& random_word() {
    static const std::string w = fmt::format("{:016x}", std::random_device{}() * 0x9e3779b97f4a7c15ULL ^
                                                            static_cast<uint64_t>(std::random_device{}()));
    return w;
  }
  std::string placeholder(size_t i) const { return fmt::format("kprop_packed_{}_{}", i, word); }
};

void emit(YAML::Emitter& out, const YAML::Node& n, bool top, PackedLists& packed) {
  if (case_yaml::is_packed(n)) {
    out << packed.placeholder(packed.lists.size());
    packed.lists.push_back(n);
  } else if (n.IsScalar()) {
    out << n.Scalar();
  } else if (n.IsNull() || !n.IsDefined()) {
    out << YAML::Null;
  } else if (n.IsSequence()) {
    const bool flow = is_scalar_list(n);
    out << (flow ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (const auto& item : n) emit(out, item, false, packed);
    out << YAML::EndSeq;
  } else {
    const bool flow = !top && is_flat_map(n);
    out << (flow ? YAML::Flow : YAML::Block) << YAML::BeginMap;
    for (auto it = n.begin(); it != n.end(); ++it) {
      out << YAML::Key << it->first.Scalar() << YAML::Value;
      emit(out, it->second, false, packed);
    }
    out << YAML::EndMap;
  }
}

}  // namespace

std::string emit_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  PackedLists packed;
  emit(out, node, true, packed);
  std::string text = out.c_str();
  if (!packed.lists.empty()) {
    std::string whole;
    size_t from = 0;
    for (size_t i = 0; i < packed.lists.size(); ++i) {
      const std::string word = packed.placeholder(i);
      const size_t at = text.find(word, from);
      if (at == std::string::npos)
        throw std::logic_error("emit_yaml: a packed list's placeholder was not written");
      whole.append(text, from, at - from);
      // Its items as the emitter writes a sequence's, ", " between them
      // whatever spacing a hand-edited file had: the case's text and hash.
      whole += '[';
      case_yaml::for_each_item(packed.lists[i], [&](const case_yaml::Item& x) {
        if (x.index) whole += ", ";
        whole += x.text;
      });
      whole += ']';
      from = at + word.size();
    }
    whole.append(text, from, std::string::npos);
    text = std::move(whole);
  }
  return text + "\n";
}

std::string case_hash(const YAML::Node& case_node) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : emit_yaml(case_node)) h = (h ^ c) * 0x100000001b3ULL;
  return fmt::format("{:016x}", h);
}

std::string emit_entry(const CorpusEntry& e) {
  YAML::Node root(YAML::NodeType::Map);
  root["kprop_corpus"] = e.version;
  root["spec"] = e.spec;
  if (!e.profile.empty()) root["profile"] = e.profile;
  root["family"] = e.family;
  root["invariant"] = e.invariant;
  root["found_against"] = e.found_against;
  root["found_by"] = e.found_by;
  root["seed"] = e.seed;
  root["message"] = e.message;
  if (!e.also.empty()) {
    YAML::Node also(YAML::NodeType::Sequence);
    for (const auto& a : e.also) {
      YAML::Node item(YAML::NodeType::Map);
      item["found_against"] = a.found_against;
      item["invariant"] = a.invariant;
      if (!a.found_by.empty()) item["found_by"] = a.found_by;
      also.push_back(item);
    }
    root["also_found_against"] = also;
  }
  root["case"] = e.case_node;
  return emit_yaml(root);
}

// A temp file left by a writer that was killed (".NAME.tmp-PID-N" whose PID
// no longer runs) is removed on the next write to its folder.
void remove_stale_temps(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto at = name.rfind(".tmp-");
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  static std::atomic<int> counter{0};
  // Written through a symbolic link (the link stays); a FIFO, device or
  // socket is no file to replace.
  std::error_code ec0;
  fs::path target(path);
  if (fs::symlink_status(target, ec0).type() == fs::file_type::symlink) {
    target = fs::weakly_canonical(target, ec0);
    if (ec0) throw InputError({path, 0, 0}, "cannot resolve the link: " + ec0.message());
  }
  const fs::file_type type = fs::status(target, ec0).type();
  if (type != fs::file_type::not_found && type != fs::file_type::regular && type != fs::file_type::none)
    throw InputError({path, 0, 0}, "is not a regular file");
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw InputError({path, 0, 0}, "cannot create its folder: " + ec.message());
    remove_stale_temps(target.parent_path());
  }
  const fs::path tmp =
      target.parent_path() / fmt::format(".{}.tmp-{}-{}", target.filename().string(), getpid(), counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError({path, 0, 0}, "cannot write file");
    out << contents;
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignore;
      fs::remove(tmp, ignore);
      throw InputError({path, 0, 0}, "cannot write file (disk full?)");
    }
  }
  std::error_code ec;
  // A file replaced keeps its permissions (a report kept private, 0600, was
  // 0644 after the next run).
  if (type == fs::file_type::regular) fs::permissions(tmp, fs::status(target, ec).permissions(), ec);
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError({path, 0, 0}, "cannot move temporary file into place");
  }
}

namespace {
// Two runs storing into one folder at once (CI shards, separate runs on one
// corpus): a file's findings are read, extended and written back one run at
// a time, or one run's also_found_against record is lost. An flock on the
// folder itself (no lock file in the tracked corpus), released with the fd;
// without one (a folder it cannot open) it goes on unlocked.
class FolderLock {
 public:
  explicit FolderLock(const fs::path& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return;
    int rc;
    while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
    // (NFS emulates flock with POSIX locks, which a read-only fd cannot
    // take exclusively: said once, then it goes on unlocked.)
    static std::atomic<bool> said{false};
    if (rc != 0 && !said.exchange(true))
      fmt::print(stderr,
                 "kprop: note: cannot lock the corpus folder {} ({}): runs storing into it at once may "
                 "lose a record\n",
                 dir.string(), std::strerror(errno));
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};
}  // namespace

std::string write_entry(const std::string& dir, const CorpusEntry& entry, bool* created,
                        std::string* replaced) {
  const FolderLock lock(dir);
  const fs::path path = fs::path(dir) / (case_hash(entry.case_node) + ".yaml");
  const bool exists = fs::exists(path);
  if (created) *created = !exists;
  if (!exists) {
    write_file_atomic(path.string(), emit_entry(entry));
    return path.string();
  }
  CorpusEntry stored;
  try {
    stored = read_entry(path.string());
  } catch (const InputError& err) {
    // A same-named file whose case is whole (it hashes to the file's name)
    // but that does not read as an entry (a key added by hand, a newer
    // format) is someone's record: kept, and the finding goes elsewhere
    // (store_entry's fallback says where). Replacing it lost its findings.
    bool whole = !std::ifstream(path);  // one it cannot read (permissions) is kept too
    try {
      std::ifstream in(path, std::ios::binary);
      std::stringstream old_text;
      old_text << in.rdbuf();
      const YAML::Node old =
          case_yaml::load_packed(old_text.str(), [](const std::string& t) { return YAML::Load(t); });
      whole = old.IsMap() && old["case"] && case_hash(old["case"]) == path.stem().string();
    } catch (const std::exception&) {
    }
    if (whole)
      throw InputError(
          {path.string(), 0, 0},
          fmt::format("holds this case but does not read as a corpus entry ({}): kept, not replaced",
                      err.what()));
    // A same-named file without its whole case (truncated by a crash or a
    // full disk, or a hand edit that broke its YAML) is replaced,
    // atomically, by the case just found; the old one is kept beside it as
    // <name>.yaml.unreadable (not replayed), and the finding says so: its
    // also_found_against records may be worth restoring by hand.
    // A name not taken: an earlier one kept this way is kept too.
    fs::path kept = path.string() + ".unreadable";
    for (int n = 2; fs::exists(kept) && n < 1000; ++n)
      kept = fmt::format("{}.unreadable.{}", path.string(), n);
    std::error_code ec;
    fs::rename(path, kept, ec);
    write_file_atomic(path.string(), emit_entry(entry));  // said replaced only once it is
    if (replaced)
      *replaced = ec ? fmt::format("{} did not read ({}) and was replaced", path.string(), err.what())
                     : fmt::format("{} did not read ({}): replaced, the old file kept as {}", path.string(),
                                   err.what(), kept.string());
    if (created) *created = true;
    return path.string();
  }
  // A file whose case was edited by hand holds another case than its name
  // says: this finding's case is not in it (it was "already in the corpus"
  // and never stored). The edited file moves to its own case's name (kept
  // where that is taken), and this case is stored under its name.
  if (const std::string own = case_hash(stored.case_node); own != path.stem().string()) {
    const fs::path moved = fs::path(dir) / (own + ".yaml");
    std::error_code ec;
    if (!fs::exists(moved)) fs::rename(path, moved, ec);
    if (!fs::exists(moved) || ec)
      throw InputError({path.string(), 0, 0},
                       "holds another case than its name says (edited by hand?): kept, not replaced");
    if (replaced)
      *replaced = fmt::format("{} held another case than its name says (edited by hand?): moved to {}",
                              path.string(), moved.string());
    if (created) *created = true;
    write_file_atomic(path.string(), emit_entry(entry));
    return path.string();
  }
  // A finding is the pair (implementation, invariant): the same case failing
  // another invariant (another test's extra invariant, or the same mutant
  // caught twice) is recorded too, so that its replay checks it.
  bool known = stored.found_against == entry.found_against && stored.invariant == entry.invariant;
  for (const auto& a : stored.also)
    known = known || (a.found_against == entry.found_against && a.invariant == entry.invariant);
  if (!known && !entry.found_against.empty()) {
    stored.also.push_back(
        {entry.found_against, entry.invariant, entry.found_by != stored.found_by ? entry.found_by : ""});
    write_file_atomic(path.string(), emit_entry(stored));
  }
  return path.string();
}

std::string find_finding(const std::string& dir, const std::string& found_against,
                         const std::string& invariant) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".yaml") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    try {
      const CorpusEntry e = read_entry(file.string());
      bool found = e.found_against == found_against && e.invariant == invariant;
      for (const auto& a : e.also)
        found = found || (a.found_against == found_against && a.invariant == invariant);
      if (found) return file.string();
    } catch (const std::exception&) {
    }
  }
  return "";
}

CorpusEntry read_entry(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError({path, 0, 0}, "cannot read corpus file");
  std::stringstream text;
  text << in.rdbuf();
  // A long list of numbers loads as one packed node (kprop/case_yaml.h).
  YAML::Node root = case_yaml::load_packed(text.str(), [&](const std::string& t) {
    return load_one_document(t, path, "corrupt corpus file", "a corpus file", /*aliases=*/false);
  });
  auto where = [&](const YAML::Node& n) -> Mark {
    const YAML::Mark m = n.Mark();
    return m.is_null() ? Mark{path, 0, 0} : Mark{path, m.line + 1, m.column + 1};
  };
  if (!root.IsMap())
    throw InputError(where(root), "corrupt corpus file: expected a map with 'kprop_corpus: 1'");
  static const std::set<std::string> known = {
      "kprop_corpus",  "spec",     "profile", "family",  "invariant",
      "found_against", "found_by", "seed",    "message", "also_found_against",
      "case"};
  for (auto it = root.begin(); it != root.end(); ++it)
    if (!it->first.IsScalar() || !known.count(it->first.Scalar()))
      throw InputError(where(it->first), "corrupt corpus file: unknown key '" +
                                             (it->first.IsScalar() ? it->first.Scalar() : "?") + "'");
  // No key twice, at the top or inside the case: it would be read as one of the two.
  const std::function<void(const YAML::Node&)> no_twice = [&](const YAML::Node& n) {
    if (n.IsSequence())
      for (const auto& item : n) no_twice(item);
    if (!n.IsMap()) return;
    std::set<std::string> keys;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->first.IsScalar() && !keys.insert(it->first.Scalar()).second)
        throw InputError(where(it->first),
                         "corrupt corpus file: key '" + it->first.Scalar() + "' appears twice");
      no_twice(it->second);
    }
  };
  no_twice(root);
  CorpusEntry e;
  auto text_of = [&](const char* key, bool required) -> std::string {
    const YAML::Node n = root[key];
    if (!n) {
      if (required) throw InputError(where(root), std::string("corrupt corpus file: missing '") + key + "'");
      return "";
    }
    if (!n.IsScalar() || case_yaml::is_packed(n))
      throw InputError(where(n), std::string("corrupt corpus file: '") + key + "' must be a scalar");
    e.marks[key] = where(n);
    return n.Scalar();
  };
  e.path = path;
  const std::string version = text_of("kprop_corpus", true);
  if (version != "1")
    throw InputError(where(root["kprop_corpus"]),
                     "unsupported corpus version '" + version + "' (this kprop reads 1)");
  e.spec = text_of("spec", false);
  e.profile = text_of("profile", false);
  e.family = text_of("family", true);
  e.invariant = text_of("invariant", false);
  e.found_against = text_of("found_against", false);
  e.found_by = text_of("found_by", false);
  e.message = text_of("message", false);
  const std::string seed = text_of("seed", false);
  if (!seed.empty()) {
    try {
      e.seed = root["seed"].as<uint64_t>();
    } catch (const YAML::Exception&) {
      throw InputError(where(root["seed"]), "corrupt corpus file: seed must be an integer");
    }
  }
  if (const YAML::Node also = root["also_found_against"]) {
    if (!also.IsSequence())
      throw InputError(where(also), "corrupt corpus file: also_found_against must be a list");
    for (const auto& item : also) {
      if (!item.IsMap() || !item["found_against"] || !item["invariant"] ||
          !item["found_against"].IsScalar() || !item["invariant"].IsScalar() ||
          case_yaml::is_packed(item["found_against"]) || case_yaml::is_packed(item["invariant"]))
        throw InputError(where(item),
                         "corrupt corpus file: also_found_against entries need found_against and invariant");
      e.marks["also_found_against." + std::to_string(e.also.size())] = where(item["invariant"]);
      const YAML::Node by = item["found_by"];
      if (by && (!by.IsScalar() || case_yaml::is_packed(by)))
        throw InputError(where(by),
                         "corrupt corpus file: an also_found_against entry's found_by must be a name");
      e.also.push_back({item["found_against"].Scalar(), item["invariant"].Scalar(), by ? by.Scalar() : ""});
    }
  }
  e.case_node = root["case"];
  if (!e.case_node || e.case_node.IsNull())
    throw InputError(where(root), "corrupt corpus file: missing 'case'");
  return e;
}

std::vector<std::string> list_corpus(const std::string& path) {
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) throw InputError({path, 0, 0}, "no such corpus file or folder");
  try {
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      const auto name = e.path().filename().string();
      // A .yaml that cannot be resolved (a link loop, a dangling link) is
      // listed too: reading it reports why, as for any unreadable file.
      const bool regular = e.is_regular_file(ec);
      if ((regular || ec) && e.path().extension() == ".yaml" && name[0] != '.')
        out.push_back(e.path().string());
    }
  } catch (const fs::filesystem_error& err) {
    throw InputError({path, 0, 0}, fmt::format("cannot list the corpus folder: {}", err.code().message()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kprop
