// AdamW (BF16/FP32 and FP8 working copies) and the global gradient norm on the GPU against the CPU
// reference, over dtype x the awkward shapes (n = rows * cols), with clipping read from device
// memory and weight decay on and off.
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/grad_norm.h"
#include "kernels/scaling.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;
using test::OpKind;
using test::ToleranceFor;

struct OptState {
  std::vector<float> master, m, v, grad;
};

OptState RandomState(int64_t n, uint64_t seed) {
  OptState s;
  s.master = test::RandomNormal(n, seed, 0.f, 1.f);
  s.m = test::RandomNormal(n, seed + 1, 0.f, 0.01f);
  s.v = test::RandomUniform(n, seed + 2, 0.f, 1e-4f);
  s.grad = test::RandomNormal(n, seed + 3, 0.f, 0.05f);
  return s;
}

// Squared norm computed on the GPU, left in device memory for AdamW to read.
void GpuNormSquared(DeviceBuffer<float>& out, const DeviceBuffer<float>& grad, int64_t n) {
  const size_t bytes = cuda::GlobalNormSquaredScratchBytes(n);
  DeviceBuffer<char> scratch(bytes);
  FP8RT_CHECK_OK(cuda::GlobalNormSquared(out.get(), grad.get(), n, scratch.get(), bytes, nullptr));
}

template <typename T>
void CheckAdamW(int64_t n) {
  const auto tol32 = ToleranceFor(OpKind::kOptimizer, DType::kFloat32);
  const auto tol = ToleranceFor(OpKind::kOptimizer, DTypeOf<T>());
  AdamWConfig cfg;
  cfg.lr = 1e-3f;
  for (const auto& [wd, max_norm] : {std::pair{0.1f, 0.f}, std::pair{0.f, 0.5f}}) {
    SCOPED_TRACE(max_norm > 0 ? "clipped, no decay" : "decay, no clipping");
    const OptState s0 = RandomState(n, 501);
    OptState ref = s0;
    std::vector<T> working_ref(n);
    // The reference clips with the GPU's own norm, so both sides use the same clip factor input.
    DeviceBuffer<float> d_master(s0.master), d_m(s0.m), d_v(s0.v), d_grad(s0.grad), d_norm(1);
    GpuNormSquared(d_norm, d_grad, n);
    const float norm_sq = d_norm.Download()[0];
    ASSERT_TRUE(cpu::AdamW(ref.master.data(), ref.m.data(), ref.v.data(), ref.grad.data(),
                           working_ref.data(), n, 7, cfg, wd, &norm_sq, max_norm)
                    .ok());
    DeviceBuffer<T> d_working(n);
    d_working.Poison();
    FP8RT_CHECK_OK(cuda::AdamW(d_master.get(), d_m.get(), d_v.get(), d_grad.get(), d_working.get(),
                               n, 7, cfg, wd, d_norm.get(), max_norm, nullptr));
    EXPECT_TRUE(test::AllClose(d_master.Download(), ref.master, tol32, "master"));
    EXPECT_TRUE(test::AllClose(d_m.Download(), ref.m, tol32, "m"));
    EXPECT_TRUE(test::AllClose(d_v.Download(), ref.v, tol32, "v"));
    EXPECT_TRUE(test::AllClose(test::ToFloatVector(d_working.Download()),
                               test::ToFloatVector(working_ref), tol, "working"));
    // The working copy is the GPU master rounded to T, exactly.
    const std::vector<float> master = d_master.Download();
    const std::vector<T> working = d_working.Download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(0, std::memcmp(&working[i], &static_cast<const T&>(T(master[i])), sizeof(T))) << i;
    }
  }
}

