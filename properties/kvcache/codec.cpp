// The kvcache family's YAML codec.
#include <algorithm>
#include <string>

#include "kprop/case_yaml.h"
#include "properties/kvcache/family_parts.h"

namespace kprop::kvcache {

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  YAML::Node heads(YAML::NodeType::Map);
  heads["kv"] = c.kv_heads;
  heads["group"] = c.group;
  n["heads"] = heads;
  n["head_dim"] = c.head_dim;
  YAML::Node seqs(YAML::NodeType::Sequence);
  for (const Sequence& s : c.seqs) {
    YAML::Node q(YAML::NodeType::Map);
    q["prompt"] = s.prompt;
    q["decode"] = s.decode;
    q["arrive"] = s.arrive;
    q["seed"] = s.seed;
    seqs.push_back(q);
  }
  n["seqs"] = seqs;
  n["page_size"] = c.page_size;
  n["chunk"] = c.chunk;
  n["pool"] = case_yaml::list(c.pool);
  n["poison"] = poison_name(c.poison);
  n["dtype"] = dtype_name(c.dtype);
  YAML::Node data(YAML::NodeType::Map);
  data["q_scale"] = case_yaml::real(c.q_scale);
  data["k_spread"] = case_yaml::real(c.k_spread);
  data["v_spread"] = case_yaml::real(c.v_spread);
  data["seed"] = c.seed;
  if (c.int8_ties > 0) data["int8_ties"] = case_yaml::real(c.int8_ties);     // absent: none
  if (c.store_ties > 0) data["store_ties"] = case_yaml::real(c.store_ties);  // absent: none
  if (c.negative_scores) data["negative_scores"] = true;                     // absent: false
  n["data"] = data;
  return n;
}

using case_yaml::expect_keys;
using case_yaml::read;

Case Traits::from_yaml(const YAML::Node& n) {
  expect_keys(n, {"heads", "head_dim", "seqs", "page_size", "chunk", "pool", "poison", "dtype", "data"},
              "kvcache case");
  Case c;
  const YAML::Node heads = n["heads"];
  if (!heads) case_yaml::fail(n, "missing 'heads'");
  expect_keys(heads, {"kv", "group"}, "heads");
  c.kv_heads = read<int>(heads, "kv");
  c.group = read<int>(heads, "group");
  c.head_dim = read<int>(n, "head_dim");
  const YAML::Node seqs = n["seqs"];
  if (!seqs || !seqs.IsSequence()) case_yaml::fail(seqs ? seqs : n, "'seqs' must be a list of sequences");
  for (const auto& q : seqs) {
    expect_keys(q, {"prompt", "decode", "arrive", "seed"}, "sequence");
    c.seqs.push_back({read<int>(q, "prompt"), read<int>(q, "decode"), case_yaml::read_or<int>(q, "arrive", 0),
                      read<uint64_t>(q, "seed")});
  }
  c.page_size = read<int>(n, "page_size");
  c.chunk = read<int>(n, "chunk");
  c.pool = case_yaml::read_list<int>(n, "pool");
  const std::string poison = read<std::string>(n, "poison");
  if (poison != "nan" && poison != "huge") case_yaml::fail(n["poison"], "'poison' is nan or huge");
  c.poison = poison == "nan" ? Poison::nan : Poison::huge;
  // Corpus files from before dtypes were f64 cases.
  const std::string dtype = case_yaml::read_or<std::string>(n, "dtype", "f64");
  const Choices& dtypes = dtype_choices();
  if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end())
    case_yaml::fail(n["dtype"], "'dtype' is one of f64, f32, f16, bf16");
  c.dtype = dtype_named(dtype);
  const YAML::Node data = n["data"];
  if (!data) case_yaml::fail(n, "missing 'data'");
  expect_keys(data, {"q_scale", "k_spread", "v_spread", "seed", "int8_ties", "store_ties", "negative_scores"},
              "data");
  c.q_scale = read<double>(data, "q_scale");
  c.k_spread = read<double>(data, "k_spread");
  c.v_spread = read<double>(data, "v_spread");
  c.seed = read<uint64_t>(data, "seed");
  // Cases from before exact int8 ties have none.
  c.int8_ties = case_yaml::read_or<double>(data, "int8_ties", 0);
  if (!(c.int8_ties >= 0 && c.int8_ties <= 1))
    case_yaml::fail(data["int8_ties"], "'int8_ties' is a probability in [0, 1]");
  // Cases from before exact dtype ties have none.
  c.store_ties = case_yaml::read_or<double>(data, "store_ties", 0);
  if (!(c.store_ties >= 0 && c.store_ties <= 1))
    case_yaml::fail(data["store_ties"], "'store_ties' is a probability in [0, 1]");
  // Cases from before the negative-score mode draw their queries and keys as they did.
  c.negative_scores = case_yaml::read_or<bool>(data, "negative_scores", false);
  case_yaml::check_contract(n, validate(c));
  return c;
}

}  // namespace kprop::kvcache
