// Data parallelism, ZeRO-1 and tensor parallelism for the GPT model: the member functions of
// Gpt<Ops, T> that talk to other ranks (included at the end of runtime/gpt_impl.h). A world of
// one runs none of this.
#pragma once

namespace fp8rt::gpt_detail {

// Averages one bucket of gradients over the data-parallel group, on the communication stream
// (which first waits for the backward so far), as one group of collectives.
template <typename Ops, typename T>
Status Gpt<Ops, T>::ReduceBucket(int b) {
  const GradBucket& k = buckets_[b];
  const bool b16 = g16_ != nullptr;
  if (b16) {  // rounded to BF16 on the compute stream, before the collectives read it
    ops_->Mark("grad pack bf16");
    for (const auto& [off, n] : k.ranges) {
      FP8RT_RETURN_IF_ERROR(ops_->FloatToBf16(G16At(off), GradAt(off), n));
    }
  }
  ops_->Mark("grad reduce (launch)");
  void* stream = ops_->ForkComm();
  ops_->CommTimerStart(kGradTimer);
  const comm::DataType dt = b16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat32;
  auto full = [&](int64_t off) -> void* {
    return b16 ? static_cast<void*>(G16At(off)) : static_cast<void*>(GradAt(off));
  };
  auto part = [&](int64_t off) -> void* {
    return b16 ? static_cast<void*>(G16ShardAt(off)) : static_cast<void*>(gshard_ + off);
  };
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  for (size_t i = 0; i < k.ranges.size(); ++i) {
    const auto [off, n] = k.ranges[i];
    if (!Zero()) {
      FP8RT_RETURN_IF_ERROR(o_.dp->AllReduce(full(off), full(off), static_cast<size_t>(n), dt,
                                             comm::ReduceOp::kSum, stream,
                                             bucket_names_[b].c_str()));
      continue;
    }
    // ZeRO-1: each layer's tensor is reduce-scattered; this rank keeps its part.
    const int p = k.range_param[i];
    const int first = k.first_layer < 0 ? 0 : k.first_layer;
    const int last = k.first_layer < 0 ? 0 : k.last_layer;
    for (int l = first; l <= last; ++l) {
      FP8RT_RETURN_IF_ERROR(o_.dp->ReduceScatter(
          full(FullOff(p, l)), part(ShardOff(p, l)), static_cast<size_t>(SliceOf(p)), dt,
          comm::ReduceOp::kSum, stream, bucket_names_[b].c_str()));
    }
  }
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd(bucket_names_[b].c_str()));
  if (Hybrid()) {  // this rank's parts summed over the replicas too
    FP8RT_RETURN_IF_ERROR(o_.replicas->GroupStart());
    for (size_t i = 0; i < k.ranges.size(); ++i) {
      const int p = k.range_param[i];
      const int first = k.first_layer < 0 ? 0 : k.first_layer;
      const int last = k.first_layer < 0 ? 0 : k.last_layer;
      for (int l = first; l <= last; ++l) {
        FP8RT_RETURN_IF_ERROR(AllReduceAcrossReplicas(part(ShardOff(p, l)), SliceOf(p), dt, stream,
                                                      bucket_names_[b].c_str()));
      }
    }
    FP8RT_RETURN_IF_ERROR(o_.replicas->GroupEnd(bucket_names_[b].c_str()));
  }
  ops_->CommTimerStop(kGradTimer);
  return Status::Ok();
}

