// The expression language's syntax tree, shared by the parser and checker
// (expr.cpp) and the evaluator (expr_eval.cpp). Internal to kprop_core.
//
// Two files because the fuzz builds instrument them differently: parsing
// decides a spec's structure and keeps comparison tracing for the spec
// loader's fuzzer, while evaluation is numeric work over a case's tensors,
// compiled with edges only (fuzz/CMakeLists.txt).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kprop/expr.h"

namespace kprop::expr {

using Shape = std::vector<std::string>;  // symbolic: a dim name, a number, or "?"
using NodeP = std::shared_ptr<Node>;

enum class Kind { number, name, unary, binary, call, index };

struct Item {
  enum class K { expr, slice, newaxis, ellipsis } k = K::expr;
  NodeP e, lo, hi;
  size_t pos = 0;
};

struct Node {
  Kind kind = Kind::number;
  size_t begin = 0, end = 0;  // span in the text
  std::string op;             // unary/binary operator, function or tensor name
  double value = 0;
  std::vector<NodeP> args;
  std::vector<Item> items;
  // keywords of calls
  std::optional<int> axis;
  bool keepdims = false;
  NodeP rtol, atol;  // close(): scalar or broadcast tolerances; NumPy's defaults 1e-5, 1e-8 when null
  // close(k=): K, checked finite and >= 0 on each case; and the elements the
  // policy does not judge (the baseline not finite where the reference is).
  NodeP k, unjudged;
  // close(k=): the tensors whose being finite everywhere makes every code of
  // `unjudged` 0 (compared): each target operand's output, its baseline and
  // its reference. Then the masks are not evaluated (expr_eval.cpp).
  std::vector<std::string> compared_where_finite;
  // A name close(k=)'s budget reads (floor.X): its lower bound serves first
  // (TensorMap::find_lower_bound; expr_eval.cpp, close_args).
  bool lower_bound_first = false;
  // static type
  DType dtype = DType::real;
  Shape shape;
  int height = 1;  // of the tree below: the checker and evaluator recurse this deep
  // Reached from more than one place of its expression (close(k=)'s budget
  // and masks, which the policy's rewrite refers to several times): its
  // value is computed once per evaluation of the expression (expr_eval.cpp).
  bool shared = false;
  // A target tensor is read at or below it (set when the expression is
  // compiled: the evaluator asks on every check, and a walk of a tree with
  // shared nodes revisits them).
  bool reads_target = false;
  // A where() or an elementwise and/or at or below it has an operand that
  // reads the target next to one that does not, or a reduction or
  // contraction of the target is: on a case, its value may be decided
  // without the target (a where's constant branch picked at every element,
  // a max over an empty slice). Set when compiled; the evaluator then asks
  // which elements the target decided (expr_eval.cpp, decided_by_target).
  bool may_drop_target = false;
};

// Calls f on each child of n that is set, in evaluation order: the
// arguments, each index item's expression and bounds, then close()'s rtol,
// atol, k and unjudged. What every walk of the tree visits.
template <typename F>
void for_each_child(const Node& n, F&& f) {
  for (const NodeP& a : n.args)
    if (a) f(a);
  for (const Item& it : n.items)
    for (const NodeP* p : {&it.e, &it.lo, &it.hi})
      if (*p) f(*p);
  for (const NodeP* p : {&n.rtol, &n.atol, &n.k, &n.unjudged})
    if (*p) f(*p);
}

}  // namespace kprop::expr
