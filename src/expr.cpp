// The expression language of spec invariants (kprop/expr.h).
//
// A hand-written recursive-descent parser: no packaged library fits. Debian
// has parser generators (bison, re2c, PEGTL) and formula evaluators
// (muParser, exprtk), but the generators would add a build-time tool for a
// grammar of a dozen rules, and the evaluators work on scalars: none has
// NumPy broadcasting, axes, gather, or the symbolic shape check that lets a
// spec fail at load time with file:line:col. The grammar (lowest first):
//
//   expr    := or
//   or      := and ('or' and)*
//   and     := not ('and' not)*
//   not     := 'not' not | compare
//   compare := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
//   sum     := product (('+'|'-') product)*
//   product := unary (('*'|'/'|'@') unary)*
//   unary   := ('-'|'+') unary | power
//   power   := postfix ('**' unary)?
//   postfix := primary ('[' item (',' item)* ']')*
//   item    := expr | expr? ':' expr? | 'None' | '...'
//   primary := NUMBER | 'true' | 'false' | 'inf' | 'nan' | NAME | NAME '(' args ')' | '(' expr ')'
//   args    := (expr | KEY '=' expr) (',' ...)*
#include "kprop/expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>

#include "expr_ast.h"  // Node and the symbolic Shape, shared with expr_eval.cpp
#include "kprop/enum_names.h"
#include "kprop/errors.h"
#include "kprop/tolerance.h"

namespace kprop::expr {

const char* dtype_name(DType dtype) {
  static constexpr const char* kNames[] = {"bool", "int", "real"};
  static_assert(std::size(kNames) == size_t(DType::real) + 1);
  return enum_name(dtype, kNames);
}

Tensor Tensor::scalar(double value, DType dtype) {
  return {{}, {value}, dtype};
}

Tensor Tensor::of(std::vector<int64_t> shape, std::vector<double> data, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != static_cast<int64_t>(data.size()))
    throw std::logic_error(fmt::format("tensor of shape {} given {} values", shape_text(shape), data.size()));
  return {std::move(shape), std::move(data), dtype};
}

void add_per_implementation(TensorInfos& t, const std::vector<Whose>& whose, const TensorInfos& outputs) {
  for (const Whose& w : whose)
    for (const TensorInfo& o : outputs)
      t.push_back({w.who + "." + o.name, o.shape, o.dtype, w.prefix + o.meaning});
}

// Hand-rolled rather than YAML: the column layout is the one the listing
// prints, and most meanings hold commas and colons that YAML would make
// every table quote.
TensorInfos tensor_table(std::string_view table) {
  TensorInfos out;
  constexpr std::string_view kBlank = " \t";
  const auto trim = [&](std::string_view s) {
    const size_t b = s.find_first_not_of(kBlank);
    return b == std::string_view::npos ? std::string_view{} : s.substr(b, s.find_last_not_of(kBlank) - b + 1);
  };
  int number = 0;
  for (size_t at = 0; at <= table.size();) {
    const size_t end = std::min(table.find('\n', at), table.size());
    const std::string_view line = table.substr(at, end - at);
    at = end + 1;
    ++number;
    const auto fail = [&](std::string_view why) {
      throw std::logic_error(fmt::format("tensor table line {}: {}: '{}'", number, why, line));
    };
    if (trim(line).empty()) continue;
    if (kBlank.find(line.front()) != std::string_view::npos) {
      if (out.empty()) fail("a continuation before the first tensor");
      out.back().meaning += " " + std::string(trim(line));
      continue;
    }
    const size_t open = line.find('['), close = line.find(']');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
      fail("no [shape] after the name");
    TensorInfo t;
    t.name = trim(line.substr(0, open));
    if (t.name.empty() || t.name.find_first_of(kBlank) != std::string::npos)
      fail("one name before the shape");
    for (std::string_view dims = line.substr(open + 1, close - open - 1); !trim(dims).empty();) {
      const size_t comma = std::min(dims.find(','), dims.size());
      t.shape.emplace_back(trim(dims.substr(0, comma)));
      if (t.shape.back().empty()) fail("an empty dimension");
      dims = comma < dims.size() ? dims.substr(comma + 1) : std::string_view{};
    }
    const std::string_view rest = trim(line.substr(close + 1));
    const size_t gap = std::min(rest.find_first_of(kBlank), rest.size());
    const std::string_view type = rest.substr(0, gap);
    if (type == "bool")
      t.dtype = DType::boolean;
    else if (type == "int")
      t.dtype = DType::integer;
    else if (type == "real")
      t.dtype = DType::real;
    else
      fail("the type is bool, int or real");
    t.meaning = trim(rest.substr(gap));
    if (t.meaning.empty()) fail("no meaning");
    out.push_back(std::move(t));
  }
  return out;
}

std::string shape_text(const std::vector<std::string>& shape) {
  return "[" + join(shape) + "]";
}
std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void TensorMap::put_with_lower_bound(const std::string& name, Tensor lower, std::function<Tensor()> full) {
  if (!wanted(name)) return;
  wanted_.erase(name);
  bounded_[name] = Bounded{std::move(lower), std::move(full)};
}

const Tensor* TensorMap::find(const std::string& name) const {
  return lookup(name, nullptr);
}

const Tensor* TensorMap::find_lower_bound(const std::string& name, bool* lower) const {
  return lookup(name, lower);
}

// `lower` null: the full value of a bounded name (computed here the first
// time); else its lower bound while the full value is not computed.
const Tensor* TensorMap::lookup(const std::string& name, bool* lower) const {
  if (const auto it = tensors_.find(name); it != tensors_.end()) return &it->second;
  if (const auto it = bounded_.find(name); it != bounded_.end()) {
    if (lower) {
      *lower = true;
      return &it->second.lower;
    }
    return &(tensors_[name] = it->second.full());
  }
  bool own_linked = false;
  for (const Link& l : links_)
    if (name.compare(0, l.prefix.size(), l.prefix) == 0) {
      own_linked = own_linked || l.prefix == kOwnPrefix;
      if (const Tensor* t = l.other->lookup(l.strip ? name.substr(l.prefix.size()) : name, lower)) return t;
    }
  // "own:X" (or "transformed.own:X") where no other map holds the family's
  // own reference: the oracle is the family's reference, and X is its tensor.
  if (const size_t at = name.find(kOwnPrefix); at != std::string::npos && !(at == 0 && own_linked))
    return lookup(std::string(name).erase(at, kOwnPrefix.size()), lower);
  return nullptr;
}

void TensorMap::put_output(const std::string& name, std::vector<int64_t> shape,
                           const std::vector<double>& data, DType dtype) {
  if (!wanted(name)) return;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (static_cast<int64_t>(data.size()) == n) put(name, Tensor::of(std::move(shape), data, dtype));
}

bool TensorMap::wants_prefix(const std::string& prefix) const {
  const auto it = wanted_.lower_bound(prefix);
  return it != wanted_.end() && it->compare(0, prefix.size(), prefix) == 0;
}

namespace {

// ---------------------------------------------------------------- lexer
struct Token {
  enum class T { end, number, name, op } t = T::end;
  std::string s;
  size_t pos = 0;
  double num = 0;
  bool integral = false;
};

std::vector<Token> lex(const std::string& text) {
  std::vector<Token> out;
  size_t i = 0;
  const auto is_name_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  const auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  while (i < text.size()) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.pos = i;
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      size_t j = i;
      bool integral = true;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      if (j < text.size() && text[j] == '.' && text.compare(j, 3, "...") != 0) {
        integral = false;
        ++j;
        while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) {
          integral = false;
          j = k;
          while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
        }
      }
      t.t = Token::T::number;
      t.s = text.substr(i, j - i);
      t.num = std::strtod(t.s.c_str(), nullptr);
      t.integral = integral;
      i = j;
    } else if (is_name_start(c)) {
      // Dotted names: target.o, reference.lse.
      size_t j = i;
      while (j < text.size() &&
             (is_name(text[j]) || (text[j] == '.' && j + 1 < text.size() && is_name_start(text[j + 1]))))
        ++j;
      t.t = Token::T::name;
      t.s = text.substr(i, j - i);
      i = j;
    } else {
      if (text.compare(i, 2, "//") == 0)
        throw ExprError(i, "unexpected '//': the expressions have no floor division (/ divides exactly)");
      static const char* ops[] = {"...", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                  "@",   "(",  ")",  "[",  "]",  ",",  ":", "=", "<", ">"};
      bool found = false;
      for (const char* op : ops)
        if (text.compare(i, std::char_traits<char>::length(op), op) == 0) {
          t.t = Token::T::op;
          t.s = op;
          i += t.s.size();
          found = true;
          break;
        }
      if (!found) {
        if (c == '%') throw ExprError(i, "unexpected character '%': the expressions have no modulo");
        if (c == '\'' || c == '"')
          throw ExprError(i,
                          fmt::format("unexpected character '{}': the expressions have no strings (a named "
                                      "choice reads as its index: act == 0 for its first choice)",
                                      c));
        if (c == '&' || c == '|' || c == '~' || c == '!')
          throw ExprError(i, fmt::format("unexpected '{}': write and, or, not", c));
        if (static_cast<unsigned char>(c) >= 0x80) {
          // A UTF-8 character whole (not its first byte), with the ASCII
          // operator meant where it is a usual one.
          const unsigned char lead = static_cast<unsigned char>(c);
          const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
          const std::string ch = text.substr(i, len);
          static const std::pair<const char*, const char*> ascii[] = {
              {"≥", ">="}, {"≤", "<="}, {"≠", "!="}, {"×", "*"}, {"·", "*"}, {"−", "-"}, {"÷", "/"}};
          for (const auto& [u, a] : ascii)
            if (ch == u) throw ExprError(i, fmt::format("unexpected character '{}': write {}", ch, a));
          throw ExprError(i, fmt::format("unexpected character '{}' (expressions are ASCII)", ch));
        }
        throw ExprError(i, fmt::format("unexpected character '{}'", c));
      }
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.pos = text.size();
  out.push_back(end);
  return out;
}

