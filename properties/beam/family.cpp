#include "properties/beam/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "kprop/case_yaml.h"

namespace kprop::beam {

Schema Traits::domain_schema() {
  return {
      field::int_range("batch", {1, 4}, 1, 1 << 16, "prompts per batch"),
      field::int_range("prompt_len", {1, 4}, 1, 1 << 20, "tokens per prompt"),
      field::int_range("vocab", {2, 32}, 2, 1 << 24, "vocabulary size (EOS included)"),
      field::int_range("max_new_tokens", {1, 6}, 1, 64, "L: most generated tokens"),
      field::map(
          "beam_width",
          {
              field::int_range("range", {1, 8}, 1, 4096,
                               "K, drawn here unless one of the rates below applies"),
              field::real("one_rate", 0.2, 0, 1, "probability K = 1 (greedy)"),
              field::real("unpruned_rate", 0.3, 0, 1,
                          "probability K is set above the number of possible hypotheses (nothing pruned; "
                          "L is lowered until that number is at most unpruned_max)"),
              field::integer("unpruned_max", 200, 1, 100000, "largest hypothesis count made unpruned"),
          },
          "beam width K"),
      field::map("alpha",
                 {
                     field::real_range("range", {-1.0, 2.5}, -16, 16, "length penalty exponent"),
                     field::real("zero_rate", 0.25, 0, 1, "probability alpha = 0 (plain log-prob sum)"),
                     field::real("one_rate", 0.1, 0, 1, "probability alpha = 1 (mean log-prob)"),
                 },
                 "length penalty alpha"),
      field::map(
          "model",
          {
              field::real_range("scale", {0.3, 4.0}, 0, 100, "spread of the random logits"),
              field::real("tie_rate", 0.1, 0, 1, "probability scale = 0: every non-EOS token ties exactly"),
              field::real_range("eos_bias", {-2.0, 6.0}, -100, 100, "added to the EOS logit"),
              field::real_range("eos_slope", {-2.0, 1.0}, -100, 100,
                                "added to the EOS logit per prefix token (< 0: EOS early, then unlikely)"),
              field::real_range("sharpen", {0.0, 1.5}, 0, 100,
                                "spread grows by this per prefix token (long paths look better per token)"),
              field::real_range("shift", {0.0, 50.0}, 0, 1000,
                                "amplitude of a per-prefix constant on every logit"),
              field::real("shift_rate", 0.5, 0, 1, "probability the shift is non-zero"),
          },
          "the random table LM"),
  };
}

// One builder for RapidCheck draws and fuzz bytes, so the fuzzer reaches
// exactly the generator's domain.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  ModelConfig& m = c.model;
  m.vocab = static_cast<int>(draw.sized(domain.int_range("vocab")));
  m.eos = draw.chance(0.5) ? 0 : static_cast<int>(draw.any(IntRange{0, m.vocab - 1}));
  m.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  m.scale = draw.chance(domain.real("model.tie_rate")) ? 0.0 : draw.any(domain.real_range("model.scale"));
  m.eos_bias = draw.any(domain.real_range("model.eos_bias"));
  m.eos_slope = draw.any(domain.real_range("model.eos_slope"));
  m.sharpen = draw.any(domain.real_range("model.sharpen"));
  m.shift = draw.chance(domain.real("model.shift_rate")) ? draw.any(domain.real_range("model.shift")) : 0.0;
  c.max_new_tokens = static_cast<int>(draw.sized(domain.int_range("max_new_tokens")));
  const int batch = static_cast<int>(draw.sized(domain.int_range("batch")));
  for (int b = 0; b < batch; ++b) {
    const int len = static_cast<int>(draw.sized(domain.int_range("prompt_len")));
    std::vector<int> prompt;
    for (int i = 0; i < len; ++i) prompt.push_back(static_cast<int>(draw.any(IntRange{0, m.vocab - 1})));
    c.prompts.push_back(std::move(prompt));
  }
  const double a = draw.any(RealRange{0, 1});
  const double zero = domain.real("alpha.zero_rate"), one = domain.real("alpha.one_rate");
  c.alpha = a < zero ? 0.0 : a < zero + one ? 1.0 : draw.any(domain.real_range("alpha.range"));
  const double k = draw.any(RealRange{0, 1});
  const double k_one = domain.real("beam_width.one_rate"), unpruned = domain.real("beam_width.unpruned_rate");
  const int64_t unpruned_max = domain.integer("beam_width.unpruned_max");
  c.beam_width = static_cast<int>(draw.sized(domain.int_range("beam_width.range")));
  if (k < k_one) {
    c.beam_width = 1;
  } else if (k < k_one + unpruned) {
    while (c.max_new_tokens > 1 && count_hypotheses(m.vocab, c.max_new_tokens) > unpruned_max)
      --c.max_new_tokens;
    const int64_t all = count_hypotheses(m.vocab, c.max_new_tokens);
    if (all <= unpruned_max) c.beam_width = static_cast<int>(all + draw.any(IntRange{0, 2}));
  }
  return c;
}

