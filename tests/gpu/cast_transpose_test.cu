// The cast+transpose family's fused casts on CUDA: the cast with the bias gradient (QuantizeDbias),
// with GELU backward (QuantizeDbiasGeluGrad), with GELU (QuantizeGelu) and with a norm's output
// (QuantizeLayerNorm), against the unfused ops followed by the plain cast and the CPU reference.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/quantize.h"
#include "kernels/rmsnorm.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "tests/gpu/quantize_test_util.h"

namespace fp8rt {
namespace {

using test::AllCases;
using test::Case;
using test::CaseName;
using test::DeviceBuffer;
using test::DeviceFp8;
using test::ExpectSameTelemetry;
using test::HostFp8;
using test::Inputs;
using test::SameBits;
using test::SameCodes;
using test::SaturatingScale;
using test::kAllOutputs;
using test::Outputs;
using test::OutputsName;
using test::Select;

// Codes equal or one step apart (same sign, magnitudes adjacent): two casts of values that may
// differ by a rounding of T.
::testing::AssertionResult SameOrNeighbourCodes(const std::vector<uint8_t>& got,
                                                const std::vector<uint8_t>& want,
                                                const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const int a = got[i], b = want[i];
    if ((a & 0x80) == (b & 0x80) && std::abs((a & 0x7f) - (b & 0x7f)) <= 1) continue;
    return ::testing::AssertionFailure() << what << ": codes at [" << i << "] differ by more than "
                                         << "one step: gpu 0x" << std::hex << a << ", cpu 0x" << b;
  }
  return ::testing::AssertionSuccess();
}

// The bias gradient rides on the transposing cast: the transposed cases only.
class QuantizeDbiasGpu : public test::QuantizeCaseGpuTest {
 protected:
  // The transposed-only cast (data null, fp8.cache_weights: false's dgrad operand): the CPU's
  // codes, amax, saturation and scale_inv, and the CPU's codes are the full cast's data_t.
  template <typename T>
  void RunTransposedOnly() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> in = test::CastVector<T>(Inputs(n, 23 + n));
    const float scale = SaturatingScale(c.format);
    HostFp8 full(rows, cols, c.format, scale, true, 0.125f);
    ASSERT_TRUE(cpu::Quantize(in.data(), full.t).ok());
    HostFp8 want(rows, cols, c.format, scale, true, 0.125f);
    want.t.data = nullptr;
    uint64_t want_sat = 5;
    ASSERT_TRUE(cpu::Quantize(in.data(), want.t, &want_sat).ok());
    EXPECT_TRUE(SameCodes(want.data_t, full.data_t, "cpu data_t vs the full cast's"));
    DeviceBuffer<T> d_in(in);
    DeviceFp8 got(rows, cols, c.format, true, scale, 0.125f);
    const std::vector<uint8_t> poison = got.data.Download();
    got.t.data = nullptr;
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{5});
    ASSERT_TRUE(cuda::Quantize(d_in.get(), got.t, d_sat.get(), nullptr).ok());
    EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
    EXPECT_TRUE(SameCodes(got.data.Download(), poison, "data (not written)"));
    ExpectSameTelemetry(got, want, d_sat, want_sat);
  }

  // QuantizeDbias: the same codes and telemetry as Quantize, plus dbias += column sums.
  template <typename T>
  void RunDbias() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> in = test::CastVector<T>(Inputs(n, 41 + n));
    const float scale = SaturatingScale(c.format);
    const std::vector<float> db0 = test::RandomNormal(cols, 43);  // accumulated into
    HostFp8 want(rows, cols, c.format, scale, true, 0.125f);
    uint64_t want_sat = 0;
    std::vector<float> want_db = db0;
    ASSERT_TRUE(cpu::QuantizeDbias(in.data(), want.t, want_db.data(), &want_sat).ok());

    DeviceBuffer<T> d_in(in);
    DeviceFp8 got(rows, cols, c.format, true, scale, 0.125f);
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{0});
    DeviceBuffer<float> d_db(db0);
    DeviceBuffer<uint8_t> scratch(cuda::QuantizeDbiasScratchBytes(rows, cols));
    scratch.Poison();
    const Status st = cuda::QuantizeDbias(d_in.get(), got.t, d_db.get(), d_sat.get(), scratch.get(),
                                          scratch.size(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(SameCodes(got.data.Download(), want.data, "data"));
    EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
    const std::vector<float> scalars = got.scalars.Download();
    EXPECT_TRUE(SameBits(scalars[1], want.scale_inv, "scale_inv"));
    EXPECT_TRUE(SameBits(scalars[2], want.amax, "amax"));
    EXPECT_EQ(d_sat.Download()[0], want_sat) << "saturated";
    // Column sums of `rows` O(1) values: FP32 per 64-row tile then over tiles, against double.
    const test::Tolerance tol{1e-6 * static_cast<double>(rows) + 1e-6, 1e-5, 0};
    EXPECT_TRUE(test::AllClose(d_db.Download(), want_db, tol, "dbias"));
  }

  // QuantizeDbiasGeluGrad: the same bits as cuda::GeluBackward followed by cuda::QuantizeDbias
  // (codes, transposed codes, amax, saturations, bias gradient), and the CPU composite within the
  // GELU's float tolerance.
  template <typename T>
  void RunDbiasGeluGrad() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> dout = test::CastVector<T>(Inputs(n, 51 + n));
    const std::vector<T> pre = test::CastVector<T>(test::RandomUniform(n, 53 + n, -4.f, 4.f));
    const float scale = SaturatingScale(c.format);
    const std::vector<float> db0 = test::RandomNormal(cols, 55);
    DeviceBuffer<T> d_dout(dout), d_pre(pre);
    DeviceBuffer<T> d_tmp{std::vector<T>(static_cast<size_t>(n))};
    DeviceBuffer<uint8_t> scratch(cuda::QuantizeDbiasScratchBytes(rows, cols));
    auto run = [&](bool fused, DeviceFp8& out, DeviceBuffer<float>& db,
                   DeviceBuffer<unsigned long long>& sat) {
      const Status st = [&]() -> Status {
        if (fused) {
          return cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_pre.get(), out.t, db.get(), sat.get(),
                                             scratch.get(), scratch.size(), nullptr);
        }
        FP8RT_RETURN_IF_ERROR(
            cuda::GeluBackward(d_tmp.get(), d_pre.get(), d_dout.get(), n, nullptr));
        return cuda::QuantizeDbias(d_tmp.get(), out.t, db.get(), sat.get(), scratch.get(),
                                   scratch.size(), nullptr);
      }();
      ASSERT_TRUE(st.ok()) << st.ToString();
    };
    DeviceFp8 fused(rows, cols, c.format, true, scale, 0.125f);
    DeviceFp8 split(rows, cols, c.format, true, scale, 0.125f);
    DeviceBuffer<float> db_fused(db0), db_split(db0);
    DeviceBuffer<unsigned long long> sat_fused(std::vector<unsigned long long>{0});
    DeviceBuffer<unsigned long long> sat_split(std::vector<unsigned long long>{0});
    run(true, fused, db_fused, sat_fused);
    run(false, split, db_split, sat_split);
    EXPECT_TRUE(SameCodes(fused.data.Download(), split.data.Download(), "data"));
    EXPECT_TRUE(SameCodes(fused.data_t.Download(), split.data_t.Download(), "data_t"));
    const std::vector<float> a = fused.scalars.Download(), b = split.scalars.Download();
    EXPECT_TRUE(SameBits(a[2], b[2], "amax"));
    EXPECT_EQ(sat_fused.Download()[0], sat_split.Download()[0]) << "saturated";
    const std::vector<float> got_db = db_fused.Download(), split_db = db_split.Download();
    for (int64_t i = 0; i < cols; ++i) {
      ASSERT_TRUE(SameBits(got_db[i], split_db[i], "dbias")) << "column " << i;
    }
    // Against the CPU composite: the GELU derivative (expf vs exp) may move a rounding of T.
    HostFp8 want(rows, cols, c.format, scale, true, 0.125f);
    std::vector<float> want_db = db0;
    ASSERT_TRUE(cpu::QuantizeDbiasGeluGrad(dout.data(), pre.data(), want.t, want_db.data()).ok());
    const test::Tolerance tol{1e-2 * static_cast<double>(rows) + 1e-3, 1e-2, 0};
    EXPECT_TRUE(test::AllClose(got_db, want_db, tol, "dbias vs CPU"));
  }

  // With gelu_out (train.recompute's FC2 input cast again in FC's dY cast): out, its telemetry
  // and dbias exactly as without it; gelu_out's transposed codes and scale_inv cuda::QuantizeGelu's
  // (and so the CPU's cast of cuda::GeluForward's output), in either format beside either of
  // out's; gelu_out's data buffer and the amax slot beside it untouched (neither is passed).
  template <typename T>
  void RunDbiasGeluGradWithGeluOut() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> dout = test::CastVector<T>(Inputs(n, 57 + n));
    std::vector<float> x = test::RandomUniform(n, 59 + n, -4.f, 4.f);
    x[0] = 1e4f;  // GELU saturates gelu_out's cast
    if (n > 2) x[n / 2] = -40.f;
    const std::vector<T> pre = test::CastVector<T>(x);
    const float scale = SaturatingScale(c.format);
    const std::vector<float> db0 = test::RandomNormal(cols, 58);
    DeviceBuffer<T> d_dout(dout), d_pre(pre);
    DeviceBuffer<uint8_t> scratch(cuda::QuantizeDbiasScratchBytes(rows, cols));
    for (const Fp8Format gf : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      SCOPED_TRACE(gf == Fp8Format::kE4M3 ? "gelu_out e4m3" : "gelu_out e5m2");
      const float gscale = SaturatingScale(gf);
      DeviceFp8 fused(rows, cols, c.format, true, scale, 0.125f);
      DeviceFp8 plain(rows, cols, c.format, true, scale, 0.125f);
      DeviceFp8 got_g(rows, cols, gf, true, gscale, 0.25f);
      DeviceFp8 want_g(rows, cols, gf, true, gscale, 0.25f);
      const std::vector<uint8_t> poison = got_g.data.Download();
      got_g.t.data = nullptr, got_g.t.amax = nullptr;
      want_g.t.data = nullptr, want_g.t.amax = nullptr;
      DeviceBuffer<float> db_fused(db0), db_plain(db0);
      DeviceBuffer<unsigned long long> sat_fused(std::vector<unsigned long long>{0});
      DeviceBuffer<unsigned long long> sat_plain(std::vector<unsigned long long>{0});
      Status st = cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_pre.get(), fused.t, db_fused.get(),
                                              sat_fused.get(), scratch.get(), scratch.size(),
                                              nullptr, &got_g.t);
      ASSERT_TRUE(st.ok()) << st.ToString();
      st = cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_pre.get(), plain.t, db_plain.get(),
                                       sat_plain.get(), scratch.get(), scratch.size(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      st = cuda::QuantizeGelu(d_pre.get(), want_g.t, nullptr, nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(SameCodes(fused.data.Download(), plain.data.Download(), "data"));
      EXPECT_TRUE(SameCodes(fused.data_t.Download(), plain.data_t.Download(), "data_t"));
      const std::vector<float> a = fused.scalars.Download(), b = plain.scalars.Download();
      EXPECT_TRUE(SameBits(a[1], b[1], "scale_inv"));
      EXPECT_TRUE(SameBits(a[2], b[2], "amax"));
      EXPECT_EQ(sat_fused.Download()[0], sat_plain.Download()[0]) << "saturated";
      const std::vector<float> got_db = db_fused.Download(), plain_db = db_plain.Download();
      for (int64_t i = 0; i < cols; ++i) {
        ASSERT_TRUE(SameBits(got_db[i], plain_db[i], "dbias")) << "column " << i;
      }
      const std::vector<uint8_t> g_t = got_g.data_t.Download();
      EXPECT_TRUE(SameCodes(g_t, want_g.data_t.Download(), "gelu_out.data_t"));
      EXPECT_TRUE(SameCodes(got_g.data.Download(), poison, "gelu_out.data (not written)"));
      const std::vector<float> g = got_g.scalars.Download();
      EXPECT_TRUE(SameBits(g[1], want_g.scalars.Download()[1], "gelu_out.scale_inv"));
      EXPECT_TRUE(SameBits(g[2], 0.25f, "the amax slot beside gelu_out (not written)"));
      // The CPU's cast of the GPU's GELU output: the same transposed codes.
      DeviceBuffer<T> d_gelu{std::vector<T>(static_cast<size_t>(n))};
      ASSERT_TRUE(cuda::GeluForward(d_gelu.get(), d_pre.get(), n, nullptr).ok());
      const std::vector<T> gelu = d_gelu.Download();
      HostFp8 host(rows, cols, gf, gscale, true, 0.25f);
      host.t.data = nullptr;
      ASSERT_TRUE(cpu::Quantize(gelu.data(), host.t).ok());
      EXPECT_TRUE(SameCodes(g_t, host.data_t, "gelu_out.data_t vs CPU"));
      // gelu_out's codes one byte off their 8-byte alignment: every tile takes the guarded path,
      // with the same codes.
      DeviceBuffer<uint8_t> shifted(n + 1);
      shifted.Poison();
      Fp8Tensor off = want_g.t;
      off.data_t = shifted.get() + 1;
      st = cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_pre.get(), fused.t, db_fused.get(),
                                       sat_fused.get(), scratch.get(), scratch.size(), nullptr,
                                       &off);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const std::vector<uint8_t> off_t = shifted.Download();
      EXPECT_TRUE(SameCodes(std::vector<uint8_t>(off_t.begin() + 1, off_t.end()), g_t,
                            "gelu_out.data_t, unaligned"));
      // A wrong gelu_out is refused before anything is written.
      Fp8Tensor bad = got_g.t;
      bad.amax = got_g.scalars.get() + 2;
      st = cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_pre.get(), fused.t, db_fused.get(),
                                       sat_fused.get(), scratch.get(), scratch.size(), nullptr,
                                       &bad);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find("gelu_out.amax is set"), std::string::npos) << st.message();
    }
  }

  // The GELU input as E4M3 codes at scale 1 (fp8.gelu_input_fp8): bit for bit the T version
  // given the codes' values (which T holds exactly), on the GPU; and the CPU's codes version
  // within the GELU's float tolerance.
  template <typename T>
  void RunDbiasGeluGradE4m3() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> dout = test::CastVector<T>(Inputs(n, 61 + n));
    const std::vector<float> x = test::RandomUniform(n, 63 + n, -6.f, 6.f);
    std::vector<uint8_t> codes(n);
    std::vector<T> decoded(n);
    for (int64_t i = 0; i < n; ++i) {
      codes[i] = Fp8Encode(i % 97 == 5 ? 1e4f : x[i], Fp8Format::kE4M3);
      decoded[i] = T(Fp8Decode(codes[i], Fp8Format::kE4M3));
    }
    const float scale = SaturatingScale(c.format);
    const std::vector<float> db0 = test::RandomNormal(cols, 65);
    DeviceBuffer<T> d_dout(dout), d_dec(decoded);
    DeviceBuffer<uint8_t> d_codes(codes);
    DeviceBuffer<uint8_t> scratch(cuda::QuantizeDbiasScratchBytes(rows, cols));
    DeviceFp8 from_codes(rows, cols, c.format, true, scale, 0.125f);
    DeviceFp8 from_values(rows, cols, c.format, true, scale, 0.125f);
    DeviceBuffer<float> db_codes(db0), db_values(db0);
    DeviceBuffer<unsigned long long> sat_codes(std::vector<unsigned long long>{0});
    DeviceBuffer<unsigned long long> sat_values(std::vector<unsigned long long>{0});
    Status st =
        cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_codes.get(), from_codes.t, db_codes.get(),
                                    sat_codes.get(), scratch.get(), scratch.size(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = cuda::QuantizeDbiasGeluGrad(d_dout.get(), d_dec.get(), from_values.t, db_values.get(),
                                     sat_values.get(), scratch.get(), scratch.size(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(SameCodes(from_codes.data.Download(), from_values.data.Download(), "data"));
    EXPECT_TRUE(SameCodes(from_codes.data_t.Download(), from_values.data_t.Download(), "data_t"));
    EXPECT_TRUE(
        SameBits(from_codes.scalars.Download()[2], from_values.scalars.Download()[2], "amax"));
    EXPECT_EQ(sat_codes.Download()[0], sat_values.Download()[0]) << "saturated";
    const std::vector<float> got_db = db_codes.Download(), values_db = db_values.Download();
    for (int64_t i = 0; i < cols; ++i) {
      ASSERT_TRUE(SameBits(got_db[i], values_db[i], "dbias")) << "column " << i;
    }
    HostFp8 want(rows, cols, c.format, scale, true, 0.125f);
    std::vector<float> want_db = db0;
    ASSERT_TRUE(cpu::QuantizeDbiasGeluGrad(dout.data(), codes.data(), want.t, want_db.data()).ok());
    const test::Tolerance tol{1e-2 * static_cast<double>(rows) + 1e-3, 1e-2, 0};
    EXPECT_TRUE(test::AllClose(got_db, want_db, tol, "dbias vs CPU"));
  }

  // QuantizeGelu: the same bits as cuda::GeluForward followed by cuda::Quantize (codes in both
  // orientations, then each alone, the other left poisoned; amax, saturations, scale_inv); the
  // CPU's Quantize of the GPU's GELU output gives them too; and the CPU composite (tanh-GELU in
  // double) gives the same codes or neighbours, its GELU moving a rounding of T at most.
  template <typename T>
  void RunGelu() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    std::vector<float> x = test::RandomNormal(n, 71 + n, 0.f, 3.f);
    if (n > 1) x[n - 1] = -12.5f;  // GELU underflows to -0
    if (n > 2) x[n / 2] = -40.f;
    if (n > 3) x[n / 3] = 0.f;
    x[0] = 1e4f;  // saturates
    const std::vector<T> pre = test::CastVector<T>(x);
    const float scale = SaturatingScale(c.format);
    DeviceBuffer<T> d_pre(pre);
    DeviceBuffer<T> d_gelu{std::vector<T>(static_cast<size_t>(n))};
    ASSERT_TRUE(cuda::GeluForward(d_gelu.get(), d_pre.get(), n, nullptr).ok());
    const std::vector<T> gelu = d_gelu.Download();
    for (const Outputs o : kAllOutputs) {
      SCOPED_TRACE(OutputsName(o));
      DeviceFp8 fused(rows, cols, c.format, true, scale, 0.125f);
      DeviceFp8 split(rows, cols, c.format, true, scale, 0.125f);
      const std::vector<uint8_t> poison = fused.data.Download();
      Select(o, fused.t);
      Select(o, split.t);
      DeviceBuffer<unsigned long long> sat_fused(std::vector<unsigned long long>{5});
      DeviceBuffer<unsigned long long> sat_split(std::vector<unsigned long long>{5});
      Status st = cuda::QuantizeGelu(d_pre.get(), fused.t, sat_fused.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      st = cuda::Quantize(d_gelu.get(), split.t, sat_split.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      const bool has_data = o != Outputs::kTransposedOnly, has_t = o != Outputs::kDataOnly;
      const std::vector<uint8_t> data = fused.data.Download(), data_t = fused.data_t.Download();
      EXPECT_TRUE(SameCodes(data, has_data ? split.data.Download() : poison, "data"));
      EXPECT_TRUE(SameCodes(data_t, has_t ? split.data_t.Download() : poison, "data_t"));
      const std::vector<float> a = fused.scalars.Download(), b = split.scalars.Download();
      EXPECT_TRUE(SameBits(a[1], b[1], "scale_inv"));
      EXPECT_TRUE(SameBits(a[2], b[2], "amax"));
      EXPECT_EQ(sat_fused.Download()[0], sat_split.Download()[0]) << "saturated";

      // The CPU's cast of the GPU's GELU output: the same bits.
      HostFp8 want(rows, cols, c.format, scale, true, 0.125f);
      Select(o, want.t);
      uint64_t want_sat = 5;
      ASSERT_TRUE(cpu::Quantize(gelu.data(), want.t, &want_sat).ok());
      ASSERT_GT(want_sat, 5u) << "the inputs must saturate somewhere";
      if (has_data) EXPECT_TRUE(SameCodes(data, want.data, "data vs CPU"));
      if (has_t) EXPECT_TRUE(SameCodes(data_t, want.data_t, "data_t vs CPU"));
      ExpectSameTelemetry(fused, want, sat_fused, want_sat);

      // The CPU composite.
      HostFp8 ref(rows, cols, c.format, scale, true, 0.125f);
      Select(o, ref.t);
      ASSERT_TRUE(cpu::QuantizeGelu(pre.data(), ref.t).ok());
      if (has_data) EXPECT_TRUE(SameOrNeighbourCodes(data, ref.data, "data vs CPU GELU"));
      if (has_t) EXPECT_TRUE(SameOrNeighbourCodes(data_t, ref.data_t, "data_t vs CPU GELU"));
      EXPECT_TRUE(test::AllClose({a[2]}, {ref.amax},
                                 test::ToleranceFor(test::OpKind::kElementwise, DTypeOf<T>()),
                                 "amax vs CPU GELU"));
    }
  }
};

TEST_P(QuantizeDbiasGpu, MatchesReference) {
  if (GetParam().dtype == DType::kFloat32) {
    RunDbias<float>();
  } else {
    RunDbias<bf16>();
  }
}

TEST_P(QuantizeDbiasGpu, TransposedOnlyCastMatchesReference) {
  if (GetParam().dtype == DType::kFloat32) {
    RunTransposedOnly<float>();
  } else {
    RunTransposedOnly<bf16>();
  }
}

TEST_P(QuantizeDbiasGpu, GeluGradFromE4m3CodesMatchesTheDecodedValues) {
  if (GetParam().dtype == DType::kFloat32) {
    RunDbiasGeluGradE4m3<float>();
  } else {
    RunDbiasGeluGradE4m3<bf16>();
  }
}

TEST_P(QuantizeDbiasGpu, GeluGradFusedMatchesGeluBackwardThenQuantizeDbias) {
  if (GetParam().dtype == DType::kFloat32) {
    RunDbiasGeluGrad<float>();
  } else {
    RunDbiasGeluGrad<bf16>();
  }
}

TEST_P(QuantizeDbiasGpu, GeluGradWithGeluOutAlsoCastsTheGeluOutputTransposed) {
  if (GetParam().dtype == DType::kFloat32) {
    RunDbiasGeluGradWithGeluOut<float>();
  } else {
    RunDbiasGeluGradWithGeluOut<bf16>();
  }
}

TEST_P(QuantizeDbiasGpu, GeluCastMatchesGeluForwardThenQuantize) {
  if (GetParam().dtype == DType::kFloat32) {
    RunGelu<float>();
  } else {
    RunGelu<bf16>();
  }
}

std::vector<Case> TransposedCases() {
  std::vector<Case> cases;
  for (const Case& c : AllCases()) {
    if (c.transpose) cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantizeDbiasGpu, ::testing::ValuesIn(TransposedCases()),
                         [](const auto& info) { return CaseName(info.param); });

// QuantizeLayerNorm: a norm's output recomputed from the CUDA forward's saved statistics.
struct NormCase {
  DType dtype;
  test::Shape2D shape;
  bool rms;
};

// The awkward shapes, the model's widths (C = 64, 128, 768, 2048, row counts that leave edge
// tiles), odd widths (7x3; 33x1001: the LayerNorm forward's scalar register kernel) and rows
// wide enough for its re-reading kernel (5x2050: scalar loads in both dtypes; 5x8200: 16-byte
// vectors in both).
std::vector<NormCase> NormCases() {
  std::vector<test::Shape2D> shapes = test::AwkwardShapes();
  for (const test::Shape2D& s : {test::Shape2D{136, 64, "136x64"},
                                 {128, 128, "128x128"},
                                 {200, 768, "200x768"},
                                 {72, 2048, "72x2048"},
                                 {7, 3, "7x3"},
                                 {33, 1001, "33x1001"},
                                 {5, 2050, "5x2050"},
                                 {5, 8200, "5x8200"}}) {
    shapes.push_back(s);
  }
  std::vector<NormCase> cases;
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    for (const test::Shape2D& s : shapes) {
      for (bool rms : {false, true}) cases.push_back({d, s, rms});
    }
  }
  return cases;
}

class QuantizeLayerNormGpu : public test::GpuTest, public ::testing::WithParamInterface<NormCase> {
 protected:
  // cuda::LayerNormForward (cuda::RmsNormForward) on random x gives y, mean and rstd; then
  // cuda::Quantize(y) is the reference: QuantizeLayerNorm from x and the statistics must give its
  // codes (both orientations, then each alone, the other left poisoned), amax, saturation and
  // scale_inv bit for bit. y is the documented formula's, bit for bit, and the CPU reference
  // from the same statistics gives the same cast.
  template <typename T>
  void Run() {
    const NormCase& c = GetParam();
    const int64_t N = c.shape.rows, C = c.shape.cols, n = N * C;
    std::vector<float> xf = test::RandomNormal(n, 91 + n, 0.3f, 1.5f);
    xf[0] = 40.f;  // far out in row 0: saturates once C >= 16
    const std::vector<T> x = test::CastVector<T>(xf);
    const std::vector<T> w = test::CastVector<T>(test::RandomNormal(C, 92, 1.f, 0.3f));
    const std::vector<T> b = test::CastVector<T>(test::RandomNormal(C, 93, 0.f, 0.3f));
    DeviceBuffer<T> d_x(x), d_w(w), d_b(b), d_y(n);
    DeviceBuffer<float> d_mean(N), d_rstd(N);
    d_y.Poison();
    d_mean.Poison();
    d_rstd.Poison();
    Status st = c.rms ? cuda::RmsNormForward(d_y.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C,
                                             1e-5f, nullptr)
                      : cuda::LayerNormForward(d_y.get(), d_mean.get(), d_rstd.get(), d_x.get(),
                                               d_w.get(), d_b.get(), N, C, 1e-5f, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const float* mean = c.rms ? nullptr : d_mean.get();
    const T* bias = c.rms ? nullptr : d_b.get();
    const Fp8Format f = Fp8Format::kE4M3;
    const float scale = SaturatingScale(f);
    DeviceFp8 split(N, C, f, true, scale, 0.125f);
    DeviceBuffer<unsigned long long> sat_split(std::vector<unsigned long long>{5});
    ASSERT_TRUE(cuda::Quantize(d_y.get(), split.t, sat_split.get(), nullptr).ok());
    const std::vector<uint8_t> want_data = split.data.Download(), want_t = split.data_t.Download();
    const std::vector<float> want = split.scalars.Download();
    const uint64_t want_sat = sat_split.Download()[0];
    if (C >= 16) EXPECT_GT(want_sat, 5u) << "the inputs must saturate somewhere";

    for (const Outputs o : kAllOutputs) {
      SCOPED_TRACE(OutputsName(o));
      DeviceFp8 fused(N, C, f, true, scale, 0.125f);
      const std::vector<uint8_t> poison = fused.data.Download();
      Select(o, fused.t);
      DeviceBuffer<unsigned long long> sat(std::vector<unsigned long long>{5});
      st = cuda::QuantizeLayerNorm(d_x.get(), mean, d_rstd.get(), d_w.get(), bias, fused.t,
                                   sat.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(SameCodes(fused.data.Download(),
                            o != Outputs::kTransposedOnly ? want_data : poison, "data"));
      EXPECT_TRUE(
          SameCodes(fused.data_t.Download(), o != Outputs::kDataOnly ? want_t : poison, "data_t"));
      const std::vector<float> got = fused.scalars.Download();
      EXPECT_TRUE(SameBits(got[1], want[1], "scale_inv"));
      EXPECT_TRUE(SameBits(got[2], want[2], "amax"));
      EXPECT_EQ(sat.Download()[0], want_sat) << "saturated";
    }

    // The forward's output is the formula's for the statistics it saved (every kernel variant).
    const std::vector<T> y = d_y.Download();
    const std::vector<float> h_mean = d_mean.Download(), h_rstd = d_rstd.Download();
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = i / C, col = i % C;
      const float xv = ToFloat(x[i]), wv = ToFloat(w[col]);
      const T want_y = T(c.rms ? xv * h_rstd[r] * wv
                               : std::fma((xv - h_mean[r]) * h_rstd[r], wv, ToFloat(b[col])));
      if (std::memcmp(&want_y, &y[i], sizeof(T)) != 0 && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0) << "forward outputs off the formula; first at [" << first
                      << "]: " << ToFloat(y[first]);

    // The CPU reference from the same statistics.
    HostFp8 cpu_q(N, C, f, scale, true, 0.125f);
    uint64_t cpu_sat = 5;
    ASSERT_TRUE(cpu::QuantizeLayerNorm(x.data(), c.rms ? nullptr : h_mean.data(), h_rstd.data(),
                                       w.data(), c.rms ? nullptr : b.data(), cpu_q.t, &cpu_sat)
                    .ok());
    EXPECT_TRUE(SameCodes(want_data, cpu_q.data, "data vs CPU"));
    EXPECT_TRUE(SameCodes(want_t, cpu_q.data_t, "data_t vs CPU"));
    EXPECT_TRUE(SameBits(want[2], cpu_q.amax, "amax vs CPU"));
    EXPECT_EQ(want_sat, cpu_sat) << "saturated vs CPU";
  }
};

TEST_P(QuantizeLayerNormGpu, MatchesTheForwardThenQuantize) {
  if (GetParam().dtype == DType::kFloat32) {
    Run<float>();
  } else {
    Run<bf16>();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantizeLayerNormGpu, ::testing::ValuesIn(NormCases()),
                         [](const auto& info) {
                           const NormCase& c = info.param;
                           return std::string(DTypeName(c.dtype)) + "_" + c.shape.name +
                                  (c.rms ? "_RmsNorm" : "_LayerNorm");
                         });

// The fused casts' NaN and inf inputs, unaligned operands and preconditions.
class CastTransposeGpuMisc : public test::GpuTest {};

// QuantizeGelu on NaN and +-inf inputs (GELU(-inf) is NaN), on the fast path (one full fp32
// tile) and the guarded one (7x13): the split cast's bits, NaN amax included. Then its
// preconditions, which name the op.
TEST_F(CastTransposeGpuMisc, GeluCastNanAndInfMatchTheSplitCast) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 128}, {7, 13}}) {
    const int64_t n = rows * cols;
    std::vector<float> pre = test::RandomNormal(n, 9, 0.f, 3.f);
    pre[3] = std::numeric_limits<float>::quiet_NaN();
    pre[n - 2] = INFINITY;
    pre[n / 2] = -INFINITY;
    DeviceBuffer<float> d_pre(pre), d_gelu(n);
    ASSERT_TRUE(cuda::GeluForward(d_gelu.get(), d_pre.get(), n, nullptr).ok());
    DeviceFp8 fused(rows, cols, Fp8Format::kE4M3, true, 64.f, 0.f);
    DeviceFp8 split(rows, cols, Fp8Format::kE4M3, true, 64.f, 0.f);
    DeviceBuffer<unsigned long long> sat_fused(std::vector<unsigned long long>{0});
    DeviceBuffer<unsigned long long> sat_split(std::vector<unsigned long long>{0});
    ASSERT_TRUE(cuda::QuantizeGelu(d_pre.get(), fused.t, sat_fused.get(), nullptr).ok());
    ASSERT_TRUE(cuda::Quantize(d_gelu.get(), split.t, sat_split.get(), nullptr).ok());
    EXPECT_TRUE(SameCodes(fused.data.Download(), split.data.Download(), "data"));
    EXPECT_TRUE(SameCodes(fused.data_t.Download(), split.data_t.Download(), "data_t"));
    const std::vector<float> a = fused.scalars.Download(), b = split.scalars.Download();
    EXPECT_TRUE(std::isnan(a[2])) << "amax " << a[2];
    EXPECT_TRUE(SameBits(a[2], b[2], "amax (NaN)"));
    EXPECT_EQ(sat_fused.Download()[0], sat_split.Download()[0]) << "saturated";
  }

  DeviceFp8 t(4, 4, Fp8Format::kE4M3, true, 1.f, 0.f);
  DeviceBuffer<float> d_pre(16);
  Fp8Tensor neither = t.t;
  neither.data = neither.data_t = nullptr;
  Status s = cuda::QuantizeGelu(d_pre.get(), neither, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("QuantizeGelu: data is null for a (4, 4) tensor (and so is data_t)"),
            std::string::npos)
      << s.message();
  s = cuda::QuantizeGelu<float>(nullptr, t.t, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("QuantizeGelu: pre is null"), std::string::npos) << s.message();
}

// QuantizeGelu's row-major-only cast runs the flat kernel (quantize.cu): aligned (vector loop
// and element tail) and one element off alignment (element-wise throughout), with NaN, +-inf and
// saturating inputs, it gives the cast+transpose kernel's data, amax, saturation and scale_inv.
template <typename T>
void ExpectRowMajorGeluCastMatchesTheTiledOne(int64_t rows, int64_t cols, int offset) {
  SCOPED_TRACE(::testing::Message()
               << DTypeName(DTypeOf<T>()) << " " << rows << "x" << cols << " offset " << offset);
  const int64_t n = rows * cols;
  std::vector<float> x = test::RandomNormal(n + offset, 17 + n, 0.f, 3.f);
  x[offset] = 1e4f;  // saturates
  if (n > 5) x[offset + 5] = std::numeric_limits<float>::quiet_NaN();
  if (n > 9) x[offset + n - 2] = INFINITY, x[offset + n / 2] = -INFINITY;
  DeviceBuffer<T> d_pre(test::CastVector<T>(x));
  DeviceFp8 flat(rows, cols, Fp8Format::kE4M3, true, 32.f, 0.5f);
  DeviceFp8 tiled(rows, cols, Fp8Format::kE4M3, true, 32.f, 0.5f);
  DeviceBuffer<uint8_t> shifted(n + offset);  // data one byte off its alignment
  shifted.Poison();
  flat.t.data = shifted.get() + offset;
  flat.t.data_t = nullptr;
  DeviceBuffer<unsigned long long> sat_flat(std::vector<unsigned long long>{3});
  DeviceBuffer<unsigned long long> sat_tiled(std::vector<unsigned long long>{3});
  Status st = cuda::QuantizeGelu(d_pre.get() + offset, flat.t, sat_flat.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = cuda::QuantizeGelu(d_pre.get() + offset, tiled.t, sat_tiled.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<uint8_t> got = shifted.Download();
  EXPECT_TRUE(SameCodes(std::vector<uint8_t>(got.begin() + offset, got.end()),
                        tiled.data.Download(), "data"));
  const std::vector<float> a = flat.scalars.Download(), b = tiled.scalars.Download();
  EXPECT_TRUE(SameBits(a[1], b[1], "scale_inv"));
  EXPECT_TRUE(SameBits(a[2], b[2], "amax"));
  EXPECT_EQ(sat_flat.Download()[0], sat_tiled.Download()[0]) << "saturated";
  EXPECT_GT(sat_tiled.Download()[0], 3u) << "the inputs must saturate";
}

TEST_F(CastTransposeGpuMisc, RowMajorGeluCastTakesTheFlatKernelAlignedOrNot) {
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{7, 13}, {64, 1029}, {256, 1024}, {1, 1}}) {
    for (const int offset : {0, 1}) {
      ExpectRowMajorGeluCastMatchesTheTiledOne<bf16>(rows, cols, offset);
      ExpectRowMajorGeluCastMatchesTheTiledOne<float>(rows, cols, offset);
    }
  }
}

// QuantizeLayerNorm with weight and bias one element off their alignment: no vector path (the
// forward then takes its scalar kernel too), the same codes as the forward then the cast. Then
// its preconditions, which name the op.
TEST_F(CastTransposeGpuMisc, LayerNormCastUnalignedWeightAndPreconditions) {
  const int64_t N = 64, C = 128, n = N * C;
  const std::vector<float> x = test::RandomNormal(n, 19, 0.3f, 1.5f);
  std::vector<float> wb = test::RandomNormal(2 * C + 2, 20, 0.5f, 0.5f);
  DeviceBuffer<float> d_x(x), d_wb(wb), d_y(n), d_mean(N), d_rstd(N);
  const float* w = d_wb.get() + 1;
  const float* b = d_wb.get() + C + 2;
  ASSERT_TRUE(cuda::LayerNormForward(d_y.get(), d_mean.get(), d_rstd.get(), d_x.get(), w, b, N, C,
                                     1e-5f, nullptr)
                  .ok());
  DeviceFp8 fused(N, C, Fp8Format::kE4M3, true, 64.f, 0.f);
  DeviceFp8 split(N, C, Fp8Format::kE4M3, true, 64.f, 0.f);
  ASSERT_TRUE(cuda::QuantizeLayerNorm(d_x.get(), d_mean.get(), d_rstd.get(), w, b, fused.t, nullptr,
                                      nullptr)
                  .ok());
  ASSERT_TRUE(cuda::Quantize(d_y.get(), split.t, nullptr, nullptr).ok());
  EXPECT_TRUE(SameCodes(fused.data.Download(), split.data.Download(), "data"));
  EXPECT_TRUE(SameCodes(fused.data_t.Download(), split.data_t.Download(), "data_t"));
  EXPECT_TRUE(SameBits(fused.scalars.Download()[2], split.scalars.Download()[2], "amax"));

  auto expect_error = [](const Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  Fp8Tensor neither = fused.t;
  neither.data = neither.data_t = nullptr;
  expect_error(cuda::QuantizeLayerNorm(d_x.get(), d_mean.get(), d_rstd.get(), w, b, neither,
                                       nullptr, nullptr),
               "QuantizeLayerNorm: data is null for a (64, 128) tensor (and so is data_t)");
  expect_error(cuda::QuantizeLayerNorm<float>(d_x.get(), d_mean.get(), d_rstd.get(), w, nullptr,
                                              fused.t, nullptr, nullptr),
               "QuantizeLayerNorm: mean is set but bias is null");
  expect_error(cuda::QuantizeLayerNorm<float>(d_x.get(), d_mean.get(), nullptr, w, b, fused.t,
                                              nullptr, nullptr),
               "QuantizeLayerNorm: in, rstd and weight must be non-null for a (64, 128) tensor");
}

}  // namespace
}  // namespace fp8rt