// ---------------------------------------------------------------- parser
class Parser {
 public:
  explicit Parser(const std::string& text) : tokens_(lex(text)) {}

  NodeP parse() {
    NodeP n = expr();
    not_assignment();
    if (peek().t != Token::T::end) throw ExprError(peek().pos, fmt::format("unexpected '{}'", peek().s));
    return n;
  }

 private:
  const Token& peek() const { return tokens_[at_]; }
  bool is_op(const char* s) const { return peek().t == Token::T::op && peek().s == s; }
  bool is_word(const char* s) const { return peek().t == Token::T::name && peek().s == s; }
  Token take() { return tokens_[at_++]; }
  // An '=' where an operand ended (`target.y = x`): meant as ==. Only a
  // plain name right after a call's '(' or ',' is a keyword (axis=1).
  void not_assignment() const {
    if (is_op("=")) throw ExprError(peek().pos, "'=' is not a comparison; write '=='");
  }
  void expect_op(const char* s) {
    not_assignment();
    if (!is_op(s)) {
      const Token& t = peek();
      throw ExprError(t.pos, t.t == Token::T::end ? fmt::format("expected '{}' before the end", s)
                                                  : fmt::format("expected '{}', got '{}'", s, t.s));
    }
    ++at_;
  }
  size_t prev_end() const { return tokens_[at_ - 1].pos + tokens_[at_ - 1].s.size(); }

  NodeP make(Kind kind, size_t begin, std::string op, std::vector<NodeP> args) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->begin = begin;
    n->end = prev_end();
    n->op = std::move(op);
    n->args = std::move(args);
    seal(*n);
    return n;
  }
  // Bounds the tree's height: `1 + 1 + ... + 1` parses in a loop but is
  // checked and evaluated recursively.
  void seal(Node& n) {
    n.height = 1;
    for (const auto& a : n.args) n.height = std::max(n.height, a->height + 1);
    for (const auto& item : n.items)
      for (const NodeP& e : {item.e, item.lo, item.hi})
        if (e) n.height = std::max(n.height, e->height + 1);
    if (n.height > kMaxDepth) throw ExprError(n.begin, "the expression nests too deeply");
  }

  // Nesting deeper than this is refused (the recursion must not exhaust the
  // stack on hostile input, e.g. from the spec-loader fuzzer).
  static constexpr int kMaxDepth = 200;
  struct Depth {
    Depth(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) throw ExprError(p.peek().pos, "the expression nests too deeply");
    }
    ~Depth() { --p.depth_; }
    Parser& p;
  };

  NodeP expr() {
    Depth d(*this);
    return or_();
  }
  // A left-associative level: next (OP next)*, OP one of `ops`, words
  // ("or") or operators ("+").
  using Level = NodeP (Parser::*)();
  NodeP left_assoc(Level next, std::initializer_list<const char*> ops, bool words) {
    NodeP l = (this->*next)();
    for (;;) {
      const auto op =
          std::find_if(ops.begin(), ops.end(), [&](const char* o) { return words ? is_word(o) : is_op(o); });
      if (op == ops.end()) return l;
      take();
      NodeP r = (this->*next)();
      l = make(Kind::binary, l->begin, *op, {l, r});
    }
  }
  NodeP or_() { return left_assoc(&Parser::and_, {"or"}, true); }
  NodeP and_() { return left_assoc(&Parser::not_, {"and"}, true); }
  NodeP not_() {
    Depth d(*this);
    if (is_word("not")) {
      const size_t b = take().pos;
      NodeP a = not_();
      return make(Kind::unary, b, "not", {a});
    }
    return compare();
  }
  NodeP compare() {
    NodeP l = sum();
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"})
      if (is_op(op)) {
        take();
        NodeP r = sum();
        for (const char* again : {"==", "!=", "<=", ">=", "<", ">"})
          if (is_op(again))
            throw ExprError(peek().pos, "chained comparisons are ambiguous: write (a < b) and (b < c)");
        return make(Kind::binary, l->begin, op, {l, r});
      }
    return l;
  }
  NodeP sum() { return left_assoc(&Parser::product, {"+", "-"}, false); }
  NodeP product() { return left_assoc(&Parser::unary, {"*", "/", "@"}, false); }
  NodeP unary() {
    Depth d(*this);
    if (is_op("-") || is_op("+")) {
      const Token t = take();
      NodeP a = unary();
      if (t.s == "+") return a;
      return make(Kind::unary, t.pos, "-", {a});
    }
    return power();
  }
  NodeP power() {
    NodeP l = postfix();
    if (is_op("**")) {
      take();
      NodeP r = unary();
      return make(Kind::binary, l->begin, "**", {l, r});
    }
    return l;
  }
  NodeP postfix() {
    NodeP n = primary();
    while (is_op("[")) {
      take();
      auto idx = std::make_shared<Node>();
      idx->kind = Kind::index;
      idx->begin = n->begin;
      idx->args = {n};
      while (true) {
        Item item;
        item.pos = peek().pos;
        if (is_op("...")) {
          take();
          item.k = Item::K::ellipsis;
        } else if (is_word("None")) {
          take();
          item.k = Item::K::newaxis;
        } else {
          if (!is_op(":")) item.e = expr();
          if (is_op(":")) {
            take();
            item.k = Item::K::slice;
            item.lo = item.e;
            item.e = nullptr;
            if (!is_op(",") && !is_op("]")) item.hi = expr();
          }
        }
        idx->items.push_back(std::move(item));
        if (is_op(",")) {
          take();
          continue;
        }
        expect_op("]");
        break;
      }
      idx->end = prev_end();
      seal(*idx);
      n = idx;
    }
    return n;
  }
  NodeP primary() {
    const Token t = peek();
    if (t.t == Token::T::number) {
      take();
      NodeP n = make(Kind::number, t.pos, "", {});
      n->value = t.num;
      n->dtype = t.integral ? DType::integer : DType::real;
      return n;
    }
    if (is_op("(")) {
      const size_t open = take().pos;
      NodeP n = expr();
      expect_op(")");
      n->begin = open, n->end = prev_end();  // messages quote it with its parentheses
      return n;
    }
    if (t.t == Token::T::name) {
      if (t.s == "true" || t.s == "false" || t.s == "True" || t.s == "False") {
        take();
        NodeP n = make(Kind::number, t.pos, "", {});
        n->value = (t.s == "true" || t.s == "True") ? 1 : 0;
        n->dtype = DType::boolean;
        return n;
      }
      if (t.s == "inf" || t.s == "nan") {
        take();
        NodeP n = make(Kind::number, t.pos, "", {});
        n->value =
            t.s == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
        n->dtype = DType::real;
        return n;
      }
      if (t.s == "and" || t.s == "or" || t.s == "not" || t.s == "None")
        throw ExprError(t.pos, fmt::format("unexpected '{}'", t.s));
      take();
      if (!is_op("(")) return make(Kind::name, t.pos, t.s, {});
      take();
      NodeP call = make(Kind::call, t.pos, t.s, {});
      std::vector<std::pair<Token, NodeP>> keywords;
      if (!is_op(")")) {
        while (true) {
          // A dotted name is no keyword: `target.y = x` is a comparison
          // written with one '=' (expect_op says so at the '=').
          if (peek().t == Token::T::name && peek().s.find('.') == std::string::npos &&
              tokens_[at_ + 1].t == Token::T::op && tokens_[at_ + 1].s == "=") {
            const Token key = take();
            take();
            try {
              keywords.emplace_back(key, expr());
            } catch (const ExprError& e) {
              // axis=(0, 1), NumPy's tuple of axes: the comma ends the group.
              if (key.s != "axis" || std::string(e.what()).find("got ','") == std::string::npos) throw;
              throw ExprError(e.offset,
                              "axis= takes one integer, not a tuple of axes: reduce one axis at a time "
                              "(sum(sum(x, axis=1), axis=0)), or every axis with no axis=");
            }
          } else {
            const size_t arg_at = peek().pos;
            NodeP arg = expr();
            not_assignment();
            if (!keywords.empty()) throw ExprError(arg_at, "a positional argument after a keyword argument");
            call->args.push_back(std::move(arg));
          }
          if (is_op(",")) {
            take();
            continue;
          }
          break;
        }
      }
      expect_op(")");
      call->end = prev_end();
      // Keywords are kept as named children; the checker resolves them.
      for (auto& [key, value] : keywords) {
        Item item;
        item.pos = key.pos;
        item.e = value;
        auto k = std::make_shared<Node>();
        k->op = key.s;
        k->begin = key.pos;
        k->end = key.pos + key.s.size();
        item.lo = k;
        call->items.push_back(std::move(item));
      }
      seal(*call);
      return call;
    }
    if (t.t == Token::T::end) throw ExprError(t.pos, "unexpected end of the expression");
    throw ExprError(t.pos, fmt::format("unexpected '{}'", t.s));
  }

  std::vector<Token> tokens_;
  size_t at_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------- static checks
