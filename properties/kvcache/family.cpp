// The kvcache family's shared names and stats; the rest of Traits is in
// schema.cpp (domain), build.cpp (builder), shrink.cpp (shrinker) and
// codec.cpp (YAML).
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "properties/kvcache/family_parts.h"

namespace kprop::kvcache {

const Choices& dtype_choices() {
  static const Choices choices = {"f64", "f32", "f16", "bf16"};
  return choices;
}

DType dtype_named(const std::string& name) {
  DType d = DType::f64;
  if (parse_dtype(name, d)) return d;
  throw std::logic_error("kvcache: unknown dtype " + name);
}

CaseStats Traits::stats(const Case& c) {
  int64_t tokens = 0;
  std::vector<std::string> seqs;
  for (const Sequence& s : c.seqs) {
    tokens += s.tokens();
    seqs.push_back(fmt::format("{}+{}@{}", s.prompt, s.decode, s.arrive));
  }
  return CaseStats{
      tokens,
      fmt::format("{} seq{} (prompt+decode@arrival: {}), heads {}x{}, head_dim {}, page {}, chunk {}, "
                  "pool {}, poison {}, {}{}{}{}",
                  c.seqs.size(), c.seqs.size() == 1 ? "" : "s", fmt::join(seqs, ", "), c.kv_heads, c.group,
                  c.head_dim, c.page_size, c.chunk, c.pool.size(), poison_name(c.poison), dtype_name(c.dtype),
                  c.int8_ties > 0 ? fmt::format(", int8 ties {}", c.int8_ties) : "",
                  c.store_ties > 0 ? fmt::format(", {} ties {}", dtype_name(c.dtype), c.store_ties) : "",
                  c.negative_scores ? ", negative scores" : "")}
      .dim("sequences", double(c.seqs.size()))
      .dim("tokens", double(tokens))
      .dim("page size", c.page_size)
      .dim("chunk", c.chunk)
      .dim("GQA group", c.group)
      .kind("dtype", dtype_name(c.dtype));
}

}  // namespace kprop::kvcache
