#include "kprop/case_yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace kprop::case_yaml {

void fail(const YAML::Node& node, const std::string& message) {
  const YAML::Mark m = node.Mark();
  throw CaseFormatError(m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, message);
}

void check_contract(const YAML::Node& map, const std::string& why) {
  if (why.empty()) return;
  size_t n = 0;
  while (n < why.size() && (std::isalnum(static_cast<unsigned char>(why[n])) || why[n] == '_')) ++n;
  if (n > 0 && map.IsMap())
    if (const YAML::Node at = map[why.substr(0, n)]) fail(at, why);
  fail(map, why);
}

void expect_keys(const YAML::Node& map, std::initializer_list<const char*> keys, const std::string& what) {
  if (!map.IsMap()) fail(map, what + " must be a map");
  for (auto it = map.begin(); it != map.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it->first.Scalar() == k;
    if (!ok) fail(it->first, "unknown key '" + it->first.Scalar() + "' in " + what);
  }
}

YAML::Node real(double v) {
  if (std::isnan(v)) return YAML::Node(std::signbit(v) ? "-.nan" : ".nan");
  if (std::isinf(v)) return YAML::Node(v > 0 ? ".inf" : "-.inf");
  return YAML::Node(fmt::format("{}", v));
}

YAML::Node real_list(const std::vector<double>& values) {
  return text_list(values.size(), [&](size_t i) { return real(values[i]).Scalar(); });
}

std::vector<double> read_reals(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  if (!n || !is_list(n)) fail(n ? n : map, std::string("'") + key + "' must be a list of numbers");
  return read_real_list(n, std::string("'") + key + "'");
}

std::vector<double> read_real_list(const YAML::Node& n, const std::string& what) {
  if (!is_list(n)) fail(n, what + " must be a list of numbers");
  std::vector<double> out;
  out.reserve(list_size(n));
  for_each_item(n, [&](const Item& x) {
    if (!x.scalar) x.fail(what + " must be a list of numbers");
    const std::string_view s = x.text;
    if (s == "nan")
      out.push_back(std::numeric_limits<double>::quiet_NaN());
    else if (s == "-nan")
      out.push_back(-std::numeric_limits<double>::quiet_NaN());
    else if (s == "inf")
      out.push_back(std::numeric_limits<double>::infinity());
    else if (s == "-inf")
      out.push_back(-std::numeric_limits<double>::infinity());
    else if (const std::optional<double> v = yaml_real(s))
      out.push_back(*v);
    else
      x.fail(what + " has a non-number '" + std::string(s) + "'");
  });
  return out;
}

// ---- packed lists
namespace {

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// [+-]?[0-9.][0-9A-Za-z.+-_]* with a digit: what a number's text looks like.
bool number_like(std::string_view t) {
  size_t i = t.empty() || (t[0] != '+' && t[0] != '-') ? 0 : 1;
  if (i >= t.size() || !(digit(t[i]) || t[i] == '.')) return false;
  bool any_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    any_digit = any_digit || digit(c);
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' || c == '_'))
      return false;
  }
  return any_digit;
}

bool special_real(std::string_view t, double& v) {
  static constexpr std::string_view inf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"};
  static constexpr std::string_view neg_inf[] = {"-.inf", "-.Inf", "-.INF"};
  static constexpr std::string_view nan[] = {".nan", ".NaN", ".NAN"};
  // Not YAML's (it has no -.nan): a NaN with its sign bit set, as kprop writes it.
  static constexpr std::string_view neg_nan[] = {"-.nan", "-.NaN", "-.NAN"};
  if (std::ranges::find(inf, t) != std::end(inf)) return v = std::numeric_limits<double>::infinity(), true;
  if (std::ranges::find(neg_inf, t) != std::end(neg_inf))
    return v = -std::numeric_limits<double>::infinity(), true;
  if (std::ranges::find(nan, t) != std::end(nan)) return v = std::numeric_limits<double>::quiet_NaN(), true;
  if (std::ranges::find(neg_nan, t) != std::end(neg_nan))
    return v = -std::numeric_limits<double>::quiet_NaN(), true;
  return false;
}