DType promote(DType a, DType b) {
  return std::max(a, b);
}
DType arith(DType a, DType b) {
  return std::max(promote(a, b), DType::integer);
}

Shape broadcast(const Shape& a, const Shape& b, const Node& at) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const std::string da = i < a.size() ? a[a.size() - 1 - i] : "1";
    const std::string db = i < b.size() ? b[b.size() - 1 - i] : "1";
    std::string d;
    if (da == db || db == "1")
      d = da;
    else if (da == "1")
      d = db;
    else if (da == "?")
      d = db;
    else if (db == "?")
      d = da;
    else
      throw ExprError(at.begin, fmt::format("shapes {} and {} do not broadcast ({} vs {})", shape_text(a),
                                            shape_text(b), da, db));
    out[r - 1 - i] = d;
  }
  return out;
}

struct FunctionInfo {
  const char* name;
  int min_args, max_args;
  std::vector<std::string> keywords;
  const char* doc;
};

const std::vector<FunctionInfo>& functions() {
  static const std::vector<FunctionInfo> fns = {
      {"abs", 1, 1, {}, "abs(x): |x| elementwise"},
      {"floor",
       1,
       1,
       {},
       "floor(x): the largest integer <= x (a `when:` that x holds integers: x == floor(x))"},
      {"ceil", 1, 1, {}, "ceil(x): the smallest integer >= x"},
      {"round", 1, 1, {}, "round(x): the nearest integer, ties to even (NumPy's)"},
      {"exp", 1, 1, {}, "exp(x)"},
      {"log", 1, 1, {}, "log(x): natural log (log 0 = -inf)"},
      {"sqrt", 1, 1, {}, "sqrt(x)"},
      {"tanh", 1, 1, {}, "tanh(x)"},
      {"erf", 1, 1, {}, "erf(x): the error function (GELU: 0.5 * x * (1 + erf(x / sqrt(2))))"},
      {"erfc",
       1,
       1,
       {},
       "erfc(x): 1 - erf(x) without its cancellation (GELU for x << 0: 0.5 * x * erfc(-x / sqrt(2)))"},
      {"log1p", 1, 1, {}, "log1p(x): log(1 + x), exact for tiny x (softplus: log1p(exp(x)))"},
      {"expm1", 1, 1, {}, "expm1(x): exp(x) - 1, exact for tiny x (ELU: where(x > 0, x, expm1(x)))"},
      {"sin", 1, 1, {}, "sin(x): x in radians"},
      {"cos", 1, 1, {}, "cos(x): x in radians"},
      {"isfinite", 1, 1, {}, "isfinite(x): bool, neither NaN nor ±inf"},
      {"isnan", 1, 1, {}, "isnan(x): bool"},
      {"isinf", 1, 1, {}, "isinf(x): bool"},
      {"where", 3, 3, {}, "where(cond, a, b): a where cond is true, else b (broadcast)"},
      {"min",
       1,
       2,
       {"axis", "keepdims"},
       "min(x, axis=k, keepdims=false): reduction (all axes without axis); min(a, b): elementwise"},
      {"max", 1, 2, {"axis", "keepdims"}, "max(x, axis=k, keepdims=false) or max(a, b): as min"},
      {"minimum", 2, 2, {}, "minimum(a, b): elementwise (NaN propagates)"},
      {"maximum", 2, 2, {}, "maximum(a, b): elementwise (NaN propagates)"},
      {"sum", 1, 1, {"axis", "keepdims"}, "sum(x, axis=k, keepdims=false)"},
      {"mean", 1, 1, {"axis", "keepdims"}, "mean(x, axis=k, keepdims=false)"},
      {"any",
       1,
       1,
       {"axis", "keepdims"},
       "any(b, axis=k): bool reduction (false on empty; in an expect, without axis, over no element: judges "
       "nothing, the case is discarded)"},
      {"all",
       1,
       1,
       {"axis", "keepdims"},
       "all(b, axis=k): bool reduction (true on empty; in an expect, without axis, over no element: judges "
       "nothing, the case is discarded)"},
      {"rowsum", 1, 1, {"keepdims"}, "rowsum(x) = sum(x, axis=-1)"},
      {"diff", 1, 1, {"axis"}, "diff(x, axis=-1): x[i+1] - x[i] along the axis (one shorter)"},
      {"cummax", 1, 1, {"axis"}, "cummax(x, axis=-1): running maximum along the axis"},
      {"cumsum", 1, 1, {"axis"}, "cumsum(x, axis=-1): running sum along the axis"},
      {"indices",
       1,
       1,
       {"axis"},
       "indices(x, axis=-1): int, each element's index along the axis (0, 1, ...): positions, causal masks "
       "(indices(s, axis=-1) <= indices(s, axis=-2)), one-hot rows (indices(w, axis=0) == ids[:, None])"},
      {"arange",
       1,
       1,
       {},
       "arange(n): int, 0, 1, ..., n - 1, of shape [n] for a dim n (arange(K)[None, :]: positions along a "
       "dim "
       "no tensor at hand carries); n an integer scalar >= 0"},
      {"matmul", 2, 2, {}, "matmul(a, b) or a @ b: NumPy matmul (batch dims broadcast)"},
      {"transpose", 1, 1, {}, "transpose(x): swaps the last two axes"},
      {"close",
       2,
       2,
       {"rtol", "atol", "k"},
       "close(a, b, rtol=1e-5, atol=1e-8): bool, |a - b| <= atol + rtol·|b|; NaN and ±inf are close only to "
       "themselves. close(a, b, k=K): kprop's dtype-aware policy; each operand that is a target output "
       "target.X (or transformed.target.X) may err by K × the family's same-precision baseline error "
       "max|naive.X - reference.X| (where both are finite; an element where only naive.X is not finite is "
       "not "
       "judged, and a case with none judged is discarded) + its floor floor.X"},
  };
  return fns;
}

const FunctionInfo* find_function(const std::string& name) {
  for (const auto& f : functions())
    if (name == f.name) return &f;
  return nullptr;
}

std::vector<std::string> function_names() {
  std::vector<std::string> out;
  for (const auto& f : functions()) out.push_back(f.name);
  return out;
}

class Checker {
 public:
  // lets: the root of each `let:` tree compile() put in, with its name and
  // text (an error inside it says which let it is in).
  Checker(const TensorInfos& infos, std::set<std::string>& used,
          const std::map<const Node*, const TensorInfo*>& lets = {})
      : infos_(infos), used_(used), lets_(lets) {}

  void check(Node& n) {
    // A let's tree is shared by its uses: checked once (the checker rewrites
    // nodes: min(a, b) becomes minimum, close(k=) gains its budget).
    if (!checked_.insert(&n).second) return;
    if (const auto let = lets_.find(&n); let != lets_.end()) {
      try {
        return check_node(n);
      } catch (const ExprError& e) {
        throw ExprError(e.offset, fmt::format("{} (in let {}: `{}`)", e.what(), let->second->name,
                                              let->second->definition));
      }
    }
    check_node(n);
  }

 private:
  void check_node(Node& n) {
    switch (n.kind) {
      case Kind::number:
        n.shape = {};
        return;
      case Kind::name:
        return name(n);
      case Kind::unary:
        return unary(n);
      case Kind::binary:
        return binary(n);
      case Kind::call:
        return call(n);
      case Kind::index:
        return index(n);
    }
  }

