// Llama's ops on the GPU (RMSNorm, SwiGLU, RoPE) against the CPU references, for float and bf16
// over the awkward shapes (rows x cols as N x C for RMSNorm, N x F for SwiGLU, and tokens x heads
// for RoPE), with the outputs poisoned first, accumulation, in-place calls and wider rows.
#include <vector>

#include "kernels/embedding.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;
using test::OpKind;
using test::ToleranceFor;

template <typename T>
std::vector<float> Down(const DeviceBuffer<T>& d) {
  return test::ToFloatVector(d.Download());
}

template <typename T>
class LlamaOpsGpu : public test::GpuTest {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(LlamaOpsGpu, Types);

TYPED_TEST(LlamaOpsGpu, RmsNormMatchesTheReference) {
  using T = TypeParam;
  const auto tol = ToleranceFor(OpKind::kNormalization, DTypeOf<T>());
  for (const auto& s : test::AwkwardShapes()) {
    SCOPED_TRACE(s.name);
    const int64_t N = s.rows, C = s.cols;
    const auto x = test::CastVector<T>(test::RandomNormal(N * C, 11, 0.5f, 2.0f));
    const auto w = test::CastVector<T>(test::RandomNormal(C, 12, 1.0f, 0.3f));
    const auto dy = test::CastVector<T>(test::RandomNormal(N * C, 13));
    const auto din0 = test::CastVector<T>(test::RandomNormal(N * C, 14));
    std::vector<T> out(N * C), din(din0);
    std::vector<float> rstd(N), dw(C, 0.5f);
    ASSERT_TRUE(cpu::RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f).ok());
    ASSERT_TRUE(cpu::RmsNormBackward(din.data(), dw.data(), dy.data(), x.data(), w.data(),
                                     rstd.data(), N, C, true).ok());
    DeviceBuffer<T> d_x(x), d_w(w), d_dy(dy), d_out(N * C), d_din(din0);
    DeviceBuffer<float> d_rstd(N), d_dw(std::vector<float>(C, 0.5f));
    d_out.Poison(), d_rstd.Poison();
    FP8RT_CHECK_OK(cuda::RmsNormForward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C,
                                        1e-5f, nullptr));
    const size_t scratch_bytes = cuda::RmsNormBackwardScratchBytes(N, C);
    DeviceBuffer<char> scratch(std::max<size_t>(scratch_bytes, 1));
    scratch.Poison();
    FP8RT_CHECK_OK(cuda::RmsNormBackward(d_din.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(),
                                         d_rstd.get(), N, C, true, scratch.get(), scratch_bytes,
                                         nullptr));
    EXPECT_TRUE(test::AllClose(Down(d_out), test::ToFloatVector(out), tol, "out"));
    EXPECT_TRUE(test::AllClose(d_rstd.Download(), rstd, ToleranceFor(OpKind::kNormalization,
                                                                     DType::kFloat32), "rstd"));
    EXPECT_TRUE(test::AllClose(Down(d_din), test::ToFloatVector(din), tol, "din (+=)"));
    // dweight sums N rows in FP32 (the reference in FP64): relative L2 over the vector.
    EXPECT_LT(test::RelL2(d_dw.Download(), dw), DTypeOf<T>() == DType::kFloat32 ? 1e-5 : 1e-2);
  }
}

TYPED_TEST(LlamaOpsGpu, SwiGluMatchesTheReference) {
  using T = TypeParam;
  const auto tol = ToleranceFor(OpKind::kElementwise, DTypeOf<T>());
  std::vector<test::Shape2D> shapes = test::AwkwardShapes();
  shapes.push_back({33, 13, "33x13 (F not a multiple of a 16-byte pack)"});
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.name);
    const int64_t N = s.rows, F = s.cols;
    const auto gu = test::CastVector<T>(test::RandomNormal(N * 2 * F, 21, 0.f, 3.f));
    const auto dy = test::CastVector<T>(test::RandomNormal(N * F, 22));
    std::vector<T> out(N * F), dgu(N * 2 * F);
    ASSERT_TRUE(cpu::SwiGluForward(out.data(), gu.data(), N, F).ok());
    ASSERT_TRUE(cpu::SwiGluBackward(dgu.data(), gu.data(), dy.data(), N, F).ok());
    DeviceBuffer<T> d_gu(gu), d_dy(dy), d_out(N * F), d_dgu(N * 2 * F);
    d_out.Poison(), d_dgu.Poison();
    FP8RT_CHECK_OK(cuda::SwiGluForward(d_out.get(), d_gu.get(), N, F, nullptr));
    FP8RT_CHECK_OK(cuda::SwiGluBackward(d_dgu.get(), d_gu.get(), d_dy.get(), N, F, nullptr));
    EXPECT_TRUE(test::AllClose(Down(d_out), test::ToFloatVector(out), tol, "out"));
    EXPECT_TRUE(test::AllClose(Down(d_dgu), test::ToFloatVector(dgu), tol, "dgu"));
  }
}

