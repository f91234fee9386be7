#include "properties/dflash/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kprop/case_yaml.h"

namespace kprop::dflash {

Schema Traits::domain_schema() {
  return {
      field::int_range("prompt_len", {1, 12}, 1, 512, "prompt tokens"),
      field::int_range("vocab", {2, 16}, 2, 4096, "vocabulary size"),
      field::map(
          "model",
          {
              field::int_range("d_model", {4, 16}, 1, 256, "width (rounded up to a multiple of heads)"),
              field::int_range("layers", {1, 2}, 0, 8, "transformer layers"),
              field::int_range("heads", {1, 2}, 1, 16, "attention heads"),
          },
          "target model shape"),
      field::map("tree",
                 {
                     field::int_range("nodes", {1, 24}, 1, 512, "draft nodes per cycle"),
                     field::int_range("roots", {1, 4}, 1, 64, "most roots per tree"),
                     field::int_range("max_children", {1, 4}, 1, 64, "most children per node"),
                     field::real_range("chain_rate", {0.0, 0.8}, 0, 1,
                                       "probability a node extends the previous node (deep chains)"),
                     field::real_range("match_rate", {0.0, 1.0}, 0, 1,
                                       "probability a draft token equals the target's greedy continuation"),
                 },
                 "draft trees"),
      field::int_range("cycles", {1, 4}, 1, 64, "verification cycles"),
  };
}

// One case builder for RapidCheck draws, fuzz bytes and seed corpora.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  c.model.vocab = static_cast<int>(draw.sized(domain.int_range("vocab")));
  c.model.heads = static_cast<int>(draw.any(domain.int_range("model.heads")));
  c.model.layers = static_cast<int>(draw.any(domain.int_range("model.layers")));
  const int width = static_cast<int>(draw.sized(domain.int_range("model.d_model")));
  c.model.d_model = (width + c.model.heads - 1) / c.model.heads * c.model.heads;
  c.model.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  const int prompt_len = static_cast<int>(draw.sized(domain.int_range("prompt_len")));
  for (int i = 0; i < prompt_len; ++i)
    c.prompt.push_back(static_cast<int>(draw.any(IntRange{0, c.model.vocab - 1})));

  const TinyLM model(c.model);
  const double match_rate = draw.any(domain.real_range("tree.match_rate"));
  const double chain_rate = draw.any(domain.real_range("tree.chain_rate"));
  const int cycles = static_cast<int>(draw.sized(domain.int_range("cycles")));
  std::vector<int> context = c.prompt;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    const int nodes = static_cast<int>(draw.sized(domain.int_range("tree.nodes")));
    const int max_roots =
        std::min<int>(static_cast<int>(draw.any(domain.int_range("tree.roots"))), c.model.vocab);
    const int max_children =
        std::min<int>(static_cast<int>(draw.any(domain.int_range("tree.max_children"))), c.model.vocab);
    DraftTree tree;
    std::vector<int> children;           // per node
    std::vector<Autoregressive> states;  // AR state after context ++ path(i)
    Autoregressive root_state(model, context);
    int roots = 0;
    for (int i = 0; i < nodes; ++i) {
      // Candidate parents with room left; -1 (a new root) while roots remain.
      std::vector<int> open;
      if (roots < max_roots) open.push_back(-1);
      for (int p = 0; p < i; ++p)
        if (children[static_cast<size_t>(p)] < max_children) open.push_back(p);
      if (open.empty()) break;
      int parent;
      if (i > 0 && children[static_cast<size_t>(i - 1)] < max_children && draw.chance(chain_rate))
        parent = i - 1;
      else
        parent = open[static_cast<size_t>(draw.index(open.size()))];
      const Autoregressive& at = parent < 0 ? root_state : states[static_cast<size_t>(parent)];
      std::set<int> taken;
      for (int j = 0; j < i; ++j)
        if (tree.parents[static_cast<size_t>(j)] == parent) taken.insert(tree.tokens[static_cast<size_t>(j)]);
      int token = at.next().index;
      if (taken.count(token) || !draw.chance(match_rate)) {
        std::vector<int> free;
        for (int t = 0; t < c.model.vocab; ++t)
          if (!taken.count(t)) free.push_back(t);
        token = free[static_cast<size_t>(draw.index(free.size()))];
      }
      tree.tokens.push_back(token);
      tree.parents.push_back(parent);
      children.push_back(0);
      if (parent < 0)
        ++roots;
      else
        ++children[static_cast<size_t>(parent)];
      Autoregressive next = at;
      next.push(token);
      states.push_back(std::move(next));
    }
    // Advance the context as a correct verifier would (greedy path + bonus).
    Autoregressive walk = root_state;
    for (int current = -1;;) {
      const int want = walk.next().index;
      int next = -1;
      for (int i = 0; i < tree.size() && next < 0; ++i)
        if (tree.parents[static_cast<size_t>(i)] == current && tree.tokens[static_cast<size_t>(i)] == want)
          next = i;
      context.push_back(want);
      if (next < 0) break;
      walk.push(want);
      current = next;
    }
    c.cycles.push_back(std::move(tree));
  }
  return c;
}

