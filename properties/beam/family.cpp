// The beam family's stats; the rest of Traits is in schema.cpp (domain),
// build.cpp (builder), shrink.cpp (shrinker) and codec.cpp (YAML).
#include "properties/beam/family.h"

#include <fmt/format.h>

#include <vector>

namespace kprop::beam {

CaseStats Traits::stats(const Case& c) {
  int64_t size = c.model.vocab + c.max_new_tokens + c.beam_width + static_cast<int64_t>(c.prompts.size());
  std::vector<size_t> lens;
  for (const auto& p : c.prompts) size += static_cast<int64_t>(p.size()), lens.push_back(p.size());
  return CaseStats{
      size,
      fmt::format("vocab {} (eos {}), L {}, K {}, alpha {}, batch {} (prompt lengths {}), model seed {}",
                  c.model.vocab, c.model.eos, c.max_new_tokens, c.beam_width, c.alpha, c.prompts.size(),
                  fmt::join(lens, ","), c.model.seed)}
      .dim("vocab", c.model.vocab)
      .dim("beam width", c.beam_width)
      .dim("max new tokens", c.max_new_tokens)
      .dim("batch", double(c.prompts.size()))
      .dim("alpha", c.alpha);
}

}  // namespace kprop::beam
