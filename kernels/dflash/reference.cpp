// The reference implementation and the KV-cached one. Both run the same
// correct pipeline; they differ in how the tree logits are computed.
#include <algorithm>

#include "kernels/dflash/dflash.h"

namespace kprop::dflash {

Pipeline correct_pipeline() {
  Pipeline p;
  p.sees = [](const DraftTree& tree, int i, std::span<uint8_t> row) {
    for (int n = i; n >= 0; n = tree.parents[static_cast<size_t>(n)]) row[static_cast<size_t>(n)] = 1;
  };
  p.position_id = [](const DraftTree& tree, int i, int P) { return P + depth(tree, i) - 1; };
  // A root is predicted by the context's last row, a child of p by p's row.
  p.prediction_row = [](const DraftTree& tree, int i) { return tree.parents[static_cast<size_t>(i)] + 1; };
  p.predict = [](const Logits& row) { return argmax(row).index; };
  p.accept = [](const DraftTree& tree, const std::vector<int>& predicted) {
    std::vector<int> path;
    for (int current = -1;;) {
      int next = -1;
      for (int i = 0; i < tree.size() && next < 0; ++i)
        if (tree.parents[static_cast<size_t>(i)] == current &&
            tree.tokens[static_cast<size_t>(i)] == predicted[static_cast<size_t>(i)])
          next = i;
      if (next < 0) return path;
      path.push_back(next);
      current = next;
    }
  };
  return p;
}

void build_tree_inputs(const Pipeline& pipeline, const DraftTree& tree, int context_length,
                       CycleTrace& trace) {
  const int P = context_length, N = tree.size();
  trace.context_length = P;
  trace.position_ids.clear();
  for (int i = 0; i < N; ++i) trace.position_ids.push_back(pipeline.position_id(tree, i, P));
  trace.mask.assign(static_cast<size_t>(N) * (P + N), 0);
  for (int i = 0; i < N; ++i) {
    const auto row =
        std::span(trace.mask).subspan(static_cast<size_t>(i) * (P + N), static_cast<size_t>(P + N));
    std::fill(row.begin(), row.begin() + P, uint8_t{1});
    pipeline.sees(tree, i, row.subspan(static_cast<size_t>(P)));
  }
}

std::vector<Logits> tree_forward(const TinyLM& model, const std::vector<int>& context, const DraftTree& tree,
                                 const std::vector<int>& position_ids, const std::vector<uint8_t>& mask) {
  const int P = static_cast<int>(context.size()), N = tree.size();
  std::vector<int> tokens = context, positions;
  tokens.insert(tokens.end(), tree.tokens.begin(), tree.tokens.end());
  for (int j = 0; j < P; ++j) positions.push_back(j);
  positions.insert(positions.end(), position_ids.begin(), position_ids.end());
  TinyLM::Cache empty = model.empty_cache();
  const auto rows = model.forward_block(
      empty, tokens, positions,
      [&](int i, int j) {
        if (i < P) return j <= i;  // the context is causal
        return mask[static_cast<size_t>(i - P) * (P + N) + j] != 0;
      },
      false);
  return {rows.begin() + (P - 1), rows.end()};
}

void verify_tree(const Pipeline& pipeline, const DraftTree& tree, CycleTrace& trace) {
  const int N = tree.size();
  std::vector<int> predicted(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i)
    predicted[static_cast<size_t>(i)] =
        pipeline.predict(trace.logits.at(static_cast<size_t>(pipeline.prediction_row(tree, i))));
  trace.accepted = pipeline.accept(tree, predicted);
  trace.emitted.clear();
  for (int node : trace.accepted) trace.emitted.push_back(tree.tokens[static_cast<size_t>(node)]);
  if (pipeline.bonus_token) {
    const size_t row = trace.accepted.empty() ? 0 : static_cast<size_t>(trace.accepted.back() + 1);
    trace.emitted.push_back(pipeline.predict(trace.logits[row]));
  }
}

Result speculative_generate(const Case& c, const Pipeline& pipeline, bool kv_cache) {
  const auto shared_model = TinyLM::shared(c.model);
  const TinyLM& model = *shared_model;
  Result result;
  std::vector<int> context = c.prompt;
  TinyLM::Cache cache = model.empty_cache();
  if (kv_cache)
    for (int t : context) model.append(cache, t, cache.length);

  for (const DraftTree& tree : c.cycles) {
    const int P = static_cast<int>(context.size()), N = tree.size();
    CycleTrace trace;
    build_tree_inputs(pipeline, tree, P, trace);
    if (kv_cache) {
      // Only the tree block runs; the context is already in the cache.
      trace.logits.push_back(cache.last_logits);
      const auto rows = model.forward_block(
          cache, tree.tokens, trace.position_ids,
          [&](int i, int j) { return trace.mask[static_cast<size_t>(i) * (P + N) + P + j] != 0; }, false);
      trace.logits.insert(trace.logits.end(), rows.begin(), rows.end());
    } else {
      trace.logits = tree_forward(model, context, tree, trace.position_ids, trace.mask);
    }
    verify_tree(pipeline, tree, trace);
    for (int t : trace.emitted) {
      context.push_back(t);
      if (kv_cache) model.append(cache, t, cache.length);
    }
    result.output.insert(result.output.end(), trace.emitted.begin(), trace.emitted.end());
    result.cycles.push_back(std::move(trace));
  }
  return result;
}

Result reference(const Case& c) {
  return speculative_generate(c, correct_pipeline(), false);
}
Result kv_cached(const Case& c) {
  return speculative_generate(c, correct_pipeline(), true);
}

}  // namespace kprop::dflash
