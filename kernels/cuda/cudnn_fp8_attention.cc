// cuDNN's fused FP8 attention (kernels/cudnn_fp8_attention.h): the forward and backward operation
// graphs, op by op as cudnn-frontend's sdpa_fp8 / sdpa_fp8_backward nodes emit them (matmul,
// descales, causal mask, softmax with stats, amax, the cast of P to FP8, matmul, descales, amax,
// the output's scale), their plans per shape, and the runs. The builder, the loader and Execute
// are cuDNN BF16 attention's (cudnn_attention_impl.h).
//
// Sources, cited below by tag (grep the node name strings, e.g. set_name("descale_q")):
//  [F] [F2] cudnn-frontend include/cudnn_frontend/node/sdpa_fp8.h, and the FP8 path of
//           scaled_dot_product_flash_attention.h in newer releases
//  [B]      cudnn-frontend node/sdpa_fp8_bwd.h;  [M] node/matmul_fp8.h;  [S] node/softmax.h
//  [D]      node/diagonal_band_mask.h;  [P] node/pointwise.h;  [R] node/reduction.h
//  [T]      graph_properties.h (untyped virtual tensors become FLOAT)
//  [S8]     samples/cpp/sdpa/fp8_fwd.cpp, fp8_bwd.cpp;  [TE] TransformerEngine fused_attn_fp8.cu
//  [O]      our BF16 graphs, cudnn_attention_graph.cc
#include "kernels/cudnn_fp8_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cuda/cudnn_attention_impl.h"

namespace fp8rt::cuda {

#if FP8RT_HAVE_CUDNN_HEADERS
namespace cudnn_detail {
namespace {

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kI32 = CUDNN_DATA_INT32,
                          kBool = CUDNN_DATA_BOOLEAN, kE4M3 = CUDNN_DATA_FP8_E4M3,
                          kE5M2 = CUDNN_DATA_FP8_E5M2;

// Uids of the FP8 variant packs. Kept clear of enum Uid (1..16, cudnn_attention_impl.h line 156)
// and of the virtual uids (1000 up).
enum Fp8Uid : int64_t {
  kF8Q = 100,
  kF8K,
  kF8V,
  kF8O,
  kF8Stats,
  kF8DO,
  kF8DQ,
  kF8DK,
  kF8DV,
  // by value (host pointers in the variant pack)
  kF8AttnScale,  // 1/sqrt(HS)                                    [F] "attn_scale", [S8]
  kF8NegInf,     // -inf (cuDNN >= 9.10) or FLT_LOWEST (< 9.10)   [D]/score_modifiers.h
  kF8PadFill,    // -2^30, only with the padded backward           [B] newer "select_padding"
  // device (1,1,1,1) fp32 inputs                                 [S8], [TE]
  kF8DescaleQ,
  kF8DescaleK,
  kF8DescaleV,
  kF8DescaleS,
  kF8ScaleS,
  kF8ScaleO,
  kF8DescaleO,
  kF8DescaleDO,
  kF8DescaleDP,
  kF8ScaleDP,
  kF8ScaleDQ,
  kF8ScaleDK,
  kF8ScaleDV,
  // device (1,1,1,1) fp32 outputs
  kF8AmaxS,
  kF8AmaxO,
  kF8AmaxDP,
  kF8AmaxDQ,
  kF8AmaxDK,
  kF8AmaxDV,
  // (B,1,1,1) int32, only with the padded spelling
  kF8SeqQ,
  kF8SeqKV,
};

// Element types. Defaults = what runs on Hopper per the frontend's checks and TE's HYBRID recipe:
// Q/K/V/O E4M3, dO (and hence dP) E5M2, dQ/dK/dV E5M2 (BF16 outputs are refused on sm_90: [B]
// newest, "sdpa fp8 backward with HALF/BFLOAT16 output is only supported on Blackwell ... 9.13";
// forward O likewise, sdpa_support_surface.h). E4M3 everywhere is what the samples use [S8].
struct Fp8Types {
  cudnnDataType_t qkv = kE4M3;
  cudnnDataType_t o = kE4M3;
  cudnnDataType_t dout = kE5M2;  // dP is cast to this type too ([B] "scale_dP")
  cudnnDataType_t dqkv = kE5M2;  // (FP8 only on sm_90: BF16 outputs need Blackwell, [B])
  // The byte alignment declared for the scale and amax tensors
  // (CudnnFp8AttentionOptions::scalar_alignment).
  int64_t scalar_alignment = 16;
};

// Alternatives to try, in order, when no engine takes the graph (same idea as kSpellings, [O] 338).
struct Fp8Spelling {
  cudnnDataType_t gen_index_math;  // compute type of GEN_INDEX; [D]/[B] leave it at the graph's
                                   // compute type (FLOAT) and type the output INT32
  bool k_view_fp8;                 // [B] "reshape_K" leaves the K view untyped -> FLOAT ([T]);
                                   // alternative: the FP8 type of K
};
constexpr Fp8Spelling kFp8Spellings[] = {{kF32, false}, {kI32, false}, {kF32, true}};

// Packed layout like ours: qkv (B, T, (NH + 2*NKV) * HS) [Q heads | K heads | V heads], out and
// dout (B, T, NH*HS); dqkv packed like qkv. Dims are (B, heads, rows, cols).
struct Fp8Views {
  int64_t B, H, HK, T, D;
  Dims q, kv;                     // (B,NH,T,HS), (B,NKV,T,HS)
  Dims q_stride, kv_stride;       // inside the packed qkv row of width W = (NH+2NKV)*HS
  Dims kvt, kvt_stride;           // K^T / V^T: (B,NKV,HS,T), the same memory with 2 and 3 swapped
  Dims o_stride;                  // out / dout (B, T, NH*HS)
  Dims score, score_stride;       // (B,NH,T,T) row-major
  Dims score_t_stride;            // its transpose view (B,NH,T_kv,T_q)
  Dims row, row_stride;           // (B,NH,T,1)
  Dims head_rm_stride;            // (B,NH,T,HS) row-major: matmul outputs [M] (matmul.h infers
                                  // row-major strides for an unset output)
  Dims kv_nhwc_stride;            // GQA head-sum output (B,NKV,T,HS), NHWC order [R]
};
Fp8Views MakeFp8Views(const Fp8AttentionShape& s) {
  const int64_t B = s.B, H = s.NH, HK = s.NKV, T = s.T, D = s.HS;
  const int64_t W = (H + 2 * HK) * D, C = H * D;
  return Fp8Views{B,
                  H,
                  HK,
                  T,
                  D,
                  {B, H, T, D},
                  {B, HK, T, D},
                  {T * W, D, W, 1},
                  {T * W, D, W, 1},
                  {B, HK, D, T},
                  {T * W, D, 1, W},
                  {T * C, D, C, 1},
                  {B, H, T, T},
                  {H * T * T, T * T, T, 1},
                  {H * T * T, T * T, 1, T},
                  {B, H, T, 1},
                  {H * T, T, 1, 1},
                  {H * T * D, T * D, D, 1},
                  // NHWC order for dims (n=B, c=NKV, h=T, w=HS): c fastest, then w, h, n.
                  {T * D * HK, 1, D * HK, HK}};
}
// Byte offsets of K and V inside a packed qkv / dqkv row (element size 1 for FP8).
inline int64_t KOffset(const Fp8AttentionShape& s) { return s.NH * s.HS; }
inline int64_t VOffset(const Fp8AttentionShape& s) { return (s.NH + s.NKV) * s.HS; }

T DeviceScalar(Graph& g, const Fp8Types& ty, int64_t uid) {
  return g.Tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, kF32, false, ty.scalar_alignment);
}

// The masks are our BF16 graphs' (CausalMask, PaddingMask in cudnn_attention_graph.cc), the same
// ops as [D] CompositeDiagonalBandMaskNode ("gen_row_index", "gen_col_index",
// "row_greater_than_col", "binary_select") and [B]'s padding mask, whose fill is -2^30 in the
// backward ("so that the softmax stats for rows that are fully padded dont go towards NaNs/Infs
// when multiplied by the numerous scale/descale"). cuDNN 9.14 takes the padded spelling for T
// not a multiple of 128 (measured: T 100, 130 and 192 on H200).

// matmul_fp8 [M]: c32 = a b (virtual fp32, dims {a0,a1,a2,b3}, row-major); if a and b have the
// same head count and c fewer (GQA dK/dV), c32 = ADD-reduce over heads ("gqa_c", output dims
// c_dims, strides NHWC [R]); c32 *= descale_a ("descale_a"); c32 *= descale_b ("descale_b");
// c = c32 * scale_c ("scale_c", c's type = the FP8 (or BF16) output); amax_c = AMAX(c32) - i.e.
// the amax of the *unscaled* result ("amax_c"). Note the amax input is the pre-scale_c tensor.
T MatmulFp8(Graph& g, T c, T a, T b, T descale_a, T descale_b, T scale_c, T amax_c,
            const Dims& mm_dims, const Dims& mm_stride, const Dims& c_dims, const Dims& c_stride,
            bool gqa_reduce, T m_override = nullptr, T n_override = nullptr,
            T k_override = nullptr) {
  T acc = g.Matmul(g.Virtual(mm_dims, mm_stride), a, b, m_override, n_override, k_override);
  if (gqa_reduce) acc = g.Reduction(CUDNN_REDUCE_TENSOR_ADD, g.Virtual(c_dims, c_stride), acc);
  const Dims& d = gqa_reduce ? c_dims : mm_dims;
  const Dims& st = gqa_reduce ? c_stride : mm_stride;
  acc = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(d, st), acc, descale_a);
  acc = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(d, st), acc, descale_b);
  g.Pointwise(CUDNN_POINTWISE_MUL, c, acc, scale_c);
  g.Reduction(CUDNN_REDUCE_TENSOR_AMAX, amax_c, acc);
  return c;
}


// ---- Forward ----
// O = scale_o * descale_s * descale_v * (fp8(scale_s * softmax(mask(attn_scale * descale_q *
// descale_k * Q K^T))) V); Stats = LSE (max + log sum exp, natural log); amax_s = max|softmax|;
// amax_o = max|O before scale_o|. Op order as [F] expand_and_infer_properties_node (and [F2]).
void BuildFp8Forward(Graph& g, const Fp8Views& v, const Fp8Types& ty, const Fp8Spelling& sp,
                     bool padded) {
  // K arrives as K^T: [F] swaps dims/strides 2<->3 of K ("maps the K->KT").
  T q = g.Tensor(kF8Q, v.q, v.q_stride, ty.qkv);
  T kt = g.Tensor(kF8K, v.kvt, v.kvt_stride, ty.qkv);
  T val = g.Tensor(kF8V, v.kv, v.kv_stride, ty.qkv);
  T out = g.Tensor(kF8O, v.q, v.o_stride, ty.o);
  T stats = g.Tensor(kF8Stats, v.row, v.row_stride, kF32);  // [TE] Stats {b,h,s_q,1}, {h*s_q,s_q,1,1}
  T attn_scale = g.Scalar(kF8AttnScale, kF32);               // by value [TE]/[S8]
  T neg_inf = g.Scalar(kF8NegInf, kF32);                     // by value [F] negative_inf_causal
  T descale_q = DeviceScalar(g, ty, kF8DescaleQ);
  T descale_k = DeviceScalar(g, ty, kF8DescaleK);
  T descale_v = DeviceScalar(g, ty, kF8DescaleV);
  T descale_s = DeviceScalar(g, ty, kF8DescaleS);
  T scale_s = DeviceScalar(g, ty, kF8ScaleS);
  T scale_o = DeviceScalar(g, ty, kF8ScaleO);
  T amax_s = DeviceScalar(g, ty, kF8AmaxS);  // output
  T amax_o = DeviceScalar(g, ty, kF8AmaxO);  // output
  T seq_q = nullptr, seq_kv = nullptr;
  if (padded) {  // [F2]: bmm1 m=seq_q n=seq_kv, bmm2 m=seq_q k=seq_kv
    seq_q = g.Tensor(kF8SeqQ, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
    seq_kv = g.Tensor(kF8SeqKV, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
  }

  // "bmm1": S = Q K^T, virtual fp32 (B,NH,T,T) row-major. GQA: Q has NH heads, K^T NKV; the
  // backend broadcasts (same as the frontend, which emits nothing extra for GQA in bmm1).
  T s = g.Matmul(g.Virtual(v.score, v.score_stride), q, kt, seq_q, seq_kv);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, attn_scale);  // "attn_scale"
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, descale_q);   // "descale_q"
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, descale_k);   // "descale_k"
  if (padded) {
    // The forward's padding fill is -inf, as [F2]'s (score_modifiers padding_mask); -2^30 is the
    // backward's.
    s = PaddingMask(g, v.score, v.score_stride, s, seq_q, seq_kv, neg_inf);
  }
  s = CausalMask(g, v.score, v.score_stride, s, neg_inf, sp.gen_index_math);

  // Softmax with stats [S]: M = MAX ("M"), sub, exp, Z = ADD ("sum"), stats = M + log Z ("log",
  // "add"), P = e / Z ("div"), as our BF16 graph's; P is virtual and untyped -> FLOAT [T].
  T p = SoftmaxWithStats(g, v.score, v.score_stride, v.row, v.row_stride, s, stats, kF32);

  g.Reduction(CUDNN_REDUCE_TENSOR_AMAX, amax_s, p);  // "amax_s": of P before scale_s
  // "scale_s": P8 = P * scale_s, typed as Q's type (the cast to FP8) [F]
  // `last_output->set_data_type(Q type)`.
  T p8 = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride, ty.qkv), p, scale_s);

  // "bmm2" = matmul_fp8(P8, V, descale_s, descale_v, scale_o) -> O, amax_o [F], [M].
  // GQA: P8 has NH heads, V NKV, O NH -> no head reduction (a_dim[1] != b_dim[1]).
  MatmulFp8(g, out, p8, val, descale_s, descale_v, scale_o, amax_o, v.q, v.head_rm_stride, v.q,
            v.head_rm_stride, /*gqa_reduce=*/false, seq_q, nullptr, seq_kv);
}

// ---- Backward ----
// Op order as [B] expand_node. No dQ accumulation tensor and no softmax_sum tensor in the graph:
// softmax_sum is *virtual* here (unlike the BF16 node, [O] kSoftmaxSum), and dQ is written by
// matmul_fp8 straight into the FP8 dQ; only the plan's own workspace is needed.
void BuildFp8Backward(Graph& g, const Fp8Views& v, const Fp8Types& ty, const Fp8Spelling& sp,
                      bool padded) {
  // K and V arrive as K^T and V^T ([B] "maps the K->KT and V->VT").
  T q = g.Tensor(kF8Q, v.q, v.q_stride, ty.qkv);
  T kt = g.Tensor(kF8K, v.kvt, v.kvt_stride, ty.qkv);
  T vt = g.Tensor(kF8V, v.kvt, v.kvt_stride, ty.qkv);
  T out = g.Tensor(kF8O, v.q, v.o_stride, ty.o);
  T dout = g.Tensor(kF8DO, v.q, v.o_stride, ty.dout);
  T stats = g.Tensor(kF8Stats, v.row, v.row_stride, kF32);
  T dq = g.Tensor(kF8DQ, v.q, v.q_stride, ty.dqkv);
  T dk = g.Tensor(kF8DK, v.kv, v.kv_stride, ty.dqkv);
  T dv = g.Tensor(kF8DV, v.kv, v.kv_stride, ty.dqkv);
  T attn_scale = g.Scalar(kF8AttnScale, kF32);
  T neg_inf = g.Scalar(kF8NegInf, kF32);
  T descale_q = DeviceScalar(g, ty, kF8DescaleQ);
  T descale_k = DeviceScalar(g, ty, kF8DescaleK);
  T descale_v = DeviceScalar(g, ty, kF8DescaleV);
  T descale_o = DeviceScalar(g, ty, kF8DescaleO);
  T descale_do = DeviceScalar(g, ty, kF8DescaleDO);
  T descale_s = DeviceScalar(g, ty, kF8DescaleS);
  T descale_dp = DeviceScalar(g, ty, kF8DescaleDP);
  T scale_s = DeviceScalar(g, ty, kF8ScaleS);
  T scale_dp = DeviceScalar(g, ty, kF8ScaleDP);
  T scale_dq = DeviceScalar(g, ty, kF8ScaleDQ);
  T scale_dk = DeviceScalar(g, ty, kF8ScaleDK);
  T scale_dv = DeviceScalar(g, ty, kF8ScaleDV);
  T amax_dp = DeviceScalar(g, ty, kF8AmaxDP);  // outputs
  T amax_dq = DeviceScalar(g, ty, kF8AmaxDQ);
  T amax_dk = DeviceScalar(g, ty, kF8AmaxDK);
  T amax_dv = DeviceScalar(g, ty, kF8AmaxDV);
  T seq_q = nullptr, seq_kv = nullptr, pad_fill = nullptr;
  if (padded) {
    seq_q = g.Tensor(kF8SeqQ, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
    seq_kv = g.Tensor(kF8SeqKV, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
    // by value, host float -1024.f*1024.f*1024.f ([B] newer "negative_inf_padding")
    pad_fill = g.Scalar(kF8PadFill, kF32);
  }

  // "mul_dO_O": dO * O, virtual fp32 (B,NH,T,HS) with dO's strides ([P]: IN_0's strides).
  T doo = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.q, v.o_stride), dout, out);
  // "reduce_dO": row sum -> (B,NH,T,1) {h*s_q, s_q, 1, 1}
  T rs = g.Reduction(CUDNN_REDUCE_TENSOR_ADD, g.Virtual(v.row, v.row_stride), doo);
  rs = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.row, v.row_stride), rs, descale_do);  // "descale_dO"
  T softmax_sum =
      g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.row, v.row_stride), rs, descale_o);  // "descale_O"

  // "bmm_Q_K" (+ m=seq_q, n=seq_kv when padded), then "attn_scale", "descale_q", "descale_k".
  T s = g.Matmul(g.Virtual(v.score, v.score_stride), q, kt, seq_q, seq_kv);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, attn_scale);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, descale_q);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, descale_k);
  if (padded) s = PaddingMask(g, v.score, v.score_stride, s, seq_q, seq_kv, pad_fill);
  // NB: the FP8 node masks BEFORE subtracting the stats; our BF16 graph ([O] line 452-454)
  // subtracts first. Follow [B] here.
  s = CausalMask(g, v.score, v.score_stride, s, neg_inf, sp.gen_index_math);
  s = g.Pointwise(CUDNN_POINTWISE_SUB, g.Virtual(v.score, v.score_stride), s, stats);  // "sub_dV_Stats"
  T exp_s = g.Pointwise(CUDNN_POINTWISE_EXP, g.Virtual(v.score, v.score_stride), s);   // "exp_dV"

  // "scale_S": S8 = P * scale_s, typed Q's type; "S_transpose": reshape to (B,NH,T_kv,T_q)
  // strides {h*sq*skv, sq*skv, 1, skv}, same FP8 type.
  T s8 = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride, ty.qkv), exp_s,
                     scale_s);
  T s8t = g.Reshape(g.Virtual(v.score, v.score_t_stride, ty.qkv), s8);

  // "bmm_S_T_dO" = matmul_fp8(S8^T, dO, descale_s, descale_dO, scale_dV) -> dV, amax_dV
  // (+ m=seq_kv, k=seq_q when padded). GQA: S8^T and dO have NH heads, dV NKV -> "gqa_c" sum.
  const bool gqa = v.HK != v.H;
  MatmulFp8(g, dv, s8t, dout, descale_s, descale_do, scale_dv, amax_dv, v.q, v.head_rm_stride,
            v.kv, v.kv_nhwc_stride, gqa, seq_kv, nullptr, seq_q);

  // "bmm_dO_V_T" (+ m=seq_q, n=seq_kv), "descale_dO", "descale_V".
  T dp = g.Matmul(g.Virtual(v.score, v.score_stride), dout, vt, seq_q, seq_kv);
  dp = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, descale_do);
  dp = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, descale_v);
  // "sub_dP_softmax_sum", "mul_dP_exp_S", "mul_dS_attn_scale"
  dp = g.Pointwise(CUDNN_POINTWISE_SUB, g.Virtual(v.score, v.score_stride), dp, softmax_sum);
  dp = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, exp_s);
  dp = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, attn_scale);
  g.Reduction(CUDNN_REDUCE_TENSOR_AMAX, amax_dp, dp);  // "amax_dP": before scale_dP
  // "scale_dP": dP8 = dP * scale_dP, typed dO's type.
  T dp8 = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride, ty.dout), dp,
                      scale_dp);

  // "reshape_K": K^T back to K (B,NKV,T,HS) with the original strides. Type: untyped in [B] ->
  // FLOAT ([T]); the FP8 type of K is the spelling tried after it.
  T k = g.Reshape(g.Virtual(v.kv, v.kv_stride, sp.k_view_fp8 ? ty.qkv : kF32), kt);
  // "bmm_dP_K" = matmul_fp8(dP8, K, descale_dP, descale_K, scale_dQ) -> dQ, amax_dQ
  // (+ m=seq_q, k=seq_kv). GQA: dP8 NH heads, K NKV -> no reduction; K broadcast by the backend.
  MatmulFp8(g, dq, dp8, k, descale_dp, descale_k, scale_dq, amax_dq, v.q, v.head_rm_stride, v.q,
            v.head_rm_stride, /*gqa_reduce=*/false, seq_q, nullptr, seq_kv);

  // "dP_T": reshape to (B,NH,T_kv,T_q) {h*sq*skv, sq*skv, 1, skv}, typed dO's type.
  T dp8t = g.Reshape(g.Virtual(v.score, v.score_t_stride, ty.dout), dp8);
  // "bmm_dP_T_Q" = matmul_fp8(dP8^T, Q, descale_dP, descale_Q, scale_dK) -> dK, amax_dK
  // (+ m=seq_kv, k=seq_q). GQA: NH -> NKV "gqa_c" sum.
  MatmulFp8(g, dk, dp8t, q, descale_dp, descale_q, scale_dk, amax_dk, v.q, v.head_rm_stride, v.kv,
            v.kv_nhwc_stride, gqa, seq_kv, nullptr, seq_q);
}


cudnnDataType_t CudnnType(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? CUDNN_DATA_FP8_E4M3 : CUDNN_DATA_FP8_E5M2;
}

using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
Fp8Key Fp8KeyOf(const Fp8AttentionShape& s) { return {s.B, s.T, s.NH, s.NKV, s.HS}; }
std::string Fp8ShapeName(const Fp8AttentionShape& s) {
  return StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

struct Fp8Plans {
  std::unique_ptr<Graph> fwd, bwd;  // bwd null when prepared forward-only
  float attn_scale = 0, neg_inf = -std::numeric_limits<float>::infinity(),
        pad_fill = -1024.0f * 1024.0f * 1024.0f;
  bool fwd_padded = false, bwd_padded = false;
  // The runs of each pass repeat bit for bit: measured at Prepare (two runs of each on the same
  // inputs), whatever cuDNN's engine notes say.
  bool fwd_repeats = true, bwd_repeats = true;
  std::unique_ptr<void, CudaFree> seq_lens;  // (2, B) int32: T, T; only when padded
};

}  // namespace
}  // namespace cudnn_detail

using cudnn_detail::BuildFp8Backward;
using cudnn_detail::BuildFp8Forward;
using cudnn_detail::CudaFree;
using cudnn_detail::CudnnApi;
using cudnn_detail::CudnnType;
using cudnn_detail::Fp8KeyOf;
using cudnn_detail::Fp8Plans;
using cudnn_detail::Fp8ShapeName;
using cudnn_detail::Fp8Spelling;
using cudnn_detail::Fp8Types;
using cudnn_detail::Fp8Views;
using cudnn_detail::Graph;
using cudnn_detail::HandleDeleter;
using cudnn_detail::kFp8Spellings;
using cudnn_detail::MakeFp8Views;
using cudnn_detail::VersionString;
using enum cudnn_detail::Fp8Uid;

namespace {
Status CheckScalars(const char* who, int alignment,
                    std::initializer_list<std::pair<const char*, const void*>> ps) {
  for (const auto& [name, p] : ps) {
    if (p == nullptr) return Status::InvalidArgument(StrCat(who, ": ", name, " is null"));
    if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
      return Status::InvalidArgument(
          StrCat(who, ": ", name, " must be ", alignment, "-byte aligned, got ", p));
    }
  }
  return Status::Ok();
}
}  // namespace

struct CudnnFp8Attention::Impl {
  const CudnnApi* api = nullptr;
  CudnnFp8AttentionOptions options;
  cudnn_detail::Handle handle{nullptr, HandleDeleter{nullptr}};
  cudaStream_t stream = nullptr;
  std::map<cudnn_detail::Fp8Key, std::unique_ptr<Fp8Plans>> plans;

  Result<const Fp8Plans*> Find(const Fp8AttentionShape& s, const char* who, bool bwd) const {
    auto it = plans.find(Fp8KeyOf(s));
    if (it == plans.end() || (bwd && it->second->bwd == nullptr)) {
      return Status::FailedPrecondition(StrCat("CudnnFp8Attention::", who, ": Prepare",
                                               bwd ? " (with the backward)" : "",
                                               " was not called (or failed) for ",
                                               Fp8ShapeName(s)));
    }
    return it->second.get();
  }
};

CudnnFp8Attention::CudnnFp8Attention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnFp8Attention::~CudnnFp8Attention() = default;

Result<std::unique_ptr<CudnnFp8Attention>> CudnnFp8Attention::Create(
    CudnnFp8AttentionOptions options) {
  if (options.scalar_alignment != 4 && options.scalar_alignment != 16) {
    return Status::InvalidArgument(StrCat("CudnnFp8Attention: scalar_alignment ",
                                          options.scalar_alignment, " is not 4 or 16"));
  }
  FP8RT_ASSIGN_OR_RETURN(const CudnnApi* api, cudnn_detail::LoadCudnn());
  const size_t version = api->GetVersion();
  if (version < 90100) {
    return Status::Unavailable(StrCat("cuDNN FP8 attention needs cuDNN 9.1 or newer; ",
                                      VersionString(version), " is loaded"));
  }
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->options = options;
  FP8RT_ASSIGN_OR_RETURN(impl->handle, cudnn_detail::CreateHandle(*api));
  return std::unique_ptr<CudnnFp8Attention>(new CudnnFp8Attention(std::move(impl)));
}

Status CudnnFp8Attention::Prepare(const Fp8AttentionShape& s, bool forward_only) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Attention(s));
  auto it = impl_->plans.find(Fp8KeyOf(s));
  if (it != impl_->plans.end() && (forward_only || it->second->bwd != nullptr)) {
    return Status::Ok();
  }
  if (s.HS % 16 != 0 || s.HS > 256) {
    return Status::InvalidArgument(StrCat("cuDNN FP8 attention: head size ", s.HS,
                                          " is not supported (a multiple of 16, at most 256)"));
  }
  const CudnnApi& api = *impl_->api;
  const size_t version = api.GetVersion();
  auto plans = std::make_unique<Fp8Plans>();
  plans->attn_scale = 1.0f / std::sqrt(static_cast<float>(s.HS));
  const Fp8Views v = MakeFp8Views(s);
  Fp8Types ty;
  ty.scalar_alignment = impl_->options.scalar_alignment;
  ty.qkv = ty.o = CudnnType(impl_->options.formats.fwd);
  ty.dout = ty.dqkv = CudnnType(impl_->options.formats.bwd);
  // Each spelling plain, then (T not a multiple of 128) with the padding mask of full lengths.
  std::vector<bool> paddings = {false};
  if (s.T % 128 != 0) paddings.push_back(true);
  auto build = [&](bool backward, bool det, std::unique_ptr<Graph>* out, bool* padded,
                   std::string* why) {
    for (bool pad : paddings) {
      for (const Fp8Spelling& sp : kFp8Spellings) {
        auto g = std::make_unique<Graph>(api);
        if (backward) {
          BuildFp8Backward(*g, v, ty, sp, pad);
        } else {
          BuildFp8Forward(*g, v, ty, sp, pad);
        }
        const Status st = g->BuildPlan(impl_->handle.get(), det);
        if (st.ok()) {
          *out = std::move(g);
          *padded = pad;
          return;
        }
        *why = StrCat(*why, " [spelling ", &sp - kFp8Spellings, pad ? ", padded" : "", "] ",
                      st.message());
      }
    }
  };
  std::string why;
  // (a forward engine without the NONDETERMINISTIC note first, where determinism is asked for)
  if (impl_->options.deterministic) build(false, true, &plans->fwd, &plans->fwd_padded, &why);
  if (plans->fwd == nullptr) build(false, false, &plans->fwd, &plans->fwd_padded, &why);
  if (plans->fwd == nullptr) {
    return Status::Unimplemented(StrCat("cuDNN FP8 attention (", VersionString(version),
                                        ") refuses the forward for ", Fp8ShapeName(s), ":", why));
  }
  if (!forward_only) {
    why.clear();
    const bool det = impl_->options.deterministic;
    build(true, det, &plans->bwd, &plans->bwd_padded, &why);
    if (plans->bwd == nullptr) {
      return Status::Unimplemented(StrCat(
          "cuDNN FP8 attention (", VersionString(version), ") refuses the ",
          det ? "deterministic " : "", "backward for ", Fp8ShapeName(s),
          s.HS != 128 ? " (its FP8 backward takes head size 128 only on Hopper)" : "", ":", why));
    }
  }
  if (plans->fwd_padded || plans->bwd_padded) {
    FP8RT_ASSIGN_OR_RETURN(plans->seq_lens, cudnn_detail::FullSeqLens(s.B, s.T));
  }
  impl_->plans[Fp8KeyOf(s)] = std::move(plans);
  if (impl_->options.deterministic) FP8RT_RETURN_IF_ERROR(ProbeRepeats(s));
  return Status::Ok();
}

// Two runs of each prepared pass on the same random codes, compared byte for byte (the output and
// log-sum-exp, dQ/dK/dV): cuDNN's engine notes do not say it all (9.14's FP8 forward on Hopper
// varies in O's last bits at B4 T2048 NH16 HS128, measured, with no NONDETERMINISTIC note).
Status CudnnFp8Attention::ProbeRepeats(const Fp8AttentionShape& s) {
  Fp8Plans& p = *impl_->plans.at(Fp8KeyOf(s));
  const size_t n_qkv = static_cast<size_t>(s.B * s.T * s.QkvWidth());
  const size_t n_out = static_cast<size_t>(s.B * s.T * s.C());
  const size_t n_stats = static_cast<size_t>(s.B * s.NH * s.T) * sizeof(float);
  const size_t ws_bytes = std::max<size_t>(
      {ForwardWorkspaceBytes(s), BackwardWorkspaceBytes(s), size_t{256}});
  // Device: qkv, dout, out x2, dqkv x2, stats x2, the scalars (16-byte slots), workspace.
  const size_t at_dout = n_qkv, at_out = at_dout + n_out, at_dqkv = at_out + 2 * n_out,
               at_stats = (at_dqkv + 2 * n_qkv + 255) / 256 * 256, at_scal = at_stats + 2 * n_stats,
               at_ws = (at_scal + 16 * 16 + 255) / 256 * 256;
  void* raw = nullptr;
  FP8RT_CUDA_TRY(cudaMalloc(&raw, at_ws + ws_bytes));
  std::unique_ptr<void, CudaFree> keep(raw);
  uint8_t* b = static_cast<uint8_t*>(raw);
  std::vector<uint8_t> host(n_qkv + n_out);
  uint32_t x = 12345;
  for (uint8_t& c : host) {  // finite codes of either sign, magnitude below 2 (no NaN or Inf)
    x = x * 1664525u + 1013904223u;
    c = static_cast<uint8_t>((x >> 24) & 0xBF);
  }
  FP8RT_CUDA_TRY(cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice));
  std::vector<float> scal(16 * 4, 1.0f);
  scal[1 * 4] = 448.0f, scal[2 * 4] = 1.0f / 448.0f, scal[3 * 4] = 0.125f;
  FP8RT_CUDA_TRY(
      cudaMemcpy(b + at_scal, scal.data(), scal.size() * sizeof(float), cudaMemcpyHostToDevice));
  float* f = reinterpret_cast<float*>(b + at_scal);
  auto slot = [&](int i) { return f + 4 * i; };
  Fp8AttentionScales sc;
  sc.descale_q = sc.descale_k = sc.descale_v = sc.descale_o = sc.descale_do = slot(3);
  sc.scale_s = slot(1), sc.descale_s = slot(2);
  sc.scale_o = sc.scale_dp = sc.descale_dp = sc.scale_dq = sc.scale_dk = sc.scale_dv = slot(0);
  sc.amax_s = slot(4), sc.amax_o = slot(5), sc.amax_dp = slot(6), sc.amax_dq = slot(7);
  sc.amax_dk = slot(8), sc.amax_dv = slot(9);
  float* stats = reinterpret_cast<float*>(b + at_stats);
  float* stats2 = reinterpret_cast<float*>(b + at_stats + n_stats);
  void* ws = b + at_ws;
  auto same = [&](const void* a, const void* c, size_t bytes, bool* eq) -> Status {
    std::vector<uint8_t> ha(bytes), hc(bytes);
    FP8RT_CUDA_TRY(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
    FP8RT_CUDA_TRY(cudaMemcpy(hc.data(), c, bytes, cudaMemcpyDeviceToHost));
    *eq = ha == hc;
    return Status::Ok();
  };
  FP8RT_RETURN_IF_ERROR(Forward(b + at_out, stats, b, s, sc, ws, ws_bytes, nullptr));
  FP8RT_RETURN_IF_ERROR(Forward(b + at_out + n_out, stats2, b, s, sc, ws, ws_bytes, nullptr));
  bool out_eq = false, stats_eq = false;
  FP8RT_RETURN_IF_ERROR(same(b + at_out, b + at_out + n_out, n_out, &out_eq));
  FP8RT_RETURN_IF_ERROR(same(stats, stats2, n_stats, &stats_eq));
  p.fwd_repeats = out_eq && stats_eq;
  if (p.bwd != nullptr) {
    for (int k = 0; k < 2; ++k) {
      FP8RT_RETURN_IF_ERROR(Backward(b + at_dqkv + k * n_qkv, b + at_dout, b, b + at_out, stats, s,
                                     sc, ws, ws_bytes, nullptr));
    }
    bool eq = false;
    FP8RT_RETURN_IF_ERROR(same(b + at_dqkv, b + at_dqkv + n_qkv, n_qkv, &eq));
    p.bwd_repeats = eq;
  }
  FP8RT_CUDA_TRY(cudaDeviceSynchronize());
  return Status::Ok();
}

bool CudnnFp8Attention::Repeats(const Fp8AttentionShape& s) const {
  auto it = impl_->plans.find(Fp8KeyOf(s));
  return it != impl_->plans.end() && it->second->fwd_repeats && it->second->bwd_repeats;
}

size_t CudnnFp8Attention::ForwardWorkspaceBytes(const Fp8AttentionShape& s) const {
  auto it = impl_->plans.find(Fp8KeyOf(s));
  return it == impl_->plans.end() ? 0 : it->second->fwd->workspace_bytes();
}
size_t CudnnFp8Attention::BackwardWorkspaceBytes(const Fp8AttentionShape& s) const {
  auto it = impl_->plans.find(Fp8KeyOf(s));
  return it == impl_->plans.end() || it->second->bwd == nullptr
             ? 0
             : it->second->bwd->workspace_bytes();
}

namespace {

Status CheckPointers(const char* who,
                     std::initializer_list<std::pair<const char*, const void*>> ps) {
  for (const auto& [name, p] : ps) {
    if (p == nullptr) return Status::InvalidArgument(StrCat(who, ": ", name, " is null"));
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return Status::InvalidArgument(
          StrCat(who, ": ", name, " must be 16-byte aligned, got ", p));
    }
  }
  return Status::Ok();
}

template <typename P>
void* Mut(P* p) {
  return const_cast<void*>(static_cast<const void*>(p));
}

Status ZeroAmax(std::initializer_list<float*> amaxes, cudaStream_t stream) {
  for (float* a : amaxes) FP8RT_CUDA_TRY(cudaMemsetAsync(a, 0, sizeof(float), stream));
  return Status::Ok();
}

}  // namespace

Status CudnnFp8Attention::Forward(uint8_t* out, float* stats, const uint8_t* qkv,
                                  const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                                  void* ws, size_t ws_bytes, cudaStream_t stream) {
  FP8RT_ASSIGN_OR_RETURN(const Fp8Plans* p, impl_->Find(s, "Forward", false));
  const size_t need = p->fwd->workspace_bytes();
  if (ws_bytes < need || (ws == nullptr && need > 0)) {
    return Status::InvalidArgument(StrCat("CudnnFp8Attention::Forward: ws_bytes=", ws_bytes,
                                          " < ", need, " needed for ", Fp8ShapeName(s)));
  }
  FP8RT_RETURN_IF_ERROR(CheckPointers("CudnnFp8Attention::Forward",
                                      {{"out", out}, {"stats", stats}, {"qkv", qkv}}));
  FP8RT_RETURN_IF_ERROR(CheckScalars(
      "CudnnFp8Attention::Forward", impl_->options.scalar_alignment,
      {{"descale_q", sc.descale_q}, {"descale_k", sc.descale_k}, {"descale_v", sc.descale_v},
       {"scale_s", sc.scale_s}, {"descale_s", sc.descale_s}, {"scale_o", sc.scale_o},
       {"amax_s", sc.amax_s}, {"amax_o", sc.amax_o}}));
  if (impl_->options.zero_amax) FP8RT_RETURN_IF_ERROR(ZeroAmax({sc.amax_s, sc.amax_o}, stream));
  uint8_t* q = const_cast<uint8_t*>(qkv);
  std::vector<int64_t> uids = {kF8Q,         kF8K,        kF8V,        kF8O,
                               kF8Stats,     kF8AttnScale, kF8NegInf,  kF8DescaleQ,
                               kF8DescaleK,  kF8DescaleV, kF8DescaleS, kF8ScaleS,
                               kF8ScaleO,    kF8AmaxS,    kF8AmaxO};
  std::vector<void*> ptrs = {q,
                             q + cudnn_detail::KOffset(s),
                             q + cudnn_detail::VOffset(s),
                             out,
                             stats,
                             Mut(&p->attn_scale),
                             Mut(&p->neg_inf),
                             Mut(sc.descale_q),
                             Mut(sc.descale_k),
                             Mut(sc.descale_v),
                             Mut(sc.descale_s),
                             Mut(sc.scale_s),
                             Mut(sc.scale_o),
                             sc.amax_s,
                             sc.amax_o};
  if (p->fwd_padded) {
    int32_t* lens = static_cast<int32_t*>(p->seq_lens.get());
    uids.push_back(kF8SeqQ), ptrs.push_back(lens);
    uids.push_back(kF8SeqKV), ptrs.push_back(lens + s.B);
  }
  return cudnn_detail::Execute(*impl_->api, impl_->handle.get(), &impl_->stream, p->fwd->plan(),
                               uids, ptrs, ws, stream);
}

Status CudnnFp8Attention::Backward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv,
                                   const uint8_t* out, const float* stats,
                                   const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                                   void* ws, size_t ws_bytes, cudaStream_t stream) {
  FP8RT_ASSIGN_OR_RETURN(const Fp8Plans* p, impl_->Find(s, "Backward", true));
  const size_t need = p->bwd->workspace_bytes();
  if (ws_bytes < need || (ws == nullptr && need > 0)) {
    return Status::InvalidArgument(StrCat("CudnnFp8Attention::Backward: ws_bytes=", ws_bytes,
                                          " < ", need, " needed for ", Fp8ShapeName(s)));
  }
  FP8RT_RETURN_IF_ERROR(CheckPointers(
      "CudnnFp8Attention::Backward",
      {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"stats", stats}}));
  FP8RT_RETURN_IF_ERROR(CheckScalars(
      "CudnnFp8Attention::Backward", impl_->options.scalar_alignment,
      {{"descale_q", sc.descale_q}, {"descale_k", sc.descale_k}, {"descale_v", sc.descale_v},
       {"scale_s", sc.scale_s}, {"descale_s", sc.descale_s}, {"descale_o", sc.descale_o},
       {"descale_do", sc.descale_do}, {"scale_dp", sc.scale_dp}, {"descale_dp", sc.descale_dp},
       {"scale_dq", sc.scale_dq}, {"scale_dk", sc.scale_dk}, {"scale_dv", sc.scale_dv},
       {"amax_dp", sc.amax_dp}, {"amax_dq", sc.amax_dq}, {"amax_dk", sc.amax_dk},
       {"amax_dv", sc.amax_dv}}));
  if (impl_->options.zero_amax) {
    FP8RT_RETURN_IF_ERROR(ZeroAmax({sc.amax_dp, sc.amax_dq, sc.amax_dk, sc.amax_dv}, stream));
  }
  uint8_t* q = const_cast<uint8_t*>(qkv);
  std::vector<int64_t> uids = {kF8Q,        kF8K,        kF8V,        kF8O,        kF8Stats,
                               kF8DO,       kF8DQ,       kF8DK,       kF8DV,       kF8AttnScale,
                               kF8NegInf,   kF8DescaleQ, kF8DescaleK, kF8DescaleV, kF8DescaleO,
                               kF8DescaleDO, kF8DescaleS, kF8DescaleDP, kF8ScaleS, kF8ScaleDP,
                               kF8ScaleDQ,  kF8ScaleDK,  kF8ScaleDV,  kF8AmaxDP,   kF8AmaxDQ,
                               kF8AmaxDK,   kF8AmaxDV};
  std::vector<void*> ptrs = {q,
                             q + cudnn_detail::KOffset(s),
                             q + cudnn_detail::VOffset(s),
                             Mut(out),
                             Mut(stats),
                             Mut(dout),
                             dqkv,
                             dqkv + cudnn_detail::KOffset(s),
                             dqkv + cudnn_detail::VOffset(s),
                             Mut(&p->attn_scale),
                             Mut(&p->neg_inf),
                             Mut(sc.descale_q),
                             Mut(sc.descale_k),
                             Mut(sc.descale_v),
                             Mut(sc.descale_o),
                             Mut(sc.descale_do),
                             Mut(sc.descale_s),
                             Mut(sc.descale_dp),
                             Mut(sc.scale_s),
                             Mut(sc.scale_dp),
                             Mut(sc.scale_dq),
                             Mut(sc.scale_dk),
                             Mut(sc.scale_dv),
                             sc.amax_dp,
                             sc.amax_dq,
                             sc.amax_dk,
                             sc.amax_dv};
  if (p->bwd_padded) {
    int32_t* lens = static_cast<int32_t*>(p->seq_lens.get());
    uids.push_back(kF8SeqQ), ptrs.push_back(lens);
    uids.push_back(kF8SeqKV), ptrs.push_back(lens + s.B);
    uids.push_back(kF8PadFill), ptrs.push_back(Mut(&p->pad_fill));
  }
  return cudnn_detail::Execute(*impl_->api, impl_->handle.get(), &impl_->stream, p->bwd->plan(),
                               uids, ptrs, ws, stream);
}

std::string CudnnFp8Attention::Version() const {
  return VersionString(impl_->api->GetVersion());
}

std::string CudnnFp8Attention::PlanSummary(const Fp8AttentionShape& s) const {
  auto it = impl_->plans.find(Fp8KeyOf(s));
  if (it == impl_->plans.end()) return "";
  const Fp8Plans& p = *it->second;
  std::string out = StrCat("fwd engine ", p.fwd->engine_id(), " (ws ", p.fwd->workspace_bytes(),
                           " B", p.fwd_padded ? ", padded" : "",
                           p.fwd_repeats ? "" : ", runs differ", ")");
  if (p.bwd != nullptr) {
    out = StrCat(out, ", bwd engine ", p.bwd->engine_id(), " (ws ", p.bwd->workspace_bytes(), " B",
                 p.bwd_padded ? ", padded" : "", p.bwd_repeats ? "" : ", runs differ", ")");
  }
  return out;
}

#else  // no cuDNN headers at build time

struct CudnnFp8Attention::Impl {};
CudnnFp8Attention::CudnnFp8Attention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnFp8Attention::~CudnnFp8Attention() = default;
Result<std::unique_ptr<CudnnFp8Attention>> CudnnFp8Attention::Create(CudnnFp8AttentionOptions) {
  return Status::Unavailable("cuDNN FP8 attention: built without the cuDNN headers");
}
Status CudnnFp8Attention::Prepare(const Fp8AttentionShape&, bool) {
  return Status::Unavailable("cuDNN FP8 attention: built without the cuDNN headers");
}
size_t CudnnFp8Attention::ForwardWorkspaceBytes(const Fp8AttentionShape&) const { return 0; }
size_t CudnnFp8Attention::BackwardWorkspaceBytes(const Fp8AttentionShape&) const { return 0; }
Status CudnnFp8Attention::Forward(uint8_t*, float*, const uint8_t*, const Fp8AttentionShape&,
                                  const Fp8AttentionScales&, void*, size_t, cudaStream_t) {
  return Status::Unavailable("cuDNN FP8 attention: built without the cuDNN headers");
}
Status CudnnFp8Attention::Backward(uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*,
                                   const float*, const Fp8AttentionShape&,
                                   const Fp8AttentionScales&, void*, size_t, cudaStream_t) {
  return Status::Unavailable("cuDNN FP8 attention: built without the cuDNN headers");
}
std::string CudnnFp8Attention::Version() const { return "cuDNN (not built)"; }
Status CudnnFp8Attention::ProbeRepeats(const Fp8AttentionShape&) {
  return Status::Unavailable("cuDNN FP8 attention: built without the cuDNN headers");
}
bool CudnnFp8Attention::Repeats(const Fp8AttentionShape&) const { return false; }
std::string CudnnFp8Attention::PlanSummary(const Fp8AttentionShape&) const { return ""; }

#endif

}  // namespace fp8rt::cuda
