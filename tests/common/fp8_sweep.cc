// Builds the FP8 conversion sweep.
#include "tests/common/fp8_sweep.h"

#include <cmath>
#include <limits>

#include "kernels/fp8.h"

namespace fp8rt::test {

std::vector<float> Fp8ConversionSweep(Fp8Format f) {
  std::vector<float> v;
  // 2^32 / 257 ~ 16.7M patterns; the odd stride visits every value of the low byte.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) v.push_back(BitsFloat(uint32_t(u)));
  // Midpoints between neighbouring codes (ties: round to even) and one float either side.
  for (int c = 0; c < 0x7f; ++c) {
    const float a = Fp8Decode(uint8_t(c), f), b = Fp8Decode(uint8_t(c + 1), f);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const float mid = 0.5f * (a + b);
    for (float m : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY), a, b}) {
      v.push_back(m);
      v.push_back(-m);
    }
  }
  const float mx = Fp8MaxFinite(f);
  for (float s : {0.f, -0.f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), mx, 1.0625f * mx, 1.125f * mx,
                  2.f * mx, -2.f * mx}) {
    v.push_back(s);
  }
  return v;
}

}  // namespace fp8rt::test
