// The attention families' shrinker: sub-cases along every axis (also behind
// `permuted`), then simplifications, each lowering the case's complexity.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <tuple>

#include "properties/attention/family_parts.h"

namespace kprop::attention {
namespace {

// Shrinking order: f64 < f32 < bf16 < f16 (fewer roundings first).
int dtype_rank(DType d) {
  return d == DType::f64 ? 0 : d == DType::f32 ? 1 : d == DType::bf16 ? 2 : 3;
}

// ------------------------------------------------------------ shrinking
// A sub-case: the kept indices along every axis (members are positions
// within a GQA group, so the head map survives).
struct Selection {
  std::vector<int> batches, kv_heads, members, rows, cols, dims;
};

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

Selection everything(const Case& c) {
  const Shape& s = c.shape;
  return {iota(s.batch), iota(s.heads_kv), iota(s.group()), iota(s.nq), iota(s.nk), iota(s.dim)};
}

Case select(const Case& c, const Selection& sel) {
  const Shape& s = c.shape;
  Case out = c;
  Shape& t = out.shape;
  t.batch = int(sel.batches.size());
  t.heads_kv = int(sel.kv_heads.size());
  t.heads_q = t.heads_kv * int(sel.members.size());
  t.nq = int(sel.rows.size());
  t.nk = int(sel.cols.size());
  t.dim = int(sel.dims.size());
  out.q.assign(t.q_size(), 0);
  out.d_out.assign(c.d_out.empty() ? 0 : t.q_size(), 0);
  out.k.assign(t.kv_size(), 0);
  out.v.assign(t.kv_size(), 0);
  for (int b = 0; b < t.batch; ++b)
    for (int kvh = 0; kvh < t.heads_kv; ++kvh) {
      const int ob = sel.batches[size_t(b)], okvh = sel.kv_heads[size_t(kvh)];
      for (int r = 0; r < int(sel.members.size()); ++r) {
        const int h = kvh * int(sel.members.size()) + r, oh = okvh * s.group() + sel.members[size_t(r)];
        for (int i = 0; i < t.nq; ++i)
          for (int d = 0; d < t.dim; ++d) {
            const size_t from = q_at(s, ob, oh, sel.rows[size_t(i)]) + sel.dims[size_t(d)];
            out.q[q_at(t, b, h, i) + d] = c.q[from];
            if (!c.d_out.empty()) out.d_out[q_at(t, b, h, i) + d] = c.d_out[from];
          }
      }
      for (int j = 0; j < t.nk; ++j)
        for (int d = 0; d < t.dim; ++d) {
          const size_t from = kv_at(s, ob, okvh, sel.cols[size_t(j)]) + sel.dims[size_t(d)];
          out.k[kv_at(t, b, kvh, j) + d] = c.k[from];
          out.v[kv_at(t, b, kvh, j) + d] = c.v[from];
        }
    }
  if (c.mask == MaskKind::key_padding) {
    out.key_lengths.clear();
    for (int ob : sel.batches) {
      int len = 0;
      for (int j : sel.cols) len += j < c.key_lengths[size_t(ob)];
      out.key_lengths.push_back(len);
    }
  }
  if (c.mask == MaskKind::boolean) {
    out.allowed.assign(size_t(t.batch) * t.nq * t.nk, 0);
    for (int b = 0; b < t.batch; ++b)
      for (int i = 0; i < t.nq; ++i)
        for (int j = 0; j < t.nk; ++j)
          out.allowed[(size_t(b) * t.nq + i) * t.nk + j] =
              c.allowed[(size_t(sel.batches[size_t(b)]) * s.nq + sel.rows[size_t(i)]) * s.nk +
                        sel.cols[size_t(j)]];
  }
  return out;
}

// Boldest first: keep one element, keep either half, drop one element.
std::vector<std::vector<int>> reductions(int n, bool singles) {
  std::vector<std::vector<int>> out;
  if (n <= 1) return out;
  if (singles)
    for (int x = 0; x < n; ++x) out.push_back({x});
  std::vector<int> all = iota(n);
  if (n > 2) {
    out.emplace_back(all.begin(), all.begin() + n / 2);
    out.emplace_back(all.begin() + n / 2, all.end());
  }
  if (n <= 128)
    for (int x = 0; x < n; ++x) {
      std::vector<int> v = all;
      v.erase(v.begin() + x);
      out.push_back(std::move(v));
    }
  return out;
}

// Smaller tiles for an axis cut from n to m elements (tile b): the same
// number of tiles, ceil(m / tiles), and the same last tile, b - (n - m). A
// failure that needs several tiles, or a partial last one, keeps them as the
// axis shrinks; with the tile kept, a cut axis soon fits in one tile, and
// the shrink stopped at e.g. Nk 4 in tiles of 3 where Nk 2 in tiles of 1
// fails as well. Only tiles below min(b, m) (what the cut alone gives).
std::vector<int> smaller_tiles(int b, int n, int m) {
  b = std::min(b, n);
  const int tiles = (n + b - 1) / b;
  std::vector<int> out;
  for (int x : {(m + tiles - 1) / tiles, b - (n - m)})
    if (x >= 1 && x < std::min(b, m) && std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return out;
}

using Edit = std::function<void(Case&)>;

// What every accepted shrink step must lower (lexicographically), so the
// greedy shrinker never cycles between edits: size, then masking, dtype,
// custom scale, tile count, non-integer values, total magnitude.
auto complexity(const Case& c) {
  const Shape& s = c.shape;
  int64_t masked = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.nq; ++i)
      for (int j = 0; j < s.nk; ++j) masked += !visible(c, b, i, j);
  int64_t fractional = 0;
  double magnitude = 0;
  for (const auto* t : {&c.q, &c.k, &c.v, &c.d_out})
    for (double x : *t) fractional += x != std::round(x), magnitude += std::fabs(x);
  const int64_t tiles = int64_t((s.nq + c.block_q - 1) / c.block_q) * ((s.nk + c.block_k - 1) / c.block_k);
  return std::tuple{int64_t(s.batch) * s.heads_q * s.nq * s.nk * s.dim,
                    int(c.mask),
                    masked,
                    dtype_rank(c.dtype),
                    int(c.scale != 0),
                    tiles,
                    c.block_q + c.block_k,
                    fractional,
                    magnitude};
}

std::vector<Edit> simplifications(const Case& c) {
  const Shape& s = c.shape;
  std::vector<Edit> edits;
  // Tiles: fewer of them (one tile), then canonical (no larger than N).
  edits.push_back([](Case& x) { x.block_q = x.shape.nq; });
  edits.push_back([](Case& x) { x.block_k = x.shape.nk; });
  edits.push_back([](Case& x) {
    x.block_q = std::min(x.block_q, x.shape.nq);
    x.block_k = std::min(x.block_k, x.shape.nk);
  });
  // Wider dtypes first (every value of a narrower one is exact in them).
  edits.push_back([](Case& x) { x.dtype = DType::f64; });
  if (is_half(c.dtype)) edits.push_back([](Case& x) { x.dtype = DType::f32; });
  edits.push_back([](Case& x) { x.scale = 0; });
  // Masks: none, then one batch or row at a time fully visible.
  edits.push_back([](Case& x) {
    x.mask = MaskKind::none;
    x.key_lengths.clear();
    x.allowed.clear();
  });
  if (c.mask == MaskKind::key_padding)
    for (int b = 0; b < s.batch; ++b)
      edits.push_back([b](Case& x) { x.key_lengths[size_t(b)] = x.shape.nk; });
  if (c.mask == MaskKind::boolean && size_t(s.batch) * s.nq <= 256)
    for (size_t row = 0; row < size_t(s.batch) * s.nq; ++row)
      edits.push_back([row](Case& x) {
        std::fill(x.allowed.begin() + long(row * x.shape.nk),
                  x.allowed.begin() + long((row + 1) * x.shape.nk), 1);
      });
  // Values: whole tensors zeroed, rounded to integers, fractions below 1 made
  // ±1; single elements of small tensors zeroed, rounded or made ±1; then,
  // last, whole tensors halved. The ±1 edit ends a failure that needs a
  // value nonzero but no particular one: rounding makes it 0 (no failure).
  // Halving comes last because it is accepted whenever the failure survives
  // scaling: ahead of the single-element edits it walked two values that
  // need only differ down to the smallest subnormal, 1,076 accepted steps
  // (an integer is simpler than any fraction: complexity()).
  const auto unit = [](double& y) {
    if (y != std::round(y) && std::fabs(y) < 1) y = std::copysign(1.0, y);
  };
  const auto tensors = {&Case::q, &Case::k, &Case::v, &Case::d_out};
  for (auto member : tensors) {
    if ((c.*member).empty()) continue;
    edits.push_back([member](Case& x) { std::fill((x.*member).begin(), (x.*member).end(), 0.0); });
    edits.push_back([member](Case& x) {
      for (double& y : x.*member) y = std::round(y);
    });
    edits.push_back([member, unit](Case& x) {
      for (double& y : x.*member) unit(y);
    });
  }
  for (auto member : tensors)
    if ((c.*member).size() <= 48)
      for (size_t i = 0; i < (c.*member).size(); ++i) {
        edits.push_back([member, i](Case& x) { (x.*member)[i] = 0; });
        edits.push_back([member, i](Case& x) { (x.*member)[i] = std::round((x.*member)[i]); });
        edits.push_back([member, i, unit](Case& x) { unit((x.*member)[i]); });
      }
  for (auto member : tensors)
    if (!(c.*member).empty())
      edits.push_back([member](Case& x) {
        for (double& y : x.*member) y = round_to(x.dtype, y / 2);
      });
  return edits;
}

}  // namespace

template <bool B>
rc::Seq<Case> CaseTraits<B>::shrinks(const Case& c, const Values& domain) {
  const Selection all = everything(c);
  // A sub-case, and its tiles (0: the case's own).
  struct Sub {
    Selection sel;
    int block_q = 0, block_k = 0;
  };
  std::vector<Sub> subs;
  auto along = [&](std::vector<int> Selection::*axis, int n, bool singles) {
    for (auto& kept : reductions(n, singles)) {
      Selection s = all;
      s.*axis = std::move(kept);
      subs.push_back({std::move(s)});
    }
  };
  // Queries or keys cut, each right before the same cut with smaller tiles.
  const int nq = c.shape.nq, nk = c.shape.nk;
  auto cut = [&](Selection s) {
    const int mq = int(s.rows.size()), mk = int(s.cols.size());
    const std::vector<int> bq = smaller_tiles(c.block_q, nq, mq), bk = smaller_tiles(c.block_k, nk, mk);
    subs.push_back({s});
    for (int b : bq) subs.push_back({s, b, 0});
    for (int b : bk) subs.push_back({s, 0, b});
    if (!bq.empty() && !bk.empty()) subs.push_back({s, bq[0], bk[0]});
  };
  along(&Selection::batches, c.shape.batch, true);
  along(&Selection::kv_heads, c.shape.heads_kv, true);
  along(&Selection::members, c.shape.group(), true);
  // Queries and keys together first: where the domain ties Nk to Nq
  // (same_length_rate = 1) only these keep the case inside it.
  if (nq == nk)
    for (auto& kept : reductions(nq, false)) {
      Selection s = all;
      s.rows = kept;
      s.cols = std::move(kept);
      cut(std::move(s));
    }
  for (auto& kept : reductions(nq, false)) {
    Selection s = all;
    s.rows = std::move(kept);
    cut(std::move(s));
  }
  for (auto& kept : reductions(nk, false)) {
    Selection s = all;
    s.cols = std::move(kept);
    cut(std::move(s));
  }
  along(&Selection::dims, c.shape.dim, true);
  auto structural = rc::seq::map(rc::seq::fromContainer(std::move(subs)), [c](const Sub& s) {
    Case out = select(c, s.sel);
    if (s.block_q) out.block_q = s.block_q;
    if (s.block_k) out.block_k = s.block_k;
    return out;
  });
  std::vector<Edit> edits = simplifications(c);
  // One tile each, as close as the domain's tile ranges allow.
  const IntRange bq = domain.int_range("block_q"), bk = domain.int_range("block_k");
  edits.insert(edits.begin(), [bq, bk](Case& x) {
    x.block_q = int(bq.nearest(x.shape.nq));
    x.block_k = int(bk.nearest(x.shape.nk));
  });
  auto simpler = rc::seq::map(rc::seq::fromContainer(std::move(edits)), [c](const Edit& edit) {
    Case s = c;
    edit(s);
    return s;
  });
  return rc::seq::filter(rc::seq::concat(std::move(structural), std::move(simpler)),
                         [c, before = complexity(c)](const Case& s) {
                           return validate(s, B).empty() && complexity(s) < before;
                         });
}

Case permuted(const Case& c, const std::vector<int>& key_perm, const std::vector<int>& query_perm) {
  Selection sel = everything(c);
  sel.rows = query_perm;
  sel.cols = key_perm;
  return select(c, sel);
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template rc::Seq<Case> CaseTraits<false>::shrinks(const Case&, const Values&);
template rc::Seq<Case> CaseTraits<true>::shrinks(const Case&, const Values&);

}  // namespace kprop::attention
