#include "kprop/reasons.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kprop {

namespace {

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// A message as alternating text and numbers: parts[0] text, parts[1] a
// number, parts[2] text, ... A number stands alone: an optional sign, digits,
// a fraction and an exponent, not part of a word ("f16", "4x4" and "x1" are
// text).
std::vector<std::string> split_numbers(const std::string& s) {
  std::vector<std::string> parts(1);
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    const bool starts = i == 0 || (!word_char(s[i - 1]) && s[i - 1] != '.');
    if (starts && (s[j] == '-' || s[j] == '+') && j + 1 < s.size() && digit(s[j + 1])) ++j;
    if (starts && digit(s[j])) {
      while (j < s.size() && digit(s[j])) ++j;
      if (j + 1 < s.size() && s[j] == '.' && digit(s[j + 1]))
        for (++j; j < s.size() && digit(s[j]);) ++j;
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t e = j + 1;
        if (e < s.size() && (s[e] == '-' || s[e] == '+')) ++e;
        if (e < s.size() && digit(s[e])) {
          while (e < s.size() && digit(s[e])) ++e;
          j = e;
        }
      }
      if (j == s.size() || (!word_char(s[j]))) {
        parts.push_back(s.substr(i, j - i));
        parts.emplace_back();
        i = j;
        continue;
      }
    }
    parts.back() += s[i++];
  }
  return parts;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> grouped_reasons(const std::map<std::string, int64_t>& reasons) {
  struct Group {
    std::vector<std::string> parts;  // the first message's, varying numbers made "…"
    int64_t count = 0;
  };
  std::map<std::string, Group> groups;  // keyed by the text between the numbers
  for (const auto& [message, count] : reasons) {
    std::vector<std::string> parts = split_numbers(message);
    std::string key;
    for (size_t p = 0; p < parts.size(); p += 2) key += parts[p] + '\0';
    auto [it, fresh] = groups.try_emplace(key);
    Group& g = it->second;
    if (fresh)
      g.parts = std::move(parts);
    else
      for (size_t p = 1; p < parts.size(); p += 2)
        if (g.parts[p] != parts[p]) g.parts[p] = "…";
    g.count += count;
  }
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& [key, g] : groups) {
    std::string text;
    for (const auto& part : g.parts) text += part;
    out.emplace_back(std::move(text), g.count);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::map<std::string, int64_t> grouped_reason_counts(const std::map<std::string, int64_t>& reasons) {
  const auto groups = grouped_reasons(reasons);
  return {groups.begin(), groups.end()};
}

std::string reasons_summary(const std::map<std::string, int64_t>& reasons, size_t most) {
  const auto groups = grouped_reasons(reasons);
  std::string out;
  for (size_t i = 0; i < groups.size() && i < most; ++i)
    out += fmt::format("{}{} ({})", i ? ", " : "", groups[i].first, groups[i].second);
  if (groups.size() > most) out += fmt::format(", and {} more", groups.size() - most);
  return out;
}

}  // namespace kprop
