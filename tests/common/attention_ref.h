// Shared by the attention GPU tests (flash kernels, cuDNN): the CPU reference of one shape, the
// per-part gradient comparison, the test-name suffix and a bit-for-bit comparison of two runs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/attention.h"
#include "tests/common/test_util.h"

namespace fp8rt::test {

// Inputs drawn from the two seeds (qkv in [-2, 2), dout in [-1, 1)), the forward output, the
// base-2 log-sum-exp per query and the gradient of qkv, all from the CPU reference.
struct AttentionReference {
  std::vector<bf16> qkv, dout, out, dqkv;
  std::vector<float> lse;
};
inline AttentionReference MakeAttentionReference(const AttentionShape& s, uint64_t qkv_seed,
                                                 uint64_t dout_seed) {
  const int64_t n_qkv = s.B * s.T * 3 * s.C(), n_out = s.B * s.T * s.C();
  AttentionReference r;
  r.qkv = CastVector<bf16>(RandomUniform(n_qkv, qkv_seed, -2.f, 2.f));
  r.dout = CastVector<bf16>(RandomUniform(n_out, dout_seed));
  r.out.resize(n_out), r.dqkv.resize(n_qkv), r.lse.resize(s.B * s.NH * s.T);
  std::vector<bf16> att(s.B * s.NH * s.T * s.T);
  EXPECT_TRUE(cpu::AttentionForward(r.out.data(), att.data(), r.qkv.data(), s).ok());
  EXPECT_TRUE(cpu::AttentionLse(r.lse.data(), r.qkv.data(), s).ok());
  EXPECT_TRUE(
      cpu::AttentionBackward(r.dqkv.data(), r.dout.data(), r.qkv.data(), att.data(), s).ok());
  return r;
}

// The whole dqkv, then dq, dk and dv each on its own (a slip in one would hide in the norm of the
// three); with `record`, their relative L2 errors become test properties.
inline void ExpectAttentionGradientsClose(const std::vector<float>& got,
                                          const std::vector<float>& want, const AttentionShape& s,
                                          Tolerance tol, bool record) {
  EXPECT_TRUE(RelL2Close(got, want, tol, "dqkv"));
  const int64_t C = s.C();
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, w;
    for (int64_t r = 0; r < s.B * s.T; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        g.push_back(got[r * 3 * C + part * C + c]);
        w.push_back(want[r * 3 * C + part * C + c]);
      }
    }
    EXPECT_TRUE(RelL2Close(g, w, tol, names[part]));
    if (record) {
      ::testing::Test::RecordProperty(StrCat("rel_l2_", names[part]), std::to_string(RelL2(g, w)));
    }
  }
}

// "B2_T37_NH3_HS64", for parameterised test names.
inline std::string AttentionShapeName(const AttentionShape& s) {
  return StrCat("B", s.B, "_T", s.T, "_NH", s.NH, "_HS", s.HS);
}

// Equal bits element by element (two runs of a deterministic kernel); names the first difference.
template <typename T>
::testing::AssertionResult SameBits(const std::vector<T>& again, const std::vector<T>& first,
                                    const std::string& what) {
  if (again.size() != first.size()) {
    return ::testing::AssertionFailure() << what << ": " << again.size() << " elements, then "
                                         << first.size();
  }
  for (size_t i = 0; i < again.size(); ++i) {
    if (std::memcmp(&again[i], &first[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << what << "[" << i << "] differs between runs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fp8rt::test