namespace {

// Drops nodes; `splice` moves children of a dropped node to its parent,
// otherwise callers mark whole subtrees. `kept` receives new -> old indices.
DraftTree remove_nodes(const DraftTree& tree, const std::vector<bool>& drop, bool splice,
                       std::vector<int>& kept) {
  DraftTree out;
  kept.clear();
  std::vector<int> new_index(tree.tokens.size(), -1);
  for (int i = 0; i < tree.size(); ++i) {
    if (drop[static_cast<size_t>(i)]) continue;
    int p = tree.parents[static_cast<size_t>(i)];
    while (splice && p >= 0 && drop[static_cast<size_t>(p)]) p = tree.parents[static_cast<size_t>(p)];
    new_index[static_cast<size_t>(i)] = out.size();
    out.tokens.push_back(tree.tokens[static_cast<size_t>(i)]);
    out.parents.push_back(p < 0 ? -1 : new_index[static_cast<size_t>(p)]);
    kept.push_back(i);
  }
  return out;
}

// Per cycle: the context a correct verifier sees, and which nodes' tokens
// equal the greedy continuation of their own path.
struct CycleView {
  std::vector<int> context;
  std::vector<bool> matches;
};

std::vector<CycleView> views(const TinyLM& model, const Case& c) {
  std::vector<CycleView> out;
  std::vector<int> context = c.prompt;
  for (const DraftTree& tree : c.cycles) {
    CycleView v{context, std::vector<bool>(tree.tokens.size())};
    std::vector<Autoregressive> states;
    Autoregressive root(model, context);
    for (int i = 0; i < tree.size(); ++i) {
      const int p = tree.parents[static_cast<size_t>(i)];
      Autoregressive at = p < 0 ? root : states[static_cast<size_t>(p)];
      v.matches[static_cast<size_t>(i)] = at.next().index == tree.tokens[static_cast<size_t>(i)];
      at.push(tree.tokens[static_cast<size_t>(i)]);
      states.push_back(std::move(at));
    }
    Autoregressive walk = root;
    for (int current = -1;;) {
      const int want = walk.next().index;
      int next = -1;
      for (int i = 0; i < tree.size() && next < 0; ++i)
        if (tree.parents[static_cast<size_t>(i)] == current && tree.tokens[static_cast<size_t>(i)] == want)
          next = i;
      context.push_back(want);
      if (next < 0) break;
      walk.push(want);
      current = next;
    }
    out.push_back(std::move(v));
    if (out.size() > 64) break;
  }
  return out;
}

// Re-chooses tokens so each node matches (or misses) the greedy
// continuation of its new path exactly as it did before a structural shrink:
// the acceptance pattern, which is what makes the case fail, survives.
DraftTree redraft(const TinyLM& model, const std::vector<int>& context, DraftTree tree,
                  const std::vector<bool>& want_match) {
  const int vocab = model.config().vocab;
  std::vector<Autoregressive> states;
  Autoregressive root(model, context);
  for (int i = 0; i < tree.size(); ++i) {
    const int p = tree.parents[static_cast<size_t>(i)];
    Autoregressive at = p < 0 ? root : states[static_cast<size_t>(p)];
    std::set<int> taken;
    for (int j = 0; j < i; ++j)
      if (tree.parents[static_cast<size_t>(j)] == p) taken.insert(tree.tokens[static_cast<size_t>(j)]);
    const int greedy_token = at.next().index;
    int& token = tree.tokens[static_cast<size_t>(i)];
    if (want_match[static_cast<size_t>(i)]) {
      if (!taken.count(greedy_token)) token = greedy_token;
    } else if (token == greedy_token || taken.count(token)) {
      for (int t = 0; t < vocab; ++t)
        if (t != greedy_token && !taken.count(t)) {
          token = t;
          break;
        }
    }
    at.push(token);
    states.push_back(std::move(at));
  }
  return tree;
}

}  // namespace

