// Element access shared by the CPU references: every element widens to double, and results round
// once to the storage type (float, bf16, or double in the finite-difference checks).
#pragma once

#include <type_traits>

#include "kernels/dtype.h"

namespace fp8rt::cpu::ref {

inline double Load(float x) { return x; }
inline double Load(bf16 x) { return ToFloat(x); }
inline double Load(double x) { return x; }
template <typename T>
T Store(double x) {
  if constexpr (std::is_same_v<T, double>) return x;
  return T(static_cast<float>(x));
}

}  // namespace fp8rt::cpu::ref
