// What `prop_runner --list` prints: every spec key, health check, family
// (domain, implementations, external ops, invariants, named tensors,
// transforms) and expression function — as text for people, or as JSON for
// tools (scripts/gen_families_md.py, scripts/gen_spec_tensors.py).
#pragma once

#include <string>

namespace kprop {

std::string list_text();
std::string list_json();  // one object: {"spec_keys", "health_checks", "families", "functions"}

}  // namespace kprop
