#include "properties/kvcache/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kprop/case_yaml.h"

namespace kprop::kvcache {
namespace {
const Choices kDtypes = {"f64", "f32", "f16", "bf16"};
DType dtype_named(const std::string& name) {
  DType d = DType::f64;
  if (parse_dtype(name, d)) return d;
  throw std::logic_error("kvcache: unknown dtype " + name);
}
}  // namespace

Schema Traits::domain_schema() {
  return {
      field::int_range("batch", {1, 6}, 1, 1 << 16, "sequences in the batch"),
      field::int_range("prompt_len", {1, 24}, 1, 1 << 24, "prompt tokens per sequence"),
      field::int_range("decode_steps", {0, 12}, 0, 1 << 24, "decode steps per sequence"),
      field::int_range("arrival", {0, 10}, 0, 1 << 24, "scheduler step at which a sequence arrives"),
      field::real(
          "edge_rate", 0.2, 0, 1,
          "probability of each edge value: a 1-token prompt, 0 decode steps, arrival at step 0, chunk 1"),
      field::int_range("kv_heads", {1, 3}, 1, 64, "key/value heads"),
      field::int_range("group", {1, 3}, 1, 64, "query heads per kv head (GQA)"),
      field::int_range("head_dim", {1, 16}, 1, 1 << 16, "channels per head"),
      field::int_range("page_size", {1, 8}, 1, 1 << 20, "tokens per paged block"),
      field::real("divisor_rate", 0.3, 0, 1, "probability the page size divides some sequence's length"),
      field::int_range("chunk", {1, 12}, 1, 1 << 24, "prompt tokens per prefill chunk"),
      field::int_range("spare_blocks", {0, 4}, 0, 1 << 20, "pool blocks beyond the peak the schedule holds"),
      field::choices("poison", {"nan", "huge"}, {"nan", "huge"}, "what unused cache slots hold"),
      field::real_range(
          "q_scale", {0.25, 256.0}, 1e-3, 1e3,
          "query magnitude (softmax sharpness), drawn log-uniformly: as many soft as sharp cases"),
      field::real_range("k_spread", {1, 100}, 1, 1e6, "key channel ranges are log-uniform in [1/spread, 1]"),
      field::real_range("v_spread", {1, 100}, 1, 1e6,
                        "value channel ranges are log-uniform in [1/spread, 1]"),
      field::choices("dtypes", kDtypes, kDtypes,
                     "the case's dtype: f64 computes in fp64; f32/f16/bf16 store Q, the cache and the "
                     "outputs in the dtype and compute in f32 (kernels/kvcache/kvcache.h, Precision)"),
  };
}

namespace {

// Reals in cases are multiples of 1/64 so the YAML stays short.
double tidy(double x) {
  return std::round(x * 64) / 64;
}

// A size-ramped draw that starts a quarter of the way up the range: the
// smallest cases (one token, no decode) exercise nothing, and the shrinker,
// not the ramp, is what makes counterexamples small. The two draws are
// sequenced (a draw in each of max's arguments would be drawn in the order
// the compiler picks: g++ and clang differ, and so would their cases).
int64_t ramped(Draw& draw, IntRange r) {
  const int64_t floor = draw.any(r.upto(r.lo + (r.hi - r.lo + 2) / 4));
  return std::max(draw.sized(r), floor);
}

}  // namespace

Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  const double edge = domain.real("edge_rate");
  c.kv_heads = static_cast<int>(ramped(draw, domain.int_range("kv_heads")));
  c.group = static_cast<int>(draw.any(domain.int_range("group")));
  c.head_dim = static_cast<int>(ramped(draw, domain.int_range("head_dim")));
  const int batch = static_cast<int>(ramped(draw, domain.int_range("batch")));
  for (int b = 0; b < batch; ++b) {
    Sequence s;
    s.prompt = draw.chance(edge) ? 1 : static_cast<int>(ramped(draw, domain.int_range("prompt_len")));
    s.decode = draw.chance(edge) ? 0 : static_cast<int>(ramped(draw, domain.int_range("decode_steps")));
    s.arrive = draw.chance(edge) ? 0 : static_cast<int>(ramped(draw, domain.int_range("arrival")));
    s.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
    c.seqs.push_back(s);
  }
  const IntRange pages = domain.int_range("page_size");
  c.page_size = static_cast<int>(draw.any(pages));
  if (draw.chance(domain.real("divisor_rate"))) {  // a page size dividing a prompt or a full length
    const Sequence& s = c.seqs[static_cast<size_t>(draw.index(c.seqs.size()))];
    const int len = draw.chance(0.5) ? s.prompt : s.tokens();
    std::vector<int> divisors;
    for (int d = static_cast<int>(pages.lo); d <= std::min<int64_t>(pages.hi, len); ++d)
      if (len % d == 0 && pages.allows(d)) divisors.push_back(d);
    if (!divisors.empty()) c.page_size = divisors[static_cast<size_t>(draw.index(divisors.size()))];
  }
  c.chunk = draw.chance(edge) ? 1 : static_cast<int>(draw.any(domain.int_range("chunk")));
  const Choices& poisons = domain.choices("poison");
  c.poison = poisons[static_cast<size_t>(draw.index(poisons.size()))] == "nan" ? Poison::nan : Poison::huge;
  // Log-uniform: a range from soft (0.25) to sharp (256) attention draws
  // each factor of two as often, so most cases are neither one-hot nor flat.
  const RealRange q = domain.real_range("q_scale");
  c.q_scale = std::max(1.0 / 64, tidy(q.lo * std::pow(q.hi / q.lo, draw.any(RealRange{0, 1}))));
  c.k_spread = std::max(1.0, tidy(draw.any(domain.real_range("k_spread"))));
  c.v_spread = std::max(1.0, tidy(draw.any(domain.real_range("v_spread"))));
  c.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  // The dtype, drawn last among the case's fields so that a spec drawing f64
  // only draws the cases it drew before dtypes existed.
  const Choices& dtypes = domain.choices("dtypes");
  c.dtype =
      dtype_named(dtypes.size() == 1 ? dtypes[0] : dtypes[static_cast<size_t>(draw.index(dtypes.size()))]);
  // The pool: what the schedule needs plus spares, in an order drawn here
  // (identity, reversed or shuffled), which is the free list's initial order.
  const int n = blocks_needed(c) + static_cast<int>(draw.any(domain.int_range("spare_blocks")));
  for (int i = 0; i < n; ++i) c.pool.push_back(i);
  const int64_t order = draw.any(IntRange{0, 4});
  if (order == 1) std::reverse(c.pool.begin(), c.pool.end());
  if (order >= 2)
    for (int i = n - 1; i > 0; --i)
      std::swap(c.pool[static_cast<size_t>(i)], c.pool[static_cast<size_t>(draw.any(IntRange{0, i}))]);
  return c;
}