 private:
  void name(Node& n) {
    // close(k=)'s own names for the family's own reference (kOwnPrefix): X's
    // shape and dtype.
    std::string looked_up = n.op;
    const size_t own = looked_up.find(kOwnPrefix);
    if (own != std::string::npos) looked_up.erase(own, kOwnPrefix.size());
    for (const auto& t : infos_)
      if (t.name == looked_up) {
        n.shape = t.shape;
        n.dtype = t.dtype;
        used_.insert(n.op);
        return;
      }
    std::vector<std::string> names;
    for (const auto& t : infos_) names.push_back(t.name);
    // A named choice's name (a function's too: tanh) where its index belongs.
    for (const auto& t : infos_)
      for (size_t k = 0; k < t.labels.size(); ++k)
        if (t.labels[k] == n.op)
          throw ExprError(n.begin, fmt::format("'{}' is a choice of {}, which expressions read as its index: "
                                               "write {} == {}",
                                               n.op, t.name, t.name, k));
    if (find_function(n.op)) throw ExprError(n.begin, fmt::format("'{}' is a function: call it", n.op));
    // The language has no named constants but inf and nan: a number is written out.
    if (n.op == "pi" || n.op == "e" || n.op == "euler_gamma")
      throw ExprError(n.begin,
                      fmt::format("unknown name '{}': the only named constants are inf and nan; write "
                                  "the number ({})",
                                  n.op,
                                  n.op == "pi"  ? "3.141592653589793"
                                  : n.op == "e" ? "2.718281828459045"
                                                : "0.5772156649015329"));
    throw ExprError(n.begin, fmt::format("unknown name '{}'{}{}", n.op, did_you_mean(n.op, names),
                                         names.empty() ? "; this family publishes no tensors"
                                                       : "; valid: " + join(names)));
  }

  static void need_bool(const Node& n, const char* what) {
    if (n.dtype != DType::boolean)
      throw ExprError(n.begin, fmt::format("{} needs a bool operand, got {} (compare it: x > 0)", what,
                                           dtype_name(n.dtype)));
  }

  void unary(Node& n) {
    Node& a = *n.args[0];
    check(a);
    n.shape = a.shape;
    if (n.op == "not") {
      need_bool(a, "'not'");
      n.dtype = DType::boolean;
    } else {
      n.dtype = arith(a.dtype, a.dtype);
    }
  }

  void binary(Node& n) {
    Node& a = *n.args[0];
    Node& b = *n.args[1];
    check(a);
    check(b);
    if (n.op == "@") return matmul(n, a, b);
    try {
      n.shape = broadcast(a.shape, b.shape, n);
    } catch (const ExprError& e) {
      if (n.op != "and" && n.op != "or") throw;
      // Two checks of different outputs joined as one (close(dk, ...) and
      // close(dq, ...)): each side whole is what is meant.
      throw ExprError(e.offset, fmt::format("{}; '{}' joins its sides element by element: to require each "
                                            "side whole, write all(...) {} all(...)",
                                            e.what(), n.op, n.op));
    }
    if (n.op == "and" || n.op == "or") {
      need_bool(a, n.op == "and" ? "'and'" : "'or'");
      need_bool(b, n.op == "and" ? "'and'" : "'or'");
      n.dtype = DType::boolean;
    } else if (n.op == "==" || n.op == "!=" || n.op == "<" || n.op == "<=" || n.op == ">" || n.op == ">=") {
      // IEEE: every comparison with NaN is false (!= true), whatever the
      // other side: `target.y != nan` held on a kernel returning NaN.
      const auto nan_literal = [](const Node* x) {
        while (x->kind == Kind::unary && x->op == "-") x = x->args[0].get();
        return x->kind == Kind::number && std::isnan(x->value);
      };
      for (const Node* side : {&a, &b})
        if (nan_literal(side))
          throw ExprError(side->begin,
                          fmt::format("a comparison with nan is {} whatever the other side is: use isnan(x)",
                                      n.op == "!=" ? "always true" : "always false"));
      n.dtype = DType::boolean;
    } else if (n.op == "/" || n.op == "**") {
      n.dtype = DType::real;
    } else {
      n.dtype = arith(a.dtype, b.dtype);
    }
  }