// A one-line list's text between its brackets holds only what packable
// items and their separators can.
bool list_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' || c == '_' ||
         c == ',' || c == ' ' || c == '\t';
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The items of a packed list's text, each with its offset in it.
template <typename Fn>
void split_items(std::string_view s, Fn&& fn) {
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(s.find(',', start), s.size());
    const std::string_view raw = s.substr(start, end - start);
    const std::string_view item = trimmed(raw);
    fn(item, start + static_cast<size_t>(item.empty() ? 0 : item.data() - raw.data()));
    if (end == s.size()) return;
    start = end + 1;
  }
}

}  // namespace

bool is_packed(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() == kPackedTag;
}

bool is_list(const YAML::Node& n) {
  return n.IsSequence() || is_packed(n);
}

size_t list_size(const YAML::Node& n) {
  if (n.IsSequence()) return n.size();
  if (!is_packed(n)) return 0;
  const std::string& s = n.Scalar();
  return static_cast<size_t>(std::count(s.begin(), s.end(), ',')) + 1;
}

bool packable(std::string_view item) {
  double ignored = 0;
  return number_like(item) || special_real(item, ignored);
}

YAML::Node text_list(size_t count, const std::function<std::string(size_t)>& text) {
  if (count >= kPackMin) {
    std::string joined;
    bool ok = true;
    for (size_t i = 0; i < count && ok; ++i) {
      const std::string t = text(i);
      ok = packable(t);
      if (i) joined += ", ";
      joined += t;
    }
    if (ok) {
      YAML::Node n(joined);
      n.SetTag(kPackedTag);
      return n;
    }
  }
  YAML::Node n(YAML::NodeType::Sequence);
  n.SetStyle(YAML::EmitterStyle::Flow);  // as emit_yaml writes it, for a plain YAML::Emitter too
  for (size_t i = 0; i < count; ++i) n.push_back(text(i));
  return n;
}

void Item::fail(const std::string& message) const {
  throw CaseFormatError(line, column, message);
}

Item as_item(const YAML::Node& n) {
  Item item;
  item.scalar = n.IsScalar() && !is_packed(n);
  if (item.scalar) item.text = n.Scalar();
  item.node = &n;
  if (const YAML::Mark m = n.Mark(); !m.is_null()) item.line = m.line + 1, item.column = m.column + 1;
  return item;
}

void for_each_item(const YAML::Node& list, const std::function<void(const Item&)>& fn) {
  if (list.IsSequence()) {
    size_t i = 0;
    for (const auto& x : list) {
      Item item = as_item(x);
      item.index = i++;
      fn(item);
    }
    return;
  }
  if (!is_packed(list)) return;
  // A loaded list sits where its `[` was (pack_flow_lists): item columns are
  // the `[`'s, plus one, plus the item's offset in the text.
  const YAML::Mark m = list.Mark();
  size_t i = 0;
  split_items(list.Scalar(), [&](std::string_view text, size_t offset) {
    Item item;
    item.index = i++;
    item.scalar = true;
    item.text = text;
    if (!m.is_null()) item.line = m.line + 1, item.column = m.column + 2 + static_cast<int>(offset);
    fn(item);
  });
}

YAML::Node unpacked(const YAML::Node& tree) {
  if (is_packed(tree)) {
    YAML::Node out(YAML::NodeType::Sequence);
    for_each_item(tree, [&](const Item& x) { out.push_back(std::string(x.text)); });
    return out;
  }
  if (tree.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    for (const auto& x : tree) out.push_back(unpacked(x));
    return out;
  }
  if (tree.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (auto it = tree.begin(); it != tree.end(); ++it) out[YAML::Clone(it->first)] = unpacked(it->second);
    return out;
  }
  return YAML::Clone(tree);
}

