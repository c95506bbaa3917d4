// The phases of one optimizer step (Step: micro-batches, the reductions across ranks, the FP8
// scale update, clipping and AdamW) and the forward-only and gradient-only passes of tests and
// evaluation. Member functions of Gpt<Ops, T>, included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

// One optimizer step, as phases: micro-batches (forward + backward, gradients accumulated), then
// the gradient and amax reductions across ranks (issue 11), the FP8 scale update, and clipping +
// AdamW (under ZeRO-1 also the weight casts and all-gathers, which run on past the step's end
// until the next forward waits for them). Ends with the step's one host synchronisation.
template <typename Ops, typename T>
Status Gpt<Ops, T>::Step(int step, float lr, const int32_t* x, const int32_t* y, StepStats* out) {
  weight_casts_ = 0;
  // The previous step ended with a Download, so the staging buffer is free to refill.
  const int64_t n = M_ * o_.grad_accum;
  std::memcpy(staging_, x, n * sizeof(int32_t));
  std::memcpy(staging_ + n, y, n * sizeof(int32_t));
  if (Multi()) {  // the stop vote travels in the loss all-reduce (alone, out->stop stays as given)
    const float vote = out->stop ? 1.0f : 0.0f;
    std::memcpy(staging_ + 2 * n, &vote, sizeof vote);
    FP8RT_RETURN_IF_ERROR(
        ops_->UploadAsync(step_losses_ + o_.grad_accum, staging_ + 2 * n, sizeof(float)));
  }
  amax_collectives_ = 0;
  current_amax_collectives_ = 0;
  grad_scale_ = Dp() ? 1.0f / static_cast<float>(DpSize()) : 1.0f;
  const Status s = MicroBatches();
  grad_scale_ = 1.0f;
  FP8RT_RETURN_IF_ERROR(s);
  FP8RT_RETURN_IF_ERROR(ReduceAcrossRanks());
  // The scales first (they need only the reduced amaxes): under ZeRO-1, AdamW casts and gathers
  // each slot's weights as soon as it has updated them.
  FP8RT_RETURN_IF_ERROR(UpdateScales());
  FP8RT_RETURN_IF_ERROR(ClipAndOptimize(step, lr));
  // The one host synchronisation of the step: the numbers the metrics need.
  std::vector<float> stats(static_cast<size_t>(o_.grad_accum + 2));
  ops_->Mark("step sync");
  FP8RT_RETURN_IF_ERROR(ops_->Download(stats.data(), step_losses_, stats.size() * sizeof(float)));
  ops_->EndProfileStep();
  double loss = 0;
  for (int i = 0; i < o_.grad_accum; ++i) loss += stats[i];
  // With several ranks the losses were summed over all of them (the TP ranks of a replica each
  // hold its loss): their mean is the global batch's loss.
  const int ranks = Multi() ? World()->size() : 1;
  out->loss = static_cast<float>(loss / o_.grad_accum / ranks);
  out->grad_norm = std::sqrt(stats[o_.grad_accum + 1]);
  if (Multi()) out->stop = stats[o_.grad_accum] > 0.0f;
  out->weight_casts = weight_casts_;
  out->amax_collectives = amax_collectives_;
  out->current_amax_collectives = current_amax_collectives_;
  // (ZeRO-3: and each layer's reduce-scatter, every micro-batch)
  out->grad_buckets =
      Dp() ? static_cast<int>(buckets_.size()) + (Zero3() ? o_.model.n_layer * o_.grad_accum : 0)
           : 0;
  out->grad_reduce_ms = Dp() ? ops_->CommTimerMs(kGradTimer) : 0;
  out->amax_reduce_ms = amax_collectives_ > 0 ? ops_->CommTimerMs(kAmaxTimer) : 0;
  // (the previous step's gather: this step's forward waited for it, so reading it does not wait)
  out->weight_gather_ms = Zero() ? ops_->SegmentsRotate() : 0;
  return Status::Ok();
}