  void matmul(Node& n, const Node& a, const Node& b) {
    if (a.shape.empty() || b.shape.empty())
      throw ExprError(n.begin, "matmul needs operands of rank >= 1 (use * for scalars)");
    Shape sa = a.shape, sb = b.shape;
    const bool va = sa.size() == 1, vb = sb.size() == 1;
    if (va) sa.insert(sa.begin(), "1");
    if (vb) sb.push_back("1");
    const std::string ka = sa.back(), kb = sb[sb.size() - 2];
    if (ka != kb && ka != "?" && kb != "?")
      throw ExprError(n.begin, fmt::format("matmul: inner dims differ ({} of {} vs {} of {})", ka,
                                           shape_text(a.shape), kb, shape_text(b.shape)));
    Shape batch = broadcast(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2), n);
    if (!va) batch.push_back(sa[sa.size() - 2]);
    if (!vb) batch.push_back(sb.back());
    n.shape = batch;
    n.dtype = arith(a.dtype, b.dtype);
  }

  int axis_of(const Node& n, const Item& kw, int rank) {
    const Node& v = *kw.e;
    const bool neg = v.kind == Kind::unary && v.op == "-" && v.args[0]->kind == Kind::number;
    const Node& lit = neg ? *v.args[0] : v;
    if (lit.kind != Kind::number || lit.dtype != DType::integer)
      throw ExprError(v.begin, "axis must be an integer literal");
    const double value = neg ? -lit.value : lit.value;  // an int cast only once it is in range
    if (value < -rank || value >= rank)
      throw ExprError(v.begin, fmt::format("axis {} is out of range for {} of rank {}{}", value,
                                           shape_text(n.args[0]->shape), rank,
                                           rank ? fmt::format(" (valid: {}..{})", -rank, rank - 1) : ""));
    const int axis = static_cast<int>(value);
    return axis < 0 ? axis + rank : axis;
  }

  // A tolerance: any real expression that broadcasts with the compared
  // tensors (e.g. 8 * eps * err.d); a literal must be finite and >= 0 (what
  // a case's tensors make of an expression is checked on the case): an
  // infinite one, `inf` or a number past a double's range (1e400), passes
  // every kernel.
  NodeP tolerance(const Item& kw) {
    Node& v = *kw.e;
    check(v);
    if (v.dtype == DType::boolean) throw ExprError(v.begin, fmt::format("{} must be a number", kw.lo->op));
    if (v.kind == Kind::unary && v.op == "-" && v.args[0]->kind == Kind::number)
      throw ExprError(v.begin, fmt::format("{} must be >= 0", kw.lo->op));
    if (v.kind == Kind::number && std::isnan(v.value) && kw.lo->op != "k")  // k: policy() says more
      throw ExprError(v.begin, fmt::format("{} must be >= 0, not nan", kw.lo->op));
    if (v.kind == Kind::number && std::isinf(v.value) && kw.lo->op != "k")
      throw ExprError(v.begin, fmt::format("{} must be a finite number >= 0: an infinite tolerance passes "
                                           "every value",
                                           kw.lo->op));
    return kw.e;
  }

  // close(a, b, k=K) is close(a, b, rtol=0, atol=budget(a) + budget(b)):
  // an operand naming a target output X (target.X, or transformed.target.X
  // for a metamorphic relation, either one indexed) may err by K × the same-precision baseline's
  // error on this case plus the family's floor for X, as the built-in
  // invariants allow (docs/DESIGN.md, "Tolerance policy"); any other operand
  // (the fp64 reference, an expression over it) is taken as exact. The
  // baseline's error, and which elements are judged, are measured against
  // the family's own reference (kOwnPrefix), as the built-in invariants
  // measure them: against another oracle, its difference from the family's
  // formula counted as rounding and widened the budget.
  void policy(Node& n, const Item& kw) {
    for (const auto& other : n.items)
      if (other.lo->op == "rtol" || other.lo->op == "atol")
        throw ExprError(other.pos, "k= sets the tolerance from the policy; give rtol/atol or k, not both");
    NodeP k = tolerance(kw);
    if (!k->shape.empty()) throw ExprError(k->begin, "k must be a scalar");
    if (k->kind == Kind::number && !std::isfinite(k->value))
      throw ExprError(k->begin, "k must be a finite number >= 0");
    const size_t at = kw.pos, end = k->end;
    auto node = [&](Kind kind, std::string op, std::vector<NodeP> args) {
      auto x = std::make_shared<Node>();
      x->kind = kind, x->begin = at, x->end = end, x->op = std::move(op), x->args = std::move(args);
      for (const auto& a : x->args) x->height = std::max(x->height, a->height + 1);
      return x;
    };
    auto num = [&](double v) {
      NodeP x = node(Kind::number, "", {});
      x->value = v;
      return x;
    };
    NodeP budget;
    // Each target operand: its output's name, its prefix and, for an indexed
    // operand, the index node (the policy's masks are X's under the same index).
    struct Operand {
      std::string pre, x;
      NodeP indexed;
    };
    std::vector<Operand> outputs;
    for (NodeP operand : {n.args[0], n.args[1]}) {
      // An output times or over an exact number (2 * target.X, a relation's
      // scaled run; -target.X): its error is |c| times X's, and so is its
      // share of the budget (it had none: a kernel within the policy on
      // both runs failed the relation by up to twice the budget).
      // Any nesting of them (-2 * target.X, target.X * -2, 2 * -target.X,
      // -(2 * target.X), -target.X / 2): the magnitudes multiply. (A literal
      // -2 is a negation of 2; each step was once taken alone, so
      // `-2 * target.X` brought no budget.)
      double scale = 1;
      for (;;) {
        if (operand->kind == Kind::unary && operand->op == "-") {
          operand = operand->args[0];
          continue;
        }
        if (operand->kind != Kind::binary || (operand->op != "*" && operand->op != "/")) break;
        const NodeP &l = operand->args[0], &r = operand->args[1];
        if (const auto c = exact_number(*l); c && operand->op == "*") {
          scale *= std::fabs(*c), operand = r;
        } else if (const auto d = exact_number(*r); d && (operand->op == "*" || *d != 0)) {
          scale = operand->op == "*" ? scale * std::fabs(*d) : scale / std::fabs(*d), operand = l;
        } else {
          break;
        }
      }
      const NodeP factor = scale != 1 ? num(scale) : nullptr;
      // A target output, or one indexed (target.X[transform.perm], a
      // relation's reordering): the budget is X's; an indexed operand's
      // unjudged elements are X's under the same index.
      const bool indexed = operand->kind == Kind::index && operand->args[0]->kind == Kind::name;
      if (operand->kind != Kind::name && !indexed) continue;
      const std::string& full = indexed ? operand->args[0]->op : operand->op;
      const std::string pre = full.rfind("transformed.", 0) == 0 ? "transformed." : "";
      if (full.compare(pre.size(), 7, "target.") != 0) continue;
      const std::string x = full.substr(pre.size() + 7);
      for (const std::string& need : {"naive." + x, "reference." + x, "floor." + x})
        if (!has(pre + need))
          throw ExprError(
              operand->begin,
              fmt::format("close(k=) on {}: the family publishes no '{}' (the policy needs the "
                          "same-precision baseline naive.{}, reference.{} and the floor floor.{})",
                          full, pre + need, x, x, x));
      auto name = [&](const std::string& t) { return node(Kind::name, pre + t, {}); };
      // As matches_reference: K × the baseline's worst error where both it and
      // the (family's own) reference are finite, + floor.X,
      //   K × max(where(isfinite(reference.X) and isfinite(naive.X), abs(naive.X - reference.X), 0)) +
      //   floor.X
      NodeP err = node(Kind::call, "abs",
                       {node(Kind::binary, "-", {name("naive." + x), name(kOwnPrefix + "reference." + x)})});
      NodeP ref_finite = node(Kind::call, "isfinite", {name(kOwnPrefix + "reference." + x)});
      NodeP naive_finite = node(Kind::call, "isfinite", {name("naive." + x)});
      NodeP both = node(Kind::binary, "and", {ref_finite, naive_finite});
      NodeP worst = node(Kind::call, "where", {both, err, num(0)});
      // Per group, as the floor is: the max over the axes floor.X
      // broadcasts along (its "1"s and the leading axes it lacks), so that
      // each row (layernorm's floor.y [R, 1]) or head (attention's
      // [B, H, 1, 1]) is held to its own baseline error and floor. One max
      // over the tensor let a row 1e-6 the size of another be all zeros
      // and pass. A scalar floor, or an indexed operand (its groups are
      // X's under the index), takes the max over the tensor.
      const std::vector<std::string>* xs = shape_of(pre + "target." + x);
      const std::vector<std::string>* fs = shape_of(pre + "floor." + x);
      const bool grouped = !indexed && xs && fs && !fs->empty() && fs->size() <= xs->size();
      if (!grouped) {
        worst = node(Kind::call, "max", {worst});
      } else {
        const int rank = static_cast<int>(xs->size()), lacks = rank - static_cast<int>(fs->size());
        for (int a = rank - 1; a >= 0; --a) {
          if (a >= lacks && (*fs)[static_cast<size_t>(a - lacks)] != "1") continue;
          NodeP axis = num(a), keep = num(1);
          axis->dtype = DType::integer, keep->dtype = DType::boolean;
          worst = node(Kind::call, "max", {worst});
          worst->items = {Item{Item::K::expr, axis, node(Kind::name, "axis", {}), nullptr, at},
                          Item{Item::K::expr, keep, node(Kind::name, "keepdims", {}), nullptr, at}};
        }
      }
      NodeP floor = name(kOwnPrefix + "floor." + x);
      floor->lower_bound_first = true;
      NodeP one = node(Kind::binary, "+", {node(Kind::binary, "*", {k, worst}), floor});
      if (factor) one = node(Kind::binary, "*", {factor, one});
      budget = budget ? node(Kind::binary, "+", {budget, one}) : one;
      outputs.push_back({pre, x, indexed ? operand : nullptr});
    }
    // What the policy makes of each element, per target operand:
    //   0  compared within the budget;
    //   1  not judged: the reference is finite where the baseline is not (an
    //      intermediate overflowed the dtype; a baseline of inf made the
    //      budget inf, NaN made it NaN), or not finite where the baseline
    //      differs from it (NaN against ±inf: below);
    //   2, 3  except where the family publishes overflow.X (a half output's
    //      overflow threshold) and the reference lies past it by more than
    //      the budget: the kernel's value before the store is within the
    //      budget of the reference, so past the threshold too, and a store
    //      rounding to nearest gives ±inf of the reference's sign (or the
    //      reference's own value, the reference as its own target). 2: it
    //      does (judged, holds); 3: it does not (a kernel that saturates to
    //      ±65504 or writes 0), as matches_reference judges it. And where
    //      the reference lies within the budget of the threshold, the store
    //      may round to ±inf of its sign (f32's 65520 of a reference
    //      65519.997): 2, a correct kernel's answer; any other value 0.
    // With one target operand the element's code is its code. With two (a
    // relation between runs) the relation is judged, not each run against
    // the reference (matches_reference does that): the pair holds judged
    // where both are 2 (both ±inf as they must or may be); its values are
    // compared where each is 0 or 3 (a missed overflow is a finite value
    // like any other: two runs that both stored 30000 where the reference
    // says inf satisfy a permutation, which failed, blaming the relation for
    // the reference's verdict), and where one is 3 and the other 2 (a finite
    // value against ±inf: not close, and the message says so); any other mix
    // is not judged: one run's ±inf as it may be cannot be compared with the
    // other's finite value, and passing it left the other run unjudged (a
    // kernel writing 0 there passed).
    std::vector<NodeP> codes;
    // Where every operand's target.X, naive.X and reference.X are finite,
    // `lost` is false everywhere, so `must` is, and `to_inf` (target.X = ±inf)
    // is: every code below is 0, as is the pair's.
    for (const Operand& o : outputs)
      for (const std::string& t : {"target." + o.x, "naive." + o.x, kOwnPrefix + "reference." + o.x})
        n.compared_where_finite.push_back(o.pre + t);
    for (const Operand& o : outputs) {
      auto name = [&](const std::string& t) { return node(Kind::name, o.pre + t, {}); };
      NodeP lost = node(Kind::binary, "and",
                        {node(Kind::call, "isfinite", {name(kOwnPrefix + "reference." + o.x)}),
                         node(Kind::unary, "not", {node(Kind::call, "isfinite", {name("naive." + o.x)})})});
      NodeP code = node(Kind::call, "where", {lost, num(1), num(0)});
      if (has(o.pre + "overflow." + o.x)) {
        NodeP ref = name(kOwnPrefix + "reference." + o.x), got = name("target." + o.x);
        NodeP past = node(
            Kind::binary, ">=",
            {node(Kind::binary, "-", {node(Kind::call, "abs", {ref}), budget}), name("overflow." + o.x)});
        NodeP must = node(Kind::binary, "and", {lost, past});
        auto both = [&](NodeP a, NodeP b) { return node(Kind::binary, "and", {std::move(a), std::move(b)}); };
        auto either = [&](NodeP a, NodeP b) {
          return node(Kind::binary, "or", {std::move(a), std::move(b)});
        };
        const double inf = std::numeric_limits<double>::infinity();
        NodeP to_inf =
            either(both(node(Kind::binary, "==", {got, num(inf)}), node(Kind::binary, ">", {ref, num(0)})),
                   both(node(Kind::binary, "==", {got, num(-inf)}), node(Kind::binary, "<", {ref, num(0)})));
        NodeP rounds = either(to_inf, node(Kind::binary, "==", {got, ref}));
        NodeP near = node(
            Kind::binary, ">=",
            {node(Kind::binary, "+", {node(Kind::call, "abs", {ref}), budget}), name("overflow." + o.x)});
        // (An element the dtype cannot carry that is not past the threshold
        // stays not judged, near it or not, as matches_reference has it.)
        code = node(Kind::call, "where",
                    {must, node(Kind::call, "where", {rounds, num(2), num(3)}),
                     node(Kind::call, "where",
                          {lost, num(1), node(Kind::call, "where", {both(near, to_inf), num(2), num(0)})})});
      }
      // A reference NaN or ±inf the baseline does not reach (NaN against
      // ±inf, +inf against -inf, or a finite baseline) is rounding's choice:
      // (x - mean(x)) · inf is 0 · inf = NaN in fp64 on a constant row and
      // ±inf in f32 whichever way the mean rounds. 1, as matches_reference
      // has it.
      {
        NodeP ref = name(kOwnPrefix + "reference." + o.x), base = name("naive." + o.x);
        NodeP agree = node(
            Kind::binary, "or",
            {node(Kind::binary, "and", {node(Kind::call, "isnan", {ref}), node(Kind::call, "isnan", {base})}),
             node(Kind::binary, "==", {base, ref})});
        NodeP diverged = node(Kind::binary, "and",
                              {node(Kind::unary, "not", {node(Kind::call, "isfinite", {ref})}),
                               node(Kind::unary, "not", {agree})});
        code = node(Kind::call, "where", {diverged, num(1), code});
      }
      if (o.indexed) {
        auto same_index = std::make_shared<Node>(*o.indexed);
        same_index->args = {code};
        code = same_index;
      }
      codes.push_back(code);
    }
    if (codes.size() == 1) {
      n.unjudged = codes[0];
    } else if (codes.size() == 2) {
      auto is = [&](const NodeP& c, double v) { return node(Kind::binary, "==", {c, num(v)}); };
      auto op = [&](const char* o, NodeP a, NodeP b) {
        return node(Kind::binary, o, {std::move(a), std::move(b)});
      };
      const NodeP &a = codes[0], &b = codes[1];
      auto value = [&](const NodeP& c) { return op("or", is(c, 0), is(c, 3)); };
      NodeP compared = op("or", op("and", value(a), value(b)),
                          op("or", op("and", is(a, 3), is(b, 2)), op("and", is(a, 2), is(b, 3))));
      n.unjudged = node(
          Kind::call, "where",
          {op("and", is(a, 2), is(b, 2)), num(2), node(Kind::call, "where", {compared, num(0), num(1)})});
    }
    if (!budget)
      throw ExprError(n.begin,
                      "close(k=) needs a target output (target.X or transformed.target.X) as an operand: "
                      "k scales that output's same-precision baseline error");
    check(*budget);
    check(*n.unjudged);
    n.rtol = num(0);
    n.atol = budget;
    n.k = k;
  }
  // The value of a finite number literal, possibly negated (-2 parses as
  // the negation of 2), else nullopt.
  static std::optional<double> exact_number(const Node& n) {
    if (n.kind == Kind::unary && n.op == "-")
      if (const auto v = exact_number(*n.args[0])) return -*v;
    if (n.kind == Kind::number && n.dtype != DType::boolean && std::isfinite(n.value)) return n.value;
    return std::nullopt;
  }
  bool has(const std::string& name) const { return shape_of(name) != nullptr; }
  // A name some published tensor's shape has as an extent: a dim.
  bool is_dim(const std::string& name) const {
    return std::any_of(infos_.begin(), infos_.end(), [&](const TensorInfo& t) {
      return std::find(t.shape.begin(), t.shape.end(), name) != t.shape.end();
    });
  }
  // A published tensor's declared shape; null if there is none of that name.
  const std::vector<std::string>* shape_of(const std::string& name) const {
    for (const auto& t : infos_)
      if (t.name == name) return &t.shape;
    return nullptr;
  }

  void call(Node& n) {
    const FunctionInfo* f = find_function(n.op);
    if (!f) {
      throw ExprError(n.begin, fmt::format("unknown function '{}'{}; functions: {}", n.op,
                                           did_you_mean(n.op, function_names()), join(function_names())));
    }
    const int argc = static_cast<int>(n.args.size());
    if (argc < f->min_args || argc > f->max_args)
      throw ExprError(
          n.begin, fmt::format("{}() takes {} argument{}, got {}", n.op,
                               f->min_args == f->max_args ? std::to_string(f->min_args)
                                                          : fmt::format("{} or {}", f->min_args, f->max_args),
                               f->max_args == 1 ? "" : "s", argc));
    for (auto& a : n.args) check(*a);
    // min(a, b) / max(a, b) are elementwise; they take no keywords.
    const bool elementwise_minmax = (n.op == "min" || n.op == "max") && argc == 2;
    const std::string written = n.op;  // messages name the function as the user wrote it
    if (elementwise_minmax) n.op = n.op == "min" ? "minimum" : "maximum";
    std::set<std::string> seen;
    for (const auto& kw : n.items) {
      const std::string& key = kw.lo->op;
      const auto& allowed = elementwise_minmax ? std::vector<std::string>{} : f->keywords;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        throw ExprError(kw.pos, fmt::format("{}() {}takes no keyword '{}'{}", written,
                                            elementwise_minmax ? "of two tensors (elementwise) " : "", key,
                                            allowed.empty() ? "" : "; keywords: " + join(allowed)));
      if (!seen.insert(key).second) throw ExprError(kw.pos, fmt::format("keyword '{}' given twice", key));
    }
    const int rank = argc ? static_cast<int>(n.args[0]->shape.size()) : 0;
    const bool reduction = n.op == "sum" || n.op == "mean" || n.op == "any" || n.op == "all" ||
                           n.op == "min" || n.op == "max" || n.op == "rowsum";
    const bool scan = n.op == "diff" || n.op == "cummax" || n.op == "cumsum" || n.op == "indices";
    if (n.op == "rowsum" || scan) {
      if (rank == 0)
        throw ExprError(n.begin, fmt::format("{}() needs a tensor of rank >= 1, got a scalar", n.op));
      n.axis = rank - 1;
    }
    // close()'s operands broadcast (said at the call, before k= builds its
    // budget over both: that said it at the k).
    if (n.op == "close") broadcast(n.args[0]->shape, n.args[1]->shape, n);
    for (const auto& kw : n.items) {
      const std::string& key = kw.lo->op;
      if (key == "axis") n.axis = axis_of(n, kw, rank);
      if (key == "keepdims") {
        const Node& v = *kw.e;
        if (v.kind != Kind::number || v.dtype != DType::boolean)
          throw ExprError(v.begin, "keepdims must be true or false");
        n.keepdims = v.value != 0;
      }
      if (key == "rtol") n.rtol = tolerance(kw);
      if (key == "atol") n.atol = tolerance(kw);
      if (key == "k") policy(n, kw);
    }
    const Node& x = *n.args[0];
    if (n.op == "arange") {
      // Shape [n] where n is a dim's name (or a literal): it broadcasts with
      // the tensors along that dim; any other integer scalar gives [?].
      if (!x.shape.empty() || x.dtype != DType::integer)
        throw ExprError(x.begin, fmt::format("arange() takes an integer scalar (a dim: arange(K)), got {} {}",
                                             dtype_name(x.dtype), shape_text(x.shape)));
      n.shape = {x.kind == Kind::number                 ? fmt::format("{}", static_cast<int64_t>(x.value))
                 : x.kind == Kind::name && is_dim(x.op) ? x.op
                                                        : "?"};
      n.dtype = DType::integer;
      return;
    }
    if (reduction) {
      if (n.op == "any" || n.op == "all") need_bool(x, (n.op + "()").c_str());
      if (!n.axis) {
        n.shape = n.keepdims ? Shape(x.shape.size(), "1") : Shape{};
      } else {
        n.shape = x.shape;
        if (n.keepdims)
          n.shape[static_cast<size_t>(*n.axis)] = "1";
        else
          n.shape.erase(n.shape.begin() + *n.axis);
      }
      n.dtype = n.op == "any" || n.op == "all"   ? DType::boolean
                : n.op == "mean"                 ? DType::real
                : n.op == "min" || n.op == "max" ? x.dtype
                                                 : arith(x.dtype, x.dtype);
      return;
    }
    if (scan) {
      n.shape = x.shape;
      if (n.op == "diff") n.shape[static_cast<size_t>(*n.axis)] = "?";
      n.dtype = n.op == "indices" ? DType::integer : n.op == "cummax" ? x.dtype : arith(x.dtype, x.dtype);
      return;
    }
    if (n.op == "isfinite" || n.op == "isnan" || n.op == "isinf") {
      n.shape = x.shape;
      n.dtype = DType::boolean;
    } else if (n.op == "abs" || n.op == "floor" || n.op == "ceil" || n.op == "round") {
      n.shape = x.shape;
      n.dtype = arith(x.dtype, x.dtype);
    } else if (n.op == "exp" || n.op == "log" || n.op == "sqrt" || n.op == "tanh" || n.op == "erf" ||
               n.op == "erfc" || n.op == "log1p" || n.op == "expm1" || n.op == "sin" || n.op == "cos") {
      n.shape = x.shape;
      n.dtype = DType::real;
    } else if (n.op == "where") {
      need_bool(x, "where()'s condition");
      n.shape = broadcast(broadcast(x.shape, n.args[1]->shape, n), n.args[2]->shape, n);
      n.dtype = promote(n.args[1]->dtype, n.args[2]->dtype);
    } else if (n.op == "minimum" || n.op == "maximum") {
      n.shape = broadcast(x.shape, n.args[1]->shape, n);
      n.dtype = promote(x.dtype, n.args[1]->dtype);
    } else if (n.op == "close") {
      n.shape = broadcast(x.shape, n.args[1]->shape, n);
      if (n.rtol) n.shape = broadcast(n.shape, n.rtol->shape, *n.rtol);
      if (n.atol) n.shape = broadcast(n.shape, n.atol->shape, *n.atol);
      n.dtype = DType::boolean;
    } else if (n.op == "matmul") {
      matmul(n, x, *n.args[1]);
    } else if (n.op == "transpose") {
      if (x.shape.size() < 2) throw ExprError(n.begin, "transpose() needs a tensor of rank >= 2");
      n.shape = x.shape;
      std::swap(n.shape[n.shape.size() - 1], n.shape[n.shape.size() - 2]);
      n.dtype = x.dtype;
    }
  }

  void index(Node& n) {
    Node& base = *n.args[0];
    check(base);
    size_t consumed = 0, ellipses = 0, tensors = 0;
    for (auto& item : n.items) {
      if (item.e) check(*item.e);
      if (item.lo) check(*item.lo);
      if (item.hi) check(*item.hi);
      if (item.k == Item::K::ellipsis) {
        if (++ellipses > 1) throw ExprError(item.pos, "only one '...' per index");
        continue;
      }
      if (item.k == Item::K::newaxis) continue;
      ++consumed;
      for (const NodeP& e : {item.e, item.lo, item.hi}) {
        if (!e) continue;
        if (e->dtype != DType::integer)
          throw ExprError(e->begin, fmt::format("an index must be an integer, got {}", dtype_name(e->dtype)));
        if (e != item.e && !e->shape.empty()) throw ExprError(e->begin, "slice bounds must be scalars");
      }
      if (item.e && !item.e->shape.empty() && ++tensors > 1)
        throw ExprError(item.pos, "only one tensor index (gather) per subscript");
    }
    if (consumed > base.shape.size())
      throw ExprError(n.begin, fmt::format("too many indices ({}) for {} of rank {}", consumed,
                                           shape_text(base.shape), base.shape.size()));
    Shape out;
    size_t axis = 0;
    for (const auto& item : n.items) {
      switch (item.k) {
        case Item::K::ellipsis:
          for (size_t k = 0; k < base.shape.size() - consumed; ++k) out.push_back(base.shape[axis++]);
          break;
        case Item::K::newaxis:
          out.push_back("1");
          break;
        case Item::K::slice:
          out.push_back(item.lo || item.hi ? "?" : base.shape[axis]);
          ++axis;
          break;
        case Item::K::expr:
          for (const auto& d : item.e->shape) out.push_back(d);  // gather: the index's dims
          // The indexed axis's dim is read with the case (an index past it
          // that reads no output of the target is the spec's error).
          for (const auto& t : infos_)
            if (t.name == base.shape[axis] && t.shape.empty()) used_.insert(t.name);
          ++axis;
          break;
      }
    }
    for (; axis < base.shape.size(); ++axis) out.push_back(base.shape[axis]);
    n.shape = out;
    n.dtype = base.dtype;
  }

  const TensorInfos& infos_;
  std::set<std::string>& used_;
  const std::map<const Node*, const TensorInfo*>& lets_;
  std::set<const Node*> checked_;
};