// One shrink step, boldest first: fewer sequences, shorter sequences, earlier
// arrivals, fewer and narrower heads, smaller pages and chunks, plain data
// (nan poison, unit spreads and scales, seed 1), then a tidy pool (identity
// order, no spare blocks). Pools grow when a candidate needs more blocks.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  std::vector<Case> out;
  auto add = [&](Case s) { out.push_back(fit_pool(std::move(s))); };
  const size_t B = c.seqs.size();
  if (B > 1) {
    Case s = c;
    s.seqs.resize(B / 2);
    add(s);
    for (size_t b = 0; b < B; ++b) {
      Case t = c;
      t.seqs.erase(t.seqs.begin() + static_cast<long>(b));
      add(t);
    }
  }
  for (size_t b = 0; b < B; ++b) {
    const Sequence& q = c.seqs[b];
    for (auto change : std::initializer_list<void (*)(Sequence&)>{
             [](Sequence& s) { s.decode = 0; }, [](Sequence& s) { s.decode /= 2; },
             [](Sequence& s) { s.decode = std::max(0, s.decode - 1); }, [](Sequence& s) { s.prompt = 1; },
             [](Sequence& s) { s.prompt = std::max(1, s.prompt / 2); },
             [](Sequence& s) { s.prompt = std::max(1, s.prompt - 1); }, [](Sequence& s) { s.arrive = 0; },
             [](Sequence& s) { s.arrive = std::max(0, s.arrive - 1); }, [](Sequence& s) { s.seed = 1; }}) {
      Case s = c;
      change(s.seqs[b]);
      if (!(s.seqs[b] == q)) add(s);
    }
  }
  auto set = [&](auto member, auto value) {
    Case s = c;
    s.*member = value;
    add(s);
  };
  set(&Case::kv_heads, 1);
  set(&Case::kv_heads, c.kv_heads - 1);
  set(&Case::group, 1);
  set(&Case::group, c.group - 1);
  set(&Case::head_dim, 1);
  set(&Case::head_dim, c.head_dim / 2);
  set(&Case::head_dim, c.head_dim - 1);
  for (int p = 1; p < c.page_size; ++p) set(&Case::page_size, p);
  int longest_prompt = 0;
  for (const Sequence& s : c.seqs) longest_prompt = std::max(longest_prompt, s.prompt);
  if (c.chunk > longest_prompt) set(&Case::chunk, longest_prompt);  // the same single chunk, a smaller number
  for (int k = 1; k < std::min(c.chunk, longest_prompt + 1); ++k) set(&Case::chunk, k);
  // Wider dtypes first: f64, then f32 (the same data, less rounding).
  if (c.dtype != DType::f64) set(&Case::dtype, DType::f64);
  if (is_half(c.dtype)) set(&Case::dtype, DType::f32);
  set(&Case::poison, Poison::nan);
  set(&Case::q_scale, 1.0);
  set(&Case::k_spread, 1.0);
  set(&Case::v_spread, 1.0);
  set(&Case::seed, uint64_t{1});
  const int need = blocks_needed(c);
  if (static_cast<int>(c.pool.size()) > need) {  // drop spare blocks (the highest ids)
    Case s = c;
    std::erase_if(s.pool, [need](int b) { return b >= need; });
    add(s);
    s = c;
    const int top = static_cast<int>(c.pool.size()) - 1;
    std::erase(s.pool, top);
    add(s);
  }
  Case sorted = c;
  std::sort(sorted.pool.begin(), sorted.pool.end());
  add(sorted);
  std::erase_if(out, [&c](const Case& s) { return s == c || !validate(s).empty(); });
  return rc::seq::fromContainer(std::move(out));
}

