// The fp64 vectors of a Case to the buffers of a kernel of precision T and
// back, element by element as static_cast rounds (to nearest).
#pragma once

#include <vector>

namespace kprop {

template <typename T>
std::vector<T> narrow(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}
template <typename T>
std::vector<double> widen(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

}  // namespace kprop