namespace {

// How readable a real is: 0, 1, -1, integers, halves, tenths, anything.
int plainness(double x) {
  if (x == 0) return 0;
  if (x == 1) return 1;
  if (x == -1) return 2;
  if (x == std::round(x)) return 3;
  if (2 * x == std::round(2 * x)) return 4;
  if (10 * x == std::round(10 * x)) return 5;
  return 6;
}

// Plainer values for x, plainest first; each strictly plainer (or as plain
// and smaller), so repeated shrinking terminates.
std::vector<double> plainer(double x) {
  std::vector<double> out;
  for (double y : {0.0, 1.0, -1.0, std::round(x), std::round(2 * x) / 2, std::round(10 * x) / 10}) {
    const bool simpler =
        plainness(y) < plainness(x) || (plainness(y) == plainness(x) && std::fabs(y) < std::fabs(x));
    if (simpler && std::find(out.begin(), out.end(), y) == out.end()) out.push_back(y);
  }
  return out;
}

Case with_vocab(Case c, int vocab) {
  c.model.vocab = vocab;
  c.model.eos = std::min(c.model.eos, vocab - 1);
  for (auto& p : c.prompts)
    for (int& t : p) t = std::min(t, vocab - 1);
  return c;
}

}  // namespace

// One shrink step, boldest first: fewer prompts, fewer steps, narrower beams,
// smaller vocabularies, shorter prompts, plainer alpha and model parameters,
// smaller seeds, smaller token ids. Candidates that break the contract are skipped.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  std::vector<Case> out;
  const int B = static_cast<int>(c.prompts.size());
  if (B > 1) {
    Case s = c;
    s.prompts.resize(1);
    out.push_back(s);
    for (int b = 0; b < B; ++b) {
      Case t = c;
      t.prompts.erase(t.prompts.begin() + b);
      out.push_back(std::move(t));
    }
  }
  for (int L : {1, c.max_new_tokens / 2, c.max_new_tokens - 1})
    if (L >= 1 && L < c.max_new_tokens) {
      Case s = c;
      s.max_new_tokens = L;
      out.push_back(std::move(s));
    }
  for (int K : {1, 2, 3, c.beam_width / 2, c.beam_width - 1})
    if (K >= 1 && K < c.beam_width) {
      Case s = c;
      s.beam_width = K;
      out.push_back(std::move(s));
    }
  for (int V : {2, 3, c.model.vocab / 2, c.model.vocab - 1})
    if (V >= 2 && V < c.model.vocab) out.push_back(with_vocab(c, V));
  for (int b = 0; b < B; ++b) {
    const auto& p = c.prompts[static_cast<size_t>(b)];
    if (p.size() > 2) {
      Case s = c;
      s.prompts[static_cast<size_t>(b)].erase(
          s.prompts[static_cast<size_t>(b)].begin(),
          s.prompts[static_cast<size_t>(b)].begin() + static_cast<long>(p.size() / 2));
      out.push_back(std::move(s));
    }
    if (p.size() > 1)
      for (size_t i = 0; i < p.size(); ++i) {
        Case s = c;
        s.prompts[static_cast<size_t>(b)].erase(s.prompts[static_cast<size_t>(b)].begin() +
                                                static_cast<long>(i));
        out.push_back(std::move(s));
      }
  }
  for (double a : plainer(c.alpha)) {
    Case s = c;
    s.alpha = a;
    out.push_back(std::move(s));
  }
  for (double ModelConfig::*param : {&ModelConfig::shift, &ModelConfig::sharpen, &ModelConfig::eos_slope,
                                     &ModelConfig::eos_bias, &ModelConfig::scale})
    for (double v : plainer(c.model.*param)) {
      Case s = c;
      s.model.*param = v;
      out.push_back(std::move(s));
    }
  for (uint64_t seed = 1; seed < c.model.seed && seed <= 8; ++seed) {
    Case s = c;
    s.model.seed = seed;
    out.push_back(std::move(s));
  }
  if (c.model.eos > 0) {
    Case s = c;
    s.model.eos = 0;
    out.push_back(std::move(s));
  }
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < c.prompts[static_cast<size_t>(b)].size(); ++i)
      for (int t : {0, c.prompts[static_cast<size_t>(b)][i] - 1})
        if (t >= 0 && t < c.prompts[static_cast<size_t>(b)][i]) {
          Case s = c;
          s.prompts[static_cast<size_t>(b)][i] = t;
          out.push_back(std::move(s));
        }
  return rc::seq::filter(rc::seq::fromContainer(std::move(out)),
                         [c](const Case& s) { return !(s == c) && validate(s).empty(); });
}