template <typename T>
void CheckAdamWUnaligned(int64_t n) {
  // Pointers one element past an aligned base: the scalar kernel; no working copy.
  const auto tol32 = ToleranceFor(OpKind::kOptimizer, DType::kFloat32);
  AdamWConfig cfg;
  const OptState s0 = RandomState(n + 1, 511);
  OptState ref = s0;
  ASSERT_TRUE(cpu::AdamW<T>(ref.master.data() + 1, ref.m.data() + 1, ref.v.data() + 1,
                            ref.grad.data() + 1, nullptr, n, 1, cfg, 0.1f, nullptr, 0.f)
                  .ok());
  DeviceBuffer<float> d_master(s0.master), d_m(s0.m), d_v(s0.v), d_grad(s0.grad);
  FP8RT_CHECK_OK(cuda::AdamW<T>(d_master.get() + 1, d_m.get() + 1, d_v.get() + 1, d_grad.get() + 1,
                                nullptr, n, 1, cfg, 0.1f, nullptr, 0.f, nullptr));
  EXPECT_TRUE(test::AllClose(d_master.Download(), ref.master, tol32, "master (unaligned)"));
  EXPECT_TRUE(test::AllClose(d_v.Download(), ref.v, tol32, "v (unaligned)"));
}

void CheckAdamWFp8(int64_t rows, int64_t cols, Fp8Format format) {
  const int64_t n = rows * cols;
  const auto tol32 = ToleranceFor(OpKind::kOptimizer, DType::kFloat32);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  const OptState s0 = RandomState(n, 521);
  OptState ref = s0;
  std::vector<float> unused(n);
  ASSERT_TRUE(cpu::AdamW(ref.master.data(), ref.m.data(), ref.v.data(), ref.grad.data(),
                         unused.data(), n, 2, cfg, 0.1f, nullptr, 0.f)
                  .ok());
  DeviceBuffer<float> d_master(s0.master), d_m(s0.m), d_v(s0.v), d_grad(s0.grad);
  DeviceBuffer<uint8_t> d_data(n), d_data_t(n);
  // A scale that saturates the largest weights: |p| > fp8_max / scale.
  const float scale = Fp8MaxFinite(format) / 2.0f;
  DeviceBuffer<float> d_scale(std::vector<float>{scale}), d_scale_inv(1),
      d_amax(std::vector<float>{0.25f});
  d_data.Poison();
  d_data_t.Poison();
  d_scale_inv.Poison();
  Fp8Tensor t;
  t.data = d_data.get();
  t.data_t = d_data_t.get();
  t.rows = rows;
  t.cols = cols;
  t.format = format;
  t.scale = d_scale.get();
  t.scale_inv = d_scale_inv.get();
  t.amax = d_amax.get();
  FP8RT_CHECK_OK(cuda::AdamWFp8(d_master.get(), d_m.get(), d_v.get(), d_grad.get(), t, 2, cfg, 0.1f,
                                nullptr, 0.f, nullptr));
  const std::vector<float> master = d_master.Download();
  EXPECT_TRUE(test::AllClose(master, ref.master, tol32, "master"));
  EXPECT_TRUE(test::AllClose(d_m.Download(), ref.m, tol32, "m"));
  // The codes, the transposed codes and amax are exact functions of the GPU's master weights.
  const std::vector<uint8_t> data = d_data.Download(), data_t = d_data_t.Download();
  float amax = 0.25f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const uint8_t q = Fp8Encode(master[i] * scale, format);
      ASSERT_EQ(data[i], q) << "(" << r << ", " << c << ")";
      ASSERT_EQ(data_t[c * rows + r], q) << "(" << r << ", " << c << ")";
      amax = std::fmax(amax, std::fabs(master[i]));
    }
  }
  EXPECT_EQ(d_amax.Download()[0], amax);
  EXPECT_EQ(d_scale_inv.Download()[0], ScaleInv(scale));
}

