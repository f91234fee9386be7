// The drawings' registry, the generic tensor error view and shared helpers
// (kprop/drawing.h).
#include "kprop/drawing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace kprop {

double DrawContext::value(const std::string& name, double fallback) const {
  if (measured)
    for (const auto& m : *measured)
      if (m.name == name) return m.value;
  return fallback;
}

double DrawContext::param(const std::string& name, double fallback) const {
  if (!params || !params->has(name)) return fallback;
  try {
    return params->real(name);
  } catch (const std::exception&) {
    return fallback;  // not a real parameter
  }
}

namespace {
std::map<std::string, AnyDrawFn>& drawings() {
  static std::map<std::string, AnyDrawFn> registry;  // filled during static initialisation
  return registry;
}
}  // namespace

bool register_drawing(const std::string& family, AnyDrawFn fn) {
  drawings()[family] = std::move(fn);
  return true;
}

const AnyDrawFn* find_drawing(const std::string& family) {
  const auto it = drawings().find(family);
  return it == drawings().end() ? nullptr : &it->second;
}

Drawing draw_case(const Family& family, const AnyCase& c, const Impl& target, const Impl& reference,
                  const DrawContext& ctx) {
  try {
    if (const AnyDrawFn* fn = find_drawing(family.name())) return (*fn)(family, c, target, reference, ctx);
    return generic_drawing(family, c, target, reference, ctx);
  } catch (const std::exception& e) {
    return {"", "", std::string("no drawing: ") + e.what()};
  }
}

namespace draw {

char error_char(double ratio) {
  if (!std::isfinite(ratio)) return '!';
  if (ratio < 0.25) return ' ';
  if (ratio < 0.5) return '.';
  if (ratio < 1) return ':';
  if (ratio < 2) return '+';
  return '#';
}

double heatmap(svg::Canvas& c, double x, double y, const std::string& title, int rows, int cols,
               const std::function<double(int, int)>& ratio, double cell, const std::string& css,
               const std::function<std::string(int, int)>& tooltip) {
  c.text(x, y + 12, title, 12, "start", svg::color::ink, "", true);
  const double top = y + 20;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const double r = ratio(i, j);
      c.rect(x + j * cell, top + i * cell, cell, cell, svg::error_color(r), svg::color::grid,
             cell > 6 ? 0.5 : 0,
             tooltip ? tooltip(i, j) : fmt::format("[{}, {}] |error|/bound {:.3g}", i, j, r), css);
    }
  c.rect(x, top, cols * cell, rows * cell, "none", svg::color::tile, 1);
  c.fit(x + cols * cell + 10, top + rows * cell + 10);
  return 20 + rows * cell;
}

}  // namespace draw

Drawing generic_drawing(const Family& family, const AnyCase& c, const Impl& target, const Impl& reference,
                        const DrawContext& ctx) {
  Drawing d;
  // Every output the family publishes for both implementations.
  std::vector<std::string> outputs, names;
  for (const auto& info : family.tensor_infos()) {
    if (info.name.rfind("target.", 0) != 0) continue;
    const std::string out = info.name.substr(7);
    for (const auto& other : family.tensor_infos())
      if (other.name == "reference." + out) outputs.push_back(out);
  }
  if (outputs.empty()) {
    d.note = "no drawing for this family, and it publishes no target/reference tensors";
    return d;
  }
  for (const auto& o : outputs) names.push_back("target." + o), names.push_back("reference." + o);
  const auto trial = family.begin_trial(c, target, reference);
  const expr::TensorMap* tensors = nullptr;
  try {
    tensors = trial->tensors(names);
  } catch (const std::exception& e) {
    d.note = std::string("the outputs could not be computed for the drawing: ") + e.what();
    return d;
  }
  // The bound the failure reported, when it did; else each tensor is shown
  // against its own largest error (the legend says which).
  const double bound = ctx.value("allowed", ctx.value("bound", 0));
  svg::Canvas canvas(520, 60, "kprop-drawing generic", "error of each output");
  double y = 8;
  canvas.text(8, y + 12,
              bound > 0 ? fmt::format("|target − reference| / bound ({:.3g}), per output element", bound)
                        : "|target − reference| relative to each output's largest error",
              12, "start", svg::color::ink, "", true);
  y += 28;
  for (const auto& o : outputs) {
    const expr::Tensor* t = tensors ? tensors->find("target." + o) : nullptr;
    const expr::Tensor* r = tensors ? tensors->find("reference." + o) : nullptr;
    if (!t || !r || t->size() != r->size() || t->size() == 0) continue;
    // Rows × the last dim; at most 64 × 64 cells drawn (the corner of a larger tensor).
    const int cols = t->rank() ? static_cast<int>(t->shape.back()) : 1;
    const int rows = static_cast<int>(t->size()) / std::max(cols, 1);
    double largest = 0;
    for (size_t k = 0; k < t->size(); ++k) largest = std::max(largest, std::fabs(t->data[k] - r->data[k]));
    const double scale = bound > 0 ? bound : largest > 0 ? largest : 1;
    const int rr = std::min(rows, 64), cc = std::min(cols, 64);
    const double cell = std::clamp(360.0 / std::max(rr, cc), 4.0, 22.0);
    auto ratio = [&](int i, int j) {
      const size_t k = static_cast<size_t>(i) * static_cast<size_t>(cols) + static_cast<size_t>(j);
      const double e = std::fabs(t->data[k] - r->data[k]);
      return std::isnan(t->data[k]) != std::isnan(r->data[k]) ? NAN : e / scale;
    };
    y += draw::heatmap(
             canvas, 8, y,
             fmt::format("{} {}{}", o, expr::shape_text(t->shape), rows > rr || cols > cc ? " (corner)" : ""),
             rr, cc, ratio, cell, "cell",
             [&](int i, int j) {
               const size_t k = static_cast<size_t>(i) * static_cast<size_t>(cols) + static_cast<size_t>(j);
               return fmt::format("{}[{}, {}]: target {:.6g}, reference {:.6g}", o, i, j, t->data[k],
                                  r->data[k]);
             }) +
         18;
  }
  canvas.error_legend(8, y + 16, 200);
  canvas.fit(300, y + 50);
  d.svg = canvas.str();
  return d;
}

}  // namespace kprop
