// The attention families' shared names and stats; the rest of CaseTraits is
// in schema.cpp (domain), build.cpp (builder), shrink.cpp (shrinker) and
// codec.cpp (YAML).
#include <fmt/format.h>

#include <stdexcept>

#include "properties/attention/family_parts.h"

namespace kprop::attention {

DType dtype_named(const std::string& name) {
  DType d = DType::f64;
  if (parse_dtype(name, d)) return d;
  throw std::logic_error("attention: unknown dtype " + name);
}

template <bool B>
CaseStats CaseTraits<B>::stats(const Case& c) {
  const Shape& s = c.shape;
  return CaseStats{int64_t(s.batch) * s.heads_q * s.nq * s.nk * s.dim, shape_text(c)}
      .dim("Nq", s.nq)
      .dim("Nk", s.nk)
      .dim("D", s.dim)
      .dim("Hq", s.heads_q)
      .dim("GQA group", s.group())
      .dim("batch", s.batch)
      .kind("mask", mask_name(c.mask))
      .kind("dtype", dtype_name(c.dtype));
}

std::string shape_text(const Case& c) {
  const Shape& s = c.shape;
  std::string mask = mask_name(c.mask);
  if (c.mask == MaskKind::key_padding) mask += fmt::format(" {}", fmt::join(c.key_lengths, ","));
  return fmt::format("B{} Hq{}/Hkv{} Nq{} Nk{} D{} tiles {}x{} {} {}{}", s.batch, s.heads_q, s.heads_kv, s.nq,
                     s.nk, s.dim, c.block_q, c.block_k, dtype_name(c.dtype), mask,
                     c.scale != 0 ? fmt::format(" scale {}", c.scale) : "");
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template CaseStats CaseTraits<false>::stats(const Case&);
template CaseStats CaseTraits<true>::stats(const Case&);

}  // namespace kprop::attention
