// The declarations every family's traits struct carries, written once. A
// family's properties/<f>/family.h keeps only what is its own:
//
//   struct Traits {
//     KPROP_FAMILY_TRAITS(my::Case, my::Result, "my", "one line");
//     KPROP_FAMILY_EXPRESSIONS();   // optional: named tensors and transforms
//   };
//
// and defines each function once (`Schema Traits::domain_schema() {...}`).
// What each function means is in kprop/family.h. These are macros and not a
// base class because the functions are static and defined per family: a base
// template could only take them as explicit specializations, each declared
// again in every family before its first use.
#pragma once

// Included by kprop/family.h, whose types these declarations name.

// The case type and the builder, shrinker, domain test, memory estimate,
// YAML codec and statistics of a family (kprop/family.h); for a case shared
// by several families (attention.fwd and .bwd), each adding its own result.
#define KPROP_FAMILY_CASE_TRAITS(CaseType)                                                 \
  using Case = CaseType;                                                                   \
  static ::kprop::Schema domain_schema();                                                  \
  /* the one builder: RapidCheck draws, fuzz bytes and fuzz seed corpora (kprop/draw.h) */ \
  static Case build(::kprop::Draw& draw, const ::kprop::Values& domain);                   \
  static ::rc::Seq<Case> shrinks(const Case& c, const ::kprop::Values& domain);            \
  static std::string in_domain(const Case& c, const ::kprop::Values& domain);              \
  static double case_bytes(const Case& c);                                                 \
  static ::kprop::CaseSize max_case_bytes(const ::kprop::Values& domain);                  \
  static ::YAML::Node to_yaml(const Case& c);                                              \
  static Case from_yaml(const ::YAML::Node& node);                                         \
  static ::kprop::CaseStats stats(const Case& c);                                          \
  static_assert(true, "")

// Named tensors for expression invariants (kprop/family.h: HasTensors);
// after `using Result`.
#define KPROP_FAMILY_TENSORS()                                                      \
  static ::kprop::expr::TensorInfos tensor_infos();                                 \
  static void tensors(const Case& c, const Result* target, const Result* reference, \
                      ::kprop::expr::TensorMap& out);                               \
  static_assert(true, "")

// Metamorphic transforms (kprop/family.h: HasTransforms).
#define KPROP_FAMILY_TRANSFORMS()                                                              \
  static const std::vector<::kprop::TransformInfo>& transforms();                              \
  static Case transform(const std::string& name, const Case& c, const ::kprop::Values& params, \
                        uint64_t seed, ::kprop::expr::TensorMap& out);                         \
  static_assert(true, "")

// Both: named tensors (tensors.cpp) and metamorphic transforms (transforms.cpp).
#define KPROP_FAMILY_EXPRESSIONS() \
  KPROP_FAMILY_TENSORS();          \
  KPROP_FAMILY_TRANSFORMS()

// The result type, name and one-line description (what `prop_runner --list`
// shows) of a family; after KPROP_FAMILY_CASE_TRAITS, or in a struct
// deriving from one that has it (attention.fwd and .bwd share a case).
#define KPROP_FAMILY_RESULT(ResultType, family_name, family_description) \
  using Result = ResultType;                                             \
  static constexpr const char* name = family_name;                       \
  static constexpr const char* description = family_description

// A family's traits: KPROP_FAMILY_CASE_TRAITS and KPROP_FAMILY_RESULT.
#define KPROP_FAMILY_TRAITS(CaseType, ResultType, family_name, family_description) \
  KPROP_FAMILY_CASE_TRAITS(CaseType);                                              \
  KPROP_FAMILY_RESULT(ResultType, family_name, family_description)