std::string pack_flow_lists(const std::string& text, std::vector<size_t>* at) {
  std::string out;
  size_t copied = 0;  // text[0, copied) is in out
  bool in_double = false, in_single = false;
  int depth = 0;          // open flow collections (not packed)
  int block_indent = -1;  // in a block scalar: the lines indented more than this
  // A plain value went on past its line: the lines indented more than this go on with it.
  int plain_indent = -1;
  // Where a node may start: after "- ", ": ", and in a flow collection
  // after its opening bracket or a comma (which a line break may follow).
  bool at_start = false;
  const size_t n = text.size();
  // UTF-16 or UTF-32 (a byte-order mark, NUL bytes): yaml-cpp converts it,
  // and no offset here would be its position.
  if (text.rfind("\xFE\xFF", 0) == 0 || text.rfind("\xFF\xFE", 0) == 0 ||
      text.find('\0') != std::string::npos)
    return text;
  for (size_t pos = 0; pos < n;) {
    const size_t next = std::min(text.find('\n', pos), n) + 1;
    size_t eol = next - 1;
    if (eol > pos && text[eol - 1] == '\r') --eol;  // CRLF
    size_t i = pos;
    while (i < eol && text[i] == ' ') ++i;
    const int indent = static_cast<int>(i - pos);
    if (block_indent >= 0 || plain_indent >= 0) {
      const int over = std::max(block_indent, plain_indent);
      if (i == eol || indent > over) {  // blank, or more of the scalar
        pos = next;
        continue;
      }
      block_indent = plain_indent = -1;
    }
    bool in_plain = false;  // in a plain value of block context
    if (in_double || in_single || depth > 0) {
      i = pos;
    } else {
      bool entry = false;
      while (i < eol && text[i] == '-' && (i + 1 == eol || text[i + 1] == ' ')) {
        entry = true;
        ++i;
        while (i < eol && text[i] == ' ') ++i;
      }
      if (!entry && i < eol && (text[i] == '[' || text[i] == '{' || text[i] == '?' || text[i] == '%')) {
        if (at) at->clear();  // a flow collection or a complex key opening a line, a directive: not followed
        return text;
      }
      at_start = entry || (i < eol && (text[i] == '"' || text[i] == '\''));  // an entry, or a quoted key
    }
    bool decorated = false;  // a tag or an anchor stands before the node
    for (; i < eol; ++i) {
      const char c = text[i];
      if (in_double) {
        if (c == '\\')
          ++i;
        else if (c == '"')
          in_double = false;
        continue;
      }
      if (in_single) {
        if (c == '\'') {
          if (i + 1 < eol && text[i + 1] == '\'')
            ++i;
          else
            in_single = false;
        }
        continue;
      }
      if (c == ' ' || c == '\t') continue;
      if (c == '#' && (i == pos || text[i - 1] == ' ' || text[i - 1] == '\t')) {  // a comment
        in_plain = false;
        break;
      }
      if (depth > 0 && (c == ']' || c == '}')) {
        --depth;
        at_start = false;
        continue;
      }
      if (at_start) {
        if (c == '!' || c == '&') {  // a tag or an anchor: the node follows
          decorated = true;
          while (i + 1 < eol && text[i + 1] != ' ') ++i;
          continue;
        }
        at_start = false;
        const bool bare = !decorated;
        decorated = false;
        if (c == '"') {
          in_double = true;
          continue;
        }
        if (c == '\'') {
          in_single = true;
          continue;
        }
        if (c == '|' || c == '>') {
          if (depth == 0) {
            block_indent = indent;
            break;
          }
          continue;
        }
        if (c == '{') {
          ++depth;
          at_start = true;
          continue;
        }
        if (c == '[') {
          size_t close = i + 1;
          while (close < eol && list_char(text[close])) ++close;
          if (bare && close < eol && text[close] == ']') {
            const std::string_view body(text.data() + i + 1, close - i - 1);
            size_t count = 0;
            bool ok = true;
            split_items(body, [&](std::string_view item, size_t) { ok = ok && packable(item), ++count; });
            if (ok && count >= kPackMin) {
              // '[a, b]' -> "'a, b'": the same length, so every mark of
              // the document stays where it was.
              out.append(text, copied, i - copied);
              out += '\'';
              out += body;
              out += '\'';
              copied = close + 1;
              if (at) at->push_back(i);
              i = close;
              continue;
            }
          }
          ++depth;
          at_start = true;
          continue;
        }
        in_plain = depth == 0;  // a plain scalar starts here
      }
      if (c == ',' && depth > 0) {
        at_start = true;
      } else if (c == ':') {
        const char after = i + 1 < eol ? text[i + 1] : ' ';
        if (after == ' ' || after == '\t' || (depth > 0 && (after == ',' || after == ']' || after == '}'))) {
          at_start = true;
          in_plain = false;
        }
      }
    }
    // A flow collection going on past the line keeps its position: after a
    // comma the next node starts on the next line.
    if (depth == 0) at_start = false;
    if (in_plain && !in_double && !in_single && depth == 0) plain_indent = indent;
    pos = next;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

YAML::Node load_packed(const std::string& text, const std::function<YAML::Node(const std::string&)>& load) {
  std::vector<size_t> at;
  YAML::Node root = load(pack_flow_lists(text, &at));
  if (at.empty()) return root;
  // (yaml-cpp's positions count bytes, CRs included, after a UTF-8 byte-order mark.)
  const size_t bom = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  // The single-quoted scalars where a packed list's `[` was are packed lists.
  walk_tree(root, [&](const YAML::Node& n) {
    if (n.IsScalar() && n.Tag() == "!" &&
        std::binary_search(at.begin(), at.end(), static_cast<size_t>(n.Mark().pos) + bom)) {
      YAML::Node list = n;
      list.SetTag(kPackedTag);
    }
    return !n.IsScalar();
  });
  return root;
}

void walk_tree(const YAML::Node& tree, const std::function<bool(const YAML::Node&)>& fn) {
  if (!fn(tree) || tree.IsScalar()) return;
  for (auto it = tree.begin(); it != tree.end(); ++it) {
    if (tree.IsMap()) {
      walk_tree(it->first, fn);
      walk_tree(it->second, fn);
    } else {
      walk_tree(*it, fn);
    }
  }
}

std::optional<double> yaml_real(std::string_view t) {
  double v = 0;
  if (special_real(t, v)) return v;
  // A plain decimal: from_chars reads it as yaml-cpp's stream does (both
  // round correctly); anything else (a leading +, hex, an overflow) goes to
  // yaml-cpp itself.
  bool plain = !t.empty() && t[0] != '+';
  for (const char c : t)
    plain = plain && (digit(c) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E');
  if (plain) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc() && end == t.data() + t.size()) return v;
  }
  try {
    return YAML::Node(std::string(t)).as<double>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

std::optional<long long> yaml_integer(std::string_view t) {
  // A decimal without a leading zero (yaml-cpp reads 010 as octal, 0x10 as hex).
  const size_t sign = !t.empty() && t[0] == '-' ? 1 : 0;
  bool plain = t.size() > sign && (t[sign] != '0' || t.size() == sign + 1);
  for (size_t i = sign; i < t.size() && plain; ++i) plain = digit(t[i]);
  if (plain) {
    long long v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc() && end == t.data() + t.size()) return v;
  }
  try {
    return YAML::Node(std::string(t)).as<long long>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

int significant_digits(double v, FloatType t) {
  if (v == 0 || !std::isfinite(v)) return 0;
  std::string digits;
  for (char ch : value_text(t, v)) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '0' && ch <= '9') digits += ch;
  }
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  return static_cast<int>(digits.find_last_not_of('0') - first + 1);
}

}  // namespace kprop::case_yaml
