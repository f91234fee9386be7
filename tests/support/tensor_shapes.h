// Shared check for a family's named tensors (kprop/expr.h): on generated
// cases, every declared tensor is published with its declared shape, and
// every transform's "transform.*" and "transformed.*" tensors likewise.
// Symbolic dims bind to the scalar tensor of that name when the family
// publishes one (e.g. "T"), and otherwise must agree across the case's
// tensors (e.g. an output length "O"); numbers are literal.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kprop/expr.h"
#include "kprop/family.h"
#include "kprop/spec.h"

namespace kprop::testing_support {

// Checks `infos` (names as an expression would write them, after `prefix`)
// against what `map` holds; dims bound so far in `dims` (a "transformed."
// case starts from its own, empty, binding).
inline void expect_shapes(const expr::TensorMap& map, const expr::TensorInfos& infos,
                          const std::string& prefix, std::map<std::string, int64_t>& dims,
                          const std::string& where) {
  for (const auto& info : infos)
    if (info.shape.empty() && info.dtype == expr::DType::integer)
      if (const expr::Tensor* t = map.find(prefix + info.name); t && t->rank() == 0)
        dims.emplace(info.name, static_cast<int64_t>(t->data[0]));
  for (const auto& info : infos) {
    const std::string name = prefix + info.name;
    const expr::Tensor* t = map.find(name);
    ASSERT_NE(t, nullptr) << where << ": " << name << " not published";
    ASSERT_EQ(t->rank(), static_cast<int>(info.shape.size()))
        << where << ": " << name << " has shape " << expr::shape_text(t->shape) << ", declared "
        << expr::shape_text(info.shape);
    ASSERT_EQ(t->dtype, info.dtype) << where << ": " << name;
    for (size_t a = 0; a < info.shape.size(); ++a) {
      const std::string& d = info.shape[a];
      if (!d.empty() && d[0] >= '0' && d[0] <= '9') {
        EXPECT_EQ(t->shape[a], std::stoll(d)) << where << ": " << name << " axis " << a;
        continue;
      }
      const auto [it, fresh] = dims.emplace(d, t->shape[a]);
      EXPECT_EQ(t->shape[a], it->second) << where << ": " << name << " axis " << a << " (" << d << ") is "
                                         << t->shape[a] << ", elsewhere " << it->second;
      (void)fresh;
    }
  }
}

// `cases` generated cases of `spec` (fixed seeds) through `spec`'s target and
// reference: every tensor and every transform's tensors.
inline void check_named_tensors(const Spec& spec, int cases) {
  const Family& f = *spec.family;
  ASSERT_FALSE(f.tensor_infos().empty()) << f.name() << " publishes no tensors";
  const int target = f.find_implementation(spec.target), reference = f.find_implementation(spec.reference);
  ASSERT_GE(target, 0);
  ASSERT_GE(reference, 0);
  std::vector<std::string> all;
  for (const auto& info : f.tensor_infos()) all.push_back(info.name);
  for (int seed = 1; seed <= cases; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, static_cast<uint64_t>(seed), 1 + seed % 60);
    const AnyCase c = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    const std::string where = "case " + std::to_string(seed) + " (" + f.stats(c).summary + ")";
    auto trial = f.begin_trial(c, static_cast<size_t>(target), static_cast<size_t>(reference));
    const expr::TensorMap* map = trial->tensors(all);
    ASSERT_NE(map, nullptr);
    std::map<std::string, int64_t> dims;
    expect_shapes(*map, f.tensor_infos(), "", dims, where);
    for (size_t i = 0; i < f.transforms().size(); ++i) {
      const TransformInfo& tr = f.transforms()[i];
      std::vector<std::string> names;
      for (const auto& info : tr.tensors) names.push_back(info.name);
      for (const auto& n : all) names.push_back("transformed." + n);
      const expr::TensorMap* view =
          trial->transformed_tensors(tr.name, i, Values::defaults(tr.params), names);
      ASSERT_NE(view, nullptr);
      std::map<std::string, int64_t> derived;
      expect_shapes(*view, f.tensor_infos(), "transformed.", derived, where + ", " + tr.name);
      // transform.* dims are the original case's (permutations of its axes).
      std::map<std::string, int64_t> original = dims;
      expect_shapes(*view, tr.tensors, "", original, where + ", " + tr.name);
    }
  }
}

// The default parameters of transform `name` of `Traits`.
template <typename Traits>
Values transform_defaults(const std::string& name) {
  for (const TransformInfo& t : Traits::transforms())
    if (t.name == name) return Values::defaults(t.params);
  ADD_FAILURE() << "no transform " << name;
  return {};
}

}  // namespace kprop::testing_support