// Forward + backward of every micro-batch in staging_, gradients accumulated in grads_.
template <typename Ops, typename T>
Status Gpt<Ops, T>::MicroBatches() {
  const int64_t n = M_ * o_.grad_accum;
  bool cast = true;
  FP8RT_RETURN_IF_ERROR(PrepareWeightCasts(&cast));
  ops_->Mark("zero grads");
  FP8RT_RETURN_IF_ERROR(ZeroGrads());
  for (int micro = 0; micro < o_.grad_accum; ++micro) {
    // FP8 weights are cast on the first micro-batch only and reused by the others. A fresh scale
    // state calibrates on the first micro-batch; the others use the scales it set.
    fp8_.calibrate_now = fp8_.calibrate && micro == 0;
    wgrad_overwrites_ = micro == 0;
    micro_ = micro;
    // Under DP the last micro-batch's backward launches the gradient buckets as they complete.
    reduce_grads_now_ = Dp() && micro == o_.grad_accum - 1;
    sparse_now_ = reduce_grads_now_ && emb_plan_.sparse;
    next_bucket_ = 0;
    FP8RT_RETURN_IF_ERROR(
        ForwardPass(staging_ + micro * M_, staging_ + n + micro * M_, cast && micro == 0, true,
                    micro));
    cast_src_ = master_;  // (ZeRO: the full master in grads_ is overwritten by the backward)
    const Status s = BackwardPass();
    reduce_grads_now_ = false;
    // (sparse_now_ stays until ReduceAcrossRanks has added the gathered rows)
    FP8RT_RETURN_IF_ERROR(s);
  }
  fp8_.calibrate_now = false;
  wgrad_overwrites_ = false;
  return Status::Ok();
}


// The global gradient norm, then AdamW on every tensor (clipping inside, from the norm).
template <typename Ops, typename T>
Status Gpt<Ops, T>::ClipAndOptimize(int step, float lr) {
  AdamWConfig cfg;
  cfg.lr = lr, cfg.beta1 = o_.beta1, cfg.beta2 = o_.beta2, cfg.eps = o_.eps;
  cfg.weight_decay = o_.weight_decay;
  ops_->Mark("grad norm");
  if (Tp()) {
    // Each TP rank holds its part of the split tensors and all of the others, the same on every
    // TP rank: the split parts add up over the group, the others count once (TP rank 0's). Under
    // ZeRO-1 the parts are also split over the data-parallel group: add up over every rank.
    FP8RT_RETURN_IF_ERROR(ops_->Zero(norm_sq_, sizeof(float)));
    for (int p = 0; p < kNumParams; ++p) {
      if ((!TpSplit(p) && o_.tp->rank() != 0) || layout_.size[p] == 0) continue;
      FP8RT_RETURN_IF_ERROR(
          Zero() ? ops_->NormSquared(norm_sq_, gshard_ + shard_offset_[p], Layers(p) * SliceOf(p),
                                     true)
                 : ops_->NormSquared(norm_sq_, G(static_cast<Param>(p)), layout_.size[p], true));
    }
    // (hybrid sharding: over one shard group's ranks, then TP; the replicas hold the same)
    void* stream = ops_->ForkComm();
    for (comm::Communicator* g : Hybrid()  ? std::vector<comm::Communicator*>{o_.dp, o_.tp}
                                 : Zero() ? std::vector<comm::Communicator*>{World()}
                                          : std::vector<comm::Communicator*>{o_.tp}) {
      FP8RT_RETURN_IF_ERROR(g->AllReduce(norm_sq_, norm_sq_, 1, comm::DataType::kFloat32,
                                         comm::ReduceOp::kSum, stream,
                                         Hybrid() ? "gradient norm all-reduce (shard group, TP)"
                                                  : "gradient norm all-reduce (TP)"));
    }
    FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
  } else if (Zero()) {
    // Each rank holds its part of the reduced gradients: the squared norms add up over ranks.
    FP8RT_RETURN_IF_ERROR(ops_->NormSquared(norm_sq_, gshard_, shard_total_));
    void* stream = ops_->ForkComm();
    FP8RT_RETURN_IF_ERROR(o_.dp->AllReduce(norm_sq_, norm_sq_, 1, comm::DataType::kFloat32,
                                           comm::ReduceOp::kSum, stream,
                                           "gradient norm all-reduce (ZeRO-1)"));
    FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
  } else {
    FP8RT_RETURN_IF_ERROR(ops_->NormSquared(norm_sq_, grads_, layout_.total));
  }
  if (Zero()) {
    // Slot by slot (the tensors outside the layers, then layer by layer), each slot's weights
    // cast and all-gathered as soon as they are updated. With current scaling a weight's cast
    // first all-reduces its amax over its shards: then every slot is updated and cast before the
    // first gather, so that those all-reduces never run beside a gather.
    // ZeRO-3 gathers slot 0 alone here: each layer's parts wait in the shards for the layer's
    // passes (UseLayer), and what the ring holds is stale from now on.
    const int slots = o_.model.n_layer + 1;
    std::fill(ring_layer_.begin(), ring_layer_.end(), -1);
    auto gather = [&](int slot) { return Zero3() && slot > 0 ? Status::Ok() : LaunchGather(slot); };
    FP8RT_RETURN_IF_ERROR(BeginGather());
    auto update = [&](int slot) -> Status {
      ops_->Mark("adamw");
      const int l = SlotLayer(slot);
      for (int p = 0; p < kNumParams; ++p) {
        if (layout_.size[p] == 0 || !InSlot(p, slot)) continue;
        const int64_t so = ShardOff(p, l), n = SliceOf(p);
        FP8RT_RETURN_IF_ERROR(MomentsAt(so, [&](auto* m, auto* v) {
          return ops_->AdamW(master_ + so, m, v, gshard_ + so, WorkShard(p, l), n, step, cfg,
                             kDecay[p] ? o_.weight_decay : 0.0f, norm_sq_, o_.grad_clip);
        }));
      }
      return CastSlot(slot);
    };
    if (fp8_.current) {
      for (int slot = 0; slot < slots; ++slot) FP8RT_RETURN_IF_ERROR(update(slot));
      for (int slot = 0; slot < slots; ++slot) FP8RT_RETURN_IF_ERROR(gather(slot));
      return Status::Ok();
    }
    for (int slot = 0; slot < slots; ++slot) {
      FP8RT_RETURN_IF_ERROR(update(slot));
      FP8RT_RETURN_IF_ERROR(gather(slot));
    }
    return Status::Ok();
  }
  ops_->Mark("adamw");
  for (int p = 0; p < kNumParams; ++p) {
    if (layout_.size[p] == 0) continue;
    const int64_t off = layout_.offset[p];
    FP8RT_RETURN_IF_ERROR(MomentsAt(off, [&](auto* m, auto* v) {
      return ops_->AdamW(master_ + off, m, v, grads_ + off, W(static_cast<Param>(p)),
                         layout_.size[p], step, cfg, kDecay[p] ? o_.weight_decay : 0.0f, norm_sq_,
                         o_.grad_clip);
    }));
  }
  return Status::Ok();
}

