// fp8.scaling: block (DeepSeek-V3's recipe) in the FP8 linear layers: activations and gradients
// cast in 1 x 128 blocks (by rows for the GEMM that reduces over their columns, by columns into
// the transpose for wgrad, which reduces over the tokens), weights in 128 x 128 blocks with their
// transposed copy from the same pass; E4M3 throughout, power-of-two scales; cuBLASLt's
// block-scaled GEMMs (kernels/block_quantize.h, docs/BLOCK_SCALING.md). Nothing is reduced across
// ranks: every block's scale comes from the block in the cast itself, identically on every rank
// that casts the same values. Member functions of Gpt<Ops, T>, included at the end of
// runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::BlockLinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                                       const T* residual) {
  constexpr Fp8Format f = Fp8Format::kE4M3;
  const bool pow2 = fp8_.kBlockPow2;
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const int slot = fp8_.Slot(l, kind);
  ops_->Mark("fp8 block cast x (+columns)");
  FP8RT_RETURN_IF_ERROR(ops_->QuantizeVec128(x, M_, K, f, pow2, fp8_.x8, fp8_.xs));
  FP8RT_RETURN_IF_ERROR(
      ops_->QuantizeVec128Columns(x, M_, K, f, pow2, fp8_.x8t[slot], fp8_.xst[slot]));
  if (cast_w) {  // from the FP32 master weights, with the transposed copy dgrad reads
    ops_->Mark("fp8 block cast w (+T)");
    const float* w = cast_src_ + layout_.offset[WeightOf(o_.model, kind)] + l * N * K;
    FP8RT_RETURN_IF_ERROR(ops_->QuantizeBlk128(w, N, K, f, pow2, fp8_.w8[slot], fp8_.ws[slot],
                                               fp8_.w8t[slot], fp8_.wst[slot]));
    ++weight_casts_;
  }
  // Y (M, N) = X (1x128) W^T (128x128)
  FP8RT_ASSIGN_OR_RETURN(GemmArgs g,
                         BlockScaledGemm({fp8_.x8, fp8_.xs, M_, K, f, false},
                                         {fp8_.w8[slot], fp8_.ws[slot], N, K, f, true}, y, kT));
  const bool fused_bias = b != nullptr && GemmBiasDType(g) == kT;
  if (fused_bias) g.bias = b, g.epilogue = Epilogue::kBias;
  if (residual != nullptr) g.c = residual, g.beta = 1.0f;
  ops_->Mark(kFpropNames[kind]);
  FP8RT_RETURN_IF_ERROR(ops_->Gemm(g));
  if (b != nullptr && !fused_bias) FP8RT_RETURN_IF_ERROR(AddBias(y, b, M_, N));
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::BlockLinearBackward(int l, int kind, T* dx, float* dw, const T* dy) {
  constexpr Fp8Format f = Fp8Format::kE4M3;
  const bool pow2 = fp8_.kBlockPow2;
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const int slot = fp8_.Slot(l, kind);
  ops_->Mark("fp8 block cast dy (+columns)");
  FP8RT_RETURN_IF_ERROR(ops_->QuantizeVec128(dy, M_, N, f, pow2, fp8_.dy8, fp8_.dys));
  FP8RT_RETURN_IF_ERROR(ops_->QuantizeVec128Columns(dy, M_, N, f, pow2, fp8_.dy8t, fp8_.dyst));
  // dX (M, K) = dY (1x128 over N) W, W read as its transposed copy (K, N) in 128x128 blocks.
  FP8RT_ASSIGN_OR_RETURN(GemmArgs gd,
                         BlockScaledGemm({fp8_.dy8, fp8_.dys, M_, N, f, false},
                                         {fp8_.w8t[slot], fp8_.wst[slot], K, N, f, true}, dx, kT));
  ops_->Mark(kDgradNames[kind]);
  FP8RT_RETURN_IF_ERROR(ops_->Gemm(gd));
  // dW (N, K) (+)= dY^T X: both cast by columns, 1x128 blocks over the tokens.
  FP8RT_ASSIGN_OR_RETURN(
      GemmArgs gw, BlockScaledGemm({fp8_.dy8t, fp8_.dyst, N, M_, f, false},
                                   {fp8_.x8t[slot], fp8_.xst[slot], K, M_, f, false}, dw,
                                   DType::kFloat32));
  gw.beta = OverwritesWgrad(kind) ? 0.0f : 1.0f;
  ops_->Mark(kWgradNames[kind]);
  return ops_->Gemm(gw);
}

}  // namespace fp8rt::gpt_detail
