// Drawings of a failing case: each family draws its shrunk counterexample in
// one function, properties/<family>/draw.cpp, registered by family name with
// KPROP_REGISTER_DRAWING (nothing else of the family changes). The runner
// draws every finding once, right after shrinking it, while the target and
// the reference are still open (in a forked child when the run isolates its
// target), and the reporters show the result: the SVG in the HTML report
// (--format html), the text map under the counterexample in the terminal.
// A family without a drawing gets the generic view: the error of each output
// it publishes as a named tensor (target.X against reference.X).
#pragma once

#include <functional>
#include <string>

#include "kprop/family.h"
#include "kprop/svg.h"

namespace kprop {

struct Drawing {
  std::string svg;   // one <svg> element ("" when there is nothing to draw)
  std::string text;  // a few lines for the terminal ("" when none)
  std::string note;  // why something is missing (e.g. the target threw while drawing)
};

// What a drawing knows about the failure besides the case and the results.
struct DrawContext {
  std::string invariant;  // the invariant broken ("" for a crash)
  const std::vector<Measured>* measured = nullptr;
  const Values* params = nullptr;  // the invariant's parameters in the spec (may be null)
  // A measured value by name, or `fallback`.
  double value(const std::string& name, double fallback) const;
  // The invariant's real parameter `name`, or `fallback`.
  double param(const std::string& name, double fallback) const;
};

// The type-erased drawing: runs the target and the reference on the case
// (each may be absent: a target that threw) and draws.
using AnyDrawFn = std::function<Drawing(const Family&, const AnyCase&, const Impl& target,
                                        const Impl& reference, const DrawContext&)>;
bool register_drawing(const std::string& family, AnyDrawFn fn);
const AnyDrawFn* find_drawing(const std::string& family);

// Draws a finding's case: the family's drawing, else the generic tensor view
// (generic_drawing). Never throws (a drawing that fails gives a note).
Drawing draw_case(const Family& family, const AnyCase& c, const Impl& target, const Impl& reference,
                  const DrawContext& ctx);
// The generic view: a heatmap of |target.X - reference.X| for each output X
// the family publishes (the declared-op family `op` among them).
Drawing generic_drawing(const Family& family, const AnyCase& c, const Impl& target, const Impl& reference,
                        const DrawContext& ctx);

// Helpers for drawings.
namespace draw {
// A heatmap of a rows × cols matrix of |error| / bound (error_color), with
// labels; cells `cell` px; returns the height used. `css` classes each cell.
double heatmap(svg::Canvas& c, double x, double y, const std::string& title, int rows, int cols,
               const std::function<double(int, int)>& ratio, double cell, const std::string& css = "cell",
               const std::function<std::string(int, int)>& tooltip = {});
// One character per cell for the terminal: ' ' < 0.25, '.' < 0.5, ':' < 1,
// '+' < 2, '#' >= 2 (beyond the bound), '!' non-finite.
char error_char(double ratio);
}  // namespace draw

namespace detail {
template <typename Traits, typename Fn>
bool register_typed_drawing(Fn fn) {
  using Case = typename Traits::Case;
  using Result = typename Traits::Result;
  return register_drawing(Traits::name, [fn](const Family& family, const AnyCase& c, const Impl& target,
                                             const Impl& reference, const DrawContext& ctx) {
    const auto& typed = static_cast<const FamilyDef<Traits>&>(family);
    const Case& input = FamilyDef<Traits>::unbox(c);
    Drawing d;
    std::optional<Result> t, r;
    try {
      t = typed.run(target, input);
    } catch (const std::exception& e) {
      d.note = std::string("target: ") + e.what();
    }
    try {
      r = typed.run(reference, input);
    } catch (const std::exception& e) {
      d.note += (d.note.empty() ? "" : "; ") + std::string("reference: ") + e.what();
    }
    Drawing drawn = fn(input, t ? &*t : nullptr, r ? &*r : nullptr, ctx);
    if (!d.note.empty()) drawn.note = d.note + (drawn.note.empty() ? "" : "; " + drawn.note);
    return drawn;
  });
}
}  // namespace detail

// In properties/<family>/draw.cpp:
//   Drawing draw(const Case&, const Result* target, const Result* reference, const DrawContext&);
//   KPROP_REGISTER_DRAWING(Traits, draw);
#define KPROP_REGISTER_DRAWING(Traits, fn)                                               \
  [[maybe_unused]] static const bool KPROP_CONCAT(kprop_drawing_registered_, __LINE__) = \
      ::kprop::detail::register_typed_drawing<Traits>(fn)

}  // namespace kprop
