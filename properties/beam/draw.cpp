// beam drawing (kprop/drawing.h): for the first prompt where the target and
// the reference differ, the steps × beams lattice of each (the pool after
// every step, best first), finished (EOS) beams marked, each beam's last
// token and score, an edge to the beam it extends; the target's lattice next
// to the reference's.
#include <fmt/format.h>

#include <algorithm>

#include "kprop/drawing.h"
#include "properties/beam/family.h"

namespace kprop::beam {
namespace {

namespace color = svg::color;

// One lattice at (x0, y0); returns its width.
double lattice(svg::Canvas& c, double x0, double y0, const std::string& title, const Beams& beams,
               const std::string& accent, int width, int steps, const std::string& css) {
  const double col = 92, row = 40, bw = 78, bh = 30;
  c.text(x0, y0 + 12, title, 13, "start", accent, "", true);
  const double top = y0 + 40;
  for (int t = 0; t < steps; ++t)
    c.text(x0 + t * col + bw / 2, top - 8, fmt::format("step {}", t + 1), 10, "middle", color::neutral);
  auto where = [&](const std::vector<Hypothesis>& pool, const std::vector<int>& tokens) {
    for (size_t r = 0; r < pool.size(); ++r)
      if (pool[r].tokens == tokens) return static_cast<int>(r);
    return -1;
  };
  for (size_t t = 0; t < beams.pools.size(); ++t) {
    const auto& pool = beams.pools[t];
    for (size_t r = 0; r < pool.size(); ++r) {
      const Hypothesis& h = pool[r];
      const double x = x0 + static_cast<double>(t) * col, y = top + static_cast<double>(r) * row;
      // The edge to the beam this one extends (its prefix in the previous pool).
      if (t > 0 && !h.tokens.empty()) {
        std::vector<int> prefix(h.tokens.begin(), h.tokens.end() - 1);
        const int from = h.finished && static_cast<int>(h.tokens.size()) <= static_cast<int>(t)
                             ? where(beams.pools[t - 1], h.tokens)
                             : where(beams.pools[t - 1], prefix);
        if (from >= 0)
          c.line(x - col + bw, top + from * row + bh / 2, x, y + bh / 2, h.finished ? color::neutral : accent,
                 1.5, h.finished && static_cast<int>(h.tokens.size()) <= static_cast<int>(t) ? "4 3" : "");
      }
      c.rect(x, y, bw, bh, h.finished ? "#2b2f36" : "#ffffff", accent, h.finished ? 1 : 1.5,
             fmt::format("step {} rank {}: tokens [{}], log-prob {:.6g}, score {:.6g}{}", t + 1, r,
                         fmt::join(h.tokens, ", "), h.logprob, h.score, h.finished ? ", finished (EOS)" : ""),
             h.finished ? css + " beam eos" : css + " beam");
      const std::string ink = h.finished ? "#ffffff" : color::ink;
      c.text(x + 6, y + 13,
             h.tokens.empty() ? "∅" : fmt::format("…{}{}", h.tokens.back(), h.finished ? " EOS" : ""), 11,
             "start", ink, "", true);
      c.text(x + 6, y + 25, fmt::format("{:.4g}", h.score), 10, "start", ink);
    }
  }
  c.fit(x0 + steps * col, top + width * row + 6);
  return steps * col;
}

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext&) {
  if (!target || !reference) return {"", "", "the target or the reference gave no beams to draw"};
  size_t p = 0;
  for (size_t b = 0; b < std::min(target->prompts.size(), reference->prompts.size()); ++b)
    if (target->prompts[b].hypotheses != reference->prompts[b].hypotheses) {
      p = b;
      break;
    }
  if (p >= target->prompts.size() || p >= reference->prompts.size())
    return {"", "", "the target returned no beams for the batch"};
  const Beams& t = target->prompts[p];
  const Beams& r = reference->prompts[p];
  int width = 1;
  for (const auto* b : {&t, &r})
    for (const auto& pool : b->pools) width = std::max(width, static_cast<int>(pool.size()));
  const int steps = static_cast<int>(std::max(t.pools.size(), r.pools.size()));
  svg::Canvas canvas(300, 100, "kprop-drawing beam", "beam lattices");
  canvas.text(
      8, 16,
      fmt::format("prompt {} of {}: [{}], K = {}, L = {}, alpha = {}, EOS = {}", p, c.prompts.size(),
                  fmt::join(c.prompts[p], ", "), c.beam_width, c.max_new_tokens, c.alpha, c.model.eos),
      13, "start", color::ink, "", true);
  const double w = lattice(canvas, 8, 28, "target", t, color::target, width, steps, "target");
  lattice(canvas, 8 + w + 40, 28, "reference", r, color::oracle, width, steps, "reference");
  // The results, best first.
  double y = 28 + 40 + width * 40 + 24;
  for (const auto& [name, beams, accent] : {std::tuple{"target's result", &t, color::target},
                                            std::tuple{"reference's result", &r, color::oracle}}) {
    canvas.text(8, y, name, 12, "start", accent, "", true);
    y += 16;
    for (const auto& h : beams->hypotheses) {
      canvas.text(20, y,
                  fmt::format("[{}]  score {:.6g}{}", fmt::join(h.tokens, ", "), h.score,
                              h.finished ? "  (EOS)" : ""),
                  11, "start", color::ink, "result");
      y += 15;
    }
    y += 8;
  }
  double lx = canvas.swatch(8, y + 8, "#ffffff", "live beam: last token, score", false, color::ink);
  canvas.swatch(lx, y + 8, "#2b2f36", "finished (EOS)", false, color::ink);
  canvas.fit(0, y + 20);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::beam