// Re-drafts every cycle of `c` against its (possibly new) context so each
// node keeps the acceptance status `want[k][i]` it had before the edit.
Case redraft_all(Case c, const std::vector<std::vector<bool>>& want) {
  const TinyLM model(c.model);
  std::vector<int> context = c.prompt;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    if (k < want.size() && want[k].size() == c.cycles[k].tokens.size())
      c.cycles[k] = redraft(model, context, c.cycles[k], want[k]);
    context = views(model, Case{context, c.model, {c.cycles[k]}}).back().context;
  }
  return c;
}

// Last resort near the bottom: every one-cycle tree with fewer nodes (up to
// 3) and tokens among the first 4 ids, under this seed and a few small ones. Greedy
// edits keep which nodes match the target; a minimal counterexample often
// needs a different pattern (e.g. the first root no longer matching).
rc::Seq<Case> exhaustive_small(const Case& c) {
  int64_t nodes = 0;
  for (const auto& tree : c.cycles) nodes += tree.size();
  const int max_n = static_cast<int>(std::min<int64_t>(3, nodes - 1));
  if (max_n < 1) return rc::Seq<Case>();
  const int tokens = std::min(c.model.vocab, 4);
  // Trees of 1-2 nodes are cheap (at most 8 labelled shapes): try many seeds,
  // since with a 2-token vocabulary a bug shows under about half the models.
  std::vector<std::pair<uint64_t, int>> blocks;  // (seed, n), smallest trees first
  for (int n = 1; n <= max_n; ++n) {
    blocks.push_back({c.model.seed, n});
    for (uint64_t s = 1; s <= (n <= 2 ? 16u : 3u); ++s)
      if (s != c.model.seed) blocks.push_back({s, n});
  }
  return rc::seq::mapcat(rc::seq::fromContainer(blocks), [c, tokens](std::pair<uint64_t, int> b) {
    const uint64_t seed = b.first;
    const int n = b.second;
    int64_t structures = 1, labelings = 1;
    for (int i = 1; i <= n; ++i) structures *= i;  // node i picks a parent among i options
    for (int i = 0; i < n; ++i) labelings *= tokens;
    return rc::seq::map(rc::seq::range<int64_t>(0, structures * labelings),
                        [c, seed, n, tokens, labelings](int64_t index) {
                          Case s = c;
                          s.model.seed = seed;
                          DraftTree tree;
                          int64_t st = index / labelings, lab = index % labelings;
                          for (int i = 0; i < n; ++i) {
                            tree.parents.push_back(static_cast<int>(st % (i + 1)) - 1);
                            st /= i + 1;
                            tree.tokens.push_back(static_cast<int>(lab % tokens));
                            lab /= tokens;
                          }
                          s.cycles = {tree};
                          return s;
                        });
  });
}

