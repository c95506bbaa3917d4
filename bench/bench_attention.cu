// Attention rows: forward, backward and both, at the attention shapes of GPT-1.3B (B=4, T=2048,
// NH=16, HS=128) and GPT-2 124M (B=16, T=1024, NH=12, HS=64), bf16, for the GEMM version
// (cuBLASLt + masked softmax), the flash kernels and cuDNN's fused attention (deterministic
// backward, and the atomic one for reference) side by side, in TFLOP/s of the causal FLOPs.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/attention.h"
#include "kernels/cudnn_attention.h"

namespace fp8rt::bench {
namespace {

// cuDNN rows, if cuDNN loads and takes the shape (otherwise one line says why). `att` may be null.
void BenchCudnnShape(Context& ctx, cuda::CudnnAttention* att, const char* label,
                     const AttentionShape& s, void* qkv, void* out, void* dout, void* dqkv,
                     void* lse,
                     const std::function<void(const std::string&, double, double)>& row) {
  if (att == nullptr) return;
  const Status prepared = att->Prepare(s);
  if (!prepared.ok()) {
    std::printf("%s attention rows skipped: %s\n", label, prepared.ToString().c_str());
    return;
  }
  std::printf("%s attention, B%ld T%ld NH%ld HS%ld: %s, %s\n", label, static_cast<long>(s.B),
              static_cast<long>(s.T), static_cast<long>(s.NH), static_cast<long>(s.HS),
              att->Version().c_str(), att->PlanSummary(s).c_str());
  const size_t ws_bytes = std::max<size_t>(att->WorkspaceBytes(s), 256);
  void* ws = DeviceAlloc(ws_bytes);
  auto fwd = [&] {
    FP8RT_CHECK_OK(att->Forward(static_cast<bf16*>(out), static_cast<float*>(lse),
                                static_cast<const bf16*>(qkv), s, ws, ws_bytes, ctx.stream));
  };
  auto bwd = [&] {
    FP8RT_CHECK_OK(att->Backward(static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                                 static_cast<const bf16*>(qkv), static_cast<const bf16*>(out),
                                 static_cast<const float*>(lse), s, ws, ws_bytes, ctx.stream));
  };
  fwd();  // the backward reads the forward's out and stats
  const double fwd_ms = MedianMs(ctx, fwd);
  const double bwd_ms = MedianMs(ctx, bwd);
  const double both_ms = MedianMs(ctx, [&] { fwd(), bwd(); });
  const double unit = 1.0 * s.B * s.NH * s.T * s.T * s.HS;
  row(StrCat("attention fwd bf16 (", label, ")"), fwd_ms, 2 * unit);
  row(StrCat("attention bwd bf16 (", label, ")"), bwd_ms, 4 * unit);
  row(StrCat("attention fwd+bwd bf16 (", label, ")"), both_ms, 6 * unit);
  DeviceFree(ws);
}

void BenchAttentionShape(Context& ctx, GemmRunner& runner, cuda::CudnnAttention* cudnn_det,
                         cuda::CudnnAttention* cudnn_atomic, const AttentionShape& s) {
  const int64_t C = s.C(), n_qkv = s.B * s.T * 3 * C, n_out = s.B * s.T * C;
  const int64_t n_att = s.B * s.NH * s.T * s.T;
  void* qkv = DeviceAlloc(n_qkv * 2);
  void* out = DeviceAlloc(n_out * 2);
  void* dout = DeviceAlloc(n_out * 2);
  void* dqkv = DeviceAlloc(n_qkv * 2);
  void* att = DeviceAlloc(n_att * 2);
  void* lse = DeviceAlloc(s.B * s.NH * s.T * 4);
  const size_t scratch_bytes = AttentionScratchBytes(s, DType::kBFloat16);
  void* scratch = DeviceAlloc(scratch_bytes);
  FillUniformBf16(qkv, n_qkv, -2.f, 2.f, 1, ctx.stream);
  FillUniformBf16(dout, n_out, -1.f, 1.f, 2, ctx.stream);
  auto q = [&] { return static_cast<const bf16*>(qkv); };

  auto fwd = [&] {
    FP8RT_CHECK_OK(cuda::AttentionForward(runner, static_cast<bf16*>(out), static_cast<bf16*>(att),
                                          q(), scratch, scratch_bytes, s, ctx.stream));
  };
  auto bwd = [&] {
    FP8RT_CHECK_OK(cuda::AttentionBackward(runner, static_cast<bf16*>(dqkv),
                                           static_cast<const bf16*>(dout), q(),
                                           static_cast<const bf16*>(att), scratch, scratch_bytes,
                                           s, ctx.stream));
  };
  fwd();  // the backward reads the forward's att
  const double fwd_ms = MedianMs(ctx, fwd);
  const double bwd_ms = MedianMs(ctx, bwd);
  const double both_ms = MedianMs(ctx, [&] { fwd(), bwd(); });

  // Causal FLOPs: each T x T x HS product is 2*B*NH*T*T*HS, half of it under the mask; the forward
  // has two (q k^T, att v), the backward four (dy v^T, att^T dy, dpre k, dpre^T q). The flash
  // backward recomputes two more (q k^T, dy v^T once per kernel); they are not counted.
  const double unit = 1.0 * s.B * s.NH * s.T * s.T * s.HS;
  const std::string shape = StrCat("B", s.B, " T", s.T, " NH", s.NH, " HS", s.HS);
  auto row = [&](const std::string& op, double ms, double flops) {
    ctx.rows.push_back({op, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", ctx.raw_bf16_tflops,
                        "raw bf16", "", true});
  };
  row("attention fwd bf16 (cuBLASLt + softmax)", fwd_ms, 2 * unit);
  row("attention bwd bf16 (cuBLASLt + softmax)", bwd_ms, 4 * unit);
  row("attention fwd+bwd bf16 (cuBLASLt + softmax)", both_ms, 6 * unit);
  // The flash kernels, once per compiled tiling (the first is the default).
  const std::vector<cuda::FlashTiling> tilings = cuda::FlashTilings(s.HS);
  for (int t = 0; t < static_cast<int>(tilings.size()); ++t) {
    auto ffwd = [&] {
      FP8RT_CHECK_OK(cuda::FlashAttentionForward(static_cast<bf16*>(out),
                                                 static_cast<float*>(lse), q(), s, ctx.stream, t));
    };
    auto fbwd = [&] {
      FP8RT_CHECK_OK(cuda::FlashAttentionBackward(
          static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), q(),
          static_cast<const bf16*>(out), static_cast<const float*>(lse), scratch, scratch_bytes,
          s, ctx.stream, t));
    };
    ffwd();  // the flash backward reads the forward's out and lse
    const double ffwd_ms = MedianMs(ctx, ffwd);
    const double fbwd_ms = MedianMs(ctx, fbwd);
    const double fboth_ms = MedianMs(ctx, [&] { ffwd(), fbwd(); });
    const std::string name = StrCat(t == 0 ? "flash" : "flash alt", ": ", tilings[t].Name());
    row(StrCat("attention fwd bf16 (", name, ")"), ffwd_ms, 2 * unit);
    row(StrCat("attention bwd bf16 (", name, ")"), fbwd_ms, 4 * unit);
    row(StrCat("attention fwd+bwd bf16 (", name, ")"), fboth_ms, 6 * unit);
  }
  BenchCudnnShape(ctx, cudnn_det, "cuDNN", s, qkv, out, dout, dqkv, lse, row);
  BenchCudnnShape(ctx, cudnn_atomic, "cuDNN nondeterministic bwd", s, qkv, out, dout, dqkv, lse,
                  row);

  for (void* p : {qkv, out, dout, dqkv, att, lse, scratch}) DeviceFree(p);
}

}  // namespace

void BenchAttention(Context& ctx) {
  auto runner_or = GemmRunner::Create();
  FP8RT_CHECK_OK(runner_or.status());
  // cuDNN is optional: where it does not load, its rows are left out and one line says why.
  auto det_or = cuda::CudnnAttention::Create();
  auto atomic_or =
      cuda::CudnnAttention::Create(cuda::CudnnAttentionOptions{.deterministic = false});
  if (!det_or.ok()) {
    std::printf("cuDNN attention rows skipped: %s\n", det_or.status().ToString().c_str());
  }
  cuda::CudnnAttention* det = det_or.ok() ? det_or->get() : nullptr;
  cuda::CudnnAttention* atomic = atomic_or.ok() ? atomic_or->get() : nullptr;
  BenchAttentionShape(ctx, **runner_or, det, atomic, AttentionShape{4, 2048, 16, 128});
  BenchAttentionShape(ctx, **runner_or, det, atomic, AttentionShape{16, 1024, 12, 64});
}

}  // namespace fp8rt::bench