// The generator's edge values (edge_rate) and its rounding of the reals to
// 1/64 mirrored. The pool (spare blocks, order) is the case's own layout and
// not checked here.
std::string Traits::in_domain(const Case& c, const Values& d) {
  const bool edges = d.real("edge_rate") > 0;
  if (std::string why = outside_int_range(d, "batch", static_cast<int64_t>(c.seqs.size())); !why.empty())
    return why;
  for (const Sequence& s : c.seqs) {
    if (std::string why = outside_int_range(d, "prompt_len", s.prompt);
        !why.empty() && !(edges && s.prompt == 1))
      return why;
    if (std::string why = outside_int_range(d, "decode_steps", s.decode);
        !why.empty() && !(edges && s.decode == 0))
      return why;
    if (std::string why = outside_int_range(d, "arrival", s.arrive);
        !why.empty() && !(edges && s.arrive == 0))
      return why;
  }
  if (std::string why = outside_int_range(d, "chunk", c.chunk); !why.empty() && !(edges && c.chunk == 1))
    return why;
  auto real_in = [&](const char* key, double v, double floor) -> std::string {
    const RealRange r = d.real_range(key);
    const double lo = std::max(floor, tidy(r.lo) - 1.0 / 64), hi = std::max(floor, tidy(r.hi) + 1.0 / 64);
    if (v >= lo && v <= hi) return "";
    return fmt::format("{} = {} is outside [{}, {}]", key, v, r.lo, r.hi);
  };
  return first_problem(
      {outside_int_range(d, "kv_heads", c.kv_heads), outside_int_range(d, "group", c.group),
       outside_int_range(d, "head_dim", c.head_dim), outside_int_range(d, "page_size", c.page_size),
       outside_choices(d, "poison", c.poison == Poison::nan ? "nan" : "huge"),
       outside_choices(d, "dtypes", dtype_name(c.dtype)), real_in("q_scale", c.q_scale, 1.0 / 64),
       real_in("k_spread", c.k_spread, 1), real_in("v_spread", c.v_spread, 1)});
}

