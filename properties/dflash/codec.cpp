// The dflash family's YAML codec.
#include <fmt/format.h>

#include "kprop/case_yaml.h"
#include "properties/dflash/family.h"

namespace kprop::dflash {

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["prompt"] = case_yaml::list(c.prompt);
  YAML::Node model(YAML::NodeType::Map);
  model["vocab"] = c.model.vocab;
  model["d_model"] = c.model.d_model;
  model["layers"] = c.model.layers;
  model["heads"] = c.model.heads;
  model["seed"] = c.model.seed;
  if (c.model.tied != 0) model["tied"] = c.model.tied;  // absent: 0, as in files from before it
  if (c.model.near_tie != 0) model["near_tie"] = case_yaml::real(c.model.near_tie);  // absent: 0, likewise
  n["model"] = model;
  YAML::Node cycles(YAML::NodeType::Sequence);
  for (const auto& tree : c.cycles) {
    YAML::Node t(YAML::NodeType::Map);
    t["tokens"] = case_yaml::list(tree.tokens);
    t["parents"] = case_yaml::list(tree.parents);
    cycles.push_back(t);
  }
  n["cycles"] = cycles;
  return n;
}

using case_yaml::expect_keys;
using case_yaml::read;
using case_yaml::read_list;

Case Traits::from_yaml(const YAML::Node& n) {
  expect_keys(n, {"prompt", "model", "cycles"}, "dflash case");
  Case c;
  c.prompt = read_list<int>(n, "prompt");
  const YAML::Node m = n["model"];
  if (!m) case_yaml::fail(n, "missing 'model'");
  expect_keys(m, {"vocab", "d_model", "layers", "heads", "seed", "tied", "near_tie"}, "model");
  c.model.vocab = read<int>(m, "vocab");
  c.model.d_model = read<int>(m, "d_model");
  c.model.layers = read<int>(m, "layers");
  c.model.heads = read<int>(m, "heads");
  c.model.seed = read<uint64_t>(m, "seed");
  if (m["tied"]) c.model.tied = read<int>(m, "tied");
  if (m["near_tie"]) c.model.near_tie = read<double>(m, "near_tie");
  const YAML::Node cycles = n["cycles"];
  if (!cycles || !cycles.IsSequence())
    case_yaml::fail(cycles ? cycles : n, "'cycles' must be a list of trees");
  for (const auto& t : cycles) {
    expect_keys(t, {"tokens", "parents"}, "tree");
    c.cycles.push_back({read_list<int>(t, "tokens"), read_list<int>(t, "parents")});
  }
  if (c.model.d_model > 1 << 16 || c.model.layers > 64 || c.model.vocab > 1 << 24 ||
      c.prompt.size() > 1 << 20)
    case_yaml::fail(m, "model or prompt too large for a test case");
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::dflash
