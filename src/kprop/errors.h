// Error types shared by the core. Every user-facing error carries a location
// ("file:line:col") when one exists, so the CLI can print one clear line.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kprop {

// A position in a YAML file; line and col are 1-based (0 = unknown).
struct Mark {
  std::string file;
  int line = 0;
  int col = 0;
  std::string str() const;  // "file:line:col", "file" or "" when unknown
};

// Malformed spec, corpus file, flag or case: the user's input is wrong (exit 2).
class InputError : public std::runtime_error {
 public:
  InputError(Mark mark, const std::string& message);
  const Mark& mark() const { return mark_; }
  const std::string& bare_message() const { return bare_; }

 private:
  Mark mark_;
  std::string bare_;
};

// The spec's own error met on one case: an expression that cannot be
// evaluated there (an index out of range, shapes that do not broadcast,
// reading no output of the target) or a tolerance below 0. As much the
// spec's error as one met at load (exit 2), wherever the case came from: a
// drawn case, a stored one, or a candidate of the shrinker, where the
// failure being shrunk may be the same error's doing.
class SpecCaseError : public InputError {
 public:
  using InputError::InputError;
};

// Raised by a family's YAML case decoder; the loader adds the file name.
class CaseFormatError : public std::runtime_error {
 public:
  CaseFormatError(int line, int col, const std::string& message);
  int line, col;
};

// A target raises this when it cannot run one case (a dtype or shape it does
// not support): the case is declined, counted apart and never checked.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A target that cannot run any case here (no CUDA device, no runtime): the
// run is reported as skipped at once, never as passed.
class TargetUnavailable : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

// The reference (an oracle) cannot run any case here: as TargetUnavailable,
// but the target is not the one that declined (Trial raises it).
class ReferenceUnavailable : public TargetUnavailable {
 public:
  using TargetUnavailable::TargetUnavailable;
};

// A decline of something only one invariant needed, not of the case: the
// target on a case a metamorphic relation derived, the reference. That
// invariant cannot check the case (a discard, with this reason); the others
// still do. (Trial raises it; a target raises Unsupported.)
class DerivedDeclined : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

// The reference (the oracle) threw, crashed or reported an error on a case:
// nothing about the target follows from that case, and it is not the
// target's failure to shrink and store. The run stops with this error
// (exit 2), naming the reference.
class ReferenceFailure : public InputError {
 public:
  explicit ReferenceFailure(const std::string& message) : InputError({}, message) {}
};

// A target that cannot be called with its op's arguments at all (a Python
// function whose signature does not take the op's inputs and attributes,
// served by a worker): how it is wired to the spec, not a failure of the
// kernel. The run stops with this error (exit 2) and stores no case.
class WiringError : public InputError {
 public:
  explicit WiringError(const std::string& message) : InputError({}, message) {}
};

// "did you mean" helper: the closest candidate by edit distance, or "".
// `text` as readable text whatever it held: control characters and bytes
// that are not UTF-8 shown escaped (\x1b, \r, \xff); newlines too, unless
// `keep_newlines`. A kernel's message, say, can then neither forge a report
// line nor drive the terminal.
std::string printable(const std::string& text, bool keep_newlines = false);

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'X'?)" for the closest candidate X, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// did_you_mean, then "; valid: " and every candidate.
std::string suggestion(const std::string& word, const std::vector<std::string>& valid);
// The offset of the first byte of `text` that is not UTF-8 (RFC 3629), or none.
std::optional<size_t> invalid_utf8_at(const std::string& text);
// `text` with each byte that is not UTF-8 replaced by U+FFFD (for XML and JSON output).
std::string valid_utf8(const std::string& text);
// "a, b, c" for error messages listing valid choices.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace kprop
