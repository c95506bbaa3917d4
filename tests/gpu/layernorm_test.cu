// LayerNorm on the GPU against the CPU reference: forward (out, mean, rstd) and backward (din
// overwritten or accumulated, dweight/dbias accumulated), over dtype x the awkward shapes plus the
// register/wide/unaligned code paths; the backward is bit-identical run to run. The norms'
// forwards with the FP8 cast fused (LayerNormForwardFp8, RmsNormForwardFp8) against the forward
// then cuda::Quantize, bit for bit, over the same shapes, and against the CPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/layernorm.h"
#include "kernels/quantize.h"
#include "kernels/rmsnorm.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;
using test::OpKind;
using test::ToleranceFor;

template <typename T>
std::vector<float> Download(const DeviceBuffer<T>& d) {
  return test::ToFloatVector(d.Download());
}

template <typename T>
void CheckLayerNorm(int64_t N, int64_t C) {
  const DType dt = DTypeOf<T>();
  const auto tol = ToleranceFor(OpKind::kNormalization, dt);
  const auto tol32 = ToleranceFor(OpKind::kNormalization, DType::kFloat32);
  const float eps = 1e-5f;
  const size_t nc = static_cast<size_t>(N * C);
  const std::vector<T> x = test::CastVector<T>(test::RandomNormal(nc, 101, 0.3f, 1.5f));
  const std::vector<T> w = test::CastVector<T>(test::RandomNormal(C, 102, 1.0f, 0.3f));
  const std::vector<T> b = test::CastVector<T>(test::RandomNormal(C, 103, 0.0f, 0.3f));

  // ---- forward ----
  std::vector<T> out_ref(nc);
  std::vector<float> mean_ref(N), rstd_ref(N);
  ASSERT_TRUE(cpu::LayerNormForward(out_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(),
                                    w.data(), b.data(), N, C, eps)
                  .ok());
  DeviceBuffer<T> d_x(x), d_w(w), d_b(b), d_out(nc);
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  d_out.Poison();
  d_mean.Poison();
  d_rstd.Poison();
  FP8RT_CHECK_OK(cuda::LayerNormForward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(),
                                        d_w.get(), d_b.get(), N, C, eps, nullptr));
  EXPECT_TRUE(test::AllClose(Download(d_out), test::ToFloatVector(out_ref), tol, "out"));
  EXPECT_TRUE(test::AllClose(d_mean.Download(), mean_ref, tol32, "mean"));
  EXPECT_TRUE(test::AllClose(d_rstd.Download(), rstd_ref, tol32, "rstd"));
  // Inference: no statistics.
  d_out.Poison();
  FP8RT_CHECK_OK(cuda::LayerNormForward(d_out.get(), nullptr, nullptr, d_x.get(), d_w.get(),
                                        d_b.get(), N, C, eps, nullptr));
  EXPECT_TRUE(test::AllClose(Download(d_out), test::ToFloatVector(out_ref), tol, "out (no stats)"));

  // ---- backward, from the reference statistics so both sides see the same inputs ----
  const std::vector<T> dout = test::CastVector<T>(test::RandomNormal(nc, 104));
  const std::vector<T> din0 = test::CastVector<T>(test::RandomNormal(nc, 105));
  const std::vector<float> dw0 = test::RandomNormal(C, 106), db0 = test::RandomNormal(C, 107);
  DeviceBuffer<T> d_dout(dout), d_din(nc);
  DeviceBuffer<float> d_dw(C), d_db(C);
  d_mean.Upload(mean_ref);
  d_rstd.Upload(rstd_ref);
  // dweight/dbias are FP32 sums over the N rows, added in another order (per-thread runs, then
  // block partials): their rounding grows with N, about N ulps of the O(1) partial sums.
  test::Tolerance tol_sum = tol32;
  tol_sum.atol = std::max(tol32.atol, 1e-8 * static_cast<double>(N));
  const size_t scratch_bytes = cuda::LayerNormBackwardScratchBytes(N, C);
  DeviceBuffer<char> scratch(scratch_bytes);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate_din" : "overwrite din");
    std::vector<T> din_ref = din0;
    std::vector<float> dw_ref = dw0, db_ref = db0;
    ASSERT_TRUE(cpu::LayerNormBackward(din_ref.data(), dw_ref.data(), db_ref.data(), dout.data(),
                                       x.data(), w.data(), mean_ref.data(), rstd_ref.data(), N, C,
                                       accumulate)
                    .ok());
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
      if (accumulate) {
        d_din.Upload(din0);
      } else {
        d_din.Poison();
      }
      d_dw.Upload(dw0);
      d_db.Upload(db0);
      scratch.Poison();
      FP8RT_CHECK_OK(cuda::LayerNormBackward(d_din.get(), d_dw.get(), d_db.get(), d_dout.get(),
                                             d_x.get(), d_w.get(), d_mean.get(), d_rstd.get(), N, C,
                                             accumulate, scratch.get(), scratch_bytes, nullptr));
      const std::vector<float> din = Download(d_din), dw = d_dw.Download(), db = d_db.Download();
      if (run == 0) {
        EXPECT_TRUE(test::AllClose(din, test::ToFloatVector(din_ref), tol, "din"));
        EXPECT_TRUE(test::AllClose(dw, dw_ref, tol_sum, "dweight"));
        EXPECT_TRUE(test::AllClose(db, db_ref, tol_sum, "dbias"));
      }
      std::vector<float> all = din;
      all.insert(all.end(), dw.begin(), dw.end());
      all.insert(all.end(), db.begin(), db.end());
      runs.push_back(std::move(all));
    }
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)))
        << "backward is not bit-identical run to run";
  }
}

