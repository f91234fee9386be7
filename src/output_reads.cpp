// Static output coverage (kprop/output_reads.h).
#include "kprop/output_reads.h"

#include <algorithm>

#include "kprop/external.h"

namespace kprop {
namespace {

// Output names in contract order, each once (an output carried by two ops
// of one family is one output to check).
std::vector<std::string> contract_outputs(const Family& family) {
  std::vector<std::string> out;
  for (const auto& op : family.external_ops())
    for (const auto& o : op.outputs)
      if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  return out;
}

// The outputs a named tensor is or is computed from: "target.X" or
// "transformed.target.X" (a metamorphic relation's derived case) for an
// output X, or what Family::tensor_outputs says of X.
std::vector<std::string> outputs_of_tensor(const Family& family, const std::string& tensor,
                                           const std::vector<std::string>& outputs) {
  for (const std::string prefix : {"target.", "transformed.target."}) {
    if (tensor.rfind(prefix, 0) != 0) continue;
    const std::string name = tensor.substr(prefix.size());
    if (std::find(outputs.begin(), outputs.end(), name) != outputs.end()) return {name};
    const auto& derived = family.tensor_outputs();
    if (const auto it = derived.find(name); it != derived.end()) {
      if (std::find(it->second.begin(), it->second.end(), "*") != it->second.end()) return outputs;
      return it->second;
    }
  }
  return {};
}

std::vector<std::string> outputs_of_tensors(const Family& family, const std::vector<std::string>& tensors,
                                            const std::vector<std::string>& outputs) {
  std::vector<std::string> out;
  for (const auto& t : tensors)
    for (const auto& o : outputs_of_tensor(family, t, outputs))
      if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  return out;
}

}  // namespace

std::vector<std::string> output_tensors(const Family& family) {
  std::vector<std::string> published, out;
  for (const auto& info : family.tensor_infos())
    if (info.name.rfind("target.", 0) == 0) published.push_back(info.name.substr(7));
  const auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const std::vector<std::string> outputs = contract_outputs(family);
  for (const auto& o : outputs) {
    if (has(published, o)) {
      if (!has(out, "target." + o)) out.push_back("target." + o);
      continue;
    }
    bool covered = false;
    for (const auto& [name, from] : family.tensor_outputs())
      if (has(published, name) && (has(from, o) || has(from, "*"))) {
        covered = true;
        if (!has(out, "target." + name)) out.push_back("target." + name);
      }
    if (!covered) return {};
  }
  return out;
}

std::optional<std::vector<std::string>> invariant_reads(const Spec& spec, const InvariantUse& use) {
  const std::vector<std::string> outputs = contract_outputs(*spec.family);
  // An expression checks what its `expect` reads: a `when` only discards,
  // so an output read there alone is not checked by it.
  if (use.expression) return outputs_of_tensors(*spec.family, use.expression->expect.names(), outputs);
  if (use.callback) return outputs_of_tensors(*spec.family, use.callback->names, outputs);
  const auto& declared = spec.family->invariants().at(use.index).reads;
  if (!declared) return std::nullopt;
  if (std::find(declared->begin(), declared->end(), "*") != declared->end()) return outputs;
  return declared;
}

std::vector<OutputReaders> output_readers(const Spec& spec) {
  std::vector<OutputReaders> table;
  for (const auto& op : spec.family->external_ops())
    for (const auto& o : op.outputs)
      if (std::none_of(table.begin(), table.end(), [&](const OutputReaders& r) { return r.output == o; }))
        table.push_back({op.op, o, {}});
  for (const auto& use : spec.invariants) {
    const auto reads = invariant_reads(spec, use);
    if (!reads) continue;
    for (auto& row : table)
      if (std::find(reads->begin(), reads->end(), row.output) != reads->end())
        row.read_by.push_back(use.name);
  }
  return table;
}

std::vector<std::string> unchecked_outputs(const Spec& spec, const std::vector<std::string>& only) {
  std::vector<std::string> out;
  for (const auto& row : output_readers(spec))
    if (std::none_of(row.read_by.begin(), row.read_by.end(), [&](const std::string& name) {
          return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
        }))
      out.push_back(row.op + "." + row.output);
  return out;
}

}  // namespace kprop
