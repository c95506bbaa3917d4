// FP8 causal attention (fp8.attention: true): Q, K, V and O as FP8 codes with per-tensor scales,
// the softmax probabilities quantized to FP8 before the second matmul, the backward taking FP8 dO
// and writing FP8 dQ/dK/dV, every FP8 tensor's amax returned for the delayed-scaling recipe. The
// CPU reference here emulates cuDNN's FP8 SDPA graphs quantization point by quantization point;
// the CUDA version (kernels/cudnn_fp8_attention.h) runs them.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8.h"

namespace fp8rt {

// qkv (B, T, (NH + 2 NKV) HS) FP8 codes, as the QKV linear writes them: NH query heads, then NKV
// key heads, then NKV value heads, HS wide each (GQA when NKV < NH; NH % NKV == 0). out and dout
// (B, T, NH HS); dqkv laid out like qkv; stats (B, NH, T) fp32.
struct Fp8AttentionShape {
  int64_t B = 0, T = 0, NH = 0, NKV = 0, HS = 0;
  int64_t QkvWidth() const { return (NH + 2 * NKV) * HS; }
  int64_t C() const { return NH * HS; }
};

// InvalidArgument naming the dimension unless every one is >= 1 and NH % NKV == 0.
Status ValidateFp8Attention(const Fp8AttentionShape& s);

// Formats: Q, K, V, O and the quantized probabilities S in `fwd` (E4M3); dO, the quantized
// dS (dP) and dQ/dK/dV in `bwd` (E5M2), as the recipe's forward/backward formats.
struct Fp8AttentionFormats {
  Fp8Format fwd = Fp8Format::kE4M3;
  Fp8Format bwd = Fp8Format::kE5M2;
};

// The scales: pointers to one float each (host memory for the CPU reference, device memory for
// CUDA, 16-byte aligned there). A tensor's codes are Encode(x * scale); descale = 1 / scale.
// Several may point at the same float (Q, K and V share the QKV output's scale in the model;
// dQ, dK and dV the QKV linear's gradient scale).
struct Fp8AttentionScales {
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  const float* scale_s = nullptr;  // P in [0, 1] -> S codes
  const float* descale_s = nullptr;
  const float* scale_o = nullptr;    // forward: O codes
  const float* descale_o = nullptr;  // backward: the forward's O codes
  const float* descale_do = nullptr;
  const float* scale_dp = nullptr;  // dS -> codes (the backward format)
  const float* descale_dp = nullptr;
  const float* scale_dq = nullptr;
  const float* scale_dk = nullptr;
  const float* scale_dv = nullptr;
  // Outputs, overwritten with this call's maxima of |x| before x is scaled: amax_s and amax_o by
  // the forward, the others by the backward.
  float* amax_s = nullptr;
  float* amax_o = nullptr;
  float* amax_dp = nullptr;
  float* amax_dq = nullptr;
  float* amax_dk = nullptr;
  float* amax_dv = nullptr;
};

// Semantics, per batch b and query head h (key/value head h / (NH / NKV)), with q, k, v, o, do
// the decoded codes times their descales and a = 1 / sqrt(HS):
//   forward:  s_ij = a q_i.k_j (j <= i), P = softmax_j(s), stats_i = ln sum_j exp(s_ij)
//             S_ij = Decode(Encode(P_ij scale_s)) descale_s;  O_i = sum_j S_ij v_j
//             out = Encode(O scale_o); amax_s = max P, amax_o = max |O|
//   backward: P_ij = exp(s_ij - stats_i), D_i = do_i.o_i, dP_ij = do_i.v_j
//             dS_ij = a P_ij (dP_ij - D_i), dS8 = Decode(Encode(dS scale_dp)) descale_dp
//             dV_j = sum_i S_ij do_i, dQ_i = sum_j dS8_ij k_j, dK_j = sum_i dS8_ij q_i
//             (dK, dV summed over the query heads sharing a key/value head)
//             dqkv = Encode(dQ scale_dq | dK scale_dk | dV scale_dv); amaxes of dS, dQ, dK, dV.
namespace cpu {
Status Fp8AttentionForward(uint8_t* out, float* stats, const uint8_t* qkv,
                           const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                           Fp8AttentionFormats f = {});
Status Fp8AttentionBackward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv,
                            const uint8_t* out, const float* stats, const Fp8AttentionShape& s,
                            const Fp8AttentionScales& sc, Fp8AttentionFormats f = {});
}  // namespace cpu

}  // namespace fp8rt
