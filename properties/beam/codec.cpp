// The beam family's YAML codec.
#include <limits>
#include <optional>
#include <vector>

#include "kprop/case_yaml.h"
#include "properties/beam/family.h"

namespace kprop::beam {

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  YAML::Node m(YAML::NodeType::Map);
  m["vocab"] = c.model.vocab;
  m["eos"] = c.model.eos;
  m["seed"] = c.model.seed;
  m["scale"] = case_yaml::real(c.model.scale);
  m["eos_bias"] = case_yaml::real(c.model.eos_bias);
  m["eos_slope"] = case_yaml::real(c.model.eos_slope);
  m["sharpen"] = case_yaml::real(c.model.sharpen);
  m["shift"] = case_yaml::real(c.model.shift);
  if (c.model.prefix_free) m["prefix_free"] = true;
  if (c.model.mask != 0) m["mask"] = case_yaml::real(c.model.mask);  // absent: 0, as in files before it
  if (c.model.near_tie != 0) m["near_tie"] = case_yaml::real(c.model.near_tie);  // likewise
  if (!c.model.relabel.empty()) m["relabel"] = case_yaml::list(c.model.relabel);
  n["model"] = m;
  YAML::Node prompts(YAML::NodeType::Sequence);
  for (const auto& p : c.prompts) prompts.push_back(case_yaml::list(p));
  n["prompts"] = prompts;
  n["beam_width"] = c.beam_width;
  n["max_new_tokens"] = c.max_new_tokens;
  n["alpha"] = case_yaml::real(c.alpha);
  return n;
}

using case_yaml::expect_keys;
using case_yaml::read;

namespace {
// A list of token ids (a sequence or a packed list) as ints.
void read_tokens(const YAML::Node& list, const char* not_an_int, std::vector<int>& out) {
  case_yaml::for_each_item(list, [&](const case_yaml::Item& t) {
    const std::optional<long long> v = t.scalar ? case_yaml::yaml_integer(t.text) : std::nullopt;
    if (!v || *v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
      t.fail(not_an_int);
    out.push_back(static_cast<int>(*v));
  });
}
}  // namespace

Case Traits::from_yaml(const YAML::Node& n) {
  expect_keys(n, {"model", "prompts", "beam_width", "max_new_tokens", "alpha"}, "beam case");
  Case c;
  const YAML::Node m = n["model"];
  if (!m) case_yaml::fail(n, "missing 'model'");
  expect_keys(m,
              {"vocab", "eos", "seed", "scale", "eos_bias", "eos_slope", "sharpen", "shift", "prefix_free",
               "mask", "near_tie", "relabel"},
              "model");
  c.model.vocab = read<int>(m, "vocab");
  c.model.eos = read<int>(m, "eos");
  c.model.seed = read<uint64_t>(m, "seed");
  c.model.scale = read<double>(m, "scale");
  c.model.eos_bias = read<double>(m, "eos_bias");
  c.model.eos_slope = read<double>(m, "eos_slope");
  c.model.sharpen = read<double>(m, "sharpen");
  c.model.shift = read<double>(m, "shift");
  c.model.prefix_free = case_yaml::read_or<bool>(m, "prefix_free", false);
  c.model.mask = case_yaml::read_or<double>(m, "mask", 0.0);
  c.model.near_tie = case_yaml::read_or<double>(m, "near_tie", 0.0);
  if (const YAML::Node r = m["relabel"]) {
    if (!case_yaml::is_list(r)) case_yaml::fail(r, "'relabel' must be a list of tokens");
    if (case_yaml::list_size(r) > 1 << 24) case_yaml::fail(r, "'relabel' too long");
    read_tokens(r, "relabel entry is not an integer", c.model.relabel);
  }
  const YAML::Node prompts = n["prompts"];
  if (!prompts || !prompts.IsSequence())
    case_yaml::fail(prompts ? prompts : n, "'prompts' must be a list of token lists");
  for (const auto& p : prompts) {
    if (!case_yaml::is_list(p)) case_yaml::fail(p, "each prompt must be a list of tokens");
    std::vector<int> tokens;
    read_tokens(p, "prompt token is not an integer", tokens);
    c.prompts.push_back(std::move(tokens));
  }
  c.beam_width = read<int>(n, "beam_width");
  c.max_new_tokens = read<int>(n, "max_new_tokens");
  c.alpha = read<double>(n, "alpha");
  // Bounds the pools' memory (batch x K x L tokens, K x V candidates per prompt).
  if (c.model.vocab > 1 << 24 || c.beam_width > 1 << 16 || c.max_new_tokens > 64 || c.prompts.size() > 1024 ||
      static_cast<int64_t>(c.beam_width) * c.model.vocab * static_cast<int64_t>(c.prompts.size()) > 1 << 28)
    case_yaml::fail(n, "vocab, beam_width, max_new_tokens or batch too large for a test case");
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::beam
