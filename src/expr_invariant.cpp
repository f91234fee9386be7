// Expression invariants at run time: a spec's `{name, expect, when}` checked
// on one trial through the family's named tensors (kprop/spec.h); and the
// caller's invariants given as code, on the same tensors.
#include <fmt/format.h>

#include <algorithm>

#include "kprop/spec.h"

namespace kprop {

namespace {

// What a relation's transform drew, as its expressions read it ("transform
// slice_T drew index = [3, 4, 5]"): the derived case is a function of the
// stored case, but nothing else in a failure shows it. Up to 16 values a
// tensor, flat, with its shape where it has more than one axis.
std::string drawn_text(const ExpressionInvariant& e, const expr::TensorMap& tensors) {
  constexpr size_t kShown = 16;
  std::vector<std::string> parts;
  for (const std::string& name : e.names) {
    if (name.rfind("transform.", 0) != 0 || name == "transform.applies") continue;
    const expr::Tensor* t = tensors.find(name);
    if (!t) continue;
    std::vector<std::string> values;
    for (size_t k = 0; k < std::min(t->size(), kShown); ++k) values.push_back(fmt::format("{}", t->data[k]));
    std::string text = fmt::format("{}", fmt::join(values, ", "));
    if (t->rank() > 0)
      text =
          fmt::format("[{}{}]{}", text, t->size() > kShown ? fmt::format(", ... ({} values)", t->size()) : "",
                      t->rank() > 1 ? " of shape " + expr::shape_text(t->shape) : "");
    parts.push_back(fmt::format("{} = {}", name.substr(10), text));
  }
  if (parts.empty()) return "";
  return fmt::format("\ntransform {} drew {}", e.transform->name, fmt::join(parts, ", "));
}

}  // namespace

Verdict check_invariant(AnyTrial& trial, const InvariantUse& use) {
  // A derived case serves the relations of its transform and parameters,
  // checked one after another: freed before any other invariant is checked.
  const ExpressionInvariant* relation =
      use.expression && use.expression->transform ? &*use.expression : nullptr;
  trial.release_derived(relation ? relation->transform->key : "");
  if (!use.unobservable.empty()) return Verdict::not_applicable(use.unobservable);
  if (use.callback) {
    const expr::TensorMap* tensors = trial.tensors(use.callback->names);
    if (!tensors) return Verdict::not_applicable("the family publishes no named tensors");
    return use.callback->check(*tensors);
  }
  if (!use.expression) return trial.check(use.index, use.params);
  const ExpressionInvariant& e = *use.expression;
  const expr::Expression* current = nullptr;
  const expr::TensorMap* current_tensors = nullptr;
  // The trial's tensors, or with a transform those of the derived case too.
  auto tensors_for = [&](const std::vector<std::string>& names) {
    return e.transform
               ? trial.transformed_tensors(e.transform->key, e.transform->index, e.transform->params, names)
               : trial.tensors(names);
  };
  try {
    // A transform that leaves this case as it is (a slice of a dim with no
    // smaller extent) says so with the scalar transform.applies = false:
    // the relation would compare the case with itself, so nothing is checked.
    if (e.transform)
      if (const expr::TensorMap* t = tensors_for({}))
        if (const expr::Tensor* applies = t->find("transform.applies");
            applies && applies->data.size() == 1 && applies->data[0] == 0)
          return Verdict::discard(fmt::format("transform {} does not apply to this case", e.transform->name));
    if (e.when) {
      // `when` first, with only its own tensors: a discarded case need not run the target.
      current = &*e.when;
      const expr::TensorMap* tensors = current_tensors = tensors_for(e.when->names());
      if (!tensors) return Verdict::not_applicable("the family publishes no named tensors");
      const expr::Tensor w = e.when->evaluate(*tensors);
      for (double v : w.data)
        if (v == 0) return Verdict::discard(fmt::format("when `{}` is false", e.when->shown()));
    }
    current = &e.expect;
    const expr::TensorMap* tensors = current_tensors = tensors_for(e.expect.names());
    if (!tensors) return Verdict::not_applicable("the family publishes no named tensors");
    expr::Expression::Outcome o = e.expect.check(*tensors);
    if (o.holds) return Verdict::pass();
    std::vector<Measured> measured;
    for (auto& [name, value] : o.measured) measured.push_back({name, value});
    return Verdict::fail(o.message + (e.transform ? drawn_text(e, *tensors) : ""), std::move(measured));
  } catch (const expr::NothingJudged& err) {
    return Verdict::discard(err.what());
  } catch (const expr::ToleranceError& err) {
    throw SpecCaseError(e.mark,
                        fmt::format("invariant {}: `{}`: {}", use.name, current->shown(), err.what()));
  } catch (const expr::SpecEvalError& err) {
    throw SpecCaseError(e.mark,
                        fmt::format("invariant {}: `{}` cannot be evaluated on this case: {} (the "
                                    "expression's own error: the index reads no output of the target)",
                                    use.name, current->shown(), err.what()));
  } catch (const expr::EvalError& err) {
    // An expression that reads no output of the target and cannot be
    // evaluated (shapes that do not broadcast, an index out of range) is
    // the spec's error, whatever the target did. One that reads an output
    // may be broken by it (an index the kernel returned out of range, an
    // output whose length is its answer: dflash's accepted tokens): that
    // fails the invariant. Shapes that do not fit are the spec's error when
    // every output read has its declared shape (a declared op's always has:
    // `target.y <= x[:, 0:2]` over D = 3 failed the kernel and stored the
    // case as its counterexample), and so is an index, computed from no
    // output of the target, past an intermediate's axis
    // (`diff(target.y)[:, 0]` at D = 1).
    const auto& names = current->names();
    if (std::none_of(names.begin(), names.end(),
                     [](const std::string& n) { return expr::is_target_name(n); }))
      throw SpecCaseError(e.mark, fmt::format("invariant {}: `{}` cannot be evaluated on this case: {} (the "
                                              "expression's own error: it reads no output of the target)",
                                              use.name, current->shown(), err.what()));
    if ((dynamic_cast<const expr::ShapeError*>(&err) || dynamic_cast<const expr::IndexError*>(&err)) &&
        current_tensors && current->target_shapes_as_declared(*current_tensors))
      throw SpecCaseError(e.mark,
                          fmt::format("invariant {}: `{}` cannot be evaluated on this case: {} (the "
                                      "expression's own error: every output it reads has its declared "
                                      "shape)",
                                      use.name, current->shown(), err.what()));
    return Verdict::fail(fmt::format("`{}` could not be evaluated: {}", current->shown(), err.what()));
  }
}

}  // namespace kprop
