// GELU and the residual add on the GPU against the CPU reference, over dtype x the awkward shapes
// (n = rows * cols), plus in-place calls and misaligned pointers (the scalar path and the tail).
#include <tuple>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/residual.h"
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

// Elements [off, off + n) of a buffer: off = 1 makes every pointer misaligned.
std::vector<float> Slice(const std::vector<float>& v, int64_t off, int64_t n) {
  return std::vector<float>(v.begin() + off, v.begin() + off + n);
}

template <typename T>
void CheckGelu(int64_t n) {
  const auto tol = ToleranceFor(OpKind::kElementwise, DTypeOf<T>());
  // Wide spread: the far tails (|x| up to ~15) and the region around the derivative's zero.
  const std::vector<T> x = test::CastVector<T>(test::RandomNormal(n + 1, 401, 0.f, 3.f));
  const std::vector<T> dout = test::CastVector<T>(test::RandomNormal(n + 1, 402));
  for (int64_t off : {0, 1}) {
    SCOPED_TRACE(off ? "misaligned" : "aligned");
    const int64_t m = n + 1 - off;
    std::vector<T> out_ref(m), din_ref(m);
    ASSERT_TRUE(cpu::GeluForward(out_ref.data(), x.data() + off, m).ok());
    ASSERT_TRUE(cpu::GeluBackward(din_ref.data(), x.data() + off, dout.data() + off, m).ok());
    DeviceBuffer<T> d_x(x), d_dout(dout), d_out(n + 1), d_din(n + 1);
    d_out.Poison();
    d_din.Poison();
    FP8RT_CHECK_OK(cuda::GeluForward(d_out.get() + off, d_x.get() + off, m, nullptr));
    FP8RT_CHECK_OK(
        cuda::GeluBackward(d_din.get() + off, d_x.get() + off, d_dout.get() + off, m, nullptr));
    EXPECT_TRUE(test::AllClose(Slice(Download(d_out), off, m), test::ToFloatVector(out_ref), tol,
                               "gelu out"));
    EXPECT_TRUE(test::AllClose(Slice(Download(d_din), off, m), test::ToFloatVector(din_ref), tol,
                               "gelu din"));
    // In place: out over in, din over dout.
    FP8RT_CHECK_OK(
        cuda::GeluBackward(d_dout.get() + off, d_x.get() + off, d_dout.get() + off, m, nullptr));
    FP8RT_CHECK_OK(cuda::GeluForward(d_x.get() + off, d_x.get() + off, m, nullptr));
    EXPECT_TRUE(test::AllClose(Slice(Download(d_x), off, m), test::ToFloatVector(out_ref), tol,
                               "gelu out in place"));
    EXPECT_TRUE(test::AllClose(Slice(Download(d_dout), off, m), test::ToFloatVector(din_ref), tol,
                               "gelu din in place"));
  }
}

template <typename T>
void CheckResidual(int64_t n) {
  const auto tol = ToleranceFor(OpKind::kElementwise, DTypeOf<T>());
  const std::vector<T> a = test::CastVector<T>(test::RandomNormal(n + 1, 411));
  const std::vector<T> b = test::CastVector<T>(test::RandomNormal(n + 1, 412));
  for (int64_t off : {0, 1}) {
    SCOPED_TRACE(off ? "misaligned" : "aligned");
    const int64_t m = n + 1 - off;
    std::vector<T> ref(m);
    ASSERT_TRUE(cpu::ResidualAdd(ref.data(), a.data() + off, b.data() + off, m).ok());
    DeviceBuffer<T> d_a(a), d_b(b), d_out(n + 1);
    d_out.Poison();
    FP8RT_CHECK_OK(
        cuda::ResidualAdd(d_out.get() + off, d_a.get() + off, d_b.get() + off, m, nullptr));
    EXPECT_TRUE(
        test::AllClose(Slice(Download(d_out), off, m), test::ToFloatVector(ref), tol, "out"));
    FP8RT_CHECK_OK(
        cuda::ResidualAdd(d_a.get() + off, d_a.get() + off, d_b.get() + off, m, nullptr));
    EXPECT_TRUE(test::AllClose(Slice(Download(d_a), off, m), test::ToFloatVector(ref), tol,
                               "out in place"));
  }
}

class ElementwiseGpu : public test::GpuTest,
                       public ::testing::WithParamInterface<std::tuple<DType, test::Shape2D>> {};

TEST_P(ElementwiseGpu, GeluMatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kFloat32) {
    CheckGelu<float>(shape.rows * shape.cols);
  } else {
    CheckGelu<bf16>(shape.rows * shape.cols);
  }
}

TEST_P(ElementwiseGpu, ResidualAddMatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kFloat32) {
    CheckResidual<float>(shape.rows * shape.cols);
  } else {
    CheckResidual<bf16>(shape.rows * shape.cols);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardShapes, ElementwiseGpu,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::ValuesIn(test::AwkwardShapes())),
    [](const ::testing::TestParamInfo<std::tuple<DType, test::Shape2D>>& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace fp8rt
