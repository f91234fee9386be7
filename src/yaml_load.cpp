#include "kprop/yaml_load.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>

#include "kprop/errors.h"

namespace kprop {
namespace {

// Where each document starts and whether it holds anything but one null.
//
// Hand-rolled rather than YAML::LoadAll: yaml-cpp 0.7's LoadAll never returns
// on a stray ',' at block level (e.g. a line ", x"): each document it yields
// is an empty one that leaves the ',' unconsumed, so it allocates until the
// process is killed. The event parser shows this as two documents starting
// at the same offset, and the walk stops there with an error.
class DocumentWalk : public YAML::EventHandler {
 public:
  YAML::Mark start;
  bool content = false;
  YAML::Mark content_at;            // the document's first node, when content
  std::optional<YAML::Mark> alias;  // the first alias (*name) of any document

  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    content = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    if (!alias) alias = mark;
    node(mark);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (!content) content_at = mark;
    content = true;
  }
};

Mark at(const std::string& source, const YAML::Mark& m) {
  return m.is_null() ? Mark{source, 0, 0} : Mark{source, m.line + 1, m.column + 1};
}

}  // namespace

YAML::Node load_one_document(const std::string& text, const std::string& source, const std::string& what,
                             const std::string& holder, bool aliases) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentWalk walk;
    bool first = true;
    int previous = -1;
    while (parser.HandleNextDocument(walk)) {
      if (walk.start.pos == previous) {
        const size_t pos = static_cast<size_t>(walk.start.pos);
        const std::string token = pos < text.size() ? "'" + std::string(1, text[pos]) + "'" : "end of text";
        throw InputError(at(source, walk.start),
                         what + ": unexpected " + token +
                             (token == "','" ? " (a ',' separates items only inside [...] or {...})" : ""));
      }
      previous = walk.start.pos;
      if (!first && walk.content)
        throw InputError(at(source, walk.content_at), "a second YAML document; " + holder + " holds one");
      first = false;
      if (!aliases && walk.alias)
        throw InputError(at(source, *walk.alias), what + ": a YAML alias; " + holder + " holds none");
    }
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // its message is "bad file"
    throw InputError(at(source, e.mark), what + ": lists and maps nested too deeply for the YAML parser");
  } catch (const YAML::ParserException& e) {
    // In a flow map, 'dtypes:[f32]' is one plain scalar, not a key and its
    // value: yaml-cpp reports the unclosed map, not the missing space.
    // Looked for before where the error was noticed, outside comments and
    // quoted strings.
    std::string hint;
    const size_t end = std::min(text.size(), e.mark.pos >= 0 ? size_t(e.mark.pos) + 1 : text.size());
    char quote = 0;
    bool comment = false;
    if (e.msg.find("flow") != std::string::npos)
      for (size_t i = 0; i + 1 < end && hint.empty(); ++i) {
        const char ch = text[i];
        if (comment) {
          comment = ch != '\n';
          continue;
        }
        if (quote) {
          if (ch == quote) quote = 0;
          continue;
        }
        if (ch == '"' || ch == '\'') {
          quote = ch;
          continue;
        }
        if (ch == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
          comment = true;
          continue;
        }
        if (ch == ':' && i > 0 && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
            (text[i + 1] == '[' || text[i + 1] == '{')) {
          size_t start = i;
          while (start > 0 &&
                 (std::isalnum(static_cast<unsigned char>(text[start - 1])) || text[start - 1] == '_'))
            --start;
          const std::string key = text.substr(start, i - start);
          hint = fmt::format(" ('{}:{}' has no space after its ':', so it is no key: write '{}: {}')", key,
                             text[i + 1], key, text[i + 1]);
        }
      }
    // A tab in a line's indentation: yaml-cpp says "illegal map value" or
    // the like, at a line that looks right. Looked for up to the error's line.
    if (hint.empty()) {
      const size_t line_end = std::min(text.size(), text.find('\n', end == 0 ? 0 : end - 1));
      int line = 1;
      for (size_t i = 0; i < line_end; ++line) {
        size_t j = i;
        while (j < line_end && (text[j] == ' ' || text[j] == '\t')) ++j;
        // (A blank line's tabs indent nothing.)
        if (text.find('\t', i) < j && j < line_end && text[j] != '\n' && text[j] != '\r') {
          hint = fmt::format(" (line {} indents with a tab: YAML indents with spaces only)", line);
          break;
        }
        const size_t next = text.find('\n', i);
        if (next == std::string::npos) break;
        i = next + 1;
      }
    }
    // A plain value with ': ' in it (an expression's slice, `x[: , 0]`,
    // `x[0: 1]`) reads as a second key on its line: "illegal map value".
    if (hint.empty() && e.mark.pos >= 0 && static_cast<size_t>(e.mark.pos) < text.size()) {
      const size_t pos = static_cast<size_t>(e.mark.pos);
      const size_t begin = text.rfind('\n', pos == 0 ? 0 : pos - 1);
      const size_t line_start = begin == std::string::npos ? 0 : begin + 1;
      const std::string line = text.substr(line_start, text.find('\n', pos) - line_start);
      const size_t key = line.find(": ");
      const size_t value = key == std::string::npos ? key : line.find_first_not_of(' ', key + 1);
      if (value != std::string::npos && line[value] != '"' && line[value] != '\'' && line[value] != '>' &&
          line[value] != '|' && line.find(':', value) != std::string::npos) {
        size_t name = key;  // the key before that ': ', as written
        while (name > 0 &&
               (std::isalnum(static_cast<unsigned char>(line[name - 1])) || line[name - 1] == '_'))
          --name;
        const std::string k = line.substr(name, key - name);
        hint = fmt::format(
            " (the value after '{}:' holds a ':' (a slice?): quote it, or write it as a block, "
            "'{}: >-' with the text on the lines below)",
            k, k);
      }
    }
    throw InputError(at(source, e.mark), what + ": " + e.msg + hint);
  }
}

}  // namespace kprop
