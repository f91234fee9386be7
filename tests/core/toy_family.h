// A toy family for framework tests: sums of small integer lists. Its mutants
// have known minimal counterexamples, so shrinking can be tested exactly.
#pragma once

#include "kprop/family.h"

namespace kprop::toy {

struct Case {
  std::vector<int> xs;
  bool operator==(const Case&) const = default;
};
struct Result {
  long sum = 0;
};

struct Traits {
  using Case = toy::Case;
  using Result = toy::Result;
  static constexpr const char* name = "toy.sum";
  static constexpr const char* description = "sum of a list (framework tests)";
  static Schema domain_schema();
  static Case build(Draw& draw, const Values& domain);
  static rc::Seq<Case> shrinks(const Case& c, const Values& domain);
  static std::string in_domain(const Case& c, const Values& domain);
  static double case_bytes(const Case& c);
  static CaseSize max_case_bytes(const Values& domain);
  static YAML::Node to_yaml(const Case& c);
  static Case from_yaml(const YAML::Node& node);
  static CaseStats stats(const Case& c);
};

}  // namespace kprop::toy
