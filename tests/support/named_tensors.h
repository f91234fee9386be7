// Shared by family tests: every tensor a family declares (Traits::tensor_infos)
// is published with its declared dtype and shape on generated cases, through
// the same AnyTrial::tensors path expression invariants use; every transform
// yields a valid case and its "transform.*" tensors have the declared shape.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cctype>
#include <functional>
#include <string>
#include <vector>

#include "kprop/family.h"
#include "kprop/spec.h"
#include "tests/support/registered.h"

namespace kprop::testing {

// The shape `symbolic` stands for on this trial: numbers as they are, names
// by the integer scalar tensor of that name the family publishes.
inline std::vector<int64_t> resolve_shape(const std::vector<std::string>& symbolic, AnyTrial& trial) {
  std::vector<int64_t> shape;
  for (const std::string& d : symbolic) {
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) {
      shape.push_back(std::stoll(d));
      continue;
    }
    const expr::TensorMap* m = trial.tensors({d});
    const expr::Tensor* t = m ? m->find(d) : nullptr;
    EXPECT_TRUE(t && t->rank() == 0 && t->dtype == expr::DType::integer)
        << "dim " << d << " is not published";
    shape.push_back(t && t->size() == 1 ? static_cast<int64_t>(t->data[0]) : -1);
  }
  return shape;
}

inline void expect_declared(const expr::TensorInfo& info, const expr::Tensor* t, AnyTrial& trial,
                            const std::string& where) {
  ASSERT_NE(t, nullptr) << info.name << " is declared but not published (" << where << ")";
  EXPECT_EQ(t->dtype, info.dtype) << info.name << " (" << where << ")";
  EXPECT_EQ(expr::shape_text(t->shape), expr::shape_text(resolve_shape(info.shape, trial)))
      << info.name << " declared " << expr::shape_text(info.shape) << " (" << where << ")";
  EXPECT_EQ(t->data.size(), [&] {
    size_t n = 1;
    for (auto d : t->shape) n *= static_cast<size_t>(d);
    return n;
  }()) << info.name;
}

// `cases` cases drawn from `spec_path`'s domain (fixed seeds), run with the
// spec's target and reference; `valid` is the family's validate().
template <typename Traits>
void expect_tensors_and_transforms(const std::string& spec_path, int cases,
                                   const std::function<std::string(const typename Traits::Case&)>& valid) {
  const Spec spec = load_spec(spec_path);
  const Family& family = *spec.family;
  const auto& typed = dynamic_cast<const FamilyDef<Traits>&>(family);
  const size_t target = implementation_index(family, spec.target),
               reference = implementation_index(family, spec.reference);
  const expr::TensorInfos& infos = family.tensor_infos();
  ASSERT_FALSE(infos.empty());
  std::vector<std::string> names;
  for (const auto& i : infos) names.push_back(i.name);
  const auto gen = family.generator(spec.domain);
  int transformed = 0;
  for (int n = 0; n < cases; ++n) {
    const AnyCase c = gen(rc::Random(static_cast<uint64_t>(1000 + n)), n * 2).value();
    const std::string where = "case " + std::to_string(n);
    const auto trial = family.begin_trial(c, target, reference);
    const expr::TensorMap* map = trial->tensors(names);
    ASSERT_NE(map, nullptr);
    EXPECT_TRUE(map->missing().empty()) << where << ": " << *map->missing().begin();
    for (const auto& info : infos) expect_declared(info, map->find(info.name), *trial, where);

    for (size_t k = 0; k < family.transforms().size(); ++k) {
      const TransformInfo& ti = family.transforms()[k];
      const Values params = Values::defaults(ti.params);
      // The derived case itself: valid for the family.
      expr::TensorMap drawn;
      const auto derived =
          Traits::transform(ti.name, FamilyDef<Traits>::unbox(c), params, typed.case_seed(c, ti.name), drawn);
      EXPECT_EQ(valid(derived), "") << ti.name << " on " << where;
      // Through the trial, as a spec reads it: transform.* and transformed.*.
      std::vector<std::string> want;
      for (const auto& t : ti.tensors) want.push_back(t.name);
      for (const auto& i : infos) want.push_back("transformed." + i.name);
      const expr::TensorMap* view = trial->transformed_tensors(&ti, k, params, want);
      ASSERT_NE(view, nullptr);
      for (const auto& t : ti.tensors)
        expect_declared(t, view->find(t.name), *trial, ti.name + " on " + where);
      for (const auto& i : infos)
        EXPECT_NE(view->find("transformed." + i.name), nullptr) << ti.name << ": transformed." << i.name;
      ++transformed;
    }
  }
  EXPECT_EQ(transformed, cases * static_cast<int>(family.transforms().size()));
}

}  // namespace kprop::testing