// The generator's exceptions to the ranges mirrored: K = 1 (one_rate), K
// above the hypothesis count with L lowered (unpruned_rate), alpha 0 or 1,
// scale 0 (tie_rate), shift 0.
std::string Traits::in_domain(const Case& c, const Values& d) {
  const ModelConfig& m = c.model;
  const int64_t all = count_hypotheses(m.vocab, c.max_new_tokens);
  const bool unpruned = d.real("beam_width.unpruned_rate") > 0 && c.beam_width >= all;
  if (std::string why = outside_int_range(d, "beam_width.range", c.beam_width);
      !why.empty() && !(c.beam_width == 1 && d.real("beam_width.one_rate") > 0) && !unpruned)
    return why;
  if (std::string why = outside_int_range(d, "max_new_tokens", c.max_new_tokens);
      !why.empty() && !(unpruned && c.max_new_tokens < d.int_range("max_new_tokens").lo))
    return why;
  if (std::string why = outside_real_range(d, "alpha.range", c.alpha);
      !why.empty() && !(c.alpha == 0 && d.real("alpha.zero_rate") > 0) &&
      !(c.alpha == 1 && d.real("alpha.one_rate") > 0))
    return why;
  if (std::string why = outside_real_range(d, "model.scale", m.scale);
      !why.empty() && !(m.scale == 0 && d.real("model.tie_rate") > 0))
    return why;
  if (std::string why = outside_real_range(d, "model.shift", m.shift);
      !why.empty() && !(m.shift == 0 && d.real("model.shift_rate") < 1))
    return why;
  if (std::string why = outside_int_range(d, "batch", static_cast<int64_t>(c.prompts.size())); !why.empty())
    return why;
  for (const auto& p : c.prompts)
    if (std::string why = outside_int_range(d, "prompt_len", static_cast<int64_t>(p.size())); !why.empty())
      return why;
  return first_problem({outside_int_range(d, "vocab", m.vocab),
                        outside_real_range(d, "model.eos_bias", m.eos_bias),
                        outside_real_range(d, "model.eos_slope", m.eos_slope),
                        outside_real_range(d, "model.sharpen", m.sharpen)});
}

namespace {
// Bytes of one trial: per prompt and step K × V candidate scores (and their
// order), the pool trace (L pools of K hypotheses of up to L tokens), for the
// target and a check's rerun (x 2); the reference's candidates of one step
// of one prompt (reference.cpp: it ranks K × V Entry objects, 72 bytes each
// (prompt, Hypothesis, Prefix) plus its token vector's heap block, at least
// 32 bytes with malloc's header: 104 bytes where the 16 of a score and an
// index were counted, which put beam's peak at 1.49 × this estimate); and
// the exhaustive oracle (matches_exhaustive enumerates at most 20000
// hypotheses by default).
double beam_bytes(double batch, double prompt, double k, double vocab, double steps) {
  const double per_prompt = 16 * k * vocab + steps * k * (4 * (prompt + steps) + 32);
  const double token_block = std::max(32.0, 16 * std::ceil((4 * steps + 8) / 16));
  return 2 * batch * per_prompt + k * vocab * (72 + token_block) + 20000 * (4 * steps + 32);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  size_t prompt = 0;
  for (const auto& p : c.prompts) prompt = std::max(prompt, p.size());
  return beam_bytes(double(c.prompts.size()), double(prompt), c.beam_width, c.model.vocab, c.max_new_tokens);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t batch = d.int_range("batch").hi, prompt = d.int_range("prompt_len").hi,
                vocab = d.int_range("vocab").hi, steps = d.int_range("max_new_tokens").hi;
  int64_t k = d.int_range("beam_width.range").hi;
  if (d.real("beam_width.unpruned_rate") > 0) k = std::max(k, d.integer("beam_width.unpruned_max") + 2);
  CaseSize size{beam_bytes(double(batch), double(prompt), double(k), double(vocab), double(steps)),
                fmt::format("batch {} x K {} x V {} x L {}", batch, k, vocab, steps),
                "batch, beam_width.range, vocab or max_new_tokens"};
  // The named tensors' dims (tensors.cpp).
  size.extents = {{"B", double(batch)}, {"K", double(k)}, {"L", double(steps)}, {"V", double(vocab)}};
  return size;
}

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
  expect_keys(m, {"vocab", "eos", "seed", "scale", "eos_bias", "eos_slope", "sharpen", "shift", "relabel"},
              "model");
  c.model.vocab = read<int>(m, "vocab");
  c.model.eos = read<int>(m, "eos");
  c.model.seed = read<uint64_t>(m, "seed");
  c.model.scale = read<double>(m, "scale");
  c.model.eos_bias = read<double>(m, "eos_bias");
  c.model.eos_slope = read<double>(m, "eos_slope");
  c.model.sharpen = read<double>(m, "sharpen");
  c.model.shift = read<double>(m, "shift");
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
