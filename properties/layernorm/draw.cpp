// layernorm drawing (kprop/drawing.h): per row, the target's largest error
// in y and in dx against the reference, and the naive two-pass computation's
// (what the tolerance is a multiple of), plotted against the row's
// |mean| / std — the conditioning that makes a one-pass variance fail — on
// log scales; the failing row ringed, the bound it broke drawn when the
// failure reported one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/drawing.h"
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

namespace color = svg::color;

double row_error(const std::vector<double>& a, const std::vector<double>& b, size_t row, size_t dim) {
  double e = 0;
  for (size_t d = row * dim; d < (row + 1) * dim && d < a.size() && d < b.size(); ++d) {
    if (!std::isfinite(a[d]) && a[d] != b[d]) return INFINITY;
    e = std::max(e, std::fabs(a[d] - b[d]));
  }
  return e;
}

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext& ctx) {
  if (!target || !reference) return {"", "", "the target or the reference gave no result to draw"};
  const size_t R = static_cast<size_t>(c.rows), D = static_cast<size_t>(c.dim);
  const Result naive = two_pass(c);
  struct Row {
    double cond, y, dx, naive;
  };
  std::vector<Row> rows;
  for (size_t r = 0; r < R; ++r) {
    double mean = 0, ss = 0;
    for (size_t d = 0; d < D; ++d) mean += c.x[r * D + d];
    mean /= static_cast<double>(D);
    for (size_t d = 0; d < D; ++d) ss += (c.x[r * D + d] - mean) * (c.x[r * D + d] - mean);
    const double sd = std::sqrt(ss / static_cast<double>(D));
    rows.push_back(
        {sd > 0 ? std::fabs(mean) / sd : INFINITY, row_error(target->y, reference->y, r, D),
         row_error(target->dx, reference->dx, r, D),
         std::max(row_error(naive.y, reference->y, r, D), row_error(naive.dx, reference->dx, r, D))});
  }
  // Log axes over what is drawn; 0 errors sit on the bottom edge, inf on the top.
  const double allowed = ctx.value("allowed", 0);
  double lo_e = 1e300, hi_e = 1e-300, lo_c = 1e300, hi_c = 1e-300;
  for (const Row& r : rows) {
    for (double e : {r.y, r.dx, r.naive})
      if (e > 0 && std::isfinite(e)) lo_e = std::min(lo_e, e), hi_e = std::max(hi_e, e);
    if (r.cond > 0 && std::isfinite(r.cond)) lo_c = std::min(lo_c, r.cond), hi_c = std::max(hi_c, r.cond);
  }
  if (allowed > 0) lo_e = std::min(lo_e, allowed), hi_e = std::max(hi_e, allowed);
  if (lo_e > hi_e) lo_e = 1e-17, hi_e = 1;
  if (lo_c > hi_c) lo_c = 0.1, hi_c = 10;
  const double e0 = std::floor(std::log10(lo_e)) - 0.5, e1 = std::ceil(std::log10(hi_e)) + 0.5;
  const double c0 = std::floor(std::log10(lo_c)) - 0.5, c1 = std::ceil(std::log10(hi_c)) + 0.5;
  const double px = 70, py = 40, pw = 420, ph = 260;
  auto X = [&](double cond) {
    if (!(cond > 0)) return px;
    if (!std::isfinite(cond)) return px + pw;
    return px + pw * (std::log10(cond) - c0) / (c1 - c0);
  };
  auto Y = [&](double e) {
    if (!(e > 0)) return py + ph;
    if (!std::isfinite(e)) return py;
    return py + ph - ph * (std::log10(e) - e0) / (e1 - e0);
  };
  svg::Canvas canvas(px + pw + 40, py + ph + 80, "kprop-drawing layernorm", "error per row");
  canvas.text(
      8, 16,
      fmt::format("{} rows × {} {}: per-row max |error| against |mean| / std", R, D, dtype_name(c.dtype)), 13,
      "start", color::ink, "", true);
  canvas.rect(px, py, pw, ph, "#fbfcfd", color::neutral, 1);
  for (int k = static_cast<int>(std::ceil(e0)); k <= static_cast<int>(std::floor(e1)); ++k) {
    const double y = Y(std::pow(10.0, k));
    canvas.line(px, y, px + pw, y, "#e6e9ed", 1);
    canvas.text(px - 6, y + 4, fmt::format("1e{}", k), 10, "end", color::neutral);
  }
  for (int k = static_cast<int>(std::ceil(c0)); k <= static_cast<int>(std::floor(c1)); ++k) {
    const double x = X(std::pow(10.0, k));
    canvas.line(x, py, x, py + ph, "#e6e9ed", 1);
    canvas.text(x, py + ph + 14, fmt::format("1e{}", k), 10, "middle", color::neutral);
  }
  canvas.text(px + pw / 2, py + ph + 32, "|mean| / std of the row (log; constant rows at the right edge)", 11,
              "middle");
  canvas.rotated_text(18, py + ph - 40, "max |error| (log)", 11, -90);
  if (allowed > 0) {
    canvas.line(px, Y(allowed), px + pw, Y(allowed), color::bad, 1.5, "6 4");
    canvas.text(px + pw - 4, Y(allowed) - 5, fmt::format("bound broken: {:.3g}", allowed), 10, "end",
                color::bad);
  }
  const double failing = ctx.value("row", -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& w = rows[r];
    const double x = X(w.cond);
    canvas.circle(x, Y(w.naive), 4, color::neutral, "none", 0,
                  fmt::format("row {}: naive error {:.3g}", r, w.naive), "naive");
    canvas.circle(x, Y(w.dx), 4.5, "none", color::oracle, 2, fmt::format("row {}: dx error {:.3g}", r, w.dx),
                  "row dx");
    canvas.circle(x, Y(w.y), 4.5, color::target, "none", 0,
                  fmt::format("row {}: y error {:.3g}, |mean|/std {:.3g}", r, w.y, w.cond), "row y");
    if (static_cast<double>(r) == failing)
      canvas.circle(x, Y(std::max(w.y, w.dx)), 10, "none", color::ink, 1.5, "the failing row");
  }
  double lx = canvas.swatch(px, py + ph + 56, color::target, "target y", true);
  lx = canvas.swatch(lx, py + ph + 56, "none", "target dx", true, color::oracle);
  lx = canvas.swatch(lx, py + ph + 56, color::neutral, "naive two-pass (the tolerance's base)", true);
  if (failing >= 0) canvas.swatch(lx, py + ph + 56, "none", "failing row", true, color::ink);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::layernorm
