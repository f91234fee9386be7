// dflash drawing (kprop/drawing.h): each cycle's draft tree (roots, siblings,
// depths) with the target's accepted path and the reference's in two
// colours, and, for the failing cycle, the target's tree mask against the
// ancestor closure (what node i must see: its ancestors and itself).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kprop/drawing.h"
#include "properties/dflash/family.h"

namespace kprop::dflash {
namespace {

namespace color = svg::color;

// x (in leaf slots) of every node: leaves left to right in depth-first
// order, a parent centred over its children.
std::vector<double> layout(const DraftTree& t, double& slots) {
  const size_t n = static_cast<size_t>(t.size());
  std::vector<std::vector<int>> children(n);
  std::vector<int> roots;
  for (size_t i = 0; i < n; ++i)
    (t.parents[i] < 0 ? roots : children[static_cast<size_t>(t.parents[i])]).push_back(static_cast<int>(i));
  std::vector<double> x(n, 0);
  double next = 0;
  auto place = [&](int i, auto&& self) -> double {
    const auto& kids = children[static_cast<size_t>(i)];
    if (kids.empty()) return x[static_cast<size_t>(i)] = next++;
    double lo = 1e9, hi = -1e9;
    for (int k : kids) {
      const double xk = self(k, self);
      lo = std::min(lo, xk), hi = std::max(hi, xk);
    }
    return x[static_cast<size_t>(i)] = (lo + hi) / 2;
  };
  for (int r : roots) place(r, place);
  slots = std::max(next, 1.0);
  return x;
}

// One cycle's tree at (x0, y0); returns its height.
double draw_tree(svg::Canvas& c, double x0, double y0, size_t k, const DraftTree& t, int context_length,
                 const std::vector<int>& target_path, const std::vector<int>& oracle_path, bool failing) {
  const double dx = 46, dy = 58, r = 15;
  double slots = 1;
  const std::vector<double> xs = layout(t, slots);
  const std::vector<int> depth = depths(t);
  int max_depth = 0;
  for (int d : depth) max_depth = std::max(max_depth, d);
  const std::set<int> on_target(target_path.begin(), target_path.end()),
      on_oracle(oracle_path.begin(), oracle_path.end());
  const double width = std::max(slots * dx, 160.0);
  const double ctx_x = x0 + width / 2, ctx_y = y0 + 34;
  c.text(x0, y0 + 12,
         fmt::format("cycle {}{}: {} node(s), target accepted {}, reference accepted {}", k,
                     failing ? " (failing)" : "", t.size(), target_path.size(), oracle_path.size()),
         12, "start", color::ink, "", true);
  auto pos = [&](int i) {
    return std::pair<double, double>{x0 + (xs[static_cast<size_t>(i)] + 0.5) * width / slots,
                                     ctx_y + dy * depth[static_cast<size_t>(i)]};
  };
  // Depth guides.
  for (int d = 1; d <= max_depth; ++d) {
    c.line(x0, ctx_y + dy * d, x0 + width, ctx_y + dy * d, "#eef0f3", 1, "3 4");
    c.text(x0 + width + 8, ctx_y + dy * d + 4, fmt::format("depth {}", d), 10, "start", color::neutral);
  }
  // Edges: the path colours, drawn under the nodes.
  for (int i = 0; i < t.size(); ++i) {
    const int p = t.parents[static_cast<size_t>(i)];
    const auto [x, y] = pos(i);
    const auto [px, py] = p < 0 ? std::pair<double, double>{ctx_x, ctx_y} : pos(p);
    const bool tgt = on_target.count(i), orc = on_oracle.count(i);
    if (tgt && orc) {
      c.line(px - 2.5, py, x - 2.5, y, color::target, 3.5, "", "edge target");
      c.line(px + 2.5, py, x + 2.5, y, color::oracle, 3.5, "", "edge oracle");
    } else if (tgt || orc) {
      c.line(px, py, x, y, tgt ? color::target : color::oracle, 3.5, tgt ? "" : "7 3",
             tgt ? "edge target" : "edge oracle");
    } else {
      c.line(px, py, x, y, color::neutral, 1.2, "", "edge");
    }
  }
  c.rect(ctx_x - 34, ctx_y - 12, 68, 24, "#eef0f3", color::neutral, 1,
         fmt::format("the context: {} token(s)", context_length));
  c.text(ctx_x, ctx_y + 4, fmt::format("context {}", context_length), 10.5, "middle");
  for (int i = 0; i < t.size(); ++i) {
    const auto [x, y] = pos(i);
    const bool tgt = on_target.count(i), orc = on_oracle.count(i);
    const std::string fill = tgt && orc ? color::both : tgt ? color::target : orc ? color::oracle : "#ffffff";
    const std::string ink = tgt || orc ? "#ffffff" : color::ink;
    c.circle(x, y, r, fill, tgt || orc ? fill : color::ink, 1.5,
             fmt::format("node {}: token {}, parent {}, depth {}{}{}", i, t.tokens[static_cast<size_t>(i)],
                         t.parents[static_cast<size_t>(i)], depth[static_cast<size_t>(i)],
                         tgt ? ", accepted by the target" : "", orc ? ", on the reference's path" : ""),
             "node");
    c.text(x, y + 4, std::to_string(t.tokens[static_cast<size_t>(i)]), 12, "middle", ink, "", true);
    c.text(x + r + 1, y - r + 2, fmt::format("#{}", i), 9, "start", color::neutral);
  }
  c.fit(x0 + width + 60, ctx_y + dy * max_depth + r + 8);
  return 34 + dy * max_depth + r + 22;
}

// The failing cycle's mask, tree part (N × N), against the ancestor closure;
// one column for the context (all of it must be visible).
double draw_mask(svg::Canvas& c, double x0, double y0, const DraftTree& t, const CycleTrace* trace) {
  const int n = t.size();
  const double cell = std::clamp(260.0 / std::max(n + 1, 1), 10.0, 26.0);
  c.text(x0, y0 + 12, "tree mask: target vs ancestor closure", 12, "start", color::ink, "", true);
  const double gx = x0 + 30, gy = y0 + 40;
  c.text(gx + cell / 2, gy - 6, "ctx", 9, "middle", color::neutral);
  for (int j = 0; j < n; ++j)
    c.text(gx + (j + 1.5) * cell, gy - 6, std::to_string(j), 9, "middle", color::neutral);
  const int P = trace ? trace->context_length : 0;
  const bool sized = trace && trace->mask.size() == static_cast<size_t>(n) * static_cast<size_t>(P + n);
  auto seen = [&](int i, int col) {
    return sized &&
           trace->mask[static_cast<size_t>(i) * static_cast<size_t>(P + n) + static_cast<size_t>(col)] != 0;
  };
  for (int i = 0; i < n; ++i) {
    const double y = gy + i * cell;
    c.text(gx - 6, y + cell / 2 + 3, std::to_string(i), 9, "end", color::neutral);
    bool ctx_all = sized;
    for (int col = 0; col < P && sized; ++col) ctx_all = ctx_all && seen(i, col);
    c.rect(gx, y, cell, cell, ctx_all ? color::visible : color::bad, color::grid, 1,
           ctx_all ? "the whole context is visible" : "part of the context is masked", "mask-cell");
    for (int j = 0; j < n; ++j) {
      const bool want = is_ancestor_or_self(t, j, i);
      const bool got = seen(i, P + j);
      const double x = gx + (j + 1) * cell;
      const std::string fill = !sized        ? color::masked
                               : got == want ? (want ? color::visible : color::masked)
                               : got         ? color::target
                                             : color::highlight;
      c.rect(x, y, cell, cell, fill, color::grid, 1,
             fmt::format("node {} → node {}: target {}, must {}", i, j, got ? "sees" : "does not see",
                         want ? "see (ancestor or self)" : "not see"),
             "mask-cell");
      if (sized && got != want)
        c.text(x + cell / 2, y + cell / 2 + 4, got ? "×" : "−", std::min(cell, 14.0), "middle", "#ffffff", "",
               true);
    }
  }
  const double ly = gy + n * cell + 22;
  double lx = c.swatch(x0, ly, color::visible, "seen, as it must be");
  c.swatch(lx, ly, color::masked, "hidden, as it must be");
  lx = c.swatch(x0, ly + 18, color::target, "× leak: sees a non-ancestor");
  c.swatch(lx, ly + 18, color::highlight, "− misses an ancestor");
  if (!sized) c.text(x0, ly + 38, "the target's mask has the wrong size", 11, "start", color::bad);
  c.fit(gx + (n + 1) * cell + 10, ly + 44);
  return ly + 44 - y0;
}

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext& ctx) {
  const size_t failing = static_cast<size_t>(std::max(0.0, ctx.value("cycle", 0)));
  svg::Canvas canvas(200, 100, "kprop-drawing dflash", "draft trees");
  double y = 6;
  double lx = canvas.swatch(8, y + 12, color::target, "target's accepted path", true);
  lx = canvas.swatch(lx, y + 12, color::oracle, "reference's path (greedy oracle)", true);
  canvas.swatch(lx, y + 12, color::both, "both", true);
  y += 26;
  int context = static_cast<int>(c.prompt.size());
  double tree_right = 0;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const CycleTrace* t = target && k < target->cycles.size() ? &target->cycles[k] : nullptr;
    const CycleTrace* r = reference && k < reference->cycles.size() ? &reference->cycles[k] : nullptr;
    const int P = t ? t->context_length : r ? r->context_length : context;
    const double h = draw_tree(canvas, 8, y, k, c.cycles[k], P, t ? t->accepted : std::vector<int>{},
                               r ? r->accepted : std::vector<int>{}, k == failing);
    tree_right = std::max(tree_right, canvas.width());
    if (k == failing) {
      const double top = y;
      draw_mask(canvas, tree_right + 24, top, c.cycles[k], t);
    }
    y += h;
    if (r) context += static_cast<int>(r->emitted.size());
  }
  canvas.fit(0, y + 8);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::dflash
