// Gpt<Ops, T>::Setup: checks the shapes FP8 and TP need, then allocates everything the model
// holds, by memory category (gpt_layout.h's MemCategory). Member functions of Gpt<Ops, T>,
// included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::Setup() {
  const ModelConfig& m = o_.model;
  const int64_t B = o_.B, Tn = o_.T, C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab();
  const int64_t P = layout_.total;
  M_ = B * Tn;
  const bool fp8 = o_.precision == Precision::kFp8;
  if (fp8) {
    if (M_ % 16 != 0) {
      return Status::InvalidArgument(StrCat("fp8: batch_size * seq_len = ", M_,
                                            " tokens is not a multiple of 16, which FP8 GEMMs "
                                            "need; choose batch_size/seq_len accordingly"));
    }
    if (C % 16 != 0) {
      return Status::InvalidArgument(
          StrCat("fp8: model.n_embd = ", C, " is not a multiple of 16, which FP8 GEMMs need"));
    }
  }
  if (Tp()) {
    const int tp = o_.tp->size();
    if (m.n_head % tp != 0) {
      return Status::InvalidArgument(StrCat("parallel.tp = ", tp, " does not divide model.n_head = ",
                                            m.n_head, " (tensor parallelism splits the heads)"));
    }
    if (fp8 && (C / tp) % 16 != 0) {
      return Status::InvalidArgument(
          StrCat("fp8: model.n_embd / parallel.tp = ", C / tp,
                 " (the attention projection's inner dimension) is not a multiple of 16, which "
                 "FP8 GEMMs need"));
    }
  }
  if (m.kv_heads() < 1 || m.n_head % m.kv_heads() != 0 || (!Llama() && Gqa()) ||
      m.kv_heads() % o_.tp_size() != 0 || m.ffn() % o_.tp_size() != 0) {
    return Status::InvalidArgument(StrCat(
        "model: n_kv_head = ", m.kv_heads(), " must divide n_head = ", m.n_head,
        " (and differ from it only in llama), and parallel.tp = ", o_.tp_size(),
        " must divide n_kv_head and ffn_hidden = ", m.ffn()));
  }
  if (Llama() && (m.head_size() % 2 != 0 || m.head_size() > kRopeMaxHeadSize)) {
    return Status::InvalidArgument(StrCat("model.arch llama: the head size ", m.head_size(),
                                          " must be even and at most ", kRopeMaxHeadSize,
                                          " (rotary embeddings)"));
  }
  for (int kind = 0; fp8 && kind < kNumLinear; ++kind) {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    if (Fp8On(kind) && (N % 16 != 0 || K % 16 != 0)) {
      return Status::InvalidArgument(StrCat("fp8: linear layer ", kLinearNames[kind],
                                            " is (N ", N, ", K ", K, ") on this rank; FP8 GEMMs "
                                            "need both multiples of 16 (model.ffn_hidden, "
                                            "n_kv_head and parallel.tp set them)"));
    }
  }
  if (fp8 && o_.fp8.mode == ScalingMode::kBlock && Zero()) {
    return Status::InvalidArgument(
        "fp8.scaling: block does not run with parallel.zero (ZeRO-1 or ZeRO-3) yet: each rank "
        "would cast "
        "its rows of a weight and the 128x128 blocks' scales would need all-gathering with the "
        "bytes; use plain data parallelism (parallel.zero: false) or fp8.scaling: delayed");
  }
  if (GeluInputFp8() && Llama()) {
    return Status::InvalidArgument(
        "fp8.gelu_input_fp8 saves gpt2's GELU input in FP8; llama's SwiGLU keeps its inputs in "
        "BF16: remove it or use model.arch: gpt2");
  }
  if (fp8 && !o_.fp8.cache_weights && (Zero() || o_.fp8.mode == ScalingMode::kBlock)) {
    return Status::InvalidArgument(StrCat(
        "fp8.cache_weights: false does not run with ",
        Zero() ? "parallel.zero (ZeRO-1 or 3): each rank holds a shard of the FP32 master weights, "
                 "so the cast FP8 weights are what it all-gathers and keeps; use "
                 "parallel.zero: false or fp8.cache_weights: true"
               : "fp8.scaling: block: its 128x128 weight cast writes the transposed copy and "
                 "its scales in the same pass; use fp8.cache_weights: true"));
  }
  if (Zero()) FP8RT_RETURN_IF_ERROR(SetupZero());
  // (hybrid sharding: the gathered rows would be one group's only; reduced densely)
  emb_plan_.sparse = Dp() && o_.sparse_embedding_grad && !Hybrid();
  // (the tied LM head writes the token table's gradient before the embedding backward; earlier
  // micro-batches add their rows to it)
  emb_plan_.wte_dense = WeightOf(m, kLmHead) == kWte || o_.grad_accum > 1;
  const int64_t owned = Zero() ? shard_total_ : P;  // master weights and moments kept here
  // (Gradients that must outlive a forward, accumulated over micro-batches or holding the full
  // master after an import under ZeRO-1, cannot lend their memory.)
  grads_shared_ = o_.share_grad_memory && o_.grad_accum == 1 && !Zero();
  mem_category_ = kMemMaster;
  FP8RT_RETURN_IF_ERROR(Alloc(&master_, owned));
  mem_category_ = kMemGrads;
  if (Zero3()) {  // the tensors outside the layers: before them and after them in the layout
    gap_lo_ = layout_.offset[kLn1W], gap_hi_ = layout_.offset[kLnfW];
    sgap_lo_ = shard_offset_[kLn1W], sgap_hi_ = shard_offset_[kLnfW];
    FP8RT_RETURN_IF_ERROR(Alloc(&grads_, gap_lo_));
    FP8RT_RETURN_IF_ERROR(Alloc(&grads_hi_, P - gap_hi_));
  } else {
    FP8RT_RETURN_IF_ERROR(Alloc(&grads_, P));
  }
  mem_category_ = kMemOptimizer;
  if (o_.bf16_moments) {
    bf16 *m = nullptr, *v = nullptr;
    FP8RT_RETURN_IF_ERROR(Alloc(&m, owned));
    FP8RT_RETURN_IF_ERROR(Alloc(&v, owned));
    m_ = m, v_ = v;
  } else {
    float *m = nullptr, *v = nullptr;
    FP8RT_RETURN_IF_ERROR(Alloc(&m, owned));
    FP8RT_RETURN_IF_ERROR(Alloc(&v, owned));
    m_ = m, v_ = v;
  }
  mem_category_ = kMemGrads;
  if (Zero()) FP8RT_RETURN_IF_ERROR(Alloc(&gshard_, shard_total_));
  if (Dp() && o_.grad_reduce_bf16 && Zero3()) {
    FP8RT_RETURN_IF_ERROR(Alloc(&g16_, gap_lo_));
    FP8RT_RETURN_IF_ERROR(Alloc(&g16_hi_, P - gap_hi_));
    FP8RT_RETURN_IF_ERROR(Alloc(&g16shard_, sgap_lo_));
    FP8RT_RETURN_IF_ERROR(Alloc(&g16shard_hi_, shard_total_ - sgap_hi_));
  } else if (Dp() && o_.grad_reduce_bf16) {
    FP8RT_RETURN_IF_ERROR(Alloc(&g16_, P));
    if (Zero()) FP8RT_RETURN_IF_ERROR(Alloc(&g16shard_, shard_total_));
  }
  cast_src_ = master_;
  int64_t work_total = 0;
  for (int p = 0; p < kNumParams; ++p) {
    // (ZeRO-3: the layers' working copies are this rank's parts and a ring, SetupZero3)
    const bool here = HasWorking(p) && !(Zero3() && IsLayerParam(p));
    work_offset_[p] = here ? work_total : -1;
    if (here) work_total += (layout_.size[p] + 63) / 64 * 64;
  }
  mem_category_ = kMemWorking;
  FP8RT_RETURN_IF_ERROR(Alloc(&working_, work_total));
  mem_category_ = kMemOther;
  FP8RT_RETURN_IF_ERROR(Alloc(&tokens_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&targets_, M_));
  // (+1: the step's stop vote, a float)
  staging_ =
      static_cast<int32_t*>(ops_->AllocHost(sizeof(int32_t) * (2 * M_ * o_.grad_accum + 1)));
  if (staging_ == nullptr) return Status(StatusCode::kResourceExhausted, "pinned host memory");
  mem_category_ = kMemActivations;
  FP8RT_RETURN_IF_ERROR(Alloc(&encoded_, M_ * C));

  // Buffers that are dead while the logits live (from the LM head's forward to the end of its
  // backward) share one allocation with them: the activations every layer shares (written and
  // read within one layer's forward, or recomputed in its backward) and the backward's scratch
  // other than dc1_ (the LM head's input gradient). Carved once the list is complete.
  std::vector<std::pair<T**, int64_t>> transient;
  std::vector<std::pair<std::vector<T*>*, int64_t>> transient_layers;
  auto per_layer = [&](std::vector<T*>* v, int64_t n, bool shared) -> Status {
    v->assign(L, nullptr);
    if (shared) {
      transient_layers.emplace_back(v, n);
      return Status::Ok();
    }
    for (int64_t l = 0; l < L; ++l) FP8RT_RETURN_IF_ERROR(AllocLayer(&(*v)[l], n, l));
    return Status::Ok();
  };
  auto stats = [&](std::vector<float*>* v) -> Status {
    v->assign(L, nullptr);
    for (int64_t l = 0; l < L; ++l) FP8RT_RETURN_IF_ERROR(Alloc(&(*v)[l], M_));
    return Status::Ok();
  };
  // The per-layer activations, declared once: (buffer, elements per token, shared by all
  // layers). In FP8 layers the backward reads the saved FP8 copy of a linear layer's input, so
  // that input can be one buffer for every layer; with train.recompute the other layers
  // recompute it in the backward.
  const AttentionShape as = Att();
  const int64_t Ct = C / o_.tp_size();  // this rank's width of the attention
  // This rank's widths of the QKV output (llama: Q + 2 KV heads), of FC's output (llama: gate
  // and up) and of FC2's input.
  int64_t Nqkv, Nfc, Kfc2, unused;
  LinearShape(kQkv, &Nqkv, &unused);
  LinearShape(kFc, &Nfc, &unused);
  LinearShape(kFcProj, &unused, &Kfc2);
  const struct {
    std::vector<T*>* v;
    int64_t per_token;
    bool shared;
  } activations[] = {
      {&ln1_, C, Fp8On(kQkv) || Recomputes(kQkv)},
      // Grouped-query attention saves the expanded copy (attq_); the backward needs no qkv_.
      {&qkv_, Nqkv, Gqa() || Fp8Attention()},
      // The attention output is the projection's input, and the flash backward reads it too.
      {&atty_, Ct, Fp8On(kAttProj) && !ops_->AttentionReadsOutput(as, kT)},
      {&res2_, C, false},
      {&ln2_, C, Fp8On(kFc) || Recomputes(kFc)},
      {&fch_, Nfc, GeluInputFp8()},
      {&fch_gelu_, Kfc2, Fp8On(kFcProj) || Recomputes(kFcProj)},
      {&res3_, C, false},
  };
  for (const auto& a : activations)
    FP8RT_RETURN_IF_ERROR(per_layer(a.v, M_ * a.per_token, a.shared));
  if (GeluInputFp8()) {  // (placed like the other saved buffers)
    mem_category_ = kMemFp8Saved;
    fch8_.assign(L, nullptr);
    for (int64_t l = 0; l < L; ++l) FP8RT_RETURN_IF_ERROR(AllocLayer(&fch8_[l], M_ * Nfc, l));
    mem_category_ = kMemOther;
    FP8RT_RETURN_IF_ERROR(Alloc(&pre_scale_, 2));
    const float one[2] = {1.0f, 1.0f};
    FP8RT_RETURN_IF_ERROR(ops_->Upload(pre_scale_, one, sizeof one));
    mem_category_ = kMemActivations;
  }
  if (Gqa() && !Fp8Attention()) {
    FP8RT_RETURN_IF_ERROR(per_layer(&attq_, M_ * 3 * Ct, false));
  } else {
    attq_ = qkv_;
  }
  // (FP8 attention saves each query's log-sum-exp, and the Q/K/V and output codes)
  const int64_t saved_bytes = Fp8Attention()
                                  ? o_.B * as.NH * o_.T * static_cast<int64_t>(sizeof(float))
                                  : static_cast<int64_t>(ops_->AttentionSavedBytes(as, kT));
  att_.assign(L, nullptr);
  for (int64_t l = 0; l < L; ++l) FP8RT_RETURN_IF_ERROR(AllocLayer(&att_[l], saved_bytes, l));
  if (Fp8Attention()) {
    mem_category_ = kMemFp8Saved;
    qkv8_.assign(L, nullptr), o8_.assign(L, nullptr);
    for (int64_t l = 0; l < L; ++l) {
      FP8RT_RETURN_IF_ERROR(AllocLayer(&qkv8_[l], M_ * Nqkv, l));
      FP8RT_RETURN_IF_ERROR(AllocLayer(&o8_[l], M_ * Ct, l));
    }
    mem_category_ = kMemFp8Scratch;
    FP8RT_RETURN_IF_ERROR(Alloc(&do8_, M_ * Ct));
    FP8RT_RETURN_IF_ERROR(Alloc(&dqkv8_, M_ * Nqkv));
    mem_category_ = kMemActivations;
    size_t ws = 0;
    const Status prepared = ops_->PrepareFp8Attention(Att8(), fp8_.AttFormats(), &ws);
    if (!prepared.ok()) {
      return Status(prepared.code(), StrCat("fp8.attention: ", prepared.message()));
    }
  }
  // (RMSNorm keeps no mean.)
  if (!Llama()) FP8RT_RETURN_IF_ERROR(stats(&ln1_mean_));
  FP8RT_RETURN_IF_ERROR(stats(&ln1_rstd_));
  if (!Llama()) FP8RT_RETURN_IF_ERROR(stats(&ln2_mean_));
  FP8RT_RETURN_IF_ERROR(stats(&ln2_rstd_));
  FP8RT_RETURN_IF_ERROR(Alloc(&lnf_, M_ * C));
  if (!Llama()) FP8RT_RETURN_IF_ERROR(Alloc(&lnf_mean_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&lnf_rstd_, M_));
  mem_category_ = kMemOther;
  FP8RT_RETURN_IF_ERROR(Alloc(&losses_, M_));
  // [losses (grad_accum), stop vote, squared norm]: one all-reduce sums the losses and the votes,
  // one download brings everything.
  FP8RT_RETURN_IF_ERROR(Alloc(&step_losses_, o_.grad_accum + 2));
  norm_sq_ = step_losses_ + o_.grad_accum + 1;
  FP8RT_RETURN_IF_ERROR(Alloc(&ones_, M_));
  mem_category_ = kMemActGrads;
  FP8RT_RETURN_IF_ERROR(Alloc(&dc1_, M_ * C));
  transient.emplace_back(&dres_, M_ * C);
  transient.emplace_back(&dc2_, M_ * C);
  transient.emplace_back(&dqkv_, M_ * 3 * Ct);
  if (Gqa()) transient.emplace_back(&dqkvg_, M_ * Nqkv);
  transient.emplace_back(&d4c_, M_ * std::max(Nfc, Kfc2));
  if (Llama()) transient.emplace_back(&dffn_, M_ * Kfc2);
  {
    // One allocation: the logits from its start, and over them the backward's transient buffers,
    // then the per-layer shared ones (256-byte aligned). cuDNN attention's workspaces lie over what
    // is dead while each pass's attention runs: the backward's over the shared buffers (every
    // reader of which in a layer's backward is done before, or starts after, its attention), the
    // forward's over the backward's transients (after the shared buffers where they do not fit).
    auto aligned = [](int64_t n) { return (n * static_cast<int64_t>(sizeof(T)) + 255) / 256 * 256; };
    auto up = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
    int64_t a = 0, b = 0;
    for (const auto& [p, n] : transient) a += aligned(n);
    for (const auto& [v, n] : transient_layers) b += aligned(n);
    // train.recompute's FP8 transposed inputs, cast again in the backward: one shared buffer, the
    // widest such input's (written and read within one linear layer's backward; FC2's, when FC's
    // dY cast writes it, from that cast to FC2's wgrad, before FC's own recast).
    int64_t recast_bytes = 0;
    for (int kind = 0; kind < kNumLinear; ++kind) {
      fp8_.recast[kind] = DecideRecast(kind);
      if (!fp8_.recast[kind]) continue;
      int64_t N, K;
      LinearShape(kind, &N, &K);
      recast_bytes = std::max(recast_bytes, up(M_ * K));
    }
    // (FC2's transposed dY, held from its cast to its wgrad across FC's dY cast)
    int64_t held_bytes = 0;
    if (MayFuseRecastIntoDyCast()) {
      int64_t N, K;
      LinearShape(kFcProj, &N, &K);
      held_bytes = up(M_ * N);
    }
    b += recast_bytes + held_bytes;
    size_t fwd_ws = 0, bwd_ws = 0;
    if (!Fp8Attention()) ops_->AttentionWorkspaceBytes(Att(), kT, &fwd_ws, &bwd_ws);
    const int64_t bwd_at = a;
    const int64_t fwd_at = static_cast<int64_t>(fwd_ws) <= a ? 0 : a + b;
    // The sparse embedding gradient's gathered rows and tokens (every DP rank's): read after the
    // backward, written from the end of the embedding backward, when only dres_ (their source,
    // the arena's first buffer) is live here: right after it.
    const int64_t D = Dp() ? o_.dp->size() : 1;
    const int64_t emb_bytes = emb_plan_.sparse ? aligned(D * M_ * C) + D * M_ * 4 : 0;
    const int64_t emb_at = aligned(M_ * C);
    mem_category_ = kMemLogits;
    uint8_t* arena = nullptr;
    FP8RT_RETURN_IF_ERROR(Alloc(
        &arena, std::max({emb_at + emb_bytes, a + b, bwd_at + up(static_cast<int64_t>(bwd_ws)),
                          fwd_at + up(static_cast<int64_t>(fwd_ws)),
                          M_ * Vp * static_cast<int64_t>(sizeof(T))})));
    logits_ = reinterpret_cast<T*>(arena);
    int64_t at = 0;
    for (const auto& [p, n] : transient) {
      *p = reinterpret_cast<T*>(arena + at);
      at += aligned(n);
    }
    for (const auto& [v, n] : transient_layers) {
      v->assign(L, reinterpret_cast<T*>(arena + at));
      at += aligned(n);
    }
    if (recast_bytes > 0) fp8_.recast_to = arena + at;
    if (held_bytes > 0) fp8_.dy8t_held = arena + at + recast_bytes;
    if (fwd_ws + bwd_ws > 0) {
      ops_->SetAttentionWorkspaces(arena + fwd_at, fwd_ws, arena + bwd_at, bwd_ws);
    }
    if (emb_plan_.sparse) {
      emb_rows_ = reinterpret_cast<T*>(arena + emb_at);
      emb_tokens_ = reinterpret_cast<int32_t*>(arena + emb_at + aligned(D * M_ * C));
    }
  }
  mem_category_ = kMemOther;
  {
    std::vector<T> ones(static_cast<size_t>(M_), T(1.0f));
    FP8RT_RETURN_IF_ERROR(ops_->Upload(ones_, ones.data(), ones.size() * sizeof(T)));
  }

  for (comm::Communicator* g : {o_.dp, o_.tp, o_.world, o_.replicas}) {
    if (g != nullptr && g->size() > 1 && g->device_buffers() != Ops::kDevice) {
      return Status::InvalidArgument(StrCat("the group of ranks (", g->backend(), ") works on ",
                                            g->device_buffers() ? "GPU" : "host",
                                            " buffers, the model's are on the ",
                                            Ops::kDevice ? "GPU" : "host"));
    }
  }
  if (Multi()) FP8RT_RETURN_IF_ERROR(Alloc(&gather_, World()->size()));
  if (Dp()) {
    buckets_ = PlanGradBuckets(m, layout_, o_.grad_bucket_bytes, emb_plan_);
    if (Zero3()) {  // (the layers' gradients are reduced layer by layer, ReduceLayer)
      std::erase_if(buckets_, [](const GradBucket& k) { return k.first_layer >= 0; });
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const GradBucket& k = buckets_[b];
      std::string names;
      for (int p : k.range_param) names += StrCat(names.empty() ? "" : ", ", kParamNames[p]);
      bucket_names_.push_back(
          k.first_layer < 0
              ? StrCat("gradient bucket ", b, " (", names, ") all-reduce")
              : StrCat("gradient bucket ", b, " (layers ", k.first_layer, "..", k.last_layer,
                       ") all-reduce"));
    }
  }
  fp8_.ring_layers = Zero3();
  FP8RT_RETURN_IF_ERROR(
      fp8_.Setup(M_, [this](void** p, int64_t bytes, MemCategory what, int layer = -1) {
        mem_category_ = what;
        const Status s = AllocLayer(reinterpret_cast<uint8_t**>(p), bytes, layer);
        mem_category_ = kMemOther;
        return s;
      }));
  if (Zero3()) FP8RT_RETURN_IF_ERROR(SetupZero3());
  FP8RT_RETURN_IF_ERROR(PlaceLayerRequests());
  if (!Gqa()) attq_ = qkv_;  // (the placed pointers)

  {
    size_t scratch = 0;
    FP8RT_RETURN_IF_ERROR(
        ops_->ReserveScratchFor(as, kT, m.vocab_size, P, C, std::max({Nqkv, Nfc, C}),
                                emb_plan_.sparse ? o_.dp->size() * M_ : 0, &scratch));
    allocated_bytes_ += scratch;
    category_bytes_[kMemWorkspace] += scratch;
  }
  return Status::Ok();
}

