// The attention families' YAML codec.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "kprop/case_yaml.h"
#include "kprop/errors.h"
#include "kprop/rng.h"
#include "properties/attention/family_parts.h"

namespace kprop::attention {

// ------------------------------------------------------------ YAML
namespace {

YAML::Node rows_node(const std::vector<double>& t, int dim, DType dtype) {
  YAML::Node rows(YAML::NodeType::Sequence);
  for (size_t r = 0; r < t.size() / size_t(dim); ++r)
    rows.push_back(case_yaml::text_list(size_t(dim),
                                        [&](size_t d) { return value_text(dtype, t[r * size_t(dim) + d]); }));
  return rows;
}

// Each decimal rounded once to the dtype (parse_value); YAML's other
// spellings of a number (.inf, .nan) as yaml-cpp reads them.
std::vector<double> read_rows(const YAML::Node& n, const char* key, int dim, DType dtype) {
  const YAML::Node rows = n[key];
  if (!rows || !rows.IsSequence())
    case_yaml::fail(rows ? rows : n, std::string("'") + key + "' must be a list of rows");
  std::vector<double> out;
  for (const auto& row : rows) {
    if (!case_yaml::is_list(row) || int(case_yaml::list_size(row)) != dim)
      case_yaml::fail(row, fmt::format("each row of '{}' must list dim = {} numbers", key, dim));
    case_yaml::for_each_item(row, [&](const case_yaml::Item& x) {
      const std::optional<double> value = x.scalar ? case_yaml::yaml_real(x.text) : std::nullopt;
      if (!value) x.fail(std::string("'") + key + "' has a non-number");
      const std::string text(x.text);
      char* end = nullptr;
      const double parsed = parse_value(dtype, text.c_str(), &end);
      out.push_back(std::isfinite(*value) && *end == '\0' ? parsed : round_to(dtype, *value));
    });
  }
  return out;
}

}  // namespace

// What to_yaml keeps (key_lengths, allowed and d_out only where it does),
// hashed value by value (rng::ContentHash): a transform's randomness,
// without building the YAML tree (its number texts were most of a run of
// the expression relations on small cases).
template <bool B>
uint64_t CaseTraits<B>::content_hash(const Case& c) {
  const Shape& s = c.shape;
  rng::ContentHash h(0x6174u);  // "at"
  for (const int x : {s.batch, s.heads_q, s.heads_kv, s.nq, s.nk, s.dim, c.block_q, c.block_k})
    h.word(static_cast<uint64_t>(x));
  // A scale of 0 (1/√D) is not written, so -0 reads back as 0.
  h.word(static_cast<uint64_t>(c.dtype))
      .real(c.scale == 0 ? 0.0 : c.scale)
      .word(static_cast<uint64_t>(c.mask));
  if (c.mask == MaskKind::key_padding) h.words(c.key_lengths);
  if (c.mask == MaskKind::boolean) {
    h.word(c.allowed.size());
    for (const uint8_t a : c.allowed) h.word(a != 0);
  }
  const auto kept = [&c](double v) { return round_to(c.dtype, v); };  // as value_text writes it
  h.reals(c.q, kept).reals(c.k, kept).reals(c.v, kept);
  if (B) h.reals(c.d_out, kept);
  return h.value();
}

template <bool B>
YAML::Node CaseTraits<B>::to_yaml(const Case& c) {
  const Shape& s = c.shape;
  YAML::Node n(YAML::NodeType::Map);
  YAML::Node shape(YAML::NodeType::Map);
  shape["batch"] = s.batch;
  shape["heads_q"] = s.heads_q;
  shape["heads_kv"] = s.heads_kv;
  shape["nq"] = s.nq;
  shape["nk"] = s.nk;
  shape["dim"] = s.dim;
  n["shape"] = shape;
  YAML::Node tiles(YAML::NodeType::Map);
  tiles["q"] = c.block_q;
  tiles["k"] = c.block_k;
  n["tiles"] = tiles;
  n["dtype"] = dtype_name(c.dtype);
  if (c.scale != 0) n["scale"] = fmt::format("{}", c.scale);
  n["mask"] = mask_name(c.mask);
  if (c.mask == MaskKind::key_padding) n["key_lengths"] = case_yaml::list(c.key_lengths);
  if (c.mask == MaskKind::boolean) {
    YAML::Node rows(YAML::NodeType::Sequence);
    for (size_t r = 0; r < size_t(s.batch) * s.nq; ++r) {
      std::string row;
      for (int j = 0; j < s.nk; ++j) row += c.allowed[r * s.nk + j] ? '1' : '0';
      rows.push_back(row);
    }
    n["allowed"] = rows;
  }
  n["q"] = rows_node(c.q, s.dim, c.dtype);
  n["k"] = rows_node(c.k, s.dim, c.dtype);
  n["v"] = rows_node(c.v, s.dim, c.dtype);
  if (B) n["d_out"] = rows_node(c.d_out, s.dim, c.dtype);
  return n;
}

template <bool B>
Case CaseTraits<B>::from_yaml(const YAML::Node& n) {
  using case_yaml::read;
  if (B)
    case_yaml::expect_keys(
        n, {"shape", "tiles", "dtype", "scale", "mask", "key_lengths", "allowed", "q", "k", "v", "d_out"},
        "attention case");
  else
    case_yaml::expect_keys(
        n, {"shape", "tiles", "dtype", "scale", "mask", "key_lengths", "allowed", "q", "k", "v"},
        "attention case");
  Case c;
  const YAML::Node shape = n["shape"];
  if (!shape) case_yaml::fail(n, "missing 'shape'");
  case_yaml::expect_keys(shape, {"batch", "heads_q", "heads_kv", "nq", "nk", "dim"}, "shape");
  Shape& s = c.shape;
  s.batch = read<int>(shape, "batch");
  s.heads_q = read<int>(shape, "heads_q");
  s.heads_kv = read<int>(shape, "heads_kv");
  s.nq = read<int>(shape, "nq");
  s.nk = read<int>(shape, "nk");
  s.dim = read<int>(shape, "dim");
  for (int x : {s.batch, s.heads_q, s.heads_kv, s.nq, s.nk, s.dim})
    if (x < 1 || x > 1 << 24) case_yaml::fail(shape, "every dimension must be in [1, 2^24]");
  const YAML::Node tiles = n["tiles"];
  if (!tiles) case_yaml::fail(n, "missing 'tiles'");
  case_yaml::expect_keys(tiles, {"q", "k"}, "tiles");
  c.block_q = read<int>(tiles, "q");
  c.block_k = read<int>(tiles, "k");
  const std::string dtype = read<std::string>(n, "dtype");
  const Choices& dtypes = dtype_choices();
  if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end())
    case_yaml::fail(n["dtype"], "dtype must be one of " + join(dtypes));
  c.dtype = dtype_named(dtype);
  c.scale = case_yaml::read_or<double>(n, "scale", 0.0);
  const std::string mask = read<std::string>(n, "mask");
  const Choices& masks = mask_choices();
  const auto it = std::find(masks.begin(), masks.end(), mask);
  if (it == masks.end()) case_yaml::fail(n["mask"], "mask must be one of none, causal, key_padding, boolean");
  c.mask = static_cast<MaskKind>(it - masks.begin());
  if (n["key_lengths"]) c.key_lengths = case_yaml::read_list<int>(n, "key_lengths");
  if (n["allowed"]) {
    for (const std::string& row : case_yaml::read_list<std::string>(n, "allowed")) {
      if (int(row.size()) != s.nk || row.find_first_not_of("01") != std::string::npos)
        case_yaml::fail(n["allowed"],
                        fmt::format("each row of 'allowed' must be {} characters 0 or 1", s.nk));
      for (char ch : row) c.allowed.push_back(ch == '1');
    }
  }
  c.q = read_rows(n, "q", s.dim, c.dtype);
  c.k = read_rows(n, "k", s.dim, c.dtype);
  c.v = read_rows(n, "v", s.dim, c.dtype);
  if (B) c.d_out = read_rows(n, "d_out", s.dim, c.dtype);
  if (const std::string why = validate(c, B); !why.empty()) case_yaml::fail(n, why);
  return c;
}

// The members defined here, for both families (not the whole class: once
// files share a translation unit, KPROP_UNITY, each member is instantiated once).
template uint64_t CaseTraits<false>::content_hash(const Case&);
template uint64_t CaseTraits<true>::content_hash(const Case&);
template YAML::Node CaseTraits<false>::to_yaml(const Case&);
template Case CaseTraits<false>::from_yaml(const YAML::Node&);
template YAML::Node CaseTraits<true>::to_yaml(const Case&);
template Case CaseTraits<true>::from_yaml(const YAML::Node&);

}  // namespace kprop::attention
