// The forward and backward passes of one micro-batch: the model itself, a flat run of launcher
// calls. gpt2's block is here, llama's in llama_block.h. Member functions of Gpt<Ops, T>,
// included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::ForwardPass(const int32_t* x_host, const int32_t* y_host, bool cast_weights,
                                bool compute_grad, int micro) {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd, Vp = m.padded_vocab(), V = m.vocab_size;
  // x_host, y_host point into staging_, which stays untouched until the step's one Download.
  FP8RT_RETURN_IF_ERROR(ops_->UploadAsync(tokens_, x_host, M_ * sizeof(int32_t)));
  FP8RT_RETURN_IF_ERROR(ops_->UploadAsync(targets_, y_host, M_ * sizeof(int32_t)));
  // Under ZeRO-1 the last step's weight all-gather may still run: wait for each part as it is read.
  FP8RT_RETURN_IF_ERROR(WaitGathered(0));
  ops_->Mark("embedding fwd");
  // (llama has no wpe: W is null)
  FP8RT_RETURN_IF_ERROR(
      ops_->EmbeddingForward(encoded_, tokens_, W(kWte), W(kWpe), o_.B, o_.T, C, V));
  const T* res = encoded_;
  // The layers' FP8 weights, cast a layer ahead on the cast stream (CastsAhead).
  casts_ahead_ = CastsAhead() && (cast_weights || !fp8_.CachesWeights());
  if (casts_ahead_) FP8RT_RETURN_IF_ERROR(LaunchWeightCasts(0, false, cast_weights));
  for (int l = 0; l < m.n_layer; ++l) {
    FP8RT_RETURN_IF_ERROR(WaitGathered(l + 1));
    if (Zero3()) FP8RT_RETURN_IF_ERROR(UseLayer(l, /*backward=*/false));
    if (casts_ahead_) {
      ops_->Mark("wait for fp8 weight casts");
      FP8RT_RETURN_IF_ERROR(ops_->WaitCast(l));
      if (l + 1 < m.n_layer) FP8RT_RETURN_IF_ERROR(LaunchWeightCasts(l + 1, false, cast_weights));
    }
    FP8RT_RETURN_IF_ERROR(Llama() ? LlamaBlockForward(l, res, cast_weights)
                                  : GptBlockForward(l, res, cast_weights));
    res = res3_[l];
  }
  casts_ahead_ = false;
  if (GeluInputFp8()) {  // (the last layer's GELU input codes, before anything reads them)
    FP8RT_RETURN_IF_ERROR(ops_->WaitCast(static_cast<int>(2 * m.n_layer - 1)));
  }
  if (Llama()) {
    ops_->Mark("rmsnorm fwd");
    FP8RT_RETURN_IF_ERROR(ops_->RmsNormForward(lnf_, lnf_rstd_, res, W(kLnfW), M_, C));
  } else {
    ops_->Mark("layernorm fwd");
    FP8RT_RETURN_IF_ERROR(
        ops_->LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, res, W(kLnfW), W(kLnfB), M_, C));
  }
  FP8RT_RETURN_IF_ERROR(LinearForward(0, kLmHead, logits_, lnf_, nullptr, cast_weights));
  const float dloss = grad_scale_ / static_cast<float>(M_ * o_.grad_accum);
  ops_->Mark("softmax-xent");
  FP8RT_RETURN_IF_ERROR(
      ops_->CrossEntropy(losses_, logits_, targets_, M_, V, Vp, dloss, compute_grad));
  return ops_->MeanLoss(step_losses_ + micro, losses_, M_);
}