// With several ranks, after the gradient buckets: ONE MAX all-reduce over every rank (DP x TP) of
// the amaxes of every FP8 tensor
// (every layer, role and micro-batch max-accumulated in the one contiguous buffer; NaN mapped to
// +Inf first, so a NaN on any rank is seen by all), and the micro-batch losses summed for the
// metrics together with the ranks' stop votes (so that all stop after the same step). The compute
// stream then waits for every collective of the step.
template <typename Ops, typename T>
Status Gpt<Ops, T>::ReduceAcrossRanks() {
  if (!Multi()) return Status::Ok();
  comm::Communicator* const world = World();
  if (fp8_.num_tensors > 0 && !fp8_.block) {  // (block scaling has no per-tensor amax)
    ops_->Mark("amax reduce");
    FP8RT_RETURN_IF_ERROR(ops_->AmaxNanToInf(fp8_.scaling.amax, fp8_.num_tensors));
    void* stream = ops_->ForkComm();
    ops_->CommTimerStart(kAmaxTimer);
    FP8RT_RETURN_IF_ERROR(world->AllReduce(
        fp8_.scaling.amax, fp8_.scaling.amax, static_cast<size_t>(fp8_.num_tensors),
        comm::DataType::kFloat32, comm::ReduceOp::kMax, stream, "FP8 amax all-reduce"));
    ops_->CommTimerStop(kAmaxTimer);
    ++amax_collectives_;
  }
  void* stream = ops_->ForkComm();
  FP8RT_RETURN_IF_ERROR(world->AllReduce(
      step_losses_, step_losses_, static_cast<size_t>(o_.grad_accum + 1), comm::DataType::kFloat32,
      comm::ReduceOp::kSum, stream, "loss and stop-vote all-reduce"));
  FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
  if (g16_ != nullptr) {  // the BF16 sums back to FP32, where the optimizer reads them
    ops_->Mark("grad unpack bf16");
    if (Zero3()) {  // (the layers' parts were widened as they were added, ReduceLayer)
      for (int p = 0; p < kNumParams; ++p) {
        if (IsLayerParam(p) || layout_.size[p] == 0) continue;
        FP8RT_RETURN_IF_ERROR(
            ops_->Bf16ToFloat(gshard_ + shard_offset_[p], G16ShardAt(shard_offset_[p]), SliceOf(p)));
      }
    } else if (Zero()) {
      FP8RT_RETURN_IF_ERROR(ops_->Bf16ToFloat(gshard_, g16shard_, shard_total_));
    } else {
      for (const GradBucket& k : buckets_) {
        for (const auto& [off, n] : k.ranges) {
          FP8RT_RETURN_IF_ERROR(ops_->Bf16ToFloat(grads_ + off, g16_ + off, n));
        }
      }
    }
  }
  return AddGatheredEmbeddingRows();
}

// parallel.sparse_embedding_grad, after the last micro-batch's embedding backward (which left the
// token table out): every DP rank's output gradient rows (already scaled by 1/DP, like every
// gradient) and tokens, gathered on the communication stream behind the gradient buckets.
template <typename Ops, typename T>
Status Gpt<Ops, T>::LaunchEmbeddingGather() {
  ops_->Mark("embedding rows all-gather (launch)");
  const int64_t C = o_.model.n_embd;
  const comm::DataType tt =
      kT == DType::kBFloat16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat32;
  const char* what = "token embedding gradient rows all-gather";
  void* stream = ops_->ForkComm();
  ops_->CommTimerStart(kGradTimer);
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  FP8RT_RETURN_IF_ERROR(
      o_.dp->AllGather(dres_, emb_rows_, static_cast<size_t>(M_ * C), tt, stream, what));
  FP8RT_RETURN_IF_ERROR(o_.dp->AllGather(tokens_, emb_tokens_, static_cast<size_t>(M_),
                                         comm::DataType::kInt32, stream, what));
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd(what));
  ops_->CommTimerStop(kGradTimer);
  return Status::Ok();
}

// After the join: the gathered rows of every rank, in rank order, added to the token table's
// reduced gradient: all of it without ZeRO-1 (every rank adds the same rows in the same order,
// so the replicas stay identical), this rank's part of it under ZeRO-1. Without a dense part
// (llama, one micro-batch) nothing was reduced: the part starts from zero.
template <typename Ops, typename T>
Status Gpt<Ops, T>::AddGatheredEmbeddingRows() {
  if (!sparse_now_) return Status::Ok();
  sparse_now_ = false;
  const int64_t C = o_.model.n_embd, D = o_.dp->size(), r = o_.dp->rank();
  float* dst = Zero() ? gshard_ + ShardOff(kWte, 0) : G(kWte);
  const int64_t lo = Zero() ? r * SliceOf(kWte) : 0;
  const int64_t count = Zero() ? SliceOf(kWte) : layout_.size[kWte];
  ops_->Mark("embedding rows add");
  if (!emb_plan_.wte_dense && Zero()) {
    FP8RT_RETURN_IF_ERROR(ops_->Zero(dst, static_cast<size_t>(count) * sizeof(float)));
  }
  return ops_->EmbeddingBackwardSlice(dst, lo, count, emb_rows_, emb_tokens_, D * M_, C,
                                      o_.model.vocab_size);
}

