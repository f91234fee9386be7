// softmax_topk drawing (kprop/drawing.h): the failing row's logits as bars,
// the target's chosen top-k and the reference's expected top-k marked (with
// their ranks), the logits within a near-tie of the k-th marked, and the
// probabilities each reported for its picks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/drawing.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {
namespace {

namespace color = svg::color;

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext& ctx) {
  if (!target || !reference) return {"", "", "the target or the reference gave no result to draw"};
  const int V = c.vocab, K = c.k;
  int row = static_cast<int>(ctx.value("row", -1));
  if (row < 0 || row >= c.rows())  // the first row where the picks differ
    for (row = 0; row + 1 < c.rows(); ++row)
      if (!std::equal(target->indices.begin() + row * K, target->indices.begin() + (row + 1) * K,
                      reference->indices.begin() + row * K))
        break;
  const size_t base = static_cast<size_t>(row) * static_cast<size_t>(V);
  auto x_of = [&](int i) { return c.logits[base + static_cast<size_t>(i)]; };
  auto picks = [&](const Result& r) {
    std::vector<int> out(static_cast<size_t>(V), -1);  // rank of each index among the picks
    for (int s = 0; s < K; ++s) {
      const size_t at = static_cast<size_t>(row) * static_cast<size_t>(K) + static_cast<size_t>(s);
      if (at < r.indices.size() && r.indices[at] >= 0 && r.indices[at] < V)
        out[static_cast<size_t>(r.indices[at])] = s;
    }
    return out;
  };
  const std::vector<int> got = picks(*target), want = picks(*reference);
  // The k-th largest logit, and the near-ties around it (the invariants' width, tie_ulps dtype ulps).
  std::vector<double> sorted;
  double lo = 0, hi = 0;
  bool any = false;
  for (int i = 0; i < V; ++i)
    if (std::isfinite(x_of(i))) {
      sorted.push_back(x_of(i));
      lo = any ? std::min(lo, x_of(i)) : x_of(i), hi = any ? std::max(hi, x_of(i)) : x_of(i), any = true;
    }
  std::sort(sorted.rbegin(), sorted.rend());
  const double kth = sorted.empty() ? 0 : sorted[std::min(sorted.size(), static_cast<size_t>(K)) - 1];
  const double width =
      ctx.param("tie_ulps", 16) * arithmetic_epsilon(c.dtype) * std::max(1.0, std::fabs(kth - hi));
  lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi - lo < 1e-12) lo -= 1, hi += 1;  // all logits equal: a unit around them
  const int shown = std::min(V, 160);
  const double bw = std::clamp(640.0 / shown, 3.0, 26.0), px = 84, py = 56, ph = 160;
  auto Y = [&](double v) { return py + ph * (hi - v) / (hi - lo); };
  svg::Canvas canvas(px + shown * bw + 40, py + ph + 110, "kprop-drawing softmax_topk", "row logits");
  canvas.text(8, 16,
              fmt::format("row {} of {}: V = {}, K = {}, {}, block {}", row, c.rows(), V, K,
                          dtype_name(c.dtype), c.block),
              13, "start", color::ink, "", true);
  canvas.line(px, Y(0), px + shown * bw, Y(0), color::neutral, 1);
  canvas.text(px - 6, Y(hi) + 4, fmt::format("{:.4g}", hi), 10, "end", color::neutral);
  canvas.text(px - 6, Y(lo) + 4, fmt::format("{:.4g}", lo), 10, "end", color::neutral);
  canvas.text(px - 6, Y(0) + 4, "0", 10, "end", color::neutral);
  for (int i = 0; i < shown; ++i) {
    const double v = x_of(i);
    const double x = px + i * bw;
    const bool g = got[static_cast<size_t>(i)] >= 0, w = want[static_cast<size_t>(i)] >= 0;
    const bool tie = std::isfinite(v) && v != kth && std::fabs(v - kth) <= width;
    const std::string fill = g && w ? color::both : g ? color::target : w ? color::oracle : "#c3c9d0";
    if (std::isfinite(v)) {
      // At least 3 px, so a logit of 0 still shows its colour.
      const double h = std::max(std::fabs(Y(v) - Y(0)), 3.0);
      canvas.rect(x + 0.5, v >= 0 ? Y(0) - h : Y(0), bw - 1, h, fill, tie ? color::highlight : "none",
                  tie ? 2 : 0,
                  fmt::format("index {}: logit {:.9g}{}{}{}", i, v,
                              g ? fmt::format(", target rank {}", got[size_t(i)]) : "",
                              w ? fmt::format(", expected rank {}", want[size_t(i)]) : "",
                              tie ? ", near-tie with the k-th" : ""),
                  g   ? (w ? "logit chosen expected" : "logit chosen")
                  : w ? "logit expected"
                      : "logit");
    } else {
      canvas.text(x + bw / 2, Y(lo) - 2, "−∞", std::min(bw, 10.0), "middle", color::neutral, "logit");
    }
    if (g)
      canvas.text(x + bw / 2, py + ph + 14, std::to_string(got[size_t(i)]), std::min(bw, 10.0), "middle",
                  color::target);
    if (w)
      canvas.text(x + bw / 2, py + ph + 26, std::to_string(want[size_t(i)]), std::min(bw, 10.0), "middle",
                  color::oracle);
    if (shown <= 40) canvas.text(x + bw / 2, py - 4, std::to_string(i), 8.5, "middle", color::neutral);
  }
  canvas.text(px - 6, py + ph + 14, "target rank", 9, "end", color::target);
  canvas.text(px - 6, py + ph + 26, "expected rank", 9, "end", color::oracle);
  if (shown < V)
    canvas.text(px + shown * bw, py + ph + 40, fmt::format("(first {} of {} logits)", shown, V), 10, "end");
  const double ly = py + ph + 56;
  double lx = canvas.swatch(8, ly, color::target, "chosen by the target only");
  lx = canvas.swatch(lx, ly, color::oracle, "expected only");
  lx = canvas.swatch(lx, ly, color::both, "both");
  canvas.swatch(lx, ly, "#ffffff", "near-tie with the k-th logit", false, color::highlight);
  // The probabilities each reported.
  std::string probs_t, probs_r;
  for (int s = 0; s < K; ++s) {
    const size_t at = static_cast<size_t>(row) * static_cast<size_t>(K) + static_cast<size_t>(s);
    if (at < target->probs.size())
      probs_t += fmt::format("{}{}:{:.4g}", s ? "  " : "", target->indices[at], target->probs[at]);
    if (at < reference->probs.size())
      probs_r += fmt::format("{}{}:{:.4g}", s ? "  " : "", reference->indices[at], reference->probs[at]);
  }
  canvas.text(8, ly + 22, "target (index:prob)     " + probs_t, 10.5, "start", color::target);
  canvas.text(8, ly + 38, "reference (index:prob)  " + probs_r, 10.5, "start", color::oracle);
  canvas.fit(8 + 6.0 * static_cast<double>(24 + std::max(probs_t.size(), probs_r.size())), ly + 46);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::softmax_topk