// One shrink step, boldest first: fewer cycles, smaller trees (with the
// acceptance pattern re-drafted, then as is), shorter prompts, smaller
// models, shallower trees, the same structure under a smaller model seed,
// smaller tokens. Candidates that break the contract are skipped.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  const TinyLM model(c.model);
  const std::vector<CycleView> view = views(model, c);
  std::vector<std::vector<bool>> pattern;
  for (const auto& v : view) pattern.push_back(v.matches);

  struct Edit {
    size_t cycle;
    DraftTree tree;
    std::vector<int> kept;  // new -> old node
  };
  std::vector<Edit> edits;
  std::vector<int> kept;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    if (tree.size() > 1) {  // drop the second half
      std::vector<bool> drop(tree.tokens.size());
      for (int i = tree.size() / 2; i < tree.size(); ++i) drop[static_cast<size_t>(i)] = true;
      DraftTree t = remove_nodes(tree, drop, false, kept);
      edits.push_back({k, std::move(t), kept});
    }
    for (int n = 0; n < tree.size(); ++n) {  // drop the subtree under n
      std::vector<bool> drop(tree.tokens.size());
      for (int i = 0; i < tree.size(); ++i) drop[static_cast<size_t>(i)] = is_ancestor_or_self(tree, n, i);
      DraftTree t = remove_nodes(tree, drop, false, kept);
      edits.push_back({k, std::move(t), kept});
    }
    for (int n = 0; n < tree.size(); ++n) {  // splice n out, keeping its children
      std::vector<bool> drop(tree.tokens.size());
      drop[static_cast<size_t>(n)] = true;
      DraftTree t = remove_nodes(tree, drop, true, kept);
      edits.push_back({k, std::move(t), kept});
    }
  }
  std::vector<Edit> reparent;  // a node moves up to its grandparent (same node count)
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    std::vector<int> same(tree.tokens.size());
    for (size_t i = 0; i < same.size(); ++i) same[i] = static_cast<int>(i);
    for (int n = 0; n < tree.size(); ++n) {
      const int p = tree.parents[static_cast<size_t>(n)];
      if (p < 0) continue;
      DraftTree t = tree;
      t.parents[static_cast<size_t>(n)] = tree.parents[static_cast<size_t>(p)];
      reparent.push_back({k, std::move(t), same});
    }
  }
  auto apply = [c, pattern](const Edit& e, uint64_t seed, bool keep_pattern) {
    Case s = c;
    s.cycles[e.cycle] = e.tree;
    s.model.seed = seed;
    if (!keep_pattern) return s;
    std::vector<std::vector<bool>> want = pattern;
    want.resize(s.cycles.size());
    want[e.cycle].clear();
    for (int old : e.kept) want[e.cycle].push_back(pattern[e.cycle][static_cast<size_t>(old)]);
    return redraft_all(std::move(s), want);
  };
  // Smaller seeds to retry a structure under: with 2-3 token vocabularies a
  // bug can hide behind a coincidence of one model and show under another.
  std::vector<uint64_t> seeds;
  for (uint64_t s = 1; s <= 6 && s < c.model.seed; ++s) seeds.push_back(s);

  std::vector<Case> cheap;  // built eagerly: no model runs
  for (size_t k = 0; k < c.cycles.size() && c.cycles.size() > 1; ++k) {
    Case s = c;
    s.cycles.erase(s.cycles.begin() + static_cast<long>(k));
    cheap.push_back(std::move(s));
  }
  std::vector<Case> simpler;  // prompt, model, tokens
  if (c.prompt.size() > 1) {
    Case s = c;
    s.prompt.erase(s.prompt.begin(), s.prompt.begin() + static_cast<long>(c.prompt.size() / 2));
    simpler.push_back(std::move(s));
    for (size_t i = 0; i < c.prompt.size(); ++i) {
      Case t = c;
      t.prompt.erase(t.prompt.begin() + static_cast<long>(i));
      simpler.push_back(std::move(t));
    }
  }
  int max_token = 0;
  for (int t : c.prompt) max_token = std::max(max_token, t);
  for (const auto& tree : c.cycles)
    for (int t : tree.tokens) max_token = std::max(max_token, t);
  for (auto change : std::initializer_list<void (*)(ModelConfig&, int)>{
           [](ModelConfig&m, int top) { m.vocab = std::max(2, top + 1); },
           [](ModelConfig&m, int) { m.layers = std::max(1, m.layers - 1); },
           [](ModelConfig&m, int) { m.heads = 1; },
           [](ModelConfig&m, int) { m.d_model = std::max(m.heads, m.d_model - m.heads); }}) {
    Case s = c;
    change(s.model, max_token);
    simpler.push_back(std::move(s));
  }
  std::vector<Case> tokens;
  for (size_t i = 0; i < c.prompt.size(); ++i)
    if (c.prompt[i] > 0) {
      Case s = c;
      s.prompt[i] = 0;
      tokens.push_back(std::move(s));
    }
  for (size_t k = 0; k < c.cycles.size(); ++k)
    for (size_t i = 0; i < c.cycles[k].tokens.size(); ++i)
      for (int t = 0; t < c.cycles[k].tokens[i]; ++t) {
        Case s = c;
        s.cycles[k].tokens[i] = t;
        tokens.push_back(std::move(s));
      }

  const uint64_t seed = c.model.seed;
  auto edits_seq = rc::seq::fromContainer(edits);
  auto reparent_seq = rc::seq::fromContainer(reparent);
  auto under = [=](rc::Seq<Edit> es, bool keep) {
    return rc::seq::map(std::move(es), [=](const Edit& e) { return apply(e, seed, keep); });
  };
  auto reseeded = [=](rc::Seq<Edit> es) {
    return rc::seq::mapcat(rc::seq::fromContainer(seeds), [=](uint64_t s) {
      return rc::seq::map(es, [=](const Edit& e) { return apply(e, s, true); });
    });
  };
  auto seed_only = rc::seq::map(rc::seq::fromContainer(seeds), [c, pattern](uint64_t s) {
    Case t = c;
    t.model.seed = s;
    return redraft_all(std::move(t), pattern);
  });
  auto all = rc::seq::concat(rc::seq::fromContainer(std::move(cheap)), under(edits_seq, true),
                             under(edits_seq, false), rc::seq::fromContainer(std::move(simpler)),
                             under(reparent_seq, true), under(reparent_seq, false), reseeded(edits_seq),
                             reseeded(reparent_seq), std::move(seed_only),
                             rc::seq::fromContainer(std::move(tokens)), exhaustive_small(c));
  return rc::seq::filter(std::move(all), [c](const Case& s) { return !(s == c) && validate(s).empty(); });
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  const ModelConfig& m = c.model;
  // d_model is a drawn width rounded up to a multiple of heads.
  const IntRange w = d.int_range("model.d_model");
  const int64_t lo = (w.lo + m.heads - 1) / m.heads * m.heads, hi = (w.hi + m.heads - 1) / m.heads * m.heads;
  if (m.d_model < lo || m.d_model > hi)
    return fmt::format("model.d_model = {} is outside [{}, {}] rounded up to a multiple of {} heads",
                       m.d_model, w.lo, w.hi, m.heads);
  if (std::string why =
          first_problem({outside_int_range(d, "vocab", m.vocab), outside_int_range(d, "model.heads", m.heads),
                         outside_int_range(d, "model.layers", m.layers),
                         outside_int_range(d, "prompt_len", static_cast<int64_t>(c.prompt.size())),
                         outside_int_range(d, "cycles", static_cast<int64_t>(c.cycles.size()))});
      !why.empty())
    return why;
  for (size_t k = 0; k < c.cycles.size(); ++k) {
    const DraftTree& tree = c.cycles[k];
    // A tree stops short of its drawn node count only when no node has room left.
    if (tree.size() < 1 || tree.size() > d.int_range("tree.nodes").hi)
      return fmt::format("cycle {}: {} nodes, outside [1, {}]", k, tree.size(), d.int_range("tree.nodes").hi);
    std::vector<int> children(static_cast<size_t>(tree.size()), 0);
    int roots = 0;
    for (int p : tree.parents) (p < 0 ? roots : children[static_cast<size_t>(p)]) += 1;
    if (roots > d.int_range("tree.roots").hi)
      return fmt::format("cycle {}: {} roots, over tree.roots = {}", k, roots, d.int_range("tree.roots").hi);
    if (*std::max_element(children.begin(), children.end()) > d.int_range("tree.max_children").hi)
      return fmt::format("cycle {}: a node has more than tree.max_children = {} children", k,
                         d.int_range("tree.max_children").hi);
  }
  return "";
}

