// FP8 E4M3 / E5M2 encode and decode: round to nearest even, saturate to the largest finite value
// (the hardware's satfinite mode: +-inf and overflow become +-max), NaN becomes the canonical NaN
// 0x7f. The CPU functions here are the oracle; kernels/cuda/fp8_convert.cu must match them bit
// for bit (tests/gpu/fp8_convert_test.cu checks every code and a dense sweep of floats).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/fp8_recipe.h"
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// ---- scalar reference conversions (host) ----
uint8_t Fp8Encode(float x, Fp8Format f);
float Fp8Decode(uint8_t code, Fp8Format f);
// Decoded value of every one of the 256 codes of a format (a lookup table for hot CPU loops).
const float* Fp8DecodeTable(Fp8Format f);

// One quantized tensor, passed whole. Pointers are device pointers for CUDA ops and host
// pointers for CPU ops. `scale` multiplies on the way in (q = sat(x * scale)); `scale_inv`
// multiplies on the way out (x ~= q * scale_inv). `amax` receives max|x| of the source, taken in
// the cast itself. `data_t`, when not null, holds the (cols, rows) transposed copy that cuBLASLt's
// TN layout needs on Hopper.
struct Fp8Tensor {
  uint8_t* data = nullptr;       // (rows, cols) row-major
  uint8_t* data_t = nullptr;     // (cols, rows) row-major, or null
  int64_t rows = 0;
  int64_t cols = 0;
  Fp8Format format = Fp8Format::kE4M3;
  ScalingMode mode = ScalingMode::kDelayed;
  float* scale = nullptr;        // (1)
  float* scale_inv = nullptr;    // (1)
  float* amax = nullptr;         // (1), max-accumulated by the cast; may be null
  int64_t numel() const { return rows * cols; }
};

namespace cpu {
// Encodes/decodes arrays with the scalar reference (no scaling).
void Fp8EncodeArray(const float* in, uint8_t* out, size_t n, Fp8Format f);
void Fp8DecodeArray(const uint8_t* in, float* out, size_t n, Fp8Format f);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Plain element-wise conversion (no scaling), as the quantize kernels do it.
Status Fp8EncodeArray(const float* in, uint8_t* out, size_t n, Fp8Format f, cudaStream_t stream);
Status Fp8DecodeArray(const uint8_t* in, float* out, size_t n, Fp8Format f, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
