// Shared test helpers: the one tolerance table, deterministic random inputs, the awkward shapes,
// and comparisons that report the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/fp8.h"

namespace fp8rt::test {

// What kind of computation produced the values under comparison.
enum class OpKind {
  kExact,          // bit-for-bit: FP8 codes, integer results, copies
  kElementwise,    // one output from a few inputs: GELU, residual, embedding, dequantize
  kNormalization,  // row reductions then a map: LayerNorm, softmax
  kLoss,           // softmax + cross-entropy: loss and dlogits
  kOptimizer,      // AdamW update and the global gradient norm
  kGemm,           // matrix products (compared by relative L2 norm)
  kAttention,      // GEMMs + softmax chains (compared by relative L2 norm)
};

struct Tolerance {
  double atol = 0;    // absolute part of |got - want| <= atol + rtol * |want|
  double rtol = 0;    // relative part
  double rel_l2 = 0;  // ||got - want|| / ||want|| bound, for kGemm / kAttention
};

// The table. out is the dtype of the compared output. fp8 GEMMs pass kE4M3.
Tolerance ToleranceFor(OpKind kind, DType out);

// The awkward shapes every kernel test sweeps, as (rows, cols): 217x256, 1x16, 5x4x3x160
// (flattened to 60x160) and 4096x768.
struct Shape2D {
  int64_t rows, cols;
  std::string name;
};
const std::vector<Shape2D>& AwkwardShapes();

// Uniform in [lo, hi), fixed by seed.
std::vector<float> RandomUniform(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Normal(mean, stddev), fixed by seed.
std::vector<float> RandomNormal(size_t n, uint64_t seed, float mean = 0.f, float stddev = 1.f);

template <typename T>
std::vector<T> CastVector(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}
template <typename T>
std::vector<float> ToFloatVector(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = ToFloat(v[i]);
  return out;
}

// Element-wise |got - want| <= atol + rtol*|want|; NaN matches only NaN. On failure names the
// worst element and how many failed.
::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want,
                                    Tolerance tol, const std::string& what);
// ||got - want||_2 / ||want||_2 <= tol.rel_l2 (and no NaN in got unless in want).
::testing::AssertionResult RelL2Close(const std::vector<float>& got,
                                      const std::vector<float>& want, Tolerance tol,
                                      const std::string& what);
double RelL2(const std::vector<float>& got, const std::vector<float>& want);

// Host buffers of one quantized (rows, cols) tensor, poisoned so unwritten bytes show; amax
// starts at amax0 (the casts max-accumulate into it). Not copyable: t points into it.
struct HostFp8 {
  std::vector<uint8_t> data, data_t;
  float scale = 1, scale_inv = -1, amax = 0;
  Fp8Tensor t;

  HostFp8(int64_t rows, int64_t cols, Fp8Format f, float s, bool transpose = true,
          float amax0 = 0.0f)
      : data(rows * cols, 0xAA), data_t(transpose ? rows * cols : 0, 0xAA), scale(s),
        amax(amax0) {
    t.data = data.data();
    t.data_t = transpose ? data_t.data() : nullptr;
    t.rows = rows;
    t.cols = cols;
    t.format = f;
    t.scale = &scale;
    t.scale_inv = &scale_inv;
    t.amax = &amax;
  }
  HostFp8(const HostFp8&) = delete;
  HostFp8& operator=(const HostFp8&) = delete;
};

// Which orientations a cast writes: both, data_t alone (a transposed-only cast) or data alone.
enum class Outputs { kBoth, kTransposedOnly, kDataOnly };
inline constexpr Outputs kAllOutputs[] = {Outputs::kBoth, Outputs::kTransposedOnly,
                                          Outputs::kDataOnly};

inline const char* OutputsName(Outputs o) {
  return o == Outputs::kBoth ? "data and data_t"
                             : (o == Outputs::kTransposedOnly ? "data_t only" : "data only");
}

// Drops the orientation o leaves out from t (its buffer stays as it was, e.g. poisoned).
inline void Select(Outputs o, Fp8Tensor& t) {
  if (o == Outputs::kTransposedOnly) t.data = nullptr;
  if (o == Outputs::kDataOnly) t.data_t = nullptr;
}
inline void Select(Outputs o, HostFp8& q) { Select(o, q.t); }

}  // namespace fp8rt::test
