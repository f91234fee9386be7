// ternary drawing (kprop/drawing.h): the histogram of the weights against
// the weight scale s and the rounding thresholds ±s/2 (w/s rounds to -1, 0,
// +1), the reference's s and the target's; the weights the target quantized
// differently marked under the axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/drawing.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {
namespace {

namespace color = svg::color;

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext&) {
  if (!target || !reference) return {"", "", "the target or the reference gave no result to draw"};
  const double s_ref = reference->w_scale, s_tgt = target->w_scale;
  double lo = 0, hi = 0;
  for (double w : c.w) lo = std::min(lo, w), hi = std::max(hi, w);
  for (double s : {s_ref, s_tgt})
    if (std::isfinite(s)) lo = std::min(lo, -1.1 * s), hi = std::max(hi, 1.1 * s);
  if (hi - lo < 1e-12) lo -= 1, hi += 1;
  const int bins = 40;
  std::vector<int> counts(bins, 0);
  for (double w : c.w)
    ++counts[static_cast<size_t>(std::clamp(static_cast<int>((w - lo) / (hi - lo) * bins), 0, bins - 1))];
  const int most = std::max(1, *std::max_element(counts.begin(), counts.end()));
  const double px = 50, py = 58, pw = 560, ph = 200;
  auto X = [&](double w) { return px + pw * (w - lo) / (hi - lo); };
  svg::Canvas canvas(px + pw + 30, py + ph + 120, "kprop-drawing ternary", "weight histogram");
  canvas.text(8, 16,
              fmt::format("{} weights (N {} × K {}), tokens {}: weight scale s = mean|W|", c.w.size(),
                          c.out_features, c.in_features, c.tokens),
              13, "start", color::ink, "", true);
  for (int b = 0; b < bins; ++b) {
    const double h = ph * counts[static_cast<size_t>(b)] / most;
    const double mid = lo + (b + 0.5) * (hi - lo) / bins;
    const double q =
        std::isfinite(s_ref) && s_ref > 0 ? std::clamp(std::nearbyint(mid / s_ref), -1.0, 1.0) : 0;
    canvas.rect(X(lo + b * (hi - lo) / bins) + 0.5, py + ph - h, pw / bins - 1, h,
                q < 0   ? "#9ecae1"
                : q > 0 ? "#fdae6b"
                        : "#c3c9d0",
                "none", 0,
                fmt::format("{} weight(s) in [{:.4g}, {:.4g})", counts[static_cast<size_t>(b)],
                            lo + b * (hi - lo) / bins, lo + (b + 1) * (hi - lo) / bins),
                "bin");
  }
  canvas.line(px, py + ph, px + pw, py + ph, color::ink, 1);
  for (double t : {lo, 0.0, hi})
    canvas.text(X(t), py + ph + 14, fmt::format("{:.3g}", t), 10, "middle", color::neutral);
  auto marks = [&](double s, const std::string& col, const std::string& who, double label_y) {
    if (!std::isfinite(s)) {
      canvas.text(px, label_y, fmt::format("{}: s = {}", who, s), 11, "start", col);
      return;
    }
    for (double t : {-s, s}) canvas.line(X(t), py - 6, X(t), py + ph, col, 2, "", "scale");
    for (double t : {-s / 2, s / 2}) canvas.line(X(t), py - 6, X(t), py + ph, col, 1.5, "5 4", "threshold");
    canvas.text(px, label_y, fmt::format("{}: s = {:.4g} (solid ±s, dashed thresholds ±s/2)", who, s), 11,
                "start", col);
  };
  marks(s_ref, color::oracle, "reference", py - 30);
  if (s_tgt != s_ref) marks(s_tgt, color::target, "target", py - 14);
  // Weights quantized differently.
  int differ = 0;
  for (size_t k = 0; k < c.w.size() && k < target->w_q.size() && k < reference->w_q.size(); ++k)
    if (!(target->w_q[k] == reference->w_q[k])) {
      ++differ;
      canvas.line(X(c.w[k]), py + ph + 20, X(c.w[k]), py + ph + 32, color::bad, 2, "", "wrong-q");
    }
  canvas.text(
      px, py + ph + 48,
      fmt::format("{} of {} weights quantized differently by the target (red ticks){}", differ, c.w.size(),
                  target->w_q.size() != c.w.size()
                      ? fmt::format("; the target returned {} values", target->w_q.size())
                      : ""),
      11, "start", differ ? color::bad : color::ink);
  const double ly = py + ph + 72;
  double lx = canvas.swatch(8, ly, "#9ecae1", "→ -1");
  lx = canvas.swatch(lx, ly, "#c3c9d0", "→ 0");
  lx = canvas.swatch(lx, ly, "#fdae6b", "→ +1 (reference rounding)");
  canvas.line(lx, ly - 4, lx + 24, ly - 4, color::oracle, 2);
  canvas.text(lx + 30, ly, "scale ±s", 11);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::ternary