// gpt2: LN -> QKV -> attention -> projection (+ residual) -> LN -> FC -> GELU -> FC2 (+ residual).
template <typename Ops, typename T>
Status Gpt<Ops, T>::GptBlockForward(int l, const T* res, bool cast_weights) {
  // Under TP the projections' partial sums are added over the group; TP rank 0 alone adds the
  // bias and the residual first.
  const bool lead = o_.tp_rank() == 0;
  bool x8_ready = false;
  FP8RT_RETURN_IF_ERROR(NormForward(l, kQkv, ln1_[l], ln1_mean_[l], ln1_rstd_[l], res,
                                    Wl(kLn1W, l), Wl(kLn1B, l), &x8_ready));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kQkv, qkv_[l], ln1_[l], Wl(kQkvB, l), cast_weights,
                                      nullptr, nullptr, nullptr, nullptr, x8_ready));
  FP8RT_RETURN_IF_ERROR(RunAttention(l));
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kAttProj, res2_[l], atty_[l],
                                      lead ? Wl(kAttProjB, l) : nullptr, cast_weights, nullptr,
                                      nullptr, /*residual=*/lead ? res : nullptr));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(res2_[l], "attention projection all-reduce (TP)"));
  FP8RT_RETURN_IF_ERROR(NormForward(l, kFc, ln2_[l], ln2_mean_[l], ln2_rstd_[l], res2_[l],
                                    Wl(kLn2W, l), Wl(kLn2B, l), &x8_ready));
  bool gelu_done = false;
  // An FP8 FC2 reads GELU of FC's stored output: applied in its input's cast (delayed scaling), or
  // by the GELU kernel (the calibrating step; current scaling with train.recompute, which casts
  // the same GELU again in the backward). FC's epilogue (GELU of the unrounded sum) serves a BF16
  // FC2, block scaling and current scaling without train.recompute.
  const bool gelu_in_cast = FusesGeluIntoXCast();
  const bool gelu_epilogue =
      !Fp8On(kFcProj) || fp8_.block || (fp8_.current && !RecastsInput(kFcProj));
  if (GeluInputFp8() && l > 0) {  // (layer l - 1's codes are cast from fch_: done before FC)
    ops_->Mark("wait for the gelu input's cast");
    FP8RT_RETURN_IF_ERROR(ops_->WaitCast(static_cast<int>(o_.model.n_layer) + l - 1));
  }
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kFc, fch_[l], ln2_[l], Wl(kFcB, l), cast_weights,
                                      gelu_epilogue ? fch_gelu_[l] : nullptr, &gelu_done, nullptr,
                                      nullptr, x8_ready));
  if (!gelu_done && !gelu_in_cast) {
    ops_->Mark("gelu fwd");
    FP8RT_RETURN_IF_ERROR(ops_->Gelu(fch_gelu_[l], fch_[l], M_ * PerLayer(kFcB)));
  }
  if (GeluInputFp8()) {
    // The codes the backward reads, cast on the cast stream beside FC2 and the next layer's start;
    // fch_ is every layer's buffer, so the next layer's FC waits for mark L + l before writing it.
    void* on = ops_->ForkCast();
    if (Ops::kDevice && on == nullptr) return Status::Internal("could not fork the cast stream");
    FP8RT_RETURN_IF_ERROR(ops_->Quantize(fch_[l], GeluInputTensor(l), nullptr, on));
    FP8RT_RETURN_IF_ERROR(ops_->MarkCast(static_cast<int>(o_.model.n_layer) + l));
  }
  FP8RT_RETURN_IF_ERROR(LinearForward(l, kFcProj, res3_[l], fch_gelu_[l],
                                      lead ? Wl(kFcProjB, l) : nullptr, cast_weights, nullptr,
                                      nullptr, /*residual=*/lead ? res2_[l] : nullptr,
                                      /*gelu_pre=*/gelu_in_cast ? fch_[l] : nullptr));
  return TpAllReduce(res3_[l], "FC2 all-reduce (TP)");
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::BackwardPass() {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd, L = m.n_layer;
  // Transposed copies not kept between the passes: cast (or transposed) a layer ahead.
  // (ZeRO-3: each layer's gather transposes them)
  casts_ahead_ = CastsAhead() && !fp8_.KeepsTranspose() && !Zero3();
  if (casts_ahead_) FP8RT_RETURN_IF_ERROR(LaunchWeightCasts(static_cast<int>(L - 1), true, false));
  // logits_ holds dlogits now.
  FP8RT_RETURN_IF_ERROR(
      LinearBackward(0, kLmHead, dc1_, G(WeightOf(m, kLmHead)), nullptr, logits_, lnf_));
  if (Llama()) {
    ops_->Mark("rmsnorm bwd");
    FP8RT_RETURN_IF_ERROR(ops_->RmsNormBackward(dres_, G(kLnfW), dc1_, res3_[L - 1], W(kLnfW),
                                                lnf_rstd_, M_, C, false));
  } else {
    ops_->Mark("layernorm bwd");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormBackward(dres_, G(kLnfW), G(kLnfB), dc1_, res3_[L - 1],
                                                  W(kLnfW), lnf_mean_, lnf_rstd_, M_, C, false));
  }
  // (sparse embedding gradient: the final norm, the LM head and the token table's dense part are
  // final now)
  if (reduce_grads_now_ && next_bucket_ < static_cast<int>(buckets_.size()) &&
      buckets_[next_bucket_].head) {
    FP8RT_RETURN_IF_ERROR(ReduceBucket(next_bucket_++));
  }
  for (int64_t l = L - 1; l >= 0; --l) {
    const T* res_in = l == 0 ? encoded_ : res3_[l - 1];
    if (casts_ahead_) {
      ops_->Mark("wait for fp8 weight casts");
      FP8RT_RETURN_IF_ERROR(ops_->WaitCast(static_cast<int>(l)));
      if (l > 0) FP8RT_RETURN_IF_ERROR(LaunchWeightCasts(static_cast<int>(l - 1), true, false));
    }
    if (Zero3()) {
      FP8RT_RETURN_IF_ERROR(UseLayer(static_cast<int>(l), /*backward=*/true));
      FP8RT_RETURN_IF_ERROR(PrepareLayerGrads(static_cast<int>(l)));
    }
    // dres_ is the gradient of this block's output (res3); after it, of its input.
    FP8RT_RETURN_IF_ERROR(Llama() ? LlamaBlockBackward(static_cast<int>(l), res_in)
                                  : GptBlockBackward(static_cast<int>(l), res_in));
    // ZeRO-3: this micro-batch's gradients of layer l are made: reduce-scattered now.
    if (Zero3()) FP8RT_RETURN_IF_ERROR(ReduceLayer(static_cast<int>(l)));
    // Layer l's gradients are final: launch the bucket that ends with it.
    if (reduce_grads_now_ && next_bucket_ < static_cast<int>(buckets_.size()) &&
        buckets_[next_bucket_].first_layer == l) {
      FP8RT_RETURN_IF_ERROR(ReduceBucket(next_bucket_++));
    }
  }
  casts_ahead_ = false;
  ops_->Mark("embedding bwd");
  // (sparse_now_: the token table's rows of this micro-batch travel gathered instead)
  FP8RT_RETURN_IF_ERROR(ops_->EmbeddingBackward(sparse_now_ ? nullptr : G(kWte), G(kWpe), dres_,
                                                tokens_, o_.B, o_.T, C, o_.model.vocab_size));
  if (reduce_grads_now_ && next_bucket_ < static_cast<int>(buckets_.size())) {
    FP8RT_RETURN_IF_ERROR(ReduceBucket(next_bucket_++));
  }
  if (sparse_now_) FP8RT_RETURN_IF_ERROR(LaunchEmbeddingGather());
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::GptBlockBackward(int l, const T* res_in) {
  const int64_t C = o_.model.n_embd;
  bool dgelu_done = false;
  // fp8.gelu_input_fp8: the FC output's codes go to the GELU backward fused into FC's dY cast as
  // they are; any other reader gets them dequantized into fch_ first.
  const bool pre8_in_cast = GeluInputFp8() && Fp8On(kFcProj) && FusesGeluIntoDyCast(kFc);
  if (GeluInputFp8() && !pre8_in_cast) {
    ops_->Mark("fp8 dequantize gelu input");
    FP8RT_RETURN_IF_ERROR(ops_->Dequantize(GeluInputTensor(l), fch_[l]));
  }
  if (Recomputes(kFcProj)) {
    ops_->Mark("gelu recompute");
    FP8RT_RETURN_IF_ERROR(ops_->Gelu(fch_gelu_[l], fch_[l], M_ * PerLayer(kFcB)));
  }
  // FC2's input cast again: by FC's dY cast below, FC2's wgrad waiting for it, or here.
  const bool recast_in_dy_cast = FusesRecastIntoDyCast();
  if (RecastsInput(kFcProj) && !recast_in_dy_cast) {
    FP8RT_RETURN_IF_ERROR(RecastInput(l, kFcProj, nullptr, fch_[l]));
  }
  GemmArgs fc2_wgrad;
  Fp8BwdSplit fc2_split, fc_split;
  if (recast_in_dy_cast) fc2_split.deferred_wgrad = &fc2_wgrad;
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kFcProj, d4c_, Gl(kFcProjW, l), Gl(kFcProjB, l), dres_,
                                       fch_gelu_[l], fch_[l], &dgelu_done, nullptr, nullptr,
                                       fc2_split));
  // The GELU backward: in fc_proj's dgrad epilogue (BF16), else in fc's FP8 cast of its output
  // gradient, else a kernel of its own.
  const bool gelu_in_cast = !dgelu_done && FusesGeluIntoDyCast(kFc);
  if (!dgelu_done && !gelu_in_cast) {
    ops_->Mark("gelu bwd");
    FP8RT_RETURN_IF_ERROR(ops_->GeluBackward(d4c_, fch_[l], d4c_, M_ * PerLayer(kFcB)));
  }
  if (recast_in_dy_cast) {
    // FC's dY cast with the GELU backward, casting FC2's input again from the same read of FC's
    // output; then FC2's wgrad, before FC's input takes the recast buffer.
    const Fp8Tensor fc2_x = RecastTarget(l, kFcProj);
    FP8RT_RETURN_IF_ERROR(
        CastDy(l, kFc, DyTensor(l, kFc), Gl(kFcB, l), d4c_, fch_[l], nullptr, &fc2_x));
    ops_->Mark(kWgradNames[kFcProj]);
    FP8RT_RETURN_IF_ERROR(ops_->Gemm(fc2_wgrad));
    fc_split.dy_cast_done = true;
  }
  if (Recomputes(kFc)) {
    ops_->Mark("layernorm recompute");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormForward(ln2_[l], ln2_mean_[l], ln2_rstd_[l], res2_[l],
                                                 Wl(kLn2W, l), Wl(kLn2B, l), M_, C));
  }
  if (RecastsInput(kFc)) {
    FP8RT_RETURN_IF_ERROR(RecastNormOutput(l, kFc, res2_[l], ln2_mean_[l], ln2_rstd_[l],
                                           Wl(kLn2W, l), Wl(kLn2B, l), ln2_[l]));
  }
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kFc, dc1_, Gl(kFcW, l), Gl(kFcB, l), d4c_, ln2_[l],
                                       nullptr, nullptr,
                                       gelu_in_cast && !pre8_in_cast ? fch_[l] : nullptr,
                                       pre8_in_cast ? fch8_[l] : nullptr, fc_split));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(dc1_, "FC input-gradient all-reduce (TP)"));
  ops_->Mark("layernorm bwd");
  FP8RT_RETURN_IF_ERROR(ops_->LayerNormBackward(dres_, Gl(kLn2W, l), Gl(kLn2B, l), dc1_, res2_[l],
                                                Wl(kLn2W, l), ln2_mean_[l], ln2_rstd_[l], M_, C,
                                                true));
  // dres_ is now the gradient of res2.
  if (RecastsInput(kAttProj)) FP8RT_RETURN_IF_ERROR(RecastInput(l, kAttProj, atty_[l]));
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kAttProj, dc2_, Gl(kAttProjW, l), Gl(kAttProjB, l),
                                       dres_, atty_[l]));
  T* dqkv = nullptr;
  FP8RT_RETURN_IF_ERROR(RunAttentionBackward(l, &dqkv));
  if (Recomputes(kQkv)) {
    ops_->Mark("layernorm recompute");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormForward(ln1_[l], ln1_mean_[l], ln1_rstd_[l], res_in,
                                                 Wl(kLn1W, l), Wl(kLn1B, l), M_, C));
  }
  if (RecastsInput(kQkv)) {
    FP8RT_RETURN_IF_ERROR(RecastNormOutput(l, kQkv, res_in, ln1_mean_[l], ln1_rstd_[l],
                                           Wl(kLn1W, l), Wl(kLn1B, l), ln1_[l]));
  }
  FP8RT_RETURN_IF_ERROR(LinearBackward(l, kQkv, dc1_, Gl(kQkvW, l), Gl(kQkvB, l), dqkv, ln1_[l]));
  FP8RT_RETURN_IF_ERROR(TpAllReduce(dc1_, "QKV input-gradient all-reduce (TP)"));
  ops_->Mark("layernorm bwd");
  return ops_->LayerNormBackward(dres_, Gl(kLn1W, l), Gl(kLn1B, l), dc1_, res_in, Wl(kLn1W, l),
                                 ln1_mean_[l], ln1_rstd_[l], M_, C, true);
}

}  // namespace fp8rt::gpt_detail