TYPED_TEST(LlamaOpsGpu, RopeMatchesTheReference) {
  using T = TypeParam;
  // cos/sin in FP32 on the device against FP64 of the same FP32 angle: a few ulp of the angle's
  // magnitude (positions up to 4096 here).
  const auto tol = DTypeOf<T>() == DType::kFloat32 ? test::Tolerance{2e-5, 2e-5, 0}
                                                   : ToleranceFor(OpKind::kElementwise, DTypeOf<T>());
  const int64_t shapes[][4] = {{1, 1, 1, 2}, {2, 217, 3, 64}, {1, 4096, 2, 128}, {3, 5, 8, 256}};
  for (const auto& sh : shapes) {
    const int64_t B = sh[0], Tn = sh[1], NH = sh[2], HS = sh[3], ld = NH * HS + 6;
    SCOPED_TRACE(::testing::Message() << B << "x" << Tn << "x" << NH << "x" << HS);
    const auto x = test::CastVector<T>(test::RandomNormal(B * Tn * ld, 31));
    std::vector<T> out(x), back(x);
    ASSERT_TRUE(cpu::RopeForward(out.data(), x.data(), B, Tn, NH, HS, ld, 500000.0f, 3).ok());
    ASSERT_TRUE(cpu::RopeBackward(back.data(), x.data(), B, Tn, NH, HS, ld, 500000.0f, 3).ok());
    DeviceBuffer<T> d_out(x), d_back(x);  // the untouched tail of each row must stay
    FP8RT_CHECK_OK(cuda::RopeForward(d_out.get(), d_out.get(), B, Tn, NH, HS, ld, 500000.0f, 3,
                                     nullptr));  // in place
    DeviceBuffer<T> d_x(x);
    FP8RT_CHECK_OK(cuda::RopeBackward(d_back.get(), d_x.get(), B, Tn, NH, HS, ld, 500000.0f, 3,
                                      nullptr));
    EXPECT_TRUE(test::AllClose(Down(d_out), test::ToFloatVector(out), tol, "forward"));
    EXPECT_TRUE(test::AllClose(Down(d_back), test::ToFloatVector(back), tol, "backward"));
  }
}

TYPED_TEST(LlamaOpsGpu, GqaExpandAndReduceMatchTheReference) {
  using T = TypeParam;
  // Reduce sums G values in FP32 (the reference in FP64, then rounded once).
  const auto tol = ToleranceFor(OpKind::kElementwise, DTypeOf<T>());
  const int64_t shapes[][4] = {{1, 1, 1, 2}, {37, 8, 2, 64}, {300, 32, 8, 64}, {5, 6, 3, 128},
                               {17, 4, 4, 16}};
  for (const auto& sh : shapes) {
    const int64_t M = sh[0], NH = sh[1], KV = sh[2], HS = sh[3];
    SCOPED_TRACE(::testing::Message() << M << "x" << NH << "/" << KV << "x" << HS);
    const int64_t ldi = (NH + 2 * KV) * HS, ldo = 3 * NH * HS;
    const auto in = test::CastVector<T>(test::RandomNormal(M * ldi, 41));
    const auto dout = test::CastVector<T>(test::RandomNormal(M * ldo, 42));
    std::vector<T> out(M * ldo), din(M * ldi);
    ASSERT_TRUE(cpu::GqaExpand(out.data(), in.data(), M, NH, KV, HS).ok());
    ASSERT_TRUE(cpu::GqaReduce(din.data(), dout.data(), M, NH, KV, HS).ok());
    DeviceBuffer<T> d_in(in), d_dout(dout), d_out(M * ldo), d_din(M * ldi);
    d_out.Poison(), d_din.Poison();
    FP8RT_CHECK_OK(cuda::GqaExpand(d_out.get(), d_in.get(), M, NH, KV, HS, nullptr));
    FP8RT_CHECK_OK(cuda::GqaReduce(d_din.get(), d_dout.get(), M, NH, KV, HS, nullptr));
    EXPECT_TRUE(test::AllClose(Down(d_out), test::ToFloatVector(out), test::Tolerance{0, 0, 0},
                               "expand (a copy: exact)"));
    EXPECT_TRUE(test::AllClose(Down(d_din), test::ToFloatVector(din), tol, "reduce"));
  }
}

// Llama's token embedding without a position table, against the reference.
TYPED_TEST(LlamaOpsGpu, EmbeddingWithoutPositionsMatchesTheReference) {
  using T = TypeParam;
  const int64_t B = 3, Tn = 37, C = 72, V = 101;
  const auto wte = test::CastVector<T>(test::RandomNormal(V * C, 51));
  std::vector<int32_t> tokens(B * Tn);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 13);
  const auto dout = test::CastVector<T>(test::RandomNormal(B * Tn * C, 52));
  std::vector<T> out(B * Tn * C);
  std::vector<float> dwte(V * C, 0.25f);
  ASSERT_TRUE(cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(),
                                    static_cast<const T*>(nullptr), B, Tn, C, V).ok());
  ASSERT_TRUE(cpu::EmbeddingBackward(dwte.data(), nullptr, dout.data(), tokens.data(), B, Tn, C, V)
                  .ok());
  DeviceBuffer<T> d_wte(wte), d_out(B * Tn * C), d_dout(dout);
  DeviceBuffer<int32_t> d_tok(tokens);
  DeviceBuffer<float> d_dwte(std::vector<float>(V * C, 0.25f));
  d_out.Poison();
  FP8RT_CHECK_OK(cuda::EmbeddingForward(d_out.get(), d_tok.get(), d_wte.get(),
                                        static_cast<const T*>(nullptr), B, Tn, C, V, nullptr));
  auto bytes = cuda::EmbeddingBackwardScratchBytes(B, Tn, V, C);
  FP8RT_CHECK_OK(bytes.status());
  DeviceBuffer<char> scratch(*bytes);
  FP8RT_CHECK_OK(cuda::EmbeddingBackward(d_dwte.get(), static_cast<float*>(nullptr), d_dout.get(),
                                         d_tok.get(), B, Tn, C, V, scratch.get(), *bytes,
                                         nullptr));
  EXPECT_TRUE(test::AllClose(Down(d_out), test::ToFloatVector(out), test::Tolerance{0, 0, 0},
                             "out (a copy: exact)"));
  EXPECT_TRUE(test::AllClose(d_dwte.Download(), dwte,
                             ToleranceFor(OpKind::kNormalization, DType::kFloat32), "dwte"));
}

}  // namespace
}  // namespace fp8rt
