// ZeRO-3 (parallel.zero: 3): the layers' weights and gradients sharded over the data-parallel
// group like the master weights and moments of ZeRO-1 (gpt_parallel.h). Each rank keeps its rows
// of every layer's FP8 weights (cast by AdamW's slot, CastSlot) and its part of every layer's T
// working copies; a layer's are all-gathered into a ring of two layer slots on the communication
// stream one layer ahead of the pass that reads them (forward: l + 1 during l; backward: l - 1
// during l), with the FP8 weights transposed there for the dgrads (with
// parallel.keep_gathered_weights: a slot per layer, gathered once per step and kept). The layers'
// gradients are written into a ring of gradient slots and reduce-scattered, as soon as the
// layer's backward has made them, into this rank's FP32 shard (added over micro-batches). The
// tensors outside the layers (embeddings, final norm, LM head) stay as under ZeRO-1. Member
// functions of Gpt<Ops, T>, included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::SetupZero3() {
  const int64_t D = o_.dp->size();
  auto up64 = [](int64_t n) { return (n + 63) / 64 * 64; };
  auto up256 = [](int64_t n) { return (n + 255) / 256 * 256; };
  int64_t tmp = 0, wshard_total = 0;
  for (int p = 0; p < kNumParams; ++p) {
    gring_off_[p] = gtmp_off_[p] = wring_off_[p] = wshard_off_[p] = -1;
    if (!IsLayerParam(p) || layout_.size[p] == 0) continue;
    gring_off_[p] = gring_layer_, gring_layer_ += up64(PerLayer(p));
    gtmp_off_[p] = tmp, tmp += up64(SliceOf(p));
    if (!HasWorking(p)) continue;
    wring_off_[p] = wring_layer_, wring_layer_ += up64(PerLayer(p));
    wshard_off_[p] = wshard_total, wshard_total += up64(Layers(p) * SliceOf(p));
  }
  const bool b16 = o_.grad_reduce_bf16;
  ring_n_ = o_.keep_gathered_weights ? std::max(o_.model.n_layer, 2) : 2;
  ring_layer_.assign(static_cast<size_t>(ring_n_), -1);
  ring_t_.assign(static_cast<size_t>(ring_n_), false);
  mem_category_ = kMemGrads;
  FP8RT_RETURN_IF_ERROR(Alloc(&gring_, kGradRing * gring_layer_));
  if (b16) FP8RT_RETURN_IF_ERROR(Alloc(&g16ring_, kGradRing * gring_layer_));
  uint8_t* t = nullptr;
  FP8RT_RETURN_IF_ERROR(Alloc(&t, tmp * (b16 ? 2 : 4)));
  gtmp_ = t;
  mem_category_ = kMemWorking;
  FP8RT_RETURN_IF_ERROR(Alloc(&wshard_, wshard_total));
  mem_category_ = kMemGathered;
  FP8RT_RETURN_IF_ERROR(Alloc(&wring_, ring_n_ * wring_layer_));
  // The FP8 weights: a layer's rows per rank, kind by kind; a ring slot holds the whole weights
  // then their transposed copies.
  int64_t at[kNumLinear] = {}, layer_bytes = 0;
  for (int kind = 0; kind < kNumLinear; ++kind) {
    if (!Fp8On(kind)) continue;
    int64_t N, K;
    LinearShape(kind, &N, &K);
    w8shard_off_[kind] = w8shard_layer_, w8shard_layer_ += up256(N / D * K);
    at[kind] = layer_bytes, layer_bytes += up256(N * K);
  }
  if (layer_bytes > 0) {
    mem_category_ = kMemFp8Weights;
    FP8RT_RETURN_IF_ERROR(Alloc(&w8shard_, o_.model.n_layer * w8shard_layer_));
    mem_category_ = kMemGathered;
    FP8RT_RETURN_IF_ERROR(Alloc(&w8ring_, ring_n_ * 2 * layer_bytes));
    for (int l = 0; l < o_.model.n_layer; ++l) {
      uint8_t* slot = w8ring_ + l % ring_n_ * 2 * layer_bytes;
      for (int kind = 0; kind < kNumLinear; ++kind) {
        if (!Fp8On(kind)) continue;
        fp8_.w8[fp8_.Slot(l, kind)] = slot + at[kind];
        fp8_.w8t[fp8_.Slot(l, kind)] = slot + layer_bytes + at[kind];
      }
    }
  }
  mem_category_ = kMemOther;
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::GatherLayer(int l, bool with_t) {
  const int k = l % ring_n_;
  if (ring_layer_[k] == l && (ring_t_[k] || !with_t)) return Status::Ok();
  const int64_t D = o_.dp->size();
  const comm::DataType tt =
      kT == DType::kBFloat16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat32;
  const std::string what = StrCat("weight all-gather (ZeRO-3), layer ", l);
  ops_->Mark("weight all-gather (launch)");
  // (behind everything the compute stream has been given: the slot's last reader included)
  void* stream = ops_->ForkComm();
  ops_->SegmentStart(stream);
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  for (int p = kLn1W; p <= kFcProjB; ++p) {
    if (wring_off_[p] < 0) continue;
    FP8RT_RETURN_IF_ERROR(o_.dp->AllGather(wshard_ + wshard_off_[p] + l * SliceOf(p),
                                           Wl(static_cast<Param>(p), l),
                                           static_cast<size_t>(SliceOf(p)), tt, stream,
                                           what.c_str()));
  }
  FP8RT_RETURN_IF_ERROR(fp8_.ForLayerLinears(l, [&](int, int kind) -> Status {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    return o_.dp->AllGather(Fp8Part(l, kind), fp8_.w8[fp8_.Slot(l, kind)],
                            static_cast<size_t>(N / D * K), comm::DataType::kUint8, stream,
                            what.c_str());
  }));
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd(what.c_str()));
  if (with_t) {
    FP8RT_RETURN_IF_ERROR(fp8_.ForLayerLinears(l, [&](int, int kind) -> Status {
      int64_t N, K;
      LinearShape(kind, &N, &K);
      const int s = fp8_.Slot(l, kind);
      return ops_->TransposeFp8(fp8_.w8t[s], fp8_.w8[s], N, K, stream);
    }));
  }
  FP8RT_RETURN_IF_ERROR(ops_->MarkComm(GatherMark(k), stream));
  ops_->SegmentStop(stream);
  ring_layer_[k] = l, ring_t_[k] = with_t;
  return Status::Ok();
}