// Every use of a `let:` name (TensorInfo::definition) below *p replaced by
// the let's tree, parsed once per expression and shared by its uses (so
// mark_shared has it computed once); the tree's spans are the first use's
// (messages quote the let's name where they quote its nodes). A let may use
// the lets before it; one that reaches itself is an error.
void substitute_lets(NodeP& p, const TensorInfos& infos, std::map<std::string, NodeP>& made,
                     std::map<const Node*, const TensorInfo*>& roots, std::vector<std::string>& open) {
  Node& n = *p;
  if (n.kind == Kind::name) {
    const auto info = std::find_if(infos.begin(), infos.end(), [&](const TensorInfo& t) {
      return !t.definition.empty() && t.name == n.op;
    });
    if (info == infos.end()) return;
    if (const auto done = made.find(n.op); done != made.end()) {
      p = done->second;
      return;
    }
    if (std::find(open.begin(), open.end(), n.op) != open.end())
      throw ExprError(n.begin, fmt::format("let {} uses itself (through {})", n.op, join(open)));
    NodeP tree;
    try {
      tree = Parser(info->definition).parse();
    } catch (const ExprError& e) {
      throw ExprError(n.begin, fmt::format("{} (in let {}: `{}`)", e.what(), n.op, info->definition));
    }
    const size_t begin = n.begin, end = n.end;
    std::vector<Node*> todo = {tree.get()};
    while (!todo.empty()) {
      Node* m = todo.back();
      todo.pop_back();
      m->begin = begin, m->end = end;
      for_each_child(*m, [&](const NodeP& c) { todo.push_back(c.get()); });
    }
    open.push_back(n.op);
    substitute_lets(tree, infos, made, roots, open);
    open.pop_back();
    roots[tree.get()] = &*info;
    made[n.op] = tree;
    p = tree;
    return;
  }
  // Not a call's keyword names (axis=, k=): only operands and index items.
  for (NodeP& a : n.args)
    if (a) substitute_lets(a, infos, made, roots, open);
  for (Item& it : n.items) {
    if (it.e) substitute_lets(it.e, infos, made, roots, open);
    if (n.kind == Kind::index)
      for (NodeP* b : {&it.lo, &it.hi})
        if (*b) substitute_lets(*b, infos, made, roots, open);
  }
}

}  // namespace

