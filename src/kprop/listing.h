// What `prop_runner --list` prints: every spec key, health check, family
// (domain, implementations, external ops, invariants, named tensors,
// transforms) and expression function — as text for people, or as JSON for
// tools (scripts/gen_families_md.py, scripts/gen_spec_tensors.py).
#pragma once

#include <string>

namespace kprop {

struct Spec;

// Without a spec: everything. With one (prop_runner --list --spec S): the
// spec's output coverage, each output of its target and the invariants that
// read it, and its unchecked outputs (kprop/output_reads.h).
std::string list_text(const Spec* spec = nullptr);
// One object: {"spec_keys", "health_checks", "families", "functions"}; with a
// spec {"spec", "family", "outputs", "reads_not_declared", "unchecked_outputs"}.
std::string list_json(const Spec* spec = nullptr);

}  // namespace kprop
