// The softmax_topk family's YAML codec.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

// What to_yaml keeps, hashed value by value (rng::ContentHash): a
// transform's randomness, without building the YAML tree (its number texts
// were most of a run of the expression relations on small cases).
uint64_t Traits::content_hash(const Case& c) {
  rng::ContentHash h(0x736du);  // "sm"
  h.word(static_cast<uint64_t>(c.dtype))
      .word(static_cast<uint64_t>(c.k))
      .word(static_cast<uint64_t>(c.block));
  // A half case's logits as value_text writes them (f32, f64: exact, as from_yaml requires).
  h.word(static_cast<uint64_t>(c.vocab)).reals(c.logits, [&c](double v) { return round_to(c.dtype, v); });
  return h.value();
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["dtype"] = dtype_name(c.dtype);
  n["k"] = c.k;
  n["block"] = c.block;
  YAML::Node rows(YAML::NodeType::Sequence);
  for (int r = 0; r < c.rows(); ++r) {
    const std::vector<double> values(c.logits.begin() + static_cast<long>(r) * c.vocab,
                                     c.logits.begin() + static_cast<long>(r + 1) * c.vocab);
    // A half case's values as the shortest text that reads back (rounded
    // to the dtype) to the value.
    YAML::Node row =
        is_half(c.dtype)
            ? case_yaml::text_list(values.size(), [&](size_t i) { return value_text(c.dtype, values[i]); })
            : case_yaml::real_list(values);
    rows.push_back(row);
  }
  n["logits"] = rows;
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"dtype", "k", "block", "logits"}, "softmax_topk case");
  Case c;
  const std::string dtype = case_yaml::read<std::string>(n, "dtype");
  if (!parse_dtype(dtype, c.dtype)) case_yaml::fail(n["dtype"], "dtype must be f16, bf16, f32 or f64");
  c.k = case_yaml::read<int>(n, "k");
  c.block = case_yaml::read_or<int>(n, "block", 16);
  const YAML::Node rows = n["logits"];
  if (!rows || !rows.IsSequence() || rows.size() == 0)
    case_yaml::fail(rows ? rows : n, "'logits' must be a non-empty list of rows");
  c.vocab = -1;
  for (const auto& item : rows) {
    const YAML::Node row = item;
    // Read in place: assigning the row into a holder map merges yaml-cpp's
    // node memory, quadratic in the rows of a large case.
    std::vector<double> values = case_yaml::read_real_list(row, "'row'");
    // A half case's values are written as their shortest text (kprop/half.h),
    // which reads back as the nearest double, then rounds to the dtype. Any
    // other text must be an exact value of the dtype (as for f32): no silent
    // rounding of a hand-written corpus value.
    if (is_half(c.dtype))
      case_yaml::for_each_item(row, [&](const case_yaml::Item& x) {
        const double v = values[x.index], h = round_to(c.dtype, v);
        if (!std::isfinite(v) || h == v) return;
        const std::string shortest = value_text(c.dtype, h);
        if (std::isfinite(h) && x.text == shortest)
          values[x.index] = h;
        else
          x.fail(fmt::format("logit {} is not a {} value (nearest: {})", x.text, dtype, shortest));
      });
    if (c.vocab >= 0 && static_cast<int>(values.size()) != c.vocab)
      case_yaml::fail(row, "rows differ in length");
    if (values.size() > (1u << 22)) case_yaml::fail(row, "row too long for a test case");
    c.vocab = static_cast<int>(values.size());
    c.logits.insert(c.logits.end(), values.begin(), values.end());
  }
  if (c.logits.size() > (1u << 24)) case_yaml::fail(rows, "case too large");
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::softmax_topk
