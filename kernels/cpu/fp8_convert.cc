// Reference FP8 conversion, written from the format definitions (not from CUDA's emulation), so
// that the GPU test compares two independent implementations.
#include <cmath>
#include <limits>

#include "kernels/fp8.h"

namespace fp8rt {
namespace {

struct Fp8Spec {
  int mbits;        // mantissa bits
  int bias;         // exponent bias
  uint8_t maxcode;  // code of the largest finite magnitude
};

constexpr Fp8Spec Spec(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? Fp8Spec{3, 7, 0x7e} : Fp8Spec{2, 15, 0x7b};
}

// Rounds q >= 0 to the nearest integer, ties to even. q < 2^24, so the arithmetic is exact.
double RoundHalfEven(double q) {
  double r = std::floor(q);
  double frac = q - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return r;
}

}  // namespace

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kE4M3: return "e4m3";
    case DType::kE5M2: return "e5m2";
  }
  return "?";
}

const char* Fp8FormatName(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

uint8_t Fp8Encode(float x, Fp8Format f) {
  const Fp8Spec s = Spec(f);
  const uint32_t u = FloatBits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 31) << 7);
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7f;                               // NaN
  if (abs_bits == 0x7f800000u) return static_cast<uint8_t>(sign | s.maxcode);  // inf saturates
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  const int emin = 1 - s.bias;  // exponent of the smallest normal
  int e = std::ilogb(a);
  if (e < emin) e = emin;  // subnormal range shares the smallest normal's quantum
  const double quantum = std::ldexp(1.0, e - s.mbits);
  const double r = RoundHalfEven(a / quantum);  // in [0, 2^(mbits+1)]
  if (r == 0.0) return sign;
  const int64_t lead = int64_t{1} << s.mbits;
  int64_t code;
  if (r < static_cast<double>(lead)) {
    code = static_cast<int64_t>(r);  // subnormal: exponent field 0
  } else {
    // (e - emin + 1) is the biased exponent; r == 2*lead carries into the next binade.
    code = (static_cast<int64_t>(e - emin + 1) << s.mbits) + static_cast<int64_t>(r) - lead;
  }
  if (code > s.maxcode) code = s.maxcode;
  return static_cast<uint8_t>(sign | code);
}

float Fp8Decode(uint8_t code, Fp8Format f) {
  const Fp8Spec s = Spec(f);
  const bool neg = (code & 0x80) != 0;
  const int mag = code & 0x7f;
  const int ebits = 7 - s.mbits;
  const int exp_field = mag >> s.mbits;
  const int mant = mag & ((1 << s.mbits) - 1);
  float v;
  if (f == Fp8Format::kE4M3 && mag == 0x7f) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (f == Fp8Format::kE5M2 && exp_field == (1 << ebits) - 1) {
    v = mant == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exp_field == 0) {
    v = static_cast<float>(std::ldexp(static_cast<double>(mant), 1 - s.bias - s.mbits));
  } else {
    v = static_cast<float>(
        std::ldexp(1.0 + static_cast<double>(mant) / (1 << s.mbits), exp_field - s.bias));
  }
  return neg ? -v : v;
}

const float* Fp8DecodeTable(Fp8Format f) {
  struct Tables {
    float t[2][256];
    Tables() {
      for (int c = 0; c < 256; ++c) {
        t[0][c] = Fp8Decode(static_cast<uint8_t>(c), Fp8Format::kE4M3);
        t[1][c] = Fp8Decode(static_cast<uint8_t>(c), Fp8Format::kE5M2);
      }
    }
  };
  static const Tables tables;
  return tables.t[f == Fp8Format::kE4M3 ? 0 : 1];
}

namespace cpu {

void Fp8EncodeArray(const float* in, uint8_t* out, size_t n, Fp8Format f) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp8Encode(in[i], f);
}

void Fp8DecodeArray(const uint8_t* in, float* out, size_t n, Fp8Format f) {
  const float* table = Fp8DecodeTable(f);
  for (size_t i = 0; i < n; ++i) out[i] = table[in[i]];
}

}  // namespace cpu
}  // namespace fp8rt
