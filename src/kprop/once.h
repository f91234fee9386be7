// Values derived once from one case: a trial's same-precision baselines and
// tolerance scales, shared by its native invariants (Trial::once) and its
// named tensors (TensorMap::once_store), so neither computes them again.
#pragma once

#include <map>
#include <memory>
#include <type_traits>

namespace kprop {

class OnceStore {
 public:
  // Fn(arg), computed on the first call for this Fn and kept. Fn must be a
  // pure function of arg, and a store serves one arg (one trial's case).
  template <auto Fn, typename Arg>
  const auto& get(Arg&& arg) {
    using Value = std::decay_t<decltype(Fn(arg))>;
    static const char key = 0;  // one per Fn
    std::shared_ptr<const void>& slot = slots_[&key];
    if (!slot) slot = std::make_shared<const Value>(Fn(arg));
    return *static_cast<const Value*>(slot.get());
  }

 private:
  std::map<const void*, std::shared_ptr<const void>> slots_;
};

}  // namespace kprop