// BF16 moments (train.moments_dtype: bf16): three steps, the moments rounded to BF16 when stored,
// against the reference (fp64 update, the same rounding); and the FP8 working copy beside them.
void CheckAdamWBf16Moments(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const auto tol32 = ToleranceFor(OpKind::kOptimizer, DType::kFloat32);
  const auto tol16 = ToleranceFor(OpKind::kOptimizer, DType::kBFloat16);
  AdamWConfig cfg;
  cfg.lr = 1e-3f;
  const OptState s0 = RandomState(n, 541);
  std::vector<float> master_ref = s0.master;
  std::vector<bf16> m_ref(n), v_ref(n), working_ref(n);
  for (int64_t i = 0; i < n; ++i) m_ref[i] = bf16(s0.m[i]), v_ref[i] = bf16(s0.v[i]);
  DeviceBuffer<float> d_master(s0.master), d_grad(s0.grad);
  DeviceBuffer<bf16> d_m(m_ref), d_v(v_ref), d_working(n);
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(cpu::AdamW(master_ref.data(), m_ref.data(), v_ref.data(), s0.grad.data(),
                           working_ref.data(), n, step, cfg, 0.1f, nullptr, 0.f)
                    .ok());
    FP8RT_CHECK_OK(cuda::AdamW(d_master.get(), d_m.get(), d_v.get(), d_grad.get(),
                               d_working.get(), n, step, cfg, 0.1f, nullptr, 0.f, nullptr));
  }
  // The GPU's FP32 update and the reference's FP64 one round a few moments to neighbouring BF16
  // values, which then move those masters by up to 1e-4 relative (16 in 3.1M after three
  // steps); where a moment's two terms nearly cancel, one flip is a large part of it (1 in 3.1M:
  // -2.1e-4 against -1.8e-4): bounds of two BF16 steps, 1e-4 absolute, 1e-3 for the master.
  test::Tolerance tol_master = tol32, tol_moment = tol16;
  tol_master.rtol = 1e-3, tol_moment.rtol = 2 * tol16.rtol, tol_moment.atol = 1e-4;
  EXPECT_TRUE(test::AllClose(d_master.Download(), master_ref, tol_master, "master"));
  EXPECT_TRUE(test::AllClose(test::ToFloatVector(d_m.Download()), test::ToFloatVector(m_ref),
                             tol_moment, "m (bf16)"));
  EXPECT_TRUE(test::AllClose(test::ToFloatVector(d_v.Download()), test::ToFloatVector(v_ref),
                             tol_moment, "v (bf16)"));
  // The FP8 working copy with BF16 moments: the codes are the GPU master's.
  DeviceBuffer<uint8_t> d_data(n);
  DeviceBuffer<float> d_scale(std::vector<float>{8.0f}), d_scale_inv(1),
      d_amax(std::vector<float>{0.0f});
  Fp8Tensor t;
  t.data = d_data.get();
  t.rows = rows;
  t.cols = cols;
  t.scale = d_scale.get();
  t.scale_inv = d_scale_inv.get();
  t.amax = d_amax.get();
  FP8RT_CHECK_OK(cuda::AdamWFp8(d_master.get(), d_m.get(), d_v.get(), d_grad.get(), t, 4, cfg,
                                0.1f, nullptr, 0.f, nullptr));
  const std::vector<float> master = d_master.Download();
  const std::vector<uint8_t> data = d_data.Download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(data[i], Fp8Encode(master[i] * 8.0f, t.format)) << i;
}

class OptimizerGpu : public test::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<DType, test::Shape2D>> {};

TEST_P(OptimizerGpu, AdamWMatchesReference) {
  const auto& [dtype, shape] = GetParam();
  const int64_t n = shape.rows * shape.cols;
  if (dtype == DType::kFloat32) {
    CheckAdamW<float>(n);
    CheckAdamWUnaligned<float>(n);
  } else {
    CheckAdamW<bf16>(n);
    CheckAdamWUnaligned<bf16>(n);
  }
}

TEST_P(OptimizerGpu, AdamWWithBf16MomentsMatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype != DType::kFloat32) GTEST_SKIP() << "one dtype axis value covers it";
  CheckAdamWBf16Moments(shape.rows, shape.cols);
}