// The backward reads the forward's last ring_n_ layers where they are (gathered with their
// transposed copies: all of them with parallel.keep_gathered_weights); every other gather of the
// backward is its own.
template <typename Ops, typename T>
Status Gpt<Ops, T>::UseLayer(int l, bool backward) {
  const int L = o_.model.n_layer;
  auto with_t = [&](int j) { return backward || j >= L - ring_n_; };
  FP8RT_RETURN_IF_ERROR(GatherLayer(l, with_t(l)));
  const int next = backward ? l - 1 : l + 1;
  if (next >= 0 && next < L) FP8RT_RETURN_IF_ERROR(GatherLayer(next, with_t(next)));
  ops_->Mark("wait for gathered weights");
  return ops_->WaitComm(GatherMark(l % ring_n_));
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::PrepareLayerGrads(int l) {
  ops_->Mark("wait for the gradient slot");
  FP8RT_RETURN_IF_ERROR(ops_->WaitComm(GradMark(l % kGradRing)));
  for (int p = kLn1W; p <= kFcProjB; ++p) {
    if (layout_.size[p] == 0 || WrittenByWgrad(p)) continue;
    FP8RT_RETURN_IF_ERROR(ops_->Zero(Gl(static_cast<Param>(p), l),
                                     static_cast<size_t>(PerLayer(p)) * sizeof(float)));
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ReduceLayer(int l) {
  const int k = l % kGradRing;
  const bool b16 = g16ring_ != nullptr;
  bf16* const ring16 = b16 ? g16ring_ + k * gring_layer_ : nullptr;
  if (b16) {  // rounded on the compute stream, before the collectives read it
    ops_->Mark("grad pack bf16");
    for (int p = kLn1W; p <= kFcProjB; ++p) {
      if (layout_.size[p] == 0) continue;
      FP8RT_RETURN_IF_ERROR(
          ops_->FloatToBf16(ring16 + gring_off_[p], Gl(static_cast<Param>(p), l), PerLayer(p)));
    }
  }
  const std::string what = StrCat("gradient reduce-scatter (ZeRO-3), layer ", l);
  ops_->Mark("grad reduce (launch)");
  void* stream = ops_->ForkComm();
  ops_->CommTimerStart(kGradTimer);
  auto* tmp32 = static_cast<float*>(gtmp_);
  auto* tmp16 = static_cast<bf16*>(gtmp_);
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  for (int p = kLn1W; p <= kFcProjB; ++p) {
    if (layout_.size[p] == 0) continue;
    const size_t n = static_cast<size_t>(SliceOf(p));
    FP8RT_RETURN_IF_ERROR(b16 ? o_.dp->ReduceScatter(ring16 + gring_off_[p], tmp16 + gtmp_off_[p],
                                                     n, comm::DataType::kBFloat16,
                                                     comm::ReduceOp::kSum, stream, what.c_str())
                              : o_.dp->ReduceScatter(Gl(static_cast<Param>(p), l),
                                                     tmp32 + gtmp_off_[p], n,
                                                     comm::DataType::kFloat32, comm::ReduceOp::kSum,
                                                     stream, what.c_str()));
  }
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd(what.c_str()));
  // This micro-batch's part into the shard (the first one's replaces what the last step left).
  for (int p = kLn1W; p <= kFcProjB; ++p) {
    if (layout_.size[p] == 0) continue;
    float* const dst = gshard_ + ShardOff(p, l);
    FP8RT_RETURN_IF_ERROR(
        b16 ? ops_->AccumulateShard(dst, tmp16 + gtmp_off_[p], SliceOf(p), micro_ > 0, stream)
            : ops_->AccumulateShard(dst, tmp32 + gtmp_off_[p], SliceOf(p), micro_ > 0, stream));
  }
  // Hybrid sharding: the step's sum of this layer's parts over the replicas too, once, after the
  // last micro-batch has added its part (in FP32: the shard's own precision).
  if (Hybrid() && reduce_grads_now_) {
    FP8RT_RETURN_IF_ERROR(o_.replicas->GroupStart());
    for (int p = kLn1W; p <= kFcProjB; ++p) {
      if (layout_.size[p] == 0) continue;
      FP8RT_RETURN_IF_ERROR(AllReduceAcrossReplicas(
          gshard_ + ShardOff(p, l), SliceOf(p), comm::DataType::kFloat32, stream, what.c_str()));
    }
    FP8RT_RETURN_IF_ERROR(o_.replicas->GroupEnd(what.c_str()));
  }
  FP8RT_RETURN_IF_ERROR(ops_->MarkComm(GradMark(k), stream));
  ops_->CommTimerStop(kGradTimer);
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::CastWholeWeights() {
  const int64_t D = o_.dp->size(), r = o_.dp->rank();
  const bool was = fp8_.calibrate_now;
  fp8_.calibrate_now = fp8_.calibrate;  // (as the step's first micro-batch casts)
  const Status s = fp8_.ForEachLinear([&](int l, int kind) -> Status {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    const Param wp = WeightOf(o_.model, kind);
    // The whole weight, through gradient memory free until the backward: the LM head's own, a
    // layer's ring slot.
    float* whole = kind == kLmHead ? G(wp) : Gl(wp, 0);
    FP8RT_RETURN_IF_ERROR(
        ops_->Upload(whole, pending_master_.data() + FullOff(wp, kind == kLmHead ? 0 : l),
                     static_cast<size_t>(N * K) * sizeof(float)));
    const int slot = fp8_.Slot(l, kind);
    const Fp8Tensor t =
        fp8_.Of(l, kind, kRoleW, fp8_.w8[slot],
                kind == kLmHead && fp8_.KeepsTranspose() ? fp8_.w8t[slot] : nullptr, N, K);
    ops_->Mark("fp8 cast w (whole, ZeRO-3 start)");
    if (fp8_.current) {
      FP8RT_RETURN_IF_ERROR(CurrentScale(l, kind, kRoleW, static_cast<const float*>(whole), N * K,
                                         SplitOverTp(kind, kRoleW) ? o_.tp : nullptr));
    }
    ++weight_casts_;
    FP8RT_RETURN_IF_ERROR(fp8_.Cast(static_cast<const float*>(whole), t,
                                    fp8_.SaturatedOf(l, kind, kRoleW)));
    if (kind == kLmHead) return Status::Ok();
    return ops_->CopyOnDevice(Fp8Part(l, kind), fp8_.w8[slot] + r * (N / D) * K,
                              static_cast<size_t>(N / D * K));
  });
  fp8_.calibrate_now = was;
  pending_master_.clear();
  pending_master_.shrink_to_fit();
  std::fill(ring_layer_.begin(), ring_layer_.end(), -1);
  return s;
}

}  // namespace fp8rt::gpt_detail