namespace {

// Node::shared for every node but a leaf (a name is borrowed, a number is
// made in no time) that the tree reaches by more than one path; the walk
// does not go below a node a second time.
void mark_shared(Node& root) {
  std::set<const Node*> seen;
  std::vector<Node*> todo = {&root};
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) {
      n->shared = n->kind != Kind::name && n->kind != Kind::number;
      continue;
    }
    for_each_child(*n, [&](const NodeP& c) { todo.push_back(c.get()); });
  }
}

// Node::reads_target for every node, each computed once (post-order, the
// shared nodes not walked again).
bool mark_reads_target(Node& n, std::set<const Node*>& done) {
  if (!done.insert(&n).second) return n.reads_target;
  bool reads = n.kind == Kind::name && is_target_name(n.op);
  for_each_child(n, [&](const NodeP& c) {
    if (mark_reads_target(*c, done)) reads = true;
  });
  return n.reads_target = reads;
}

// Node::may_drop_target for every node, each computed once (after
// mark_reads_target). `selective`: set where a where() or an and/or may
// leave the target out on any case (a reduction or a contraction drops it
// only where its axis is empty, which the evaluation sees: expr_eval.cpp,
// t_empty_reduction).
bool mark_may_drop_target(Node& n, std::set<const Node*>& done, bool& selective) {
  if (!done.insert(&n).second) return n.may_drop_target;
  const bool picks = (n.kind == Kind::call && n.op == "where" && n.args.size() == 3) ||
                     (n.kind == Kind::binary && (n.op == "and" || n.op == "or"));
  const bool reduces = (n.kind == Kind::call && n.args.size() == 1 &&
                        (n.op == "sum" || n.op == "mean" || n.op == "rowsum" || n.op == "min" ||
                         n.op == "max" || n.op == "any" || n.op == "all")) ||
                       (n.kind == Kind::call && n.op == "matmul") || (n.kind == Kind::binary && n.op == "@");
  bool drops = false;
  if (picks && n.reads_target)
    for (const NodeP& a : n.args) drops = drops || !a->reads_target;
  if (drops) selective = true;
  if (reduces && n.reads_target) drops = true;
  for_each_child(n, [&](const NodeP& c) {
    if (mark_may_drop_target(*c, done, selective)) drops = true;
  });
  return n.may_drop_target = drops;
}

}  // namespace