// train.share_gradient_memory: layer l's requests (l >= 1) into the weight-gradient memory of
// layers 0..l-1. Safe because layer j's weight gradients are overwritten (beta 0) by the one
// micro-batch's wgrads of layer j, which the backward reaches only after layer l's for every
// l > j (the last reader of layer l's buffers: res3_[l] is read by layer l + 1's), and the next
// forward writes them only after AdamW read the gradients (DP's all-reduces, each launched after
// its lowest layer's backward, are joined before it). A weight's gradients are one array in layer
// order, so its slots of layers 0..l-1 are one region that grows by one slot per layer: layer by
// layer, each request, largest first, goes at the front of what is left of the weight's region
// that leaves least room (best fit), spanning slots where it must. 256-byte aligned.
template <typename Ops, typename T>
Status Gpt<Ops, T>::PlaceLayerRequests() {
  if (layer_requests_.empty()) return Status::Ok();
  constexpr uintptr_t kAlign = 256;
  auto up = [](uintptr_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  std::stable_sort(layer_requests_.begin(), layer_requests_.end(),
                   [](const LayerRequest& a, const LayerRequest& b) {
                     return a.layer != b.layer ? a.layer < b.layer : a.bytes > b.bytes;
                   });
  constexpr int kWeights[] = {kQkvW, kAttProjW, kFcW, kFcProjW};
  uintptr_t next[std::size(kWeights)];  // each region's first free byte
  for (size_t i = 0; i < std::size(kWeights); ++i) {
    next[i] = up(reinterpret_cast<uintptr_t>(grads_ + FullOff(kWeights[i], 0)));
  }
  for (const LayerRequest& r : layer_requests_) {
    const uintptr_t need = up(static_cast<uintptr_t>(r.bytes));
    int best = -1;
    uintptr_t best_left = 0;
    for (size_t i = 0; i < std::size(kWeights); ++i) {
      if (layout_.size[kWeights[i]] == 0) continue;
      // (layer r.layer's own slot starts the part the region may not use yet)
      const uintptr_t limit = reinterpret_cast<uintptr_t>(
          grads_ + FullOff(kWeights[i], static_cast<int>(r.layer)));
      const uintptr_t left = limit > next[i] ? limit - next[i] : 0;
      if (left >= need && (best < 0 || left < best_left)) best = static_cast<int>(i), best_left = left;
    }
    if (best >= 0) {
      *r.p = reinterpret_cast<uint8_t*>(next[best]);
      next[best] += need;
      shared_grad_bytes_ += static_cast<size_t>(r.bytes);
      continue;
    }
    mem_category_ = r.what;
    uint8_t* raw = nullptr;
    FP8RT_RETURN_IF_ERROR(Alloc(&raw, r.bytes));
    *r.p = raw;
  }
  mem_category_ = kMemOther;
  layer_requests_.clear();
  return Status::Ok();
}

}  // namespace fp8rt::gpt_detail
