// The op family: index tensors and masks kept valid (normalize_structured,
// check_input, check_structured) and case surgery along a dim (gather,
// keep_indices).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "properties/op/family_parts.h"

namespace kprop::op {

std::vector<double> gather(const std::vector<double>& data, const std::vector<int64_t>& extents,
                           const std::vector<std::string>& shape, const std::string& dim,
                           const std::vector<int64_t>& keep) {
  std::vector<double> cur = data;
  std::vector<int64_t> ext = extents;
  for (size_t ax = 0; ax < shape.size(); ++ax) {
    if (shape[ax] != dim) continue;
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < ax; ++k) outer *= ext[k];
    for (size_t k = ax + 1; k < ext.size(); ++k) inner *= ext[k];
    const int64_t n = ext[ax], m = static_cast<int64_t>(keep.size());
    std::vector<double> next(static_cast<size_t>(outer * m * inner));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < m; ++j)
        std::copy_n(cur.begin() + (o * n + keep[static_cast<size_t>(j)]) * inner, inner,
                    next.begin() + (o * m + j) * inner);
    cur = std::move(next);
    ext[ax] = m;
  }
  return cur;
}

std::vector<double> causal_mask(const std::vector<int64_t>& ext, bool bottom_right) {
  const int64_t rows = ext[ext.size() - 2], cols = ext.back();
  std::vector<double> m(static_cast<size_t>(count(ext)));
  const int64_t shift = bottom_right ? cols - rows : 0;
  for (size_t k = 0; k < m.size(); ++k) {
    const int64_t col = static_cast<int64_t>(k) % cols, row = (static_cast<int64_t>(k) / cols) % rows;
    m[k] = col <= row + shift ? 1 : 0;
  }
  return m;
}

int64_t padding_min(const ValueSpec& v, int64_t n) {
  return std::min(static_cast<int64_t>(v.a), n);
}

int64_t ids_bound(const ValueSpec& v, const std::vector<int64_t>& dims) {
  return v.bound_dim >= 0 ? dims[static_cast<size_t>(v.bound_dim)] : static_cast<int64_t>(v.a);
}

namespace {

const ValueSpec* structured_kind(const Case& c, size_t i) {
  if (c.kinds.size() <= i || c.kinds[i] < 0) return nullptr;
  return &c.decl->inputs[i].values[static_cast<size_t>(c.kinds[i])];
}

}  // namespace

void normalize_structured(Case& c) {
  const Decl& d = *c.decl;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const ValueSpec* v = structured_kind(c, i);
    if (!v) continue;
    auto& x = c.inputs[i];
    const auto ext = d.extents(d.inputs[i].shape, c.dims);
    switch (v->kind) {
      case ValueKind::permutation:  // each line re-ranked: a permutation of [0, n)
        for_lines(ext, static_cast<size_t>(v->axis), [&](int64_t, int64_t base, int64_t stride, int64_t n) {
          std::vector<std::pair<double, int64_t>> line;
          for (int64_t j = 0; j < n; ++j) line.push_back({x[static_cast<size_t>(base + j * stride)], j});
          std::sort(line.begin(), line.end());
          for (int64_t r = 0; r < n; ++r)
            x[static_cast<size_t>(base + line[static_cast<size_t>(r)].second * stride)] =
                static_cast<double>(r);
        });
        break;
      case ValueKind::ids: {  // a sentinel (specials) stays one
        const double bound = static_cast<double>(ids_bound(*v, c.dims));
        for (double& e : x)
          if (!(e >= 0 && e < bound) && !d.inputs[i].specials.sentinel(e)) e = 0;
        break;
      }
      case ValueKind::causal:
        x = causal_mask(ext, v->bottom_right);
        break;
      case ValueKind::padding:  // the valid count of each row as a prefix, at least the minimum
        if (!ext.empty())
          for_lines(ext, ext.size() - 1, [&](int64_t, int64_t base, int64_t stride, int64_t n) {
            int64_t len = 0;
            for (int64_t j = 0; j < n; ++j) len += x[static_cast<size_t>(base + j * stride)] != 0;
            len = std::max(len, padding_min(*v, n));
            for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(base + j * stride)] = j < len ? 1 : 0;
          });
        break;
      case ValueKind::bernoulli:
        for (double& e : x) e = e != 0 ? 1 : 0;
        break;
      default:
        break;
    }
  }
}

