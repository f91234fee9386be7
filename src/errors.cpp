#include "kprop/errors.h"

#include <algorithm>
#include <cctype>

namespace kprop {

std::string Mark::str() const {
  if (file.empty()) return "";
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

// Length of the valid UTF-8 sequence starting at s[i] (0: not valid there):
// RFC 3629's table, so no overlong form, surrogate or code point past U+10FFFF.
static size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  // The second byte's range where the first narrows it.
  const unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
  const unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  return n;
}

std::string valid_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    out += n ? text.substr(i, n) : "\xEF\xBF\xBD";  // U+FFFD for a byte that is not UTF-8
    i += n ? n : 1;
  }
  return out;
}

std::optional<size_t> invalid_utf8_at(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

// Errors are one line of readable text whatever the input held: control
// characters (a newline inside a quoted YAML key, say) and bytes that are not
// UTF-8 (a binary file given as a corpus file) are shown escaped.
static std::string one_line(const std::string& text) {
  return printable(text, false);
}

std::string printable(const std::string& text, bool keep_newlines) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      if (const size_t n = utf8_length(text, i)) {
        out += text.substr(i, n);
        i += n - 1;
      } else {
        out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
      }
    } else if (c == '\n')
      out += keep_newlines ? "\n" : "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    else
      out += static_cast<char>(c);
  }
  return out;
}

static std::string located(const Mark& mark, const std::string& message) {
  const std::string where = one_line(mark.str());
  return where.empty() ? one_line(message) : where + ": " + one_line(message);
}

InputError::InputError(Mark mark, const std::string& message)
    : std::runtime_error(located(mark, message)), mark_(std::move(mark)), bare_(one_line(message)) {}

CaseFormatError::CaseFormatError(int l, int c, const std::string& message)
    : std::runtime_error(message), line(l), col(c) {}

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  // A unique candidate that differs from the word only in case ('k' for a
  // dim K) wins outright: by edit distance a one-letter name is as near to
  // every other one-letter name.
  const auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  std::string cased;
  int cased_hits = 0;
  for (const auto& c : candidates)
    if (c != word && lower(c) == lower(word)) cased = c, ++cased_hits;
  if (cased_hits == 1) return cased;
  // A unique candidate that starts with the word ("positional") wins outright.
  std::string prefixed;
  int prefix_hits = 0;
  for (const auto& c : candidates)
    if (word.size() >= 3 && c.rfind(word, 0) == 0) prefixed = c, ++prefix_hits;
  if (prefix_hits == 1) return prefixed;
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  const auto letters = [&](const std::string& w) {
    std::string l = lower(w);
    std::sort(l.begin(), l.end());
    return l;
  };
  for (const auto& c : candidates) {
    // The same letters in another order (`kN` for `Nk`) is one slip, nearer
    // than any other name at the same edit distance (`Nq`).
    const size_t d = c != word && letters(c) == letters(word) ? 1 : edit_distance(word, c);
    // Not one that shares no letter with the word: replacing the letter of
    // a one-letter key `x` gives any one-letter dim (`T`); `kN` for `Nk`
    // shares both.
    const bool shares = std::any_of(word.begin(), word.end(), [&](char w) {
      return std::any_of(c.begin(), c.end(), [&](char ch) {
        return std::tolower(static_cast<unsigned char>(w)) == std::tolower(static_cast<unsigned char>(ch));
      });
    });
    if (d < best_distance && shares) best_distance = d, best = c;
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string close = closest_match(word, candidates);
  return close.empty() ? "" : " (did you mean '" + close + "'?)";
}

std::string suggestion(const std::string& word, const std::vector<std::string>& valid) {
  return did_you_mean(word, valid) + "; valid: " + join(valid);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

}  // namespace kprop
