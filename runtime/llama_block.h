// llama's block, forward and backward: RMSNorm -> QKV -> RoPE on Q and K -> (grouped-query:
// key/value heads expanded) -> causal attention -> projection (+ residual) -> RMSNorm -> gate/up
// -> SwiGLU -> down (+ residual). No biases. Member functions of Gpt<Ops, T>, included at the end
// of runtime/gpt_impl.h; the passes around it are in gpt_passes.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::LlamaBlockForward(int l, const T* res, bool cast_weights) {
  const ModelConfig& m = o_.model;
  const int64_t HS = m.head_size(), tp = o_.tp_size();
  const int64_t NH = m.n_head / tp, KV = m.kv_heads() / tp, ld = (NH + 2 * KV) * HS;
  const int64_t F = m.ffn() / tp;
  const bool lead = o_.tp_rank() == 0;  // adds the residual before the TP sum
  bool x8_ready = false;
  FP8RT_RETURN_IF_ERROR(NormForward(l, kQkv, ln1_[l], nullptr, ln1_rstd_[l], res, Wl(kLn1W, l),
                                    nullptr, &x8_ready));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kQkv, qkv_[l], ln1_[l], nullptr, cast_weights, nullptr,
                                      nullptr, nullptr, nullptr, x8_ready));
  ops_->Mark("rope fwd");  // the query heads and the key heads after them: one call
  FP8RT_RETURN_IF_ERROR(ops_->Rope(qkv_[l], o_.B, o_.T, NH + KV, HS, ld, m.rope_theta));
  FP8RT_RETURN_IF_ERROR(RunAttention(l));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kAttProj, res2_[l], atty_[l], nullptr, cast_weights,
                                      nullptr, nullptr, /*residual=*/lead ? res : nullptr));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(res2_[l], "attention projection all-reduce (TP)"));
  FP8RT_RETURN_IF_ERROR(NormForward(l, kFc, ln2_[l], nullptr, ln2_rstd_[l], res2_[l],
                                    Wl(kLn2W, l), nullptr, &x8_ready));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kFc, fch_[l], ln2_[l], nullptr, cast_weights, nullptr,
                                      nullptr, nullptr, nullptr, x8_ready));
  ops_->Mark("swiglu fwd");
  FP8RT_RETURN_IF_ERROR(ops_->SwiGlu(fch_gelu_[l], fch_[l], M_, F));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kFcProj, res3_[l], fch_gelu_[l], nullptr, cast_weights,
                                      nullptr, nullptr, /*residual=*/lead ? res2_[l] : nullptr));
  return TpAllReduce(res3_[l], "FC2 all-reduce (TP)");
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::LlamaBlockBackward(int l, const T* res_in) {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd, HS = m.head_size(), tp = o_.tp_size();
  const int64_t NH = m.n_head / tp, KV = m.kv_heads() / tp, ld = (NH + 2 * KV) * HS;
  const int64_t F = m.ffn() / tp;
  if (Recomputes(kFcProj) || RecastsInput(kFcProj)) {
    ops_->Mark("swiglu recompute");
    FP8RT_RETURN_IF_ERROR(ops_->SwiGlu(fch_gelu_[l], fch_[l], M_, F));
  }
  if (RecastsInput(kFcProj)) FP8RT_RETURN_IF_ERROR(RecastInput(l, kFcProj, fch_gelu_[l]));
  FP8RT_RETURN_IF_ERROR(
      LinearBackward(l, kFcProj, dffn_, Gl(kFcProjW, l), nullptr, dres_, fch_gelu_[l]));
  ops_->Mark("swiglu bwd");
  FP8RT_RETURN_IF_ERROR(ops_->SwiGluBackward(d4c_, fch_[l], dffn_, M_, F));
  if (Recomputes(kFc)) {
    ops_->Mark("rmsnorm recompute");
    FP8RT_RETURN_IF_ERROR(
        ops_->RmsNormForward(ln2_[l], ln2_rstd_[l], res2_[l], Wl(kLn2W, l), M_, C));
  }
  if (RecastsInput(kFc)) {
    FP8RT_RETURN_IF_ERROR(RecastNormOutput(l, kFc, res2_[l], nullptr, ln2_rstd_[l],
                                           Wl(kLn2W, l), nullptr, ln2_[l]));
  }
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kFc, dc1_, Gl(kFcW, l), nullptr, d4c_, ln2_[l]));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(dc1_, "FC input-gradient all-reduce (TP)"));
  ops_->Mark("rmsnorm bwd");
  FP8RT_RETURN_IF_ERROR(ops_->RmsNormBackward(dres_, Gl(kLn2W, l), dc1_, res2_[l], Wl(kLn2W, l),
                                              ln2_rstd_[l], M_, C, true));
  // dres_ is now the gradient of res2.
  if (RecastsInput(kAttProj)) FP8RT_RETURN_IF_ERROR(RecastInput(l, kAttProj, atty_[l]));
  FP8RT_RETURN_IF_ERROR(
      LinearBackward(l, kAttProj, dc2_, Gl(kAttProjW, l), nullptr, dres_, atty_[l]));
  T* dq = nullptr;
  FP8RT_RETURN_IF_ERROR(RunAttentionBackward(l, &dq));
  ops_->Mark("rope bwd");
  FP8RT_RETURN_IF_ERROR(ops_->RopeBackward(dq, o_.B, o_.T, NH + KV, HS, ld, m.rope_theta));
  if (Recomputes(kQkv)) {
    ops_->Mark("rmsnorm recompute");
    FP8RT_RETURN_IF_ERROR(ops_->RmsNormForward(ln1_[l], ln1_rstd_[l], res_in, Wl(kLn1W, l), M_, C));
  }
  if (RecastsInput(kQkv)) {
    FP8RT_RETURN_IF_ERROR(RecastNormOutput(l, kQkv, res_in, nullptr, ln1_rstd_[l], Wl(kLn1W, l),
                                           nullptr, ln1_[l]));
  }
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kQkv, dc1_, Gl(kQkvW, l), nullptr, dq, ln1_[l]));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(dc1_, "QKV input-gradient all-reduce (TP)"));
  ops_->Mark("rmsnorm bwd");
  return ops_->RmsNormBackward(dres_, Gl(kLn1W, l), dc1_, res_in, Wl(kLn1W, l), ln1_rstd_[l], M_,
                               C, true);
}

}  // namespace fp8rt::gpt_detail
