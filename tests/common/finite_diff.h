// Finite-difference gradient checks for the CPU references (double precision).
#pragma once

#include <cmath>
#include <functional>
#include <vector>

namespace fp8rt::test {

// Central differences of loss() with respect to every element of x (x is restored).
inline std::vector<double> NumericGrad(std::vector<double>& x, const std::function<double()>& loss,
                                       double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// max |analytic - numeric| / max |numeric|.
template <typename A>
double MaxRelError(const std::vector<A>& analytic, const std::vector<double>& numeric) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    err = std::fmax(err, std::fabs(static_cast<double>(analytic[i]) - numeric[i]));
    scale = std::fmax(scale, std::fabs(numeric[i]));
  }
  return err / scale;
}

}  // namespace fp8rt::test