// Delayed scaling: this step's amaxes into the histories, next step's scales from them.
template <typename Ops, typename T>
Status Gpt<Ops, T>::UpdateScales() {
  ops_->Mark("fp8 scaling update");
  if (fp8_.num_tensors > 0 && !fp8_.block) {
    FP8RT_RETURN_IF_ERROR(ops_->UpdateScaling(fp8_.scaling, fp8_.cfg));
  }
  fp8_.calibrate = false;
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::Forward(const int32_t* x, const int32_t* y, float* loss,
                            std::vector<float>* logits) {
  std::memcpy(staging_, x, M_ * sizeof(int32_t));
  std::memcpy(staging_ + M_, y, M_ * sizeof(int32_t));
  bool cast = true;
  FP8RT_RETURN_IF_ERROR(PrepareWeightCasts(&cast));
  const Status fwd = ForwardPass(staging_, staging_ + M_, cast, false, 0);
  cast_src_ = master_;
  FP8RT_RETURN_IF_ERROR(fwd);
  float l = 0;
  FP8RT_RETURN_IF_ERROR(ops_->Download(&l, step_losses_, sizeof(float)));
  *loss = l;
  if (logits != nullptr) {
    const int64_t n = M_ * o_.model.padded_vocab();
    std::vector<T> raw(static_cast<size_t>(n));
    FP8RT_RETURN_IF_ERROR(ops_->Download(raw.data(), logits_, raw.size() * sizeof(T)));
    logits->resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) (*logits)[i] = ToFloat(raw[i]);
  }
  // Evaluation must not feed the next training step's amax; the weights' amaxes stay (under ZeRO
  // the last step's update cast them, for the next step's history; otherwise the next step casts
  // the same weights again).
  FP8RT_RETURN_IF_ERROR(fp8_.ClearAmax(/*keep_weights=*/true));
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::Gradients(const int32_t* x, const int32_t* y, float* loss,
                              std::vector<float>* grads) {
  if (Zero()) {
    return Status::FailedPrecondition(
        "Gradients (a test hook) needs the full master weights, which ZeRO-1 shards");
  }
  const int saved = o_.grad_accum;
  o_.grad_accum = 1;
  FP8RT_RETURN_IF_ERROR(ZeroGrads());
  std::memcpy(staging_, x, M_ * sizeof(int32_t));
  std::memcpy(staging_ + M_, y, M_ * sizeof(int32_t));
  const Status s = [&]() -> Status {
    FP8RT_RETURN_IF_ERROR(ForwardPass(staging_, staging_ + M_, true, true, 0));
    wgrad_overwrites_ = true;
    const Status b = BackwardPass();
    wgrad_overwrites_ = false;
    return b;
  }();
  o_.grad_accum = saved;
  FP8RT_RETURN_IF_ERROR(s);
  FP8RT_RETURN_IF_ERROR(ops_->Download(loss, step_losses_, sizeof(float)));
  grads->resize(static_cast<size_t>(layout_.total));
  FP8RT_RETURN_IF_ERROR(ops_->Download(grads->data(), grads_, grads->size() * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(fp8_.ClearAmax());
  return Status::Ok();
}

}  // namespace fp8rt::gpt_detail
