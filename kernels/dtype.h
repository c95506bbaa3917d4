// Element types shared by the CPU reference and the CUDA kernels: BF16 as a 16-bit value with
// round-to-nearest-even conversion, and the two FP8 formats. Bit layouts match CUDA's
// __nv_bfloat16 / __nv_fp8_e4m3 / __nv_fp8_e5m2, so buffers pass between the two unchanged.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP8RT_HD __host__ __device__ __forceinline__
#else
#define FP8RT_HD inline
#endif

namespace fp8rt {

enum class DType : uint8_t { kFloat32, kBFloat16, kE4M3, kE5M2 };
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

const char* DTypeName(DType t);
const char* Fp8FormatName(Fp8Format f);
inline DType ToDType(Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kE4M3 : DType::kE5M2; }

// Largest finite value of each FP8 format: 448 (E4M3) and 57344 (E5M2).
FP8RT_HD float Fp8MaxFinite(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

FP8RT_HD uint32_t FloatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}
FP8RT_HD float BitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

// bfloat16 storage. Conversion from float rounds to nearest even; NaN stays a quiet NaN.
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  FP8RT_HD explicit bf16(float x) : bits(FromFloat(x)) {}
  FP8RT_HD explicit operator float() const { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

  FP8RT_HD static uint16_t FromFloat(float x) {
    uint32_t u = FloatBits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};
static_assert(sizeof(bf16) == 2);

// Widening/narrowing helpers so templated reference code reads the same for float and bf16.
FP8RT_HD float ToFloat(float x) { return x; }
FP8RT_HD float ToFloat(bf16 x) { return static_cast<float>(x); }
template <typename T>
FP8RT_HD T FromFloat(float x) {
  return T(x);
}

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <>
constexpr DType DTypeOf<bf16>() { return DType::kBFloat16; }

}  // namespace fp8rt
