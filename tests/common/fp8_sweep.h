// The FP32 inputs the FP8 conversion tests sweep: a stride through all 2^32 bit patterns, every
// midpoint between adjacent FP8 values with its float neighbours, and the special values.
#pragma once

#include <vector>

#include "kernels/dtype.h"

namespace fp8rt::test {
std::vector<float> Fp8ConversionSweep(Fp8Format f);
}  // namespace fp8rt::test