class LayerNormGpu : public test::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<DType, test::Shape2D>> {};

TEST_P(LayerNormGpu, MatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kFloat32) {
    CheckLayerNorm<float>(shape.rows, shape.cols);
  } else {
    CheckLayerNorm<bf16>(shape.rows, shape.cols);
  }
}

// Beyond the awkward shapes: GPT-2 1.3B's C (the benchmarked case), a row too wide for registers
// (the re-reading forward kernel), C not a multiple of the vector width (scalar loads, several
// vectors per thread in the backward), the backward's largest C, a backward whose blocks take
// several iterations with a ragged last one (2500 rows over 264 blocks of 3 rows), a row of
// 16-byte vectors that leaves some threads' last vector out of range (the forward's column
// checks: 225 bf16 or 450 fp32 vectors over 128 threads), and then enough widths that, in both
// dtypes, every forward kernel the launcher can pick (vectors per thread, threads per row, exact
// fit or not, 16-byte or scalar loads) and every backward kernel (rows of 3 through shared memory
// or registers, geometry at compile time or not, the prefetching and 1024-thread paths) runs at
// least once: 64 forward and 27 backward choices over C = 1..16384, listed by following the
// launchers' logic. Row counts are small and not multiples of the rows per block.
const std::vector<test::Shape2D>& KernelPathShapes() {
  static const std::vector<test::Shape2D> shapes = {
      {64, 2048, "64x2048"}, {5, 5000, "5x5000"},       {7, 2050, "7x2050"}, {3, 16384, "3x16384"},
      {33, 3, "33x3"},       {2500, 1024, "2500x1024"}, {9, 1800, "9x1800"}, {5, 352, "5x352"},
      {9, 1000, "9x1000"},   {7, 1032, "7x1032"},       {6, 1001, "6x1001"}, {5, 3072, "5x3072"},
      {3, 4096, "3x4096"},   {3, 8192, "3x8192"},       {5, 500, "5x500"},   {11, 60, "11x60"},
      {7, 200, "7x200"},     {5, 225, "5x225"},         {7, 257, "7x257"},   {3, 513, "3x513"},
      {9, 65, "9x65"},       {6, 97, "6x97"},           {5, 129, "5x129"},   {7, 449, "7x449"},
      {5, 512, "5x512"},     {3, 520, "3x520"},         {3, 1025, "3x1025"}, {3, 1536, "3x1536"},
      {3, 2056, "3x2056"},   {3, 3080, "3x3080"},       {3, 4097, "3x4097"}, {7, 33, "7x33"},
      {9, 128, "9x128"},     {5, 384, "5x384"},         {3, 6144, "3x6144"}, {3, 6152, "3x6152"},
  };
  return shapes;
}

std::string Name(const ::testing::TestParamInfo<std::tuple<DType, test::Shape2D>>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, LayerNormGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(test::AwkwardShapes())),
                         Name);
INSTANTIATE_TEST_SUITE_P(KernelPaths, LayerNormGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(KernelPathShapes())),
                         Name);