// The shard layout, and the shapes ZeRO-1 can split: every tensor's per-layer size and every FP8
// weight's rows must divide by the number of ranks.
template <typename Ops, typename T>
Status Gpt<Ops, T>::SetupZero() {
  const int64_t D = o_.dp->size();
  for (int p = 0; p < kNumParams; ++p) {
    if (PerLayer(p) % D != 0) {
      return Status::InvalidArgument(StrCat(
          "parallel.zero: tensor ", kParamNames[p], " has ", PerLayer(p),
          " elements per layer, which do not split into ", D, " equal parts (ZeRO-", o_.zero,
          " needs model.n_embd to be a multiple of the ",
          Hybrid() ? "shard group's size, parallel.shard_group" : "data-parallel size", ")"));
    }
  }
  const ZeroShards shards(o_.model, layout_, static_cast<int>(D));
  std::copy_n(shards.offset, kNumParams, shard_offset_);
  shard_total_ = shards.total;
  for (int kind = 0; kind <= kNumLinear; ++kind) {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    if (Fp8On(kind) && N % D != 0) {
      return Status::InvalidArgument(StrCat("parallel.zero: the FP8 weight of ", kLinearNames[kind],
                                            " has ", N, " rows, which do not split into ", D,
                                            " equal parts"));
    }
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::PrepareWeightCasts(bool* cast) {
  *cast = true;
  cast_src_ = master_;
  if (!Zero()) return Status::Ok();
  if (pending_master_.empty()) {
    *cast = false;  // the last step's gather (LaunchGather) made this step's FP8 weights
    return Status::Ok();
  }
  if (Zero3()) {
    *cast = false;
    return CastWholeWeights();
  }
  // After InitRandom/ImportState: the full master, the same on every rank, in grads_ (free until
  // the backward), cast like a step without ZeRO (with current scaling when calibrating), so that
  // every rank computes the same scales.
  FP8RT_RETURN_IF_ERROR(
      ops_->Upload(grads_, pending_master_.data(), pending_master_.size() * sizeof(float)));
  pending_master_.clear();
  pending_master_.shrink_to_fit();
  cast_src_ = grads_;
  return Status::Ok();
}

// ZeRO-1's weight all-gather, slot by slot as AdamW finishes each (ClipAndOptimize), after the
// scale update: each rank casts its rows of the slot's FP8 weights with the weights' new scales
// (CastSlot), then the FP8 bytes and the T working copies are all-gathered and the FP8 weights
// transposed, on the communication stream (LaunchGather). So the gather overlaps the rest of
// AdamW and then the next step's forward. One group of collectives per slot, in the order the
// forward reads them: slot 0 holds the tensors outside the layers (the embeddings, the final
// norm, the LM head), slot 1 + l layer l. Each slot ends with a mark that the forward waits for
// (WaitGathered) before it reads the slot's weights. Cast once per optimizer step, as without
// ZeRO; the weights' amaxes (of this rank's rows) feed next step's amax reduction.
template <typename Ops, typename T>
Status Gpt<Ops, T>::BeginGather() {
  // (The forward waited for every slot of the last step's gather; this makes sure of it.)
  FP8RT_RETURN_IF_ERROR(FinishGather());
  gather_pending_.assign(static_cast<size_t>(o_.model.n_layer + 1), false);
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::CastSlot(int slot) {
  const int64_t D = o_.dp->size();
  ops_->Mark("fp8 cast w (ZeRO part)");
  return ForSlotLinears(slot, [&](int l, int kind) -> Status {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    const int64_t rows = N / D;
    uint8_t* mine = Fp8Part(l, kind);
    const Fp8Tensor t = fp8_.Of(l, kind, kRoleW, mine, nullptr, rows, K);
    ++weight_casts_;
    const float* shard = master_ + ShardOff(WeightOf(o_.model, kind), kind == kLmHead ? 0 : l);
    if (fp8_.current) {  // the whole weight's amax: over its shards (and its TP parts)
      FP8RT_RETURN_IF_ERROR(CurrentScale(l, kind, kRoleW, shard, rows * K,
                                         SplitOverTp(kind, kRoleW) ? World() : o_.dp));
    }
    return fp8_.Cast(shard, t, fp8_.SaturatedOf(l, kind, kRoleW));
  });
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::LaunchGather(int slot) {
  const int64_t D = o_.dp->size(), r = o_.dp->rank();
  ops_->Mark("weight all-gather (launch)");
  void* stream = ops_->ForkComm();
  ops_->SegmentStart(stream);
  const comm::DataType tt =
      kT == DType::kBFloat16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat32;
  const std::string what = slot == 0 ? std::string("weight all-gather (ZeRO-1), embeddings")
                                     : StrCat("weight all-gather (ZeRO-1), layer ", slot - 1);
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  for (int p = 0; p < kNumParams; ++p) {
    if (!HasWorking(p) || !InSlot(p, slot)) continue;
    T* all = W(static_cast<Param>(p)) + SlotLayer(slot) * PerLayer(p);
    FP8RT_RETURN_IF_ERROR(o_.dp->AllGather(all + r * SliceOf(p), all,
                                           static_cast<size_t>(SliceOf(p)), tt, stream,
                                           what.c_str()));
  }
  FP8RT_RETURN_IF_ERROR(ForSlotLinears(slot, [&](int l, int kind) -> Status {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    uint8_t* all = fp8_.w8[fp8_.Slot(l, kind)];
    const int64_t part = N / D * K;
    return o_.dp->AllGather(all + r * part, all, static_cast<size_t>(part),
                            comm::DataType::kUint8, stream, what.c_str());
  }));
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd(what.c_str()));
  // (Kept transposed copies only; otherwise the backward transposes each weight when it needs it.)
  if (fp8_.KeepsTranspose()) {
    FP8RT_RETURN_IF_ERROR(ForSlotLinears(slot, [&](int l, int kind) -> Status {
      int64_t N, K;
      LinearShape(kind, &N, &K);
      const int s = fp8_.Slot(l, kind);
      return ops_->TransposeFp8(fp8_.w8t[s], fp8_.w8[s], N, K, stream);
    }));
  }
  FP8RT_RETURN_IF_ERROR(ops_->MarkComm(slot, stream));
  ops_->SegmentStop(stream);
  gather_pending_[slot] = true;
  return Status::Ok();
}

// The compute stream waits for a gather slot of the last step (once).
template <typename Ops, typename T>
Status Gpt<Ops, T>::WaitGathered(int slot) {
  if (slot >= static_cast<int>(gather_pending_.size()) || !gather_pending_[slot]) {
    return Status::Ok();
  }
  gather_pending_[slot] = false;
  ops_->Mark("wait for gathered weights");
  return ops_->WaitComm(slot);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::FinishGather() {
  for (int slot = 0; slot < static_cast<int>(gather_pending_.size()); ++slot) {
    FP8RT_RETURN_IF_ERROR(WaitGathered(slot));
  }
  gather_pending_.clear();
  return Status::Ok();
}

// The full (layout-order) tensor from every rank's part (through grads_, which no step is using
// when checkpoints are taken); every rank gets it.
template <typename Ops, typename T>
Status Gpt<Ops, T>::GatherState(const float* shard, std::vector<float>* full) {
  if (Zero3()) {  // tensor by tensor, through its gradient memory (a layer's: a ring slot)
    full->assign(static_cast<size_t>(layout_.total), 0.0f);
    const char* what = "optimizer state all-gather (ZeRO-3 checkpoint)";
    for (int p = 0; p < kNumParams; ++p) {
      if (layout_.size[p] == 0) continue;
      for (int l = 0; l < Layers(p); ++l) {
        float* through = IsLayerParam(p) ? Gl(static_cast<Param>(p), 0) : G(static_cast<Param>(p));
        FP8RT_RETURN_IF_ERROR(o_.dp->AllGather(shard + ShardOff(p, l), through,
                                               static_cast<size_t>(SliceOf(p)),
                                               comm::DataType::kFloat32, ops_->ForkComm(), what));
        FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
        FP8RT_RETURN_IF_ERROR(ops_->Download(full->data() + FullOff(p, l), through,
                                             static_cast<size_t>(PerLayer(p)) * sizeof(float)));
      }
    }
    return Status::Ok();
  }
  FP8RT_RETURN_IF_ERROR(ops_->Zero(grads_, static_cast<size_t>(layout_.total) * sizeof(float)));
  void* stream = ops_->ForkComm();
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupStart());
  for (int p = 0; p < kNumParams; ++p) {
    if (layout_.size[p] == 0) continue;
    for (int l = 0; l < Layers(p); ++l) {
      FP8RT_RETURN_IF_ERROR(o_.dp->AllGather(
          shard + ShardOff(p, l), grads_ + FullOff(p, l), static_cast<size_t>(SliceOf(p)),
          comm::DataType::kFloat32, stream, "optimizer state all-gather (ZeRO-1 checkpoint)"));
    }
  }
  FP8RT_RETURN_IF_ERROR(o_.dp->GroupEnd("optimizer state all-gather (ZeRO-1 checkpoint)"));
  FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
  full->resize(static_cast<size_t>(layout_.total));
  return ops_->Download(full->data(), grads_, full->size() * sizeof(float));
}

// This rank's parts of a full (layout-order) tensor, in shard order.
template <typename Ops, typename T>
std::vector<float> Gpt<Ops, T>::ShardOf(const std::vector<float>& full) const {
  const int64_t r = o_.dp->rank();
  std::vector<float> mine(static_cast<size_t>(shard_total_), 0.0f);
  for (int p = 0; p < kNumParams; ++p) {
    for (int l = 0; l < Layers(p); ++l) {
      std::copy_n(full.data() + FullOff(p, l) + r * SliceOf(p), SliceOf(p),
                  mine.data() + ShardOff(p, l));
    }
  }
  return mine;
}

// ... into the shard.
template <typename Ops, typename T>
Status Gpt<Ops, T>::ScatterState(const std::vector<float>& full, float* shard) {
  const std::vector<float> mine = ShardOf(full);
  return ops_->Upload(shard, mine.data(), mine.size() * sizeof(float));
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::TpAllReduce(T* x, const char* what) {
  if (!Tp()) return Status::Ok();
  ops_->Mark("tp all-reduce");
  const comm::DataType dt =
      kT == DType::kBFloat16 ? comm::DataType::kBFloat16 : comm::DataType::kFloat32;
  return o_.tp->AllReduce(x, x, static_cast<size_t>(M_ * o_.model.n_embd), dt,
                          comm::ReduceOp::kSum, ops_->ComputeStream(), what);
}

// Every TP rank's part through a temporary device buffer (TP x this rank's state), then put
// together on the host.
template <typename Ops, typename T>
Status Gpt<Ops, T>::TpGather(const std::vector<float>& part, std::vector<float>* whole) {
  const int tp = o_.tp->size(), r = o_.tp->rank();
  const size_t n = part.size();
  float* buf = static_cast<float*>(ops_->Alloc(n * tp * sizeof(float)));
  if (buf == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  StrCat("out of memory gathering the tensor-parallel parts of the state (",
                         n * tp * sizeof(float), " bytes)"));
  }
  std::vector<float> all(n * tp);
  const Status s = [&]() -> Status {
    FP8RT_RETURN_IF_ERROR(ops_->Upload(buf + r * n, part.data(), n * sizeof(float)));
    FP8RT_RETURN_IF_ERROR(o_.tp->AllGather(buf + r * n, buf, n, comm::DataType::kFloat32,
                                           ops_->ForkComm(), "state all-gather (TP checkpoint)"));
    FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
    return ops_->Download(all.data(), buf, all.size() * sizeof(float));
  }();
  ops_->Free(buf);
  FP8RT_RETURN_IF_ERROR(s);
  whole->assign(static_cast<size_t>(Layout(o_.model).total), 0.0f);
  for (int k = 0; k < tp; ++k) TpInsert(o_.model, tp, k, all.data() + k * n, whole->data());
  return Status::Ok();
}

}  // namespace fp8rt::gpt_detail