TEST_P(OptimizerGpu, AdamWFp8MatchesReference) {
  const auto& [dtype, shape] = GetParam();
  // The working copy is FP8 here; the dtype axis picks the format instead.
  CheckAdamWFp8(shape.rows, shape.cols,
                dtype == DType::kFloat32 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
}

TEST_P(OptimizerGpu, GlobalNormSquaredMatchesReferenceAndIsDeterministic) {
  const auto& shape = std::get<1>(GetParam());
  const int64_t n = shape.rows * shape.cols + (std::get<0>(GetParam()) == DType::kFloat32 ? 0 : 3);
  const std::vector<float> g = test::RandomNormal(n + 1, 531);
  for (int64_t off : {0, 1}) {  // off = 1: misaligned, the scalar loads
    float want = 0;
    ASSERT_TRUE(cpu::GlobalNormSquared(&want, g.data() + off, n).ok());
    DeviceBuffer<float> d_g(g), d_out(1);
    const size_t bytes = cuda::GlobalNormSquaredScratchBytes(n);
    DeviceBuffer<char> scratch(bytes);
    float first = 0;
    for (int run = 0; run < 2; ++run) {
      d_out.Poison();
      FP8RT_CHECK_OK(
          cuda::GlobalNormSquared(d_out.get(), d_g.get() + off, n, scratch.get(), bytes, nullptr));
      const float got = d_out.Download()[0];
      EXPECT_TRUE(test::AllClose({got}, {want}, ToleranceFor(OpKind::kOptimizer, DType::kFloat32),
                                 "norm^2"));
      if (run == 0) {
        first = got;
      } else {
        EXPECT_EQ(FloatBits(first), FloatBits(got)) << "not bit-identical run to run";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardShapes, OptimizerGpu,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::ValuesIn(test::AwkwardShapes())),
    [](const ::testing::TestParamInfo<std::tuple<DType, test::Shape2D>>& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
    });

class OptimizerGpuEdge : public test::GpuTest {};

TEST_F(OptimizerGpuEdge, LargeNormUsesManyBlocks) {
  // 2^26 + 5 elements: the full 1024-block grid and a tail.
  const int64_t n = (int64_t{1} << 26) + 5;
  const std::vector<float> g = test::RandomUniform(n, 541);
  float want = 0;
  ASSERT_TRUE(cpu::GlobalNormSquared(&want, g.data(), n).ok());
  DeviceBuffer<float> d_g(g), d_out(1);
  const size_t bytes = cuda::GlobalNormSquaredScratchBytes(n);
  EXPECT_EQ(bytes, 1024 * sizeof(float));
  DeviceBuffer<char> scratch(bytes);
  FP8RT_CHECK_OK(cuda::GlobalNormSquared(d_out.get(), d_g.get(), n, scratch.get(), bytes, nullptr));
  EXPECT_TRUE(test::AllClose(d_out.Download(), {want},
                             ToleranceFor(OpKind::kOptimizer, DType::kFloat32), "norm^2"));
}

// Accumulating two awkward ranges (one misaligned) onto a value already there gives the
// reference's sum of all three.
TEST_F(OptimizerGpuEdge, AccumulateAddsTheRangeToWhatIsThere) {
  const std::vector<float> g = test::RandomNormal(70001, 547);
  const int64_t n1 = 33333, n2 = 70001 - 33333 - 1;
  float a = 0, b = 0, want = 0;
  ASSERT_TRUE(cpu::GlobalNormSquared(&a, g.data(), n1).ok());
  ASSERT_TRUE(cpu::GlobalNormSquared(&b, g.data() + n1 + 1, n2).ok());
  want = 2.5f;
  ASSERT_TRUE(cpu::GlobalNormSquared(&want, g.data(), n1, true).ok());
  ASSERT_TRUE(cpu::GlobalNormSquared(&want, g.data() + n1 + 1, n2, true).ok());
  EXPECT_EQ(want, 2.5f + a + b);
  DeviceBuffer<float> d_g(g), d_out(std::vector<float>{2.5f});
  const size_t bytes = cuda::GlobalNormSquaredScratchBytes(n2);
  DeviceBuffer<char> scratch(bytes);
  FP8RT_CHECK_OK(
      cuda::GlobalNormSquared(d_out.get(), d_g.get(), n1, scratch.get(), bytes, nullptr, true));
  FP8RT_CHECK_OK(cuda::GlobalNormSquared(d_out.get(), d_g.get() + n1 + 1, n2, scratch.get(),
                                         bytes, nullptr, true));
  EXPECT_TRUE(test::AllClose(d_out.Download(), {want},
                             ToleranceFor(OpKind::kOptimizer, DType::kFloat32), "norm^2"));
}

TEST_F(OptimizerGpuEdge, RejectsBadArguments) {
  DeviceBuffer<float> buf(8);
  AdamWConfig cfg;
  EXPECT_EQ(cuda::AdamW<float>(buf.get(), buf.get(), buf.get(), buf.get(), nullptr, 8, 1, cfg, 0.f,
                               nullptr, 1.f, nullptr)
                .code(),
            StatusCode::kInvalidArgument);  // clipping without a norm
  EXPECT_EQ(cuda::GlobalNormSquared(buf.get(), buf.get(), 8, buf.get(), 0, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt
