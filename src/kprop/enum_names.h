// Names of an enum class's values from a table in declaration order, for
// enums numbered 0, 1, ..., N-1:
//   const char* run_status_name(RunStatus s) {
//     static constexpr const char* kNames[] = {"passed", "failed", ...};
//     static_assert(std::size(kNames) == size_t(RunStatus::interrupted) + 1);
//     return enum_name(s, kNames);
//   }
// The static_assert ties the table to the last enumerator, so a value added
// without a name does not compile (what -Wswitch gave the switch this
// replaces, written once instead of once per enum). Self-contained, like
// half.h: kernels may include it.
#pragma once

#include <cstddef>
#include <iterator>
#include <type_traits>

namespace kprop {

template <class E, std::size_t N>
constexpr const char* enum_name(E e, const char* const (&names)[N]) {
  using U = std::underlying_type_t<E>;
  const U i = static_cast<U>(e);
  if constexpr (std::is_signed_v<U>)
    if (i < 0) return "?";
  return static_cast<std::size_t>(i) < N ? names[static_cast<std::size_t>(i)] : "?";
}

// A value per enumerator where a wrong one is silent (an ABI code): each
// entry names its enumerator, and in_enum_order checks at compile time that
// entry i is enumerator i, so a swapped or missing pair does not compile:
//   static constexpr EnumValue<FloatType, int32_t> kCodes[] = {{FloatType::f32, KPROP_F32}, ...};
//   static_assert(std::size(kCodes) == size_t(FloatType::bf16) + 1 && in_enum_order(kCodes));
//   return kCodes[size_t(t)].value;
template <class E, class V>
struct EnumValue {
  E key;
  V value;
};
template <class E, class V, std::size_t N>
constexpr bool in_enum_order(const EnumValue<E, V> (&table)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (static_cast<std::size_t>(table[i].key) != i) return false;
  return true;
}

}  // namespace kprop
