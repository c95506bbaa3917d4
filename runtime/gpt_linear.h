// The linear layers of the GPT model: forward (bias, GELU and the residual in the GEMM's
// epilogue where cuBLASLt takes them) and backward, in FP8 (the weights' cached casts, the
// inputs' saved transposed copies, dy cast with its bias gradient and the GELU backward) or in T.
// Member functions of Gpt<Ops, T>, included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::AddBias(T* y, const T* b, int64_t M, int64_t N) {
  // y (M, N) += ones (M, 1) b (1, N): a rank-1 GEMM, for the one case the GEMM epilogue cannot
  // take the bias (FP8 inputs with FP32 output, i.e. emulated FP8 on the CPU).
  GemmArgs g;
  g.M = M, g.N = N, g.K = 1;
  g.a = {ones_, kT};
  g.b = {b, kT};
  g.d = y, g.d_dtype = kT, g.beta = 1.0f;
  ops_->Mark("gemm add bias");
  return ops_->Gemm(g);
}

template <typename Ops, typename T>
template <typename U>
Status Gpt<Ops, T>::CurrentScale(int l, int kind, int role, const U* in, int64_t n,
                                 comm::Communicator* group) {
  const int i = fp8_.Index(l, kind, role);
  float* const amax = fp8_.cur_amax + i;
  ops_->Mark("fp8 current amax");
  FP8RT_RETURN_IF_ERROR(ops_->Zero(amax, sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->ComputeAmax(in, n, amax));
  if (group != nullptr && group->size() > 1) {
    ops_->Mark("fp8 current amax all-reduce");
    FP8RT_RETURN_IF_ERROR(group->AllReduce(amax, amax, 1, comm::DataType::kFloat32,
                                           comm::ReduceOp::kMax, ops_->ComputeStream(),
                                           "current-scaling amax all-reduce"));
    ++current_amax_collectives_;
  }
  return ops_->ScaleFromAmax(amax, fp8_.scaling.scale + i,
                             FormatFor(fp8_.cfg.recipe, role == kRoleDy), fp8_.cfg.margin);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::LinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                                  T* gelu_out, bool* gelu_done, const T* residual,
                                  const T* gelu_pre, bool x8_ready) {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const Param wp = WeightOf(o_.model, kind);
  if (gelu_done != nullptr) *gelu_done = false;
  // Runs g, with GELU fused into its bias epilogue when asked and possible: the epilogue writes
  // GELU(y) to gelu_out and y itself (the backward's input) to aux.
  auto run = [&](GemmArgs g) -> Status {
    if (residual != nullptr) g.c = residual, g.beta = 1.0f;
    if (gelu_out == nullptr || g.epilogue != Epilogue::kBias || N % 8 != 0) return ops_->Gemm(g);
    GemmArgs fused = g;
    fused.epilogue = Epilogue::kBiasGeluAux;
    fused.d = gelu_out;
    fused.aux = y;
    return GemmTryFused(fused, g, &gelu_epilogue_ok_, gelu_done);
  };
  if ((gelu_pre != nullptr || x8_ready) &&
      (!Fp8On(kind) || !CastsUnmeasured() || (x8_ready && !RecastsInput(kind)))) {
    return Status::Internal(StrCat("LinearForward: layer kind ", kind,
                                   " cannot take its input's cast from elsewhere"));
  }
  if (!Fp8On(kind)) {
    ops_->Mark(kFpropNames[kind]);
    const T* w = Wl(wp, l);
    GemmArgs g;
    g.M = M_, g.N = N, g.K = K;
    g.a = {x, kT};
    g.b = {w, kT, /*trans=*/true};
    g.d = y, g.d_dtype = kT;
    g.bias = b;
    g.epilogue = b ? Epilogue::kBias : Epilogue::kNone;
    return run(g);
  }
  if (fp8_.block) return BlockLinearForward(l, kind, y, x, b, cast_w, residual);
  const int slot = fp8_.Slot(l, kind);
  // (no transposed copy where the backward casts it again)
  const Fp8Tensor xq =
      fp8_.Of(l, kind, kRoleX, fp8_.x8, RecastsInput(kind) ? nullptr : fp8_.x8t[slot], M_, K);
  comm::Communicator* const tp = o_.tp;
  if (fp8_.current) {
    FP8RT_RETURN_IF_ERROR(
        CurrentScale(l, kind, kRoleX, x, M_ * K, SplitOverTp(kind, kRoleX) ? tp : nullptr));
  }
  // (x8_ready: NormForward wrote the codes and counted amax and saturation)
  if (!x8_ready && gelu_pre != nullptr) {  // (delayed scaling: the cast is Quantize's)
    ops_->Mark("fp8 cast x (+T, +gelu)");
    FP8RT_RETURN_IF_ERROR(ops_->QuantizeGelu(gelu_pre, xq, fp8_.SaturatedOf(l, kind, kRoleX)));
  } else if (!x8_ready) {
    ops_->Mark("fp8 cast x (+T)");
    FP8RT_RETURN_IF_ERROR(fp8_.Cast(x, xq, fp8_.SaturatedOf(l, kind, kRoleX)));
  }
  // (The cast writes the transposed copy only where it is kept.)
  const Fp8Tensor wq = fp8_.Of(l, kind, kRoleW, fp8_.w8[slot], nullptr, N, K);
  // From the FP32 master weights: once per step, or (fp8.cache_weights: false) in every
  // forward, the step's first cast alone counting saturation (the others cast the same weights
  // with the same scale). A layer's come from LaunchWeightCasts when casts_ahead_.
  if ((cast_w || !fp8_.CachesWeights()) && !(casts_ahead_ && kind != kLmHead)) {
    FP8RT_RETURN_IF_ERROR(CastWeight(l, kind, cast_w, nullptr));
  }
  FP8RT_ASSIGN_OR_RETURN(GemmArgs probe, Fp8Fprop(xq, wq, y, kT, nullptr, true));
  const bool fused_bias = b != nullptr && GemmBiasDType(probe) == kT;
  FP8RT_ASSIGN_OR_RETURN(GemmArgs g, Fp8Fprop(xq, wq, y, kT, fused_bias ? b : nullptr, true));
  ops_->Mark(kFpropNames[kind]);
  FP8RT_RETURN_IF_ERROR(run(g));
  if (b != nullptr && !fused_bias) FP8RT_RETURN_IF_ERROR(AddBias(y, b, M_, N));
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::CastWeight(int l, int kind, bool count, void* on) {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const int slot = fp8_.Slot(l, kind);
  const Fp8Tensor wq = fp8_.Of(l, kind, kRoleW, fp8_.w8[slot],
                               fp8_.KeepsTranspose() ? fp8_.w8t[slot] : nullptr, N, K);
  const float* w = cast_src_ + layout_.offset[WeightOf(o_.model, kind)] + l * N * K;
  if (on == nullptr) ops_->Mark(fp8_.KeepsTranspose() ? "fp8 cast w (+T)" : "fp8 cast w");
  if (fp8_.current) {  // (never on the cast stream: CastsAhead)
    FP8RT_RETURN_IF_ERROR(
        CurrentScale(l, kind, kRoleW, w, N * K, SplitOverTp(kind, kRoleW) ? o_.tp : nullptr));
  }
  ++weight_casts_;
  return fp8_.Cast(w, wq, count ? fp8_.SaturatedOf(l, kind, kRoleW) : nullptr, on);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::NormForward(int l, int kind, T* out, float* mean, float* rstd, const T* in,
                                const T* w, const T* b, bool* x8_ready) {
  const int64_t C = o_.model.n_embd;
  *x8_ready = RecastsInput(kind) && CastsUnmeasured();
  if (!*x8_ready) {
    ops_->Mark(Llama() ? "rmsnorm fwd" : "layernorm fwd");
    return Llama() ? ops_->RmsNormForward(out, rstd, in, w, M_, C)
                   : ops_->LayerNormForward(out, mean, rstd, in, w, b, M_, C);
  }
  // (the layer's input codes: row-major only, the transposed copy is cast again in the backward)
  const Fp8Tensor xq = fp8_.Of(l, kind, kRoleX, fp8_.x8, nullptr, M_, C);
  typename Ops::Counter* const sat = fp8_.SaturatedOf(l, kind, kRoleX);
  ops_->Mark(Llama() ? "rmsnorm fwd (+fp8 cast x)" : "layernorm fwd (+fp8 cast x)");
  return Llama() ? ops_->RmsNormForwardFp8(xq, rstd, in, w, M_, C, sat)
                 : ops_->LayerNormForwardFp8(xq, mean, rstd, in, w, b, M_, C, sat);
}

// train.recompute's FP8 input, transposed only, into the shared fp8_.recast_to: the forward's
// codes, since the forward cast the same values (x recomputed, or kept) with the same scale,
// which nothing changes before the step's scaling update. With gelu_pre, x = GELU(gelu_pre) in
// the same pass. The amax and saturation were the forward's to count.
template <typename Ops, typename T>
Fp8Tensor Gpt<Ops, T>::RecastTarget(int l, int kind) const {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  Fp8Tensor t = fp8_.Of(l, kind, kRoleX, nullptr, fp8_.x8t[fp8_.Slot(l, kind)], M_, K);
  t.amax = nullptr;
  return t;
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::RecastInput(int l, int kind, const T* x, const T* gelu_pre) {
  const Fp8Tensor t = RecastTarget(l, kind);
  if (gelu_pre != nullptr) {
    ops_->Mark("fp8 recast x (T only, +gelu)");
    return ops_->QuantizeGelu(gelu_pre, t, nullptr);
  }
  ops_->Mark("fp8 recast x (T only)");
  return ops_->Quantize(x, t, nullptr);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::RecastNormOutput(int l, int kind, const T* in, const float* mean,
                                     const float* rstd, const T* w, const T* b, T* scratch) {
  const Fp8Tensor t = RecastTarget(l, kind);
  ops_->Mark(b != nullptr ? "fp8 recast x (T only, +layernorm)" : "fp8 recast x (T only, +rmsnorm)");
  return ops_->QuantizeNormOutput(in, mean, rstd, w, b, M_, t.cols, scratch, t);
}

// The transposed copy alone, cast again from the FP32 master weights with the scale the forward's
// cast used (the step's, which nothing changes before the scaling update): the forward's codes,
// transposed. The amax and saturation were the forward's to count. (master_ is what the forward
// cast from: cast_src_ differs only under ZeRO-1, which fp8.cache_weights: false refuses.)
template <typename Ops, typename T>
Status Gpt<Ops, T>::CastWeightT(int l, int kind, void* on) {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  Fp8Tensor t = fp8_.Of(l, kind, kRoleW, nullptr, fp8_.w8t[fp8_.Slot(l, kind)], N, K);
  t.amax = nullptr;
  if (on == nullptr) ops_->Mark("fp8 cast w (T only)");
  ++weight_casts_;
  return ops_->Quantize(master_ + layout_.offset[WeightOf(o_.model, kind)] + l * N * K, t, nullptr,
                        on);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::LaunchWeightCasts(int l, bool backward, bool count) {
  void* on = ops_->ForkCast();
  if (Ops::kDevice && on == nullptr) {
    return Status::Internal("could not start the stream of the FP8 weights' casts");
  }
  for (int kind = 0; kind < kNumLinear; ++kind) {
    if (!Fp8On(kind)) continue;
    FP8RT_RETURN_IF_ERROR(backward ? MakeDgradWeight(l, kind, on)
                                   : CastWeight(l, kind, count, on));
  }
  return ops_->MarkCast(l);
}

// The dgrad's transposed weight where it is not kept: cast again from the master (uncached
// weights) or transposed from the cached FP8 weight; nothing where it is kept.
template <typename Ops, typename T>
Status Gpt<Ops, T>::MakeDgradWeight(int l, int kind, void* on) {
  if (!fp8_.CachesWeights()) return CastWeightT(l, kind, on);
  // (ZeRO-3: a layer's gather transposed them)
  if (fp8_.KeepsTranspose() || (Zero3() && kind != kLmHead)) return Status::Ok();
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const int slot = fp8_.Slot(l, kind);
  if (on == nullptr) ops_->Mark("fp8 transpose w");
  return ops_->TransposeFp8(fp8_.w8t[slot], fp8_.w8[slot], N, K, on);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::LinearBackward(int l, int kind, T* dx, float* dw, float* db, const T* dy,
                                   const T* x, const T* dgelu_aux, bool* dgelu_done,
                                   const T* dy_gelu_pre, const uint8_t* dy_gelu_pre8,
                                   const Fp8BwdSplit& split) {
  if ((split.dy_cast_done || split.deferred_wgrad != nullptr) && (!Fp8On(kind) || fp8_.block)) {
    return Status::Internal(StrCat("LinearBackward: layer kind ", kind,
                                   " is not a per-tensor FP8 layer; its backward is not split"));
  }
  if (split.deferred_wgrad != nullptr && fp8_.dy8t_held == nullptr) {
    return Status::Internal(StrCat("LinearBackward: layer kind ", kind,
                                   " defers its wgrad, but Setup placed no held dY codes"));
  }
  if ((dy_gelu_pre != nullptr || dy_gelu_pre8 != nullptr) &&
      (db == nullptr || !FusesGeluIntoDyCast(kind))) {
    return Status::Internal(StrCat("LinearBackward: layer kind ", kind,
                                   " cannot apply the GELU backward in its dy cast"));
  }
  int64_t N, K;
  LinearShape(kind, &N, &K);
  if (dgelu_done != nullptr) *dgelu_done = false;
  // Runs the dgrad GEMM, with the GELU backward in its epilogue when asked and possible. BF16/FP32
  // layers only: cuBLASLt 13.1 takes DGELU with FP8 inputs, but its kernel made the fc_proj dgrad
  // 7x slower on H200 (0.7 -> 4.8 ms per step at gpt2-124m); FP8 layers apply the GELU backward in
  // the next layer's dY cast instead (FusesGeluIntoDyCast).
  auto run_dgrad = [&](const GemmArgs& gd) -> Status {
    if (dgelu_aux == nullptr || K % 8 != 0 || Fp8On(kind)) return ops_->Gemm(gd);
    GemmArgs fused = gd;
    fused.epilogue = Epilogue::kDGelu;
    fused.aux = const_cast<T*>(dgelu_aux);  // read only
    return GemmTryFused(fused, gd, &dgelu_epilogue_ok_, dgelu_done);
  };
  // FP8 layers get db from the cast of dY (QuantizeDbias), the rest (and block scaling's) from a
  // GEMM.
  if (db != nullptr && (!Fp8On(kind) || fp8_.block)) {  // db (1, N) += ones (1, M) dY (M, N)
    ops_->Mark("gemm bias grad");
    GemmArgs g;
    g.M = 1, g.N = N, g.K = M_;
    g.a = {ones_, kT};
    g.b = {dy, kT};
    g.d = db, g.d_dtype = DType::kFloat32, g.beta = 1.0f;
    FP8RT_RETURN_IF_ERROR(ops_->Gemm(g));
  }
  if (!Fp8On(kind)) {
    const T* w = Wl(WeightOf(o_.model, kind), l);
    GemmArgs gd;  // dX (M, K) = dY (M, N) W (N, K)
    gd.M = M_, gd.N = K, gd.K = N;
    gd.a = {dy, kT};
    gd.b = {w, kT};
    gd.d = dx, gd.d_dtype = kT;
    ops_->Mark(kDgradNames[kind]);
    FP8RT_RETURN_IF_ERROR(run_dgrad(gd));
    GemmArgs gw;  // dW (N, K) += dY^T (N, M) X (M, K)
    gw.M = N, gw.N = K, gw.K = M_;
    gw.a = {dy, kT, /*trans=*/true};
    gw.b = {x, kT};
    gw.d = dw, gw.d_dtype = DType::kFloat32, gw.beta = OverwritesWgrad(kind) ? 0.0f : 1.0f;
    ops_->Mark(kWgradNames[kind]);
    return ops_->Gemm(gw);
  }
  if (fp8_.block) return BlockLinearBackward(l, kind, dx, dw, dy);
  const int slot = fp8_.Slot(l, kind);
  const Fp8Tensor dyq =
      DyTensor(l, kind, split.deferred_wgrad != nullptr ? fp8_.dy8t_held : nullptr);
  if (!split.dy_cast_done) {
    FP8RT_RETURN_IF_ERROR(CastDy(l, kind, dyq, db, dy, dy_gelu_pre, dy_gelu_pre8));
  }
  const Fp8Tensor wq = fp8_.Of(l, kind, kRoleW, fp8_.w8[slot], fp8_.w8t[slot], N, K);
  const Fp8Tensor xq = fp8_.Of(l, kind, kRoleX, nullptr, fp8_.x8t[slot], M_, K);
  // (a layer's from LaunchWeightCasts when casts_ahead_)
  if (!(casts_ahead_ && kind != kLmHead)) FP8RT_RETURN_IF_ERROR(MakeDgradWeight(l, kind, nullptr));
  FP8RT_ASSIGN_OR_RETURN(GemmArgs gd, Fp8Dgrad(dyq, wq, dx, kT));
  ops_->Mark(kDgradNames[kind]);
  FP8RT_RETURN_IF_ERROR(run_dgrad(gd));
  FP8RT_ASSIGN_OR_RETURN(GemmArgs gw, Fp8Wgrad(dyq, xq, dw, /*accumulate=*/!OverwritesWgrad(kind)));
  if (split.deferred_wgrad != nullptr) {
    *split.deferred_wgrad = gw;
    return Status::Ok();
  }
  ops_->Mark(kWgradNames[kind]);
  return ops_->Gemm(gw);
}

template <typename Ops, typename T>
Fp8Tensor Gpt<Ops, T>::DyTensor(int l, int kind, uint8_t* dy8t) const {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  return fp8_.Of(l, kind, kRoleDy, fp8_.dy8, dy8t != nullptr ? dy8t : fp8_.dy8t, M_, N);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::CastDy(int l, int kind, const Fp8Tensor& dyq, float* db, const T* dy,
                           const T* dy_gelu_pre, const uint8_t* dy_gelu_pre8,
                           const Fp8Tensor* gelu_recast) {
  if (gelu_recast != nullptr && dy_gelu_pre == nullptr) {
    return Status::Internal(
        StrCat("CastDy: layer kind ", kind, " casts an input again only beside the GELU backward"));
  }
  const int64_t N = dyq.cols;
  typename Ops::Counter* const dy_saturated = fp8_.SaturatedOf(l, kind, kRoleDy);
  if (fp8_.current) {  // (never with dy_gelu_pre: FusesGeluIntoDyCast)
    FP8RT_RETURN_IF_ERROR(CurrentScale(l, kind, kRoleDy, dy, M_ * N,
                                       SplitOverTp(kind, kRoleDy) ? o_.tp : nullptr));
  }
  if (dy_gelu_pre8 != nullptr) {  // (the same, the GELU input's FP8 codes read directly)
    ops_->Mark("fp8 cast dy (+T, +dbias, +gelu bwd)");
    return ops_->QuantizeDbiasGeluGrad(dy, dy_gelu_pre8, dyq, db, dy_saturated);
  }
  if (dy_gelu_pre != nullptr) {  // never while calibrating (FusesGeluIntoDyCast)
    ops_->Mark(gelu_recast != nullptr ? "fp8 cast dy (+T, +dbias, +gelu bwd, +recast x)"
                                      : "fp8 cast dy (+T, +dbias, +gelu bwd)");
    return ops_->QuantizeDbiasGeluGrad(dy, dy_gelu_pre, dyq, db, dy_saturated, gelu_recast);
  }
  if (db != nullptr) {
    if (fp8_.calibrate_now) {  // the first step: this tensor's scale from its own amax, cast again
                               // below
      ops_->Mark("fp8 calibrate dy");
      FP8RT_RETURN_IF_ERROR(fp8_.Cast(dy, dyq, nullptr));
    }
    ops_->Mark("fp8 cast dy (+T, +dbias)");
    return ops_->QuantizeDbias(dy, dyq, db, dy_saturated);
  }
  ops_->Mark("fp8 cast dy (+T)");
  return fp8_.Cast(dy, dyq, dy_saturated);
}

}  // namespace fp8rt::gpt_detail
