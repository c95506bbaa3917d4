// Shared by the GPU cast tests (quantize_test.cu: the flat casts; cast_transpose_test.cu: the
// fused casts of the cast+transpose family): the shapes, inputs, device FP8 tensor and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt::test {

// AwkwardShapes plus shapes that reach every path of the transposing cast (64x128 tiles): 7x3
// (odd), 72x40 (vector-friendly but narrower than a tile: edge kernel only), 264x136 and 520x520
// (interior tiles plus both edge bands), 512x1024 (interior tiles only).
inline std::vector<test::Shape2D> QuantizeShapes() {
  std::vector<test::Shape2D> shapes = test::AwkwardShapes();
  shapes.push_back({7, 3, "7x3"});
  shapes.push_back({72, 40, "72x40"});
  shapes.push_back({264, 136, "264x136"});
  shapes.push_back({520, 520, "520x520"});
  shapes.push_back({512, 1024, "512x1024"});
  return shapes;
}

// N(0, 1) values with a few planted extremes so every shape saturates somewhere and holds a
// zero and a value that is subnormal in FP8 after scaling.
inline std::vector<float> Inputs(size_t n, uint64_t seed) {
  std::vector<float> v = test::RandomNormal(n, seed);
  v[0] = 9.5f;
  if (n > 1) v[n - 1] = -7.25f;
  if (n > 2) v[n / 2] = 0.f;
  if (n > 3) v[n / 3] = 1e-4f;
  return v;
}

// A scale under which |x| > 2.5 saturates: about 1% of N(0, 1), plus the planted values.
inline float SaturatingScale(Fp8Format f) { return Fp8MaxFinite(f) / 2.5f; }

struct Case {
  DType dtype;
  test::Shape2D shape;
  Fp8Format format;
  bool transpose;
};

inline std::string CaseName(const Case& c) {
  return std::string(DTypeName(c.dtype)) + "_" + c.shape.name + "_" + Fp8FormatName(c.format) +
         (c.transpose ? "_T" : "_noT");
}

// Device-side Fp8Tensor: data, data_t, and scale/scale_inv/amax in one small buffer.
struct DeviceFp8 {
  DeviceBuffer<uint8_t> data, data_t;
  DeviceBuffer<float> scalars;  // [scale, scale_inv, amax]
  Fp8Tensor t;

  DeviceFp8(int64_t rows, int64_t cols, Fp8Format f, bool transpose, float scale, float amax)
      : data(rows * cols), data_t(transpose ? rows * cols : 0), scalars(3) {
    if (data.size() > 0) data.Poison();
    if (data_t.size() > 0) data_t.Poison();
    scalars.Upload({scale, std::numeric_limits<float>::quiet_NaN(), amax});
    t.data = data.get();
    t.data_t = transpose ? data_t.get() : nullptr;
    t.rows = rows;
    t.cols = cols;
    t.format = f;
    t.scale = scalars.get();
    t.scale_inv = scalars.get() + 1;
    t.amax = scalars.get() + 2;
  }
};

inline ::testing::AssertionResult SameCodes(const std::vector<uint8_t>& got,
                                            const std::vector<uint8_t>& want,
                                            const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " codes differ; first at [" << first
         << "]: gpu 0x" << std::hex << int(got[first]) << ", cpu 0x" << int(want[first]);
}

inline ::testing::AssertionResult SameBits(float got, float want, const std::string& what) {
  if (FloatBits(got) == FloatBits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": gpu " << got << " (0x" << std::hex << FloatBits(got) << "), cpu " << want
         << " (0x" << FloatBits(want) << ")";
}

// The GPU cast's scale_inv, amax and saturation count against the CPU's.
inline void ExpectSameTelemetry(DeviceFp8& got, const HostFp8& want,
                                DeviceBuffer<unsigned long long>& d_sat, uint64_t want_sat) {
  const std::vector<float> scalars = got.scalars.Download();
  EXPECT_TRUE(SameBits(scalars[1], want.scale_inv, "scale_inv"));
  EXPECT_TRUE(SameBits(scalars[2], want.amax, "amax"));
  EXPECT_EQ(d_sat.Download()[0], want_sat) << "saturated";
}

// Every Case: both dtypes x QuantizeShapes() x both formats x with and without data_t.
inline std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    for (const test::Shape2D& s : QuantizeShapes()) {
      for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
        for (bool t : {true, false}) cases.push_back({d, s, f, t});
      }
    }
  }
  return cases;
}

// The fixture of the tests parameterised over a Case (QuantizeGpu, QuantizeDbiasGpu).
class QuantizeCaseGpuTest : public GpuTest, public ::testing::WithParamInterface<Case> {};

}  // namespace fp8rt::test
