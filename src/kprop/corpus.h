// The regression corpus: one shrunk counterexample per YAML file under
// corpus/<spec>/, named by a hash of the case, written atomically.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kprop/errors.h"

namespace kprop {

// Another implementation the same case was found against (a later
// finding of an identical case, possibly by another invariant).
struct AlsoFound {
  std::string found_against;
  std::string invariant;
  // Who found it, when not the file's own found_by: kprop.check's ("python")
  // in a file prop_runner stored, whose invariant may be a Python
  // extra_invariants function no spec has (replay skips it, as it skips a
  // file kprop.check stored, instead of calling its name a typo).
  std::string found_by = "";
};

struct CorpusEntry {
  int version = 1;
  std::string spec;
  std::string profile;  // the spec profile it was found under ("" = none); replay ignores it
  std::string family;
  std::string invariant;
  std::string found_against;
  std::string found_by = "rapidcheck";  // or libfuzzer, crash
  uint64_t seed = 0;
  std::string message;
  YAML::Node case_node;
  std::vector<AlsoFound> also;  // also_found_against: replay checks each
  std::string path;             // where it was read from or written to
  // Where read_entry found each header key's value (spec, profile, family,
  // invariant, ...; also_found_against.N: the Nth entry's invariant): at(key)
  // is that position, or the file alone.
  std::map<std::string, Mark> marks;
  Mark at(const std::string& key) const {
    const auto it = marks.find(key);
    return it != marks.end() ? it->second : Mark{path, 0, 0};
  }
};

// Canonical, human-readable YAML text of a node (flow style for short lists).
std::string emit_yaml(const YAML::Node& node);
std::string emit_entry(const CorpusEntry& entry);
// FNV-1a 64 of the canonical case text, as 16 hex digits: the file's stem.
std::string case_hash(const YAML::Node& case_node);

// Writes dir/<hash>.yaml (temp file + rename). Returns the path and sets
// `created` false when an identical case was already stored; then a finding
// of another (implementation, invariant) pair is added to its
// also_found_against.
// `replaced`: set when a same-named file that did not read was replaced
// (it says where the old one was kept).
std::string write_entry(const std::string& dir, const CorpusEntry& entry, bool* created = nullptr,
                        std::string* replaced = nullptr);
// The first file (by name) of dir/*.yaml that records the finding
// (found_against, invariant), at its top or in also_found_against; "" when
// none does (files that do not read are passed over).
std::string find_finding(const std::string& dir, const std::string& found_against,
                         const std::string& invariant);
// Reads one entry; throws InputError naming file:line:col on anything malformed.
CorpusEntry read_entry(const std::string& path);
// A file, or every *.yaml under a folder (recursively), sorted.
std::vector<std::string> list_corpus(const std::string& path);

// Atomic whole-file write used for corpus files and reports.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace kprop