std::string check_input(const Case& c, size_t i) {
  const Decl& d = *c.decl;
  {
    const auto& in = d.inputs[i];
    const auto& x = c.inputs[i];
    if (!is_float(c.dtypes[i])) {
      if (x.size() != static_cast<size_t>(count(d.extents(in.shape, c.dims))))
        return fmt::format("input {} has {} values, not {}", in.name, x.size(), expr::shape_text(in.shape));
      const auto [lo, hi] = int_range(c.dtypes[i]);
      for (double e : x)
        if (e != std::floor(e) || e < lo || e > hi)
          return fmt::format("input {} ({}) holds {}, not a value of its dtype", in.name,
                             dtype_name(c.dtypes[i]), e);
    }
    const ValueSpec* v = structured_kind(c, i);
    if (!v) return "";
    const auto ext = d.extents(in.shape, c.dims);
    std::string why;
    switch (v->kind) {
      case ValueKind::ids: {
        const int64_t bound = ids_bound(*v, c.dims);
        for (size_t k = 0; k < x.size() && why.empty(); ++k)
          if ((x[k] < 0 || x[k] >= static_cast<double>(bound)) && !in.specials.sentinel(x[k]))
            why = fmt::format("input {}: id {} at {} is outside [0, {}){}", in.name, x[k], k, bound,
                              in.specials.sentinels.empty() ? "" : " and no special value");
        break;
      }
      case ValueKind::integer:
        for (size_t k = 0; k < x.size() && why.empty(); ++k)
          if ((x[k] < v->a || x[k] > v->b) && !in.specials.sentinel(x[k]))
            why = fmt::format("input {}: {} at {} is outside [{}, {}]{}", in.name, x[k], k, v->a, v->b,
                              in.specials.sentinels.empty() ? "" : " and no special value");
        break;
      case ValueKind::permutation:
        for_lines(
            ext, static_cast<size_t>(v->axis), [&](int64_t line, int64_t base, int64_t stride, int64_t n) {
              std::vector<bool> seen(static_cast<size_t>(n));
              for (int64_t j = 0; j < n && why.empty(); ++j) {
                const double e = x[static_cast<size_t>(base + j * stride)];
                if (e < 0 || e >= static_cast<double>(n) || seen[static_cast<size_t>(e)])
                  why = fmt::format("input {}: line {} is not a permutation of [0, {})", in.name, line, n);
                else
                  seen[static_cast<size_t>(e)] = true;
              }
            });
        break;
      case ValueKind::causal:
        if (x != causal_mask(ext, v->bottom_right))
          why = fmt::format("input {} is not the causal mask", in.name);
        break;
      case ValueKind::padding:
        for_lines(ext, ext.size() - 1, [&](int64_t line, int64_t base, int64_t stride, int64_t n) {
          int64_t len = 0;
          while (len < n && x[static_cast<size_t>(base + len * stride)] != 0) ++len;
          for (int64_t j = len; j < n && why.empty(); ++j)
            if (x[static_cast<size_t>(base + j * stride)] != 0)
              why = fmt::format("input {}: row {} is not a valid prefix", in.name, line);
          if (why.empty() && len < padding_min(*v, n))
            why = fmt::format("input {}: row {} has {} valid elements, fewer than {}", in.name, line, len,
                              padding_min(*v, n));
        });
        break;
      default:
        break;
    }
    return why;
  }
}

std::string check_structured(const Case& c) {
  for (size_t i = 0; i < c.decl->inputs.size(); ++i)
    if (auto why = check_input(c, i); !why.empty()) return why;
  return "";
}

Case keep_indices(const Case& c, size_t dim, const std::vector<int64_t>& keep, std::string* changed) {
  const Decl& d = *c.decl;
  Case s = c;
  std::string dropped;  // an id pointing at an index not kept
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    s.inputs[i] =
        gather(c.inputs[i], d.extents(d.inputs[i].shape, c.dims), d.inputs[i].shape, d.dims[dim].name, keep);
    // ids into the cut dim follow their rows (kept index keep[p] -> p;
    // dropped -> 0); a sentinel (specials, never an id) stays as it is
    const ValueSpec* v = structured_kind(c, i);
    if (v && v->kind == ValueKind::ids && v->bound_dim == static_cast<int>(dim)) {
      std::vector<int64_t> where(static_cast<size_t>(c.dims[dim]), -1);
      for (size_t p = keep.size(); p-- > 0;) where[static_cast<size_t>(keep[p])] = static_cast<int64_t>(p);
      for (double& e : s.inputs[i]) {
        if (d.inputs[i].specials.sentinel(e)) continue;
        const int64_t to =
            e >= 0 && e < static_cast<double>(where.size()) ? where[static_cast<size_t>(e)] : -1;
        if (to < 0 && dropped.empty())
          dropped = fmt::format("input {}: id {} points at an index of {} not kept", d.inputs[i].name, e,
                                d.dims[dim].name);
        e = static_cast<double>(std::max<int64_t>(to, 0));
      }
    }
  }
  s.dims[dim] = static_cast<int64_t>(keep.size());
  // What the gather alone made of the masks and index tensors, before they
  // are made valid again: "" when the case was carried over unchanged.
  if (changed) *changed = dropped.empty() ? check_structured(s) : dropped;
  normalize_structured(s);
  return s;
}

}  // namespace kprop::op