namespace {
// Doubles of one trial: per token Q and the outputs of Hq·D (target,
// reference, the reruns of the checks: about 5 results), K and V of Hkv·D
// (the case's, the paged pool's and a contiguous copy), and one row of
// scores of the longest sequence.
double kvcache_bytes(double tokens, double longest, double q_heads, double kv_heads, double dim) {
  return 8 * (tokens * dim * (6 * q_heads + 6 * kv_heads) + longest);
}
constexpr int64_t kMaxTokens = int64_t(1) << 15;  // validate()'s limit
}  // namespace

double Traits::case_bytes(const Case& c) {
  double tokens = 0, longest = 0;
  for (const Sequence& s : c.seqs) tokens += s.tokens(), longest = std::max(longest, double(s.tokens()));
  return kvcache_bytes(tokens, longest, c.q_heads(), c.kv_heads, c.head_dim);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  const int64_t longest = hi("prompt_len") + hi("decode_steps"), tokens = hi("batch") * longest;
  CaseSize size{kvcache_bytes(double(tokens), double(longest), double(hi("kv_heads") * hi("group")),
                              double(hi("kv_heads")), double(hi("head_dim"))),
                fmt::format("{} sequences of {} tokens x {} query heads x D {}", hi("batch"), longest,
                            hi("kv_heads") * hi("group"), hi("head_dim")),
                "batch, prompt_len, decode_steps, kv_heads, group or head_dim"};
  // The named tensors' dims (tensors.cpp): N tokens in all; the pool holds
  // at most a block per token (page_size 1) plus its spares.
  size.extents = {{"Bs", double(hi("batch"))},
                  {"Hq", double(hi("kv_heads") * hi("group"))},
                  {"Hkv", double(hi("kv_heads"))},
                  {"G", double(hi("group"))},
                  {"D", double(hi("head_dim"))},
                  {"N", double(tokens)},
                  {"NB", double(tokens + hi("spare_blocks"))}};
  return size;
}

std::string Traits::check_domain(const Values& d) {
  const int64_t tokens =
      d.int_range("batch").hi * (d.int_range("prompt_len").hi + d.int_range("decode_steps").hi);
  if (tokens <= kMaxTokens) return "";
  return fmt::format(
      "the largest case of this domain holds batch x (prompt_len + decode_steps) = {} tokens, "
      "over the {} a case may hold; narrow batch, prompt_len or decode_steps",
      tokens, kMaxTokens);
}

namespace {
const char* poison_name(Poison p) {
  return p == Poison::nan ? "nan" : "huge";
}
}  // namespace

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
  if (std::find(kDtypes.begin(), kDtypes.end(), dtype) == kDtypes.end())
    case_yaml::fail(n["dtype"], "'dtype' is one of f64, f32, f16, bf16");
  c.dtype = dtype_named(dtype);
  const YAML::Node data = n["data"];
  if (!data) case_yaml::fail(n, "missing 'data'");
  expect_keys(data, {"q_scale", "k_spread", "v_spread", "seed"}, "data");
  c.q_scale = read<double>(data, "q_scale");
  c.k_spread = read<double>(data, "k_spread");
  c.v_spread = read<double>(data, "v_spread");
  c.seed = read<uint64_t>(data, "seed");
  case_yaml::check_contract(n, validate(c));
  return c;
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
                  "pool {}, poison {}, {}",
                  c.seqs.size(), c.seqs.size() == 1 ? "" : "s", fmt::join(seqs, ", "), c.kv_heads, c.group,
                  c.head_dim, c.page_size, c.chunk, c.pool.size(), poison_name(c.poison),
                  dtype_name(c.dtype))}
      .dim("sequences", double(c.seqs.size()))
      .dim("tokens", double(tokens))
      .dim("page size", c.page_size)
      .dim("chunk", c.chunk)
      .dim("GQA group", c.group)
      .kind("dtype", dtype_name(c.dtype));
}

}  // namespace kprop::kvcache