// ---------------------------------------------------------------- Expression
Expression Expression::compile(const std::string& text, const TensorInfos& tensors) {
  Expression e;
  e.text_ = text;
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw ExprError(0, "the expression is empty");
  NodeP root = Parser(text).parse();
  std::set<std::string> used;
  std::map<std::string, NodeP> made;
  std::map<const Node*, const TensorInfo*> lets;
  std::vector<std::string> open;
  substitute_lets(root, tensors, made, lets, open);
  Checker(tensors, used, lets).check(*root);
  mark_shared(*root);
  std::set<const Node*> done;
  mark_reads_target(*root, done);
  done.clear();
  mark_may_drop_target(*root, done, e.selective_);
  e.root_ = root;
  e.names_.assign(used.begin(), used.end());
  return e;
}

DType Expression::dtype() const {
  return root_->dtype;
}
std::string Expression::shape() const {
  return shape_text(root_->shape);
}

// Independence along a dim: where the value's axis named `dim` lies (-1:
// it has none, and no element depends on one), or kMixes where an element may
// depend on other indices along `dim` than its own (a reduction over it, a
// contraction, two axes named `dim` that meet, indexing by or into it, the
// extent itself as a value) or the analysis cannot tell.
namespace {
constexpr int kMixes = -2;

int axis_along(const Node& n, const std::string& dim) {
  const auto named = [&](const Shape& s) { return std::count(s.begin(), s.end(), dim); };
  const auto position = [&](const Shape& s) {
    return static_cast<int>(std::find(s.begin(), s.end(), dim) - s.begin());
  };
  if (named(n.shape) > 1) return kMixes;
  const int rank = static_cast<int>(n.shape.size());
  // Each operand's axis, where the value's axes are aligned from the right
  // (broadcasting), or kMixes; -1 where none has one.
  const auto aligned = [&](const std::vector<NodeP>& operands) {
    int at = -1;
    for (const NodeP& a : operands) {
      const int p = axis_along(*a, dim);
      if (p == kMixes) return kMixes;
      if (p < 0) continue;
      const int q = p + rank - static_cast<int>(a->shape.size());
      if (at >= 0 && q != at) return kMixes;
      at = q;
    }
    return at;
  };
  int at = kMixes;
  static const std::set<std::string> elementwise = {
      "abs",   "floor", "ceil", "round", "exp",      "log",   "sqrt",  "tanh",  "erf",     "erfc",
      "log1p", "expm1", "sin",  "cos",   "isfinite", "isnan", "isinf", "where", "minimum", "maximum"};
  static const std::set<std::string> reductions = {"sum", "mean", "any", "all", "min", "max", "rowsum"};
  // (indices along `dim` is the position there: a slice along it moves it.)
  static const std::set<std::string> scans = {"diff", "cummax", "cumsum", "indices"};
  switch (n.kind) {
    case Kind::number:
      at = -1;
      break;
    case Kind::name:  // a tensor (its declared axes) or a scalar; `dim` itself is the extent
      at = n.op == dim ? kMixes : named(n.shape) ? position(n.shape) : -1;
      break;
    case Kind::unary:
      at = aligned(n.args);
      break;
    case Kind::binary:
      if (n.op != "@") {
        at = aligned(n.args);
        break;
      }
      [[fallthrough]];
    case Kind::call:
      if (n.kind == Kind::call && elementwise.count(n.op)) {
        at = aligned(n.args);
      } else if (n.kind == Kind::call && (reductions.count(n.op) || scans.count(n.op))) {
        const int p = axis_along(*n.args[0], dim);
        if (p < 0 || !n.axis) {
          at = p == -1 ? -1 : kMixes;  // without axis: over every axis, dim's too
        } else if (*n.axis == p) {
          at = kMixes;
        } else {
          at = scans.count(n.op) || n.keepdims || *n.axis > p ? p : p - 1;
        }
      } else if (n.op == "transpose") {
        const int p = axis_along(*n.args[0], dim);
        at = p < 0 || p < rank - 2 ? p : p == rank - 1 ? rank - 2 : rank - 1;
      } else if (n.op == "matmul" || n.op == "@") {
        // a [..., m, k] @ b [..., k, n]: k is summed over; m and n become the
        // value's last two axes, the batch axes broadcast.
        const Node &a = *n.args[0], &b = *n.args[1];
        const int pa = axis_along(a, dim), pb = axis_along(b, dim);
        const int ra = static_cast<int>(a.shape.size()), rb = static_cast<int>(b.shape.size());
        at = -1;
        if (pa == kMixes || pb == kMixes || ((pa >= 0 || pb >= 0) && (ra < 2 || rb < 2))) {
          at = kMixes;
        } else {
          const int qa = pa < 0 ? -1 : pa == ra - 1 ? kMixes : pa == ra - 2 ? rank - 2 : pa + rank - ra;
          const int qb = pb < 0 ? -1 : pb == rb - 2 ? kMixes : pb == rb - 1 ? rank - 1 : pb + rank - rb;
          at = qa == kMixes || qb == kMixes || (qa >= 0 && qb >= 0 && qa != qb) ? kMixes : std::max(qa, qb);
        }
      } else {
        // Anything else (close(), ...): only where nothing below has the axis.
        at = -1;
        for_each_child(n, [&](const NodeP& c) {
          if (axis_along(*c, dim) != -1) at = kMixes;
        });
      }
      break;
    case Kind::index:  // gathers and slices: only where nothing below has the axis
      at = -1;
      for_each_child(n, [&](const NodeP& c) {
        if (axis_along(*c, dim) != -1) at = kMixes;
      });
      break;
  }
  // The value's own shape must agree: the axis where it was found, or none.
  if (at >= 0 && (at >= rank || n.shape[static_cast<size_t>(at)] != dim)) return kMixes;
  if (at == -1 && named(n.shape)) return kMixes;
  return at;
}
}  // namespace

bool Expression::independent_along(const std::string& dim) const {
  return axis_along(*root_, dim) != kMixes;
}

namespace {
bool adds_up(const Node& n) {
  if ((n.kind == Kind::call &&
       (n.op == "sum" || n.op == "mean" || n.op == "rowsum" || n.op == "cumsum" || n.op == "matmul")) ||
      (n.kind == Kind::binary && n.op == "@"))
    return true;
  return std::any_of(n.args.begin(), n.args.end(), [](const NodeP& a) { return a && adds_up(*a); });
}
}  // namespace

bool Expression::has_sum() const {
  return adds_up(*root_);
}

// The model of what an evaluation holds at its peak: a node's operands are
// computed in order, each one's value kept while the next is computed and
// until the node's own value is made; a shared subexpression
// (Node::shared, SharedValues) is computed once and kept to the evaluation's
// end. The names' values are the map's (not counted); a number is one element.
namespace {
double elements_of(const Shape& shape, const std::function<double(const std::string&)>& extent) {
  double n = 1;
  for (const std::string& d : shape)
    n *= d == "?" ? 1.0 : std::isdigit(static_cast<unsigned char>(d[0])) ? std::stod(d) : extent(d);
  return n;
}
}  // namespace

double Expression::peak_elements(const std::function<double(const std::string&)>& extent) const {
  auto elements = [&](const Shape& shape) { return elements_of(shape, extent); };
  double retained = 0;  // the shared nodes' values
  std::set<const Node*> computed;
  // The most the evaluation of n holds at once (its value included).
  std::function<double(const Node&)> peak = [&](const Node& n) -> double {
    if (n.kind == Kind::name) return 0;
    if (n.shared && !computed.insert(&n).second) return 0;  // read from SharedValues
    const double own = elements(n.shape);
    double live = 0, most = 0;
    for_each_child(n, [&](const NodeP& e) {  // the operands, in order
      most = std::max(most, live + peak(*e));
      if (e->kind != Kind::name) live += elements(e->shape);
    });
    if (n.shared) retained += own;
    return std::max(most, live + own);
  };
  const double top = peak(*root_);
  return top + retained;
}

std::map<std::string, double> Expression::name_elements(
    const std::function<double(const std::string&)>& extent) const {
  std::map<std::string, double> out;
  std::set<const Node*> seen;
  std::vector<const Node*> todo = {root_.get()};
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->kind == Kind::name) out[n->op] = elements_of(n->shape, extent);
    for_each_child(*n, [&](const NodeP& c) { todo.push_back(c.get()); });
  }
  return out;
}

std::string describe_functions() {
  std::string out;
  for (const auto& f : functions()) out += fmt::format("  {}\n", f.doc);
  return out;
}

std::vector<std::pair<std::string, std::string>> function_docs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : functions()) out.emplace_back(f.name, f.doc);
  return out;
}

}  // namespace kprop::expr