namespace {
// Doubles of one trial: the model's weights (about 12 d² per layer plus the
// embedding and unembedding), the generator's and the oracle's per-node
// autoregressive states (a K/V cache per layer over the whole context) and
// the N + 1 logit rows per cycle, for target and reference.
double dflash_bytes(double vocab, double d_model, double layers, double prompt, double nodes, double cycles) {
  const double context = prompt + cycles * (nodes + 1);
  const double weights = layers * 12 * d_model * d_model + 2 * vocab * d_model;
  const double states = nodes * context * layers * 2 * d_model;
  const double logits = cycles * (nodes + 1) * vocab;
  return 8 * (weights + 2 * (states + logits + context * layers * 2 * d_model));
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  int nodes = 0;
  for (const DraftTree& t : c.cycles) nodes = std::max(nodes, t.size());
  return dflash_bytes(c.model.vocab, c.model.d_model, std::max(1, c.model.layers), double(c.prompt.size()),
                      nodes, double(c.cycles.size()));
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  const int64_t heads = hi("model.heads"), width = (hi("model.d_model") + heads - 1) / heads * heads;
  return {dflash_bytes(double(hi("vocab")), double(width), double(std::max<int64_t>(1, hi("model.layers"))),
                       double(hi("prompt_len")), double(hi("tree.nodes")), double(hi("cycles"))),
          fmt::format("V {} x d_model {} x layers {}, prompt {} + {} cycles of {} nodes", hi("vocab"), width,
                      hi("model.layers"), hi("prompt_len"), hi("cycles"), hi("tree.nodes")),
          "vocab, model.d_model, model.layers, prompt_len, tree.nodes or cycles"};
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["prompt"] = case_yaml::list(c.prompt);
  YAML::Node model(YAML::NodeType::Map);
  model["vocab"] = c.model.vocab;
  model["d_model"] = c.model.d_model;
  model["layers"] = c.model.layers;
  model["heads"] = c.model.heads;
  model["seed"] = c.model.seed;
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
  expect_keys(m, {"vocab", "d_model", "layers", "heads", "seed"}, "model");
  c.model.vocab = read<int>(m, "vocab");
  c.model.d_model = read<int>(m, "d_model");
  c.model.layers = read<int>(m, "layers");
  c.model.heads = read<int>(m, "heads");
  c.model.seed = read<uint64_t>(m, "seed");
  const YAML::Node cycles = n["cycles"];
  if (!cycles || !cycles.IsSequence())
    case_yaml::fail(cycles ? cycles : n, "'cycles' must be a list of trees");
  for (const auto& t : cycles) {
    expect_keys(t, {"tokens", "parents"}, "tree");
    c.cycles.push_back({read_list<int>(t, "tokens"), read_list<int>(t, "parents")});
  }
  if (c.model.d_model > 4096 || c.model.layers > 64 || c.model.vocab > 1 << 20 || c.prompt.size() > 1 << 16)
    case_yaml::fail(m, "model or prompt too large for a test case");
  if (const std::string why = validate(c); !why.empty()) case_yaml::fail(n, why);
  return c;
}

CaseStats Traits::stats(const Case& c) {
  int64_t nodes = 0;
  int max_roots = 0, max_depth = 0;
  for (const auto& tree : c.cycles) {
    nodes += tree.size();
    int roots = 0;
    for (int p : tree.parents) roots += p < 0;
    max_roots = std::max(max_roots, roots);
    for (int d : depths(tree)) max_depth = std::max(max_depth, d);
  }
  return {nodes,
          fmt::format(
              "{}-node tree{} ({} root{}, depth {}), vocab {}, prompt {}, d_model {}, layers {}, heads {}",
              nodes, c.cycles.size() > 1 ? fmt::format("s over {} cycles", c.cycles.size()) : "", max_roots,
              max_roots == 1 ? "" : "s", max_depth, c.model.vocab, c.prompt.size(), c.model.d_model,
              c.model.layers, c.model.heads)};
}

}  // namespace kprop::dflash
