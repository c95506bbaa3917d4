// Attention rows: forward, backward and both for GPT-1.3B attention (B=4, T=2048, NH=16, HS=128)
// in bf16, in TFLOP/s of the causal FLOPs. No target yet (the flash-style kernel is to come).
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/attention.h"

namespace fp8rt::bench {

void BenchAttention(Context& ctx) {
  const AttentionShape s{4, 2048, 16, 128};
  const int64_t C = s.C(), n_qkv = s.B * s.T * 3 * C, n_out = s.B * s.T * C;
  const int64_t n_att = s.B * s.NH * s.T * s.T;
  auto runner_or = GemmRunner::Create();
  FP8RT_CHECK_OK(runner_or.status());
  GemmRunner& runner = **runner_or;
  void* qkv = DeviceAlloc(n_qkv * 2);
  void* out = DeviceAlloc(n_out * 2);
  void* dout = DeviceAlloc(n_out * 2);
  void* dqkv = DeviceAlloc(n_qkv * 2);
  void* att = DeviceAlloc(n_att * 2);
  const size_t scratch_bytes = AttentionScratchBytes(s, DType::kBFloat16);
  void* scratch = DeviceAlloc(scratch_bytes);
  FillUniformBf16(qkv, n_qkv, -2.f, 2.f, 1, ctx.stream);
  FillUniformBf16(dout, n_out, -1.f, 1.f, 2, ctx.stream);

  auto fwd = [&] {
    FP8RT_CHECK_OK(cuda::AttentionForward(runner, static_cast<bf16*>(out), static_cast<bf16*>(att),
                                          static_cast<const bf16*>(qkv), scratch, scratch_bytes, s,
                                          ctx.stream));
  };
  auto bwd = [&] {
    FP8RT_CHECK_OK(
        cuda::AttentionBackward(runner, static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout),
                                static_cast<const bf16*>(qkv), static_cast<const bf16*>(att),
                                scratch, scratch_bytes, s, ctx.stream));
  };
  fwd();  // the backward reads the forward's att
  const double fwd_ms = MedianMs(ctx, fwd);
  const double bwd_ms = MedianMs(ctx, bwd);
  const double both_ms = MedianMs(ctx, [&] { fwd(), bwd(); });

  // Causal FLOPs: each T x T x HS product is 2*B*NH*T*T*HS, half of it under the mask; the forward
  // has two (q k^T, att v), the backward four (dy v^T, att^T dy, dpre k, dpre^T q).
  const double unit = 1.0 * s.B * s.NH * s.T * s.T * s.HS;
  const std::string shape = "B4 T2048 NH16 HS128";
  auto row = [&](const char* op, double ms, double flops) {
    ctx.rows.push_back({op, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", ctx.raw_bf16_tflops,
                        "raw bf16", "", true});
  };
  row("attention fwd bf16 (cuBLASLt + softmax)", fwd_ms, 2 * unit);
  row("attention bwd bf16 (cuBLASLt + softmax)", bwd_ms, 4 * unit);
  row("attention fwd+bwd bf16 (cuBLASLt + softmax)", both_ms, 6 * unit);

  for (void* p : {qkv, out, dout, dqkv, att, scratch}) DeviceFree(p);
}

}  // namespace fp8rt::bench
