// The reference implementation and the KV-cached one. Both run the same
// correct pipeline; they differ in how the tree logits are computed.
#include "kernels/dflash/dflash.h"

namespace kprop::dflash {

Pipeline correct_pipeline() {
  Pipeline p;
  p.sees = [](const DraftTree& tree, int i, int j) { return is_ancestor_or_self(tree, j, i); };
  p.position_id = [](const DraftTree& tree, int i, int P) {
    return P + depths(tree)[static_cast<size_t>(i)] - 1;
  };
  // A root is predicted by the context's last row, a child of p by p's row.
  p.prediction_row = [](const DraftTree& tree, int i) { return tree.parents[static_cast<size_t>(i)] + 1; };
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

Result speculative_generate(const Case& c, const Pipeline& pipeline, bool kv_cache) {
  const TinyLM model(c.model);
  Result result;
  std::vector<int> context = c.prompt;
  TinyLM::Cache cache = model.empty_cache();
  if (kv_cache)
    for (int t : context) model.append(cache, t, cache.length);

  for (const DraftTree& tree : c.cycles) {
    const int P = static_cast<int>(context.size()), N = tree.size();
    CycleTrace trace;
    trace.context_length = P;
    for (int i = 0; i < N; ++i) trace.position_ids.push_back(pipeline.position_id(tree, i, P));
    trace.mask.assign(static_cast<size_t>(N) * (P + N), 0);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < P + N; ++j)
        trace.mask[static_cast<size_t>(i) * (P + N) + j] = j < P || pipeline.sees(tree, i, j - P);

    if (kv_cache) {
      // Only the tree block runs; the context is already in the cache.
      trace.logits.push_back(cache.last_logits);
      const auto rows = model.forward_block(
          cache, tree.tokens, trace.position_ids,
          [&](int i, int j) { return trace.mask[static_cast<size_t>(i) * (P + N) + P + j] != 0; }, false);
      trace.logits.insert(trace.logits.end(), rows.begin(), rows.end());
    } else {
      // The whole sequence from scratch under the explicit mask.
      std::vector<int> tokens = context, positions;
      tokens.insert(tokens.end(), tree.tokens.begin(), tree.tokens.end());
      for (int j = 0; j < P; ++j) positions.push_back(j);
      positions.insert(positions.end(), trace.position_ids.begin(), trace.position_ids.end());
      TinyLM::Cache empty = model.empty_cache();
      const auto rows = model.forward_block(
          empty, tokens, positions,
          [&](int i, int j) {
            if (i < P) return j <= i;  // the context is causal
            return trace.mask[static_cast<size_t>(i - P) * (P + N) + j] != 0;
          },
          false);
      trace.logits.assign(rows.begin() + (P - 1), rows.end());
    }

    std::vector<int> predicted(static_cast<size_t>(N));
    for (int i = 0; i < N; ++i)
      predicted[static_cast<size_t>(i)] =
          argmax(trace.logits.at(static_cast<size_t>(pipeline.prediction_row(tree, i)))).index;
    trace.accepted = pipeline.accept(tree, predicted);
    for (int node : trace.accepted) trace.emitted.push_back(tree.tokens[static_cast<size_t>(node)]);
    if (pipeline.bonus_token) {
      const size_t row = trace.accepted.empty() ? 0 : static_cast<size_t>(trace.accepted.back() + 1);
      trace.emitted.push_back(argmax(trace.logits[row]).index);
    }
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
