// kvcache drawing (kprop/drawing.h): the target's block table — each
// sequence's logical blocks and the physical block each maps to, with the
// pool below — physical blocks mapped by pages of more than one sequence
// (reused; stale when a sequence still reads it: the error row shows which)
// marked; and each sequence's per-token output error
// against the reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kprop/drawing.h"
#include "properties/kvcache/family.h"

namespace kprop::kvcache {
namespace {

namespace color = svg::color;

Drawing draw(const Case& c, const Result* target, const Result* reference, const DrawContext&) {
  if (!target) return {"", "", "the target gave no result to draw"};
  const auto& tables = target->block_tables;
  const double cell = 30;
  svg::Canvas canvas(420, 100, "kprop-drawing kvcache", "block table");
  canvas.text(8, 16,
              fmt::format("{} sequence(s), page {} tokens, chunk {}, pool {} blocks, {} allocated, {} reused",
                          c.seqs.size(), c.page_size, c.chunk, c.pool.size(), target->blocks_allocated,
                          target->blocks_reused),
              13, "start", color::ink, "", true);
  double y = 34;
  // Who maps each physical block.
  std::map<int, int> users;
  for (const auto& t : tables)
    for (int b : t) ++users[b];
  std::map<int, std::pair<double, double>> logical_at;  // a physical block -> where a page of it was drawn
  if (tables.empty()) {
    canvas.text(8, y + 14, "the target does not page (no block table): the outputs only", 11, "start",
                color::neutral);
    y += 26;
  } else {
    canvas.text(8, y + 12, "block table (logical page → physical block)", 12, "start", color::ink, "", true);
    y += 22;
    for (size_t s = 0; s < tables.size(); ++s) {
      const Sequence& q = c.seqs[s];
      canvas.text(8, y + 19, fmt::format("seq {} ({}+{} @{})", s, q.prompt, q.decode, q.arrive), 11, "start");
      for (size_t l = 0; l < tables[s].size(); ++l) {
        const int b = tables[s][l];
        const bool shared = users[b] > 1;
        const double x = 130 + static_cast<double>(l) * (cell + 4);
        canvas.rect(
            x, y, cell, cell, shared ? color::bad : color::visible, color::tile, 1,
            fmt::format("seq {} page {} → physical block {}{}", s, l, b,
                        shared ? fmt::format(" (reused: mapped by {} pages of the run)", users[b]) : ""),
            shared ? "page stale" : "page");
        canvas.text(x + cell / 2, y + 19, std::to_string(b), 11, "middle", shared ? "#ffffff" : color::ink,
                    "", true);
        logical_at[b] = {x + cell / 2, y + cell};
        canvas.fit(x + cell + 10, 0);
      }
      y += cell + 8;
    }
    // The pool, in physical order, with a line from each page to its block.
    y += 26;
    canvas.text(8, y + 19, "physical pool", 11, "start");
    const int n = static_cast<int>(c.pool.size());
    for (int b = 0; b < n; ++b) {
      const double x = 130 + b * (cell + 4);
      const int u = users.count(b) ? users[b] : 0;
      if (logical_at.count(b))
        canvas.line(logical_at[b].first, logical_at[b].second, x + cell / 2, y,
                    u > 1 ? color::bad : color::neutral, u > 1 ? 2 : 1);
      canvas.rect(x, y, cell, cell,
                  u > 1    ? color::bad
                  : u == 1 ? color::visible
                           : color::masked,
                  color::tile, 1, fmt::format("physical block {}: mapped by {} page(s)", b, u), "block");
      canvas.text(x + cell / 2, y + 19, std::to_string(b), 11, "middle", u > 1 ? "#ffffff" : color::ink);
      canvas.fit(x + cell + 10, 0);
    }
    y += cell + 12;
  }
  // Per sequence, per token: max |error| over heads and dims / the largest.
  if (reference && reference->out.size() == target->out.size()) {
    double largest = 0;
    for (size_t s = 0; s < target->out.size(); ++s)
      for (size_t k = 0; k < std::min(target->out[s].size(), reference->out[s].size()); ++k)
        largest = std::max(largest, std::fabs(target->out[s][k] - reference->out[s][k]));
    canvas.text(8, y + 14, fmt::format("output error per token, relative to the largest ({:.3g})", largest),
                12, "start", color::ink, "", true);
    y += 22;
    const size_t token = static_cast<size_t>(c.q_heads() * c.head_dim);
    for (size_t s = 0; s < target->out.size(); ++s) {
      canvas.text(8, y + 11, fmt::format("seq {}", s), 11, "start");
      const size_t tokens =
          std::min(target->out[s].size(), reference->out[s].size()) / std::max<size_t>(token, 1);
      for (size_t t = 0; t < tokens; ++t) {
        double e = 0;
        bool finite = true;
        for (size_t k = t * token; k < (t + 1) * token; ++k) {
          finite = finite && std::isfinite(target->out[s][k]);
          e = std::max(e, std::fabs(target->out[s][k] - reference->out[s][k]));
        }
        const double ratio = !finite ? NAN : largest > 0 ? e / largest : 0;
        canvas.rect(130 + static_cast<double>(t) * 14, y, 13, 13, svg::error_color(ratio), color::grid, 0.5,
                    fmt::format("seq {} token {}: max |error| {:.3g}", s, t, e), "token");
      }
      canvas.fit(130 + static_cast<double>(tokens) * 14 + 10, 0);
      y += 18;
    }
  }
  double lx = canvas.swatch(8, y + 22, color::visible, "mapped by one page");
  lx = canvas.swatch(lx, y + 22, color::bad, "reused: mapped by more than one page (stale if still read)");
  canvas.swatch(lx, y + 22, color::masked, "free");
  canvas.fit(0, y + 32);
  return {canvas.str(), "", ""};
}

}  // namespace

KPROP_REGISTER_DRAWING(Traits, draw);

}  // namespace kprop::kvcache
