// A row of a kernel's mutant table (kernels/<family>/mutants.cpp): a name, a
// one-line description of the bug and the implementation that has it.
// Self-contained (the standard library only), so kernels may include it
// like kprop/rng.h, kprop/half.h and kprop/float_type.h.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kprop {

template <typename Case, typename Result>
struct Mutant {
  const char* name;
  const char* description;
  Result (*run)(const Case&);
  // The bug reads or writes outside its buffers (ImplInfo::out_of_bounds).
  bool out_of_bounds = false;
};

// The row named `name` of `table`; std::logic_error when there is none.
template <typename Row>
const Row& find_mutant(const std::vector<Row>& table, const std::string& name) {
  for (const Row& m : table)
    if (name == m.name) return m;
  throw std::logic_error("no mutant " + name);
}

}  // namespace kprop
