// The ternary family's YAML codec.
#include "kprop/case_yaml.h"
#include "kprop/rng.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {

// What to_yaml keeps, hashed value by value (rng::ContentHash): a
// transform's randomness, without building the YAML tree (its number texts
// were most of a run of the expression relations on small cases).
uint64_t Traits::content_hash(const Case& c) {
  rng::ContentHash h(0x7472u);  // "tr"
  h.word(static_cast<uint64_t>(c.tokens)).word(static_cast<uint64_t>(c.in_features));
  h.word(static_cast<uint64_t>(c.out_features)).reals(c.x).reals(c.w).reals(c.dy);
  return h.value();
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["tokens"] = c.tokens;
  n["in_features"] = c.in_features;
  n["out_features"] = c.out_features;
  n["x"] = case_yaml::real_list(c.x);
  n["w"] = case_yaml::real_list(c.w);
  n["dy"] = case_yaml::real_list(c.dy);
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"tokens", "in_features", "out_features", "x", "w", "dy"}, "ternary case");
  Case c;
  c.tokens = case_yaml::read<int>(n, "tokens");
  c.in_features = case_yaml::read<int>(n, "in_features");
  c.out_features = case_yaml::read<int>(n, "out_features");
  c.x = case_yaml::read_reals(n, "x");
  c.w = case_yaml::read_reals(n, "w");
  c.dy = case_yaml::read_reals(n, "dy");
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::ternary
