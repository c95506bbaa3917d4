// FP8 attention rows: cuDNN's fused FP8 SDPA forward, backward and both, beside cuDNN's BF16
// attention on the same shape in the same run, at the attention shapes of gpt-1.3b (B4 T2048 NH16
// HS128), llama3-1b (B4 T2048 NH32/KV8 HS64) and llama3-8b (B1 T8192 NH32/KV8 HS128), in TFLOP/s
// of the causal FLOPs against the FP8 dense ceiling (the raw cuBLASLt FP8 GEMM of this run where
// the gemm family ran, else the card's spec sheet: 1979 TFLOP/s dense on H100/H200 SXM).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/cudnn_attention.h"
#include "kernels/cudnn_fp8_attention.h"

namespace fp8rt::bench {
namespace {

constexpr double kFp8DenseSpecTflops = 1979.0;

// Device floats in 16-byte slots: the scales of one call, all 1 but S's (448: P in [0, 1]).
Fp8AttentionScales DeviceScales(float** block) {
  std::vector<float> host(32 * 4, 1.0f);
  host[1 * 4] = 448.0f, host[2 * 4] = 1.0f / 448.0f;
  *block = static_cast<float*>(DeviceAlloc(host.size() * sizeof(float)));
  FP8RT_CUDA_CHECK(
      cudaMemcpy(*block, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  float* b = *block;
  auto at = [&](int i) { return b + 4 * i; };
  Fp8AttentionScales sc;
  sc.descale_q = sc.descale_k = sc.descale_v = sc.descale_o = sc.descale_do = at(0);
  sc.scale_s = at(1), sc.descale_s = at(2);
  sc.scale_o = sc.scale_dp = sc.descale_dp = sc.scale_dq = sc.scale_dk = sc.scale_dv = at(0);
  sc.amax_s = at(3), sc.amax_o = at(4), sc.amax_dp = at(5), sc.amax_dq = at(6);
  sc.amax_dk = at(7), sc.amax_dv = at(8);
  return sc;
}

void BenchShape(Context& ctx, cuda::CudnnFp8Attention* fp8, cuda::CudnnAttention* bf16_att,
                const char* model, const Fp8AttentionShape& s) {
  const std::string shape = StrCat("B", s.B, " T", s.T, " NH", s.NH, "/KV", s.NKV, " HS", s.HS);
  const double unit = 1.0 * s.B * s.NH * s.T * s.T * s.HS;  // causal: half of 2*B*NH*T*T*HS
  const double ceiling = ctx.raw_fp8_tflops > 0 ? ctx.raw_fp8_tflops : kFp8DenseSpecTflops;
  const char* ceiling_name = ctx.raw_fp8_tflops > 0 ? "raw fp8 gemm" : "fp8 dense spec";
  auto row = [&](const std::string& op, double ms, double flops) {
    ctx.rows.push_back({StrCat(op, " (", model, ")"), shape, ms, flops / (ms * 1e-3) / 1e12,
                        "TFLOP/s", ceiling, ceiling_name, "", true});
  };
  const int64_t n_qkv = s.B * s.T * s.QkvWidth(), n_out = s.B * s.T * s.C();
  void* stats = DeviceAlloc(s.B * s.NH * s.T * 4);
  // FP8: random codes (bf16 fill bytes: a spread of finite E4M3/E5M2 values, no NaN below 0x7f).
  {
    const Status prepared = fp8->Prepare(s);
    const bool backward = prepared.ok();
    if (!backward) {
      std::printf("fp8 attention backward (%s) skipped: %s\n", model, prepared.ToString().c_str());
      FP8RT_CHECK_OK(fp8->Prepare(s, /*forward_only=*/true));
    }
    std::printf("fp8 attention %s, %s: %s, %s\n", model, shape.c_str(), fp8->Version().c_str(),
                fp8->PlanSummary(s).c_str());
    uint8_t* qkv = static_cast<uint8_t*>(DeviceAlloc(n_qkv));
    uint8_t* out = static_cast<uint8_t*>(DeviceAlloc(n_out));
    uint8_t* dout = static_cast<uint8_t*>(DeviceAlloc(n_out));
    uint8_t* dqkv = static_cast<uint8_t*>(DeviceAlloc(n_qkv));
    FillUniformBf16(qkv, n_qkv / 2, -1.f, 1.f, 3, ctx.stream);
    FillUniformBf16(dout, n_out / 2, -1.f, 1.f, 4, ctx.stream);
    float* block = nullptr;
    const Fp8AttentionScales sc = DeviceScales(&block);
    const size_t ws_bytes =
        std::max<size_t>({fp8->ForwardWorkspaceBytes(s), fp8->BackwardWorkspaceBytes(s), 256});
    void* ws = DeviceAlloc(ws_bytes);
    auto fwd = [&] {
      FP8RT_CHECK_OK(fp8->Forward(out, static_cast<float*>(stats), qkv, s, sc, ws, ws_bytes,
                                  ctx.stream));
    };
    auto bwd = [&] {
      FP8RT_CHECK_OK(fp8->Backward(dqkv, dout, qkv, out, static_cast<const float*>(stats), s, sc,
                                   ws, ws_bytes, ctx.stream));
    };
    fwd();
    row("attention fwd fp8 (cuDNN)", MedianMs(ctx, fwd), 2 * unit);
    if (backward) {
      row("attention bwd fp8 (cuDNN)", MedianMs(ctx, bwd), 4 * unit);
      row("attention fwd+bwd fp8 (cuDNN)", MedianMs(ctx, [&] { fwd(), bwd(); }), 6 * unit);
    }
    for (void* p : {static_cast<void*>(qkv), static_cast<void*>(out), static_cast<void*>(dout),
                    static_cast<void*>(dqkv), ws, static_cast<void*>(block)}) {
      DeviceFree(p);
    }
  }
  // BF16 cuDNN at the same FLOPs (its graphs have no GQA: every query head its own K/V head).
  if (bf16_att != nullptr) {
    const AttentionShape b{s.B, s.T, s.NH, s.HS};
    const Status prepared = bf16_att->Prepare(b);
    if (!prepared.ok()) {
      std::printf("bf16 attention (%s) skipped: %s\n", model, prepared.ToString().c_str());
    } else {
      void* qkv = DeviceAlloc(s.B * s.T * 3 * s.C() * 2);
      void* out = DeviceAlloc(n_out * 2);
      void* dout = DeviceAlloc(n_out * 2);
      void* dqkv = DeviceAlloc(s.B * s.T * 3 * s.C() * 2);
      FillUniformBf16(qkv, s.B * s.T * 3 * s.C(), -2.f, 2.f, 5, ctx.stream);
      FillUniformBf16(dout, n_out, -1.f, 1.f, 6, ctx.stream);
      const size_t ws_bytes = std::max<size_t>(bf16_att->WorkspaceBytes(b), 256);
      void* ws = DeviceAlloc(ws_bytes);
      auto fwd = [&] {
        FP8RT_CHECK_OK(bf16_att->Forward(static_cast<bf16*>(out), static_cast<float*>(stats),
                                         static_cast<const bf16*>(qkv), b, ws, ws_bytes,
                                         ctx.stream));
      };
      auto bwd = [&] {
        FP8RT_CHECK_OK(bf16_att->Backward(
            static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
            static_cast<const bf16*>(qkv), static_cast<const bf16*>(out),
            static_cast<const float*>(stats), b, ws, ws_bytes, ctx.stream));
      };
      fwd();
      row("attention fwd bf16 (cuDNN)", MedianMs(ctx, fwd), 2 * unit);
      row("attention bwd bf16 (cuDNN)", MedianMs(ctx, bwd), 4 * unit);
      row("attention fwd+bwd bf16 (cuDNN)", MedianMs(ctx, [&] { fwd(), bwd(); }), 6 * unit);
      for (void* p : {qkv, out, dout, dqkv, ws}) DeviceFree(p);
    }
  }
  DeviceFree(stats);
}

}  // namespace

void BenchFp8Attention(Context& ctx) {
  auto fp8 = cuda::CudnnFp8Attention::Create();
  if (!fp8.ok()) {
    std::printf("fp8 attention rows skipped: %s\n", fp8.status().ToString().c_str());
    return;
  }
  auto bf16_att = cuda::CudnnAttention::Create();
  cuda::CudnnAttention* b = bf16_att.ok() ? bf16_att->get() : nullptr;
  BenchShape(ctx, fp8->get(), b, "gpt-1.3b", {4, 2048, 16, 16, 128});
  BenchShape(ctx, fp8->get(), b, "llama3-1b", {4, 2048, 32, 8, 64});
  BenchShape(ctx, fp8->get(), b, "llama3-8b", {1, 8192, 32, 8, 128});
}

}  // namespace fp8rt::bench
