// attention.fwd / attention.bwd drawings (kprop/drawing.h): for the head
// with the largest error, the mask over (query, key) with the tile
// boundaries and the fully masked rows marked, next to a heatmap of
// |error| / bound per output element (O and LSE; dQ, and dK, dV under the
// keys they belong to). The bound is the one matches_reference applies
// (bounds.h): k × the naive computation's max error + the floor. The same
// map in characters goes under the counterexample in the terminal.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "kprop/drawing.h"
#include "properties/attention/bounds.h"
#include "properties/attention/family.h"
#include "properties/attention/family_parts.h"

namespace kprop::attention {
namespace {

namespace color = svg::color;

// One output tensor of the case under the policy: its per-element |error| /
// bound, the bound of the element's head (bounds.h).
struct Scored {
  std::string name;
  const std::vector<double>* target = nullptr;
  const std::vector<double>* reference = nullptr;
  std::vector<double> bounds;  // per group
  size_t group_len = 1;
  double ratio(size_t k) const {
    if (!target || !reference || k >= target->size() || k >= reference->size()) return 0;
    const double t = (*target)[k], r = (*reference)[k];
    if (t == r) return 0;  // equal infinities (an empty row's LSE) included
    if (!std::isfinite(t) || !std::isfinite(r)) return NAN;
    return std::fabs(t - r) / std::max(bounds[std::min(k / group_len, bounds.size() - 1)], 1e-300);
  }
};

Scored scored(const std::string& name, const std::vector<double>& t, const std::vector<double>& r,
              const std::vector<double>& naive, double k, const std::vector<double>& floors) {
  Scored s{name, &t, &r, {}, std::max<size_t>(1, r.size() / floors.size())};
  const bool grouped = naive.size() == r.size() && r.size() % floors.size() == 0;
  for (size_t g = 0; g < floors.size(); ++g) {
    auto part = [&](const std::vector<double>& v) {
      return grouped ? std::span<const double>(v).subspan(g * s.group_len, s.group_len)
                     : std::span<const double>(v);
    };
    s.bounds.push_back(k * max_error(part(r), part(naive)) + floors[g]);
  }
  return s;
}

// The parts of one drawing, shared by the two families.
struct View {
  const Case& c;
  int b = 0, h = 0;
  Scored o, lse;                     // forward (the backward's forward too)
  std::optional<Scored> dq, dk, dv;  // backward
};

double row_worst(const View& v, int b, int h) {
  const Shape& s = v.c.shape;
  double worst = 0;
  auto take = [&](double r) { worst = std::isnan(r) ? INFINITY : std::max(worst, r); };
  for (int i = 0; i < s.nq; ++i) {
    for (int d = 0; d < s.dim; ++d) {
      take(v.o.ratio(q_at(s, b, h, i) + size_t(d)));
      if (v.dq) take(v.dq->ratio(q_at(s, b, h, i) + size_t(d)));
    }
    take(v.lse.ratio((size_t(b) * s.heads_q + h) * s.nq + i));
  }
  if (v.dk && h % s.group() == 0)
    for (int j = 0; j < s.nk; ++j)
      for (int d = 0; d < s.dim; ++d) {
        take(v.dk->ratio(kv_at(s, b, h / s.group(), j) + size_t(d)));
        take(v.dv->ratio(kv_at(s, b, h / s.group(), j) + size_t(d)));
      }
  return worst;
}

void pick_head(View& v) {
  double worst = -1;
  for (int b = 0; b < v.c.shape.batch; ++b)
    for (int h = 0; h < v.c.shape.heads_q; ++h)
      if (const double w = row_worst(v, b, h); w > worst) worst = w, v.b = b, v.h = h;
}

std::string text_map(const View& v) {
  const Case& c = v.c;
  const Shape& s = c.shape;
  const int rows = std::min(s.nq, 24), keys = std::min(s.nk, 48), dims = std::min(s.dim, 32);
  std::string out = fmt::format(
      "error map (batch {}, head {}): mask per key (# seen, . masked, | tile edge) | |error|/bound of {} per "
      "d{}\n"
      "  (' ' <0.25  . <0.5  : <1  + <2  # >=2 beyond the bound  ! NaN/inf; * fully masked row)\n",
      v.b, v.h, v.dq ? "dQ" : "O", v.dq ? "" : " | LSE");
  for (int i = 0; i < rows; ++i) {
    const bool empty = row_fully_masked(c, v.b, i);
    std::string line = fmt::format("  {:>3}{} ", i, empty ? '*' : ' ');
    for (int j = 0; j < keys; ++j) {
      if (j > 0 && j % c.block_k == 0) line += '|';
      line += visible(c, v.b, i, j) ? '#' : '.';
    }
    if (keys < s.nk) line += "…";
    line += " | ";
    const Scored& out_t = v.dq ? *v.dq : v.o;
    for (int d = 0; d < dims; ++d) line += draw::error_char(out_t.ratio(q_at(s, v.b, v.h, i) + size_t(d)));
    if (!v.dq)
      line += fmt::format(" | {}", draw::error_char(v.lse.ratio((size_t(v.b) * s.heads_q + v.h) * s.nq + i)));
    out += line + "\n";
    if (i + 1 < rows && (i + 1) % c.block_q == 0)
      out += "       " + std::string(size_t(keys + (keys - 1) / c.block_k), '-') + "\n";
  }
  if (rows < s.nq) out += fmt::format("  … {} more rows\n", s.nq - rows);
  return out;
}

std::string svg_map(const View& v, const std::string& family) {
  const Case& c = v.c;
  const Shape& s = c.shape;
  const double cell = std::clamp(300.0 / std::max({s.nq, s.nk, s.dim, 1}), 7.0, 34.0);
  svg::Canvas canvas(400, 100, "kprop-drawing " + family, "attention error map");
  canvas.text(
      8, 18,
      fmt::format("batch {}, query head {} (kv head {}): {}", v.b, v.h, v.h / s.group(), shape_text(c)), 13,
      "start", color::ink, "", true);
  // The mask, rows = queries, columns = keys.
  const double mx = 46, my = 64;
  const std::string mask_label =
      fmt::format("mask ({}), tiles {}×{}", mask_name(c.mask), c.block_q, c.block_k);
  canvas.text(mx, my - 22, mask_label, 12, "start", color::ink, "", true);
  canvas.text(mx + s.nk * cell / 2, my - 6, "key j →", 10, "middle", color::neutral);
  canvas.rotated_text(mx - 30, my + s.nq * cell / 2 + 20, "query i →", 10, -90);
  for (int i = 0; i < s.nq; ++i) {
    const bool empty = row_fully_masked(c, v.b, i);
    if (s.nq <= 40 || i % 5 == 0)
      canvas.text(mx - 4, my + (i + 0.5) * cell + 3.5, std::to_string(i), 9, "end",
                  empty ? color::bad : color::neutral);
    for (int j = 0; j < s.nk; ++j) {
      const bool seen = visible(c, v.b, i, j);
      canvas.rect(mx + j * cell, my + i * cell, cell, cell, seen ? color::visible : color::masked,
                  color::grid, cell > 6 ? 0.6 : 0,
                  fmt::format("query {} {} key {}", i, seen ? "sees" : "does not see", j), "mask-cell");
    }
    if (empty) {
      canvas.rect(mx, my + i * cell, s.nk * cell, cell, "none", color::bad, 2,
                  "fully masked row: O = 0, LSE = -inf", "empty-row");
      canvas.line(mx, my + (i + 0.5) * cell, mx + s.nk * cell, my + (i + 0.5) * cell, color::bad, 1.2, "4 3");
    }
  }
  // Tile boundaries.
  for (int i = c.block_q; i < s.nq; i += c.block_q)
    canvas.line(mx, my + i * cell, mx + s.nk * cell, my + i * cell, color::tile, 2, "", "tile-edge");
  for (int j = c.block_k; j < s.nk; j += c.block_k)
    canvas.line(mx + j * cell, my, mx + j * cell, my + s.nq * cell, color::tile, 2, "", "tile-edge");
  canvas.rect(mx, my, s.nk * cell, s.nq * cell, "none", color::tile, 2);
  // The error panels to the right of the mask and of its label.
  double right = std::max(mx + s.nk * cell + 30, mx + 7.0 * static_cast<double>(mask_label.size()) + 16);
  // The error of the outputs that share the query axis.
  auto query_side = [&](const Scored& t, int cols, const std::string& label) {
    canvas.text(right, my - 22, label, 12, "start", color::ink, "", true);
    const double label_w = 7.0 * static_cast<double>(label.size()) + 16;
    for (int i = 0; i < s.nq; ++i)
      for (int d = 0; d < cols; ++d) {
        const size_t k =
            cols == 1 ? (size_t(v.b) * s.heads_q + v.h) * s.nq + i : q_at(s, v.b, v.h, i) + size_t(d);
        const double r = t.ratio(k);
        canvas.rect(
            right + d * cell, my + i * cell, cell, cell, svg::error_color(r), color::grid, cell > 6 ? 0.6 : 0,
            fmt::format("{}[{}{}]: target {:.6g}, reference {:.6g}, |error|/bound {:.3g}", t.name, i,
                        cols == 1 ? "" : fmt::format(", {}", d), (*t.target)[k], (*t.reference)[k], r),
            "err-cell");
      }
    canvas.rect(right, my, cols * cell, s.nq * cell, "none", color::tile, 1);
    right += std::max(cols * cell + 26, label_w);
  };
  query_side(v.dq ? *v.dq : v.o, s.dim, v.dq ? "dQ per (i, d)" : "O per (i, d)");
  if (!v.dq) query_side(v.lse, 1, "LSE");
  double bottom = my + s.nq * cell + 16;
  // dK and dV under their keys: rows = d, columns = keys of kv head h / g.
  if (v.dk)
    for (const Scored* t : {&*v.dk, &*v.dv}) {
      canvas.text(mx, bottom + 14, fmt::format("{} per (d, key j), kv head {}", t->name, v.h / s.group()), 12,
                  "start", color::ink, "", true);
      bottom += 22;
      for (int d = 0; d < s.dim; ++d)
        for (int j = 0; j < s.nk; ++j) {
          const size_t k = kv_at(s, v.b, v.h / s.group(), j) + size_t(d);
          const double r = t->ratio(k);
          canvas.rect(mx + j * cell, bottom + d * cell, cell, cell, svg::error_color(r), color::grid,
                      cell > 6 ? 0.6 : 0,
                      fmt::format("{}[key {}, {}]: target {:.6g}, reference {:.6g}, |error|/bound {:.3g}",
                                  t->name, j, d, (*t->target)[k], (*t->reference)[k], r),
                      "err-cell");
        }
      canvas.rect(mx, bottom, s.nk * cell, s.dim * cell, "none", color::tile, 1);
      bottom += s.dim * cell + 8;
    }
  // Legend.
  const double ly = bottom + 24;
  double lx = canvas.swatch(8, ly, color::visible, "key visible");
  lx = canvas.swatch(lx, ly, color::masked, "masked");
  lx = canvas.swatch(lx, ly, "none", "fully masked row", false, color::bad);
  canvas.line(lx, ly - 4, lx + 26, ly - 4, color::tile, 2);
  canvas.text(lx + 32, ly, "tile boundary", 11);
  canvas.error_legend(8, ly + 30, 220);
  canvas.fit(std::max(right, 420.0), ly + 66);
  return canvas.str();
}

// Both families: the forward's O and LSE, and the backward's gradients.
template <typename R>
Drawing draw(const Case& c, const R* target, const R* reference, const DrawContext& ctx) {
  constexpr bool backward = std::is_same_v<R, BwdResult>;
  if (!target || !reference) return {"", "", "the target or the reference gave no outputs to compare"};
  const double k = ctx.param("k", 2);
  const Scales f = floors(c, backward, ctx.param("floor_ulps", 8));
  R naive;
  if constexpr (backward)
    naive = naive_backward(c);
  else
    naive = naive_forward(c);
  View v{c, 0, 0, scored("O", target->o, reference->o, naive.o, k, f.of(&ErrorScales::o)),
         scored("LSE", target->lse, reference->lse, naive.lse, k, f.of(&ErrorScales::lse))};
  if constexpr (backward) {
    v.dq = scored("dQ", target->dq, reference->dq, naive.dq, k, f.of(&ErrorScales::dq));
    v.dk = scored("dK", target->dk, reference->dk, naive.dk, k, f.of(&ErrorScales::dk));
    v.dv = scored("dV", target->dv, reference->dv, naive.dv, k, f.of(&ErrorScales::dv));
  }
  pick_head(v);
  return {svg_map(v, backward ? "attention-bwd" : "attention-fwd"), text_map(v), ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(FwdTraits, draw<FwdResult>);
KPROP_REGISTER_DRAWING(BwdTraits, draw<BwdResult>);

}  // namespace kprop::attention