// ---- the forwards with the FP8 cast fused ----

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A device E4M3 tensor with data alone, `offset` bytes into its poisoned buffer (1: no vector
// stores), and scalars [scale, scale_inv, amax] = [scale, NaN, 0.125] (the cast max-accumulates).
struct DeviceCodes {
  DeviceBuffer<uint8_t> buf;
  DeviceBuffer<float> scalars;
  int offset;
  Fp8Tensor t;

  DeviceCodes(int64_t N, int64_t C, float scale, int offset = 0)
      : buf(N * C + offset), scalars(3), offset(offset) {
    if (buf.size() > 0) buf.Poison();
    scalars.Upload({scale, kNaN, 0.125f});
    t.data = buf.get() + offset;
    t.rows = N;
    t.cols = C;
    t.format = Fp8Format::kE4M3;
    t.scale = scalars.get();
    t.scale_inv = scalars.get() + 1;
    t.amax = scalars.get() + 2;
  }
  std::vector<uint8_t> Codes() const {
    const std::vector<uint8_t> all = buf.Download();
    return std::vector<uint8_t>(all.begin() + offset, all.end());
  }
};

// Codes equal, or (within_one_step) at most one step apart in value order.
::testing::AssertionResult CodesMatch(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want, const std::string& what,
                                      bool within_one_step = false) {
  auto ordinal = [](uint8_t q) { return (q & 0x80) ? -(q & 0x7f) : (q & 0x7f); };
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok =
        within_one_step ? std::abs(ordinal(got[i]) - ordinal(want[i])) <= 1 : got[i] == want[i];
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " codes differ; first at [" << first
         << "]: 0x" << std::hex << int(got[first]) << " vs 0x" << int(want[first]);
}

::testing::AssertionResult SameFloats(const std::vector<float>& got, const std::vector<float>& want,
                                      const std::string& what) {
  if (got.size() == want.size() &&
      std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << what << " differs in its bits";
}

struct Fp8NormCase {
  DType dtype;
  test::Shape2D shape;
  bool rms;
};

// The norm's GPU forward (out in T) or fused forward (out as codes); rms ignores mean and bias.
template <typename T>
Status Forward(bool rms, T* y, float* mean, float* rstd, const T* x, const T* w, const T* b,
               int64_t N, int64_t C) {
  return rms ? cuda::RmsNormForward(y, rstd, x, w, N, C, 1e-5f, nullptr)
             : cuda::LayerNormForward(y, mean, rstd, x, w, b, N, C, 1e-5f, nullptr);
}
template <typename T>
Status ForwardFp8(bool rms, const Fp8Tensor& q, float* mean, float* rstd, const T* x, const T* w,
                  const T* b, int64_t N, int64_t C, unsigned long long* sat) {
  return rms ? cuda::RmsNormForwardFp8(q, rstd, x, w, N, C, 1e-5f, sat, nullptr)
             : cuda::LayerNormForwardFp8(q, mean, rstd, x, w, b, N, C, 1e-5f, sat, nullptr);
}

class NormForwardFp8Gpu : public test::GpuTest, public ::testing::WithParamInterface<Fp8NormCase> {
 protected:
  // Random rows with a far value in row 0 (saturates under the scale below, which saturates
  // |y| > 2.5) and, with_nan, a NaN in row N / 2 (the amax becomes NaN). The fused forward, with
  // out.data aligned and one byte off, and without statistics, against cuda::{LayerNorm,
  // RmsNorm}Forward then cuda::Quantize: codes, mean, rstd, amax, saturation count and
  // scale_inv bit for bit. Without NaN, against the CPU's fused forward too: statistics within
  // the normalisation tolerance, codes at most one step apart (the fp64 reference rounds y
  // differently near FP8 rounding boundaries).
  template <typename T>
  void Run(bool with_nan) {
    const Fp8NormCase& c = GetParam();
    const bool rms = c.rms;
    const int64_t N = c.shape.rows, C = c.shape.cols, n = N * C;
    std::vector<float> xf = test::RandomNormal(n, 71 + n, 0.3f, 1.5f);
    xf[0] = 40.f;
    if (with_nan) xf[(N / 2) * C + C / 3] = kNaN;
    const std::vector<T> x = test::CastVector<T>(xf);
    const std::vector<T> w = test::CastVector<T>(test::RandomNormal(C, 72, 1.f, 0.3f));
    const std::vector<T> b = test::CastVector<T>(test::RandomNormal(C, 73, 0.f, 0.3f));
    DeviceBuffer<T> d_x(x), d_w(w), d_b(b), d_y(n);
    const float scale = Fp8MaxFinite(Fp8Format::kE4M3) / 2.5f;

    DeviceBuffer<float> d_mean(N), d_rstd(N);
    d_y.Poison();
    d_mean.Poison();
    d_rstd.Poison();
    ASSERT_TRUE(Forward<T>(rms, d_y.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(),
                           d_b.get(), N, C)
                    .ok());
    DeviceCodes want(N, C, scale);
    DeviceBuffer<unsigned long long> want_sat(std::vector<unsigned long long>{5});
    ASSERT_TRUE(cuda::Quantize(d_y.get(), want.t, want_sat.get(), nullptr).ok());
    const std::vector<uint8_t> want_codes = want.Codes();
    const std::vector<float> want_scalars = want.scalars.Download();
    const std::vector<float> want_mean = d_mean.Download(), want_rstd = d_rstd.Download();
    const uint64_t want_saturated = want_sat.Download()[0];
    if (C >= 64) {
      EXPECT_GT(want_saturated, 5u) << "the scale must saturate some outputs";
    }
    if (with_nan) {
      EXPECT_TRUE(std::isnan(want_scalars[2])) << "amax of a NaN row";
    }

    for (int offset : {0, 1}) {
      SCOPED_TRACE(offset == 0 ? "out.data aligned" : "out.data one byte off");
      DeviceCodes got(N, C, scale, offset);
      DeviceBuffer<float> g_mean(N), g_rstd(N);
      g_mean.Poison();
      g_rstd.Poison();
      DeviceBuffer<unsigned long long> sat(std::vector<unsigned long long>{5});
      const Status st = ForwardFp8<T>(rms, got.t, g_mean.get(), g_rstd.get(), d_x.get(), d_w.get(),
                                      d_b.get(), N, C, sat.get());
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(CodesMatch(got.Codes(), want_codes, "codes"));
      if (!rms) {
        EXPECT_TRUE(SameFloats(g_mean.Download(), want_mean, "mean"));
      }
      EXPECT_TRUE(SameFloats(g_rstd.Download(), want_rstd, "rstd"));
      EXPECT_TRUE(SameFloats(got.scalars.Download(), want_scalars, "[scale, scale_inv, amax]"));
      EXPECT_EQ(sat.Download()[0], want_saturated) << "saturated";
    }
    // Inference: no statistics, no saturation counter.
    DeviceCodes bare(N, C, scale);
    ASSERT_TRUE(
        ForwardFp8<T>(rms, bare.t, nullptr, nullptr, d_x.get(), d_w.get(), d_b.get(), N, C, nullptr)
            .ok());
    EXPECT_TRUE(CodesMatch(bare.Codes(), want_codes, "codes (no statistics)"));
    EXPECT_TRUE(SameFloats(bare.scalars.Download(), want_scalars, "scalars (no statistics)"));
    if (with_nan) return;

    // The CPU's fused forward (the CPU forward then cpu::Quantize).
    std::vector<uint8_t> cpu_codes(n);
    std::vector<float> cpu_mean(N), cpu_rstd(N);
    float cpu_scale = scale, cpu_scale_inv = kNaN, cpu_amax = 0.125f;
    Fp8Tensor q;
    q.data = cpu_codes.data();
    q.rows = N;
    q.cols = C;
    q.scale = &cpu_scale;
    q.scale_inv = &cpu_scale_inv;
    q.amax = &cpu_amax;
    uint64_t cpu_sat = 5;
    ASSERT_TRUE(
        (rms ? cpu::RmsNormForwardFp8(q, cpu_rstd.data(), x.data(), w.data(), N, C, 1e-5f, &cpu_sat)
             : cpu::LayerNormForwardFp8(q, cpu_mean.data(), cpu_rstd.data(), x.data(), w.data(),
                                        b.data(), N, C, 1e-5f, &cpu_sat))
            .ok());
    const auto tol32 = ToleranceFor(OpKind::kNormalization, DType::kFloat32);
    if (!rms) {
      EXPECT_TRUE(test::AllClose(want_mean, cpu_mean, tol32, "mean vs CPU"));
    }
    EXPECT_TRUE(test::AllClose(want_rstd, cpu_rstd, tol32, "rstd vs CPU"));
    EXPECT_TRUE(CodesMatch(want_codes, cpu_codes, "codes vs CPU", /*within_one_step=*/true));
    EXPECT_TRUE(test::AllClose({want_scalars[2]}, {cpu_amax},
                               ToleranceFor(OpKind::kNormalization, DTypeOf<T>()), "amax vs CPU"));
    EXPECT_EQ(want_scalars[1], cpu_scale_inv) << "scale_inv vs CPU";
    // Only outputs within rounding of the saturation threshold can count differently.
    EXPECT_LE(std::abs(static_cast<double>(want_saturated) - static_cast<double>(cpu_sat)),
              2 + n / 10000)
        << "saturated vs CPU: " << want_saturated << " vs " << cpu_sat;
  }
};

TEST_P(NormForwardFp8Gpu, MatchesTheForwardThenQuantize) {
  for (bool with_nan : {false, true}) {
    SCOPED_TRACE(with_nan ? "with a NaN row" : "finite");
    if (GetParam().dtype == DType::kFloat32) {
      Run<float>(with_nan);
    } else {
      Run<bf16>(with_nan);
    }
  }
}

// Every forward kernel variant (the kernel paths above) plus the model's widths with odd row
// counts (register kernels of 16-byte vectors, exact and not, scalar loads at C = 1001, the wide
// kernel with scalar loads at 2050 and 16-byte vectors at 8200).
std::vector<Fp8NormCase> Fp8NormCases() {
  std::vector<test::Shape2D> shapes = test::AwkwardShapes();
  shapes.insert(shapes.end(), KernelPathShapes().begin(), KernelPathShapes().end());
  for (const test::Shape2D& s : {test::Shape2D{7, 64, "7x64"},
                                 {33, 128, "33x128"},
                                 {200, 768, "200x768"},
                                 {33, 2048, "33x2048"},
                                 {7, 1001, "7x1001"},
                                 {33, 2050, "33x2050"},
                                 {7, 8200, "7x8200"}}) {
    shapes.push_back(s);
  }
  std::vector<Fp8NormCase> cases;
  for (bool rms : {false, true}) {
    for (DType d : {DType::kFloat32, DType::kBFloat16}) {
      for (const test::Shape2D& s : shapes) cases.push_back({d, s, rms});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, NormForwardFp8Gpu, ::testing::ValuesIn(Fp8NormCases()),
                         [](const auto& info) {
                           const Fp8NormCase& c = info.param;
                           return std::string(c.rms ? "RmsNorm_" : "LayerNorm_") +
                                  DTypeName(c.dtype) + "_" + c.shape.name;
                         });

class LayerNormGpuArgs : public test::GpuTest {};

// No rows: scale_inv alone (Quantize's empty cast). Refusals name the op.
TEST_F(LayerNormGpuArgs, ForwardFp8EmptyAndRefusals) {
  const int64_t N = 4, C = 64;
  DeviceBuffer<float> buf(N * C), stat(N);
  DeviceBuffer<unsigned long long> sat(std::vector<unsigned long long>{3});
  for (bool rms : {false, true}) {
    DeviceCodes empty(0, C, 4.f);
    ASSERT_TRUE(ForwardFp8<float>(rms, empty.t, nullptr, nullptr, nullptr, buf.get(), buf.get(), 0,
                                  C, sat.get())
                    .ok());
    const std::vector<float> scalars = empty.scalars.Download();
    EXPECT_EQ(scalars[1], 0.25f);
    EXPECT_EQ(scalars[2], 0.125f);
    EXPECT_EQ(sat.Download()[0], 3u);

    const std::string op = rms ? "RmsNormForwardFp8:" : "LayerNormForwardFp8:";
    auto expect_refused = [&](const Fp8Tensor& t, const char* what) {
      const Status s = ForwardFp8<float>(rms, t, stat.get(), stat.get(), buf.get(), buf.get(),
                                         buf.get(), N, C, nullptr);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
      EXPECT_NE(s.message().find(op), std::string::npos) << what << ": " << s.message();
    };
    DeviceCodes with_t(N, C, 1.f);
    DeviceBuffer<uint8_t> t_codes(N * C);
    with_t.t.data_t = t_codes.get();
    expect_refused(with_t.t, "data_t set");
    DeviceCodes no_data(N, C, 1.f);
    no_data.t.data = nullptr;
    expect_refused(no_data.t, "data null");
    DeviceCodes short_rows(N - 1, C, 1.f);
    expect_refused(short_rows.t, "rows != N");
  }
}

TEST_F(LayerNormGpuArgs, BackwardRejectsShortScratch) {
  const int64_t N = 4, C = 64;
  DeviceBuffer<float> buf(N * C), stat(N), scratch(1);
  const Status s =
      cuda::LayerNormBackward(buf.get(), buf.get(), buf.get(), buf.get(), buf.get(), buf.get(),
                              stat.get(), stat.get(), N, C, false, scratch.get(), 4, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt
