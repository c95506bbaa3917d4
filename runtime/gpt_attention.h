// A block's causal attention, forward and backward: BF16 (or FP32) attention on the Ops' kernels,
// or fp8.attention's FP8 attention: the Q/K/V codes cast from qkv_ (grouped-query attention read
// as it is, key/value heads not expanded), the output codes and the log-sum-exp saved for the
// backward, the output dequantized into atty_ for the projection; the output gradient cast to
// FP8 and the Q/K/V gradient codes dequantized for the layers below. Member functions of
// Gpt<Ops, T>, included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::RunAttention(int l) {
  if (!Fp8Attention()) {
    if (Gqa()) {
      const ModelConfig& m = o_.model;
      const int64_t tp = o_.tp_size();
      ops_->Mark("gqa expand");
      FP8RT_RETURN_IF_ERROR(ops_->GqaExpand(attq_[l], qkv_[l], M_, m.n_head / tp,
                                            m.kv_heads() / tp, m.head_size()));
    }
    ops_->Mark("attention fwd");
    return ops_->Attention(atty_[l], att_[l], attq_[l], Att());
  }
  const Fp8AttentionShape s = Att8();
  // (The first step of a fresh state casts with current scaling, as the linears' inputs.)
  ops_->Mark("fp8 cast qkv (attention)");
  FP8RT_RETURN_IF_ERROR(fp8_.Cast(qkv_[l], fp8_.AttOf(l, kAttQkv, qkv8_[l], M_, s.QkvWidth()),
                                  fp8_.AttSaturatedOf(l, kAttQkv)));
  ops_->Mark("attention fwd (fp8)");
  FP8RT_RETURN_IF_ERROR(ops_->Fp8AttentionForward(o8_[l], reinterpret_cast<float*>(att_[l]),
                                                  qkv8_[l], s, fp8_.AttScales(l)));
  ops_->Mark("fp8 dequantize attention output");
  return ops_->Dequantize(fp8_.AttOf(l, kAttOut, o8_[l], M_, s.C()), atty_[l]);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::RunAttentionBackward(int l, T** dq) {
  if (!Fp8Attention()) {
    ops_->Mark("attention bwd");
    FP8RT_RETURN_IF_ERROR(
        ops_->AttentionBackward(dqkv_, dc2_, attq_[l], atty_[l], att_[l], Att()));
    *dq = dqkv_;
    if (!Gqa()) return Status::Ok();
    const ModelConfig& m = o_.model;
    const int64_t tp = o_.tp_size();
    ops_->Mark("gqa reduce");
    *dq = dqkvg_;
    return ops_->GqaReduce(dqkvg_, dqkv_, M_, m.n_head / tp, m.kv_heads() / tp, m.head_size());
  }
  const Fp8AttentionShape s = Att8();
  ops_->Mark("fp8 cast attention grad_output");
  FP8RT_RETURN_IF_ERROR(fp8_.Cast(dc2_, fp8_.AttOf(l, kAttDout, do8_, M_, s.C()),
                                  fp8_.AttSaturatedOf(l, kAttDout)));
  ops_->Mark("attention bwd (fp8)");
  FP8RT_RETURN_IF_ERROR(ops_->Fp8AttentionBackward(dqkv8_, do8_, qkv8_[l], o8_[l],
                                                   reinterpret_cast<const float*>(att_[l]), s,
                                                   fp8_.AttScales(l)));
  *dq = Gqa() ? dqkvg_ : dqkv_;
  ops_->Mark("fp8 dequantize attention grad_qkv");
  return ops_->Dequantize(fp8_.AttOf(l, kAttDqkv, dqkv8_, M_, s.QkvWidth()), *dq);
}

}  // namespace fp8rt::gpt_detail
