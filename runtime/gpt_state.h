// The model's state in and out: GPT-2 initialisation (drawn for the whole model, whatever the
// parallelism), whole-model export and import of the master weights and AdamW moments (under TP
// and ZeRO-1 each rank takes its part on import and the parts are all-gathered on export), and
// the T working copies written from the master, and the checkpoint snapshot. Member functions of
// Gpt<Ops, T>, included at the end of runtime/gpt_impl.h.
#pragma once

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
Status Gpt<Ops, T>::RefreshWorkingCopy(const std::vector<float>* full) {
  std::vector<float> downloaded;
  if (full == nullptr) {
    downloaded.resize(static_cast<size_t>(layout_.total));
    FP8RT_RETURN_IF_ERROR(
        ops_->Download(downloaded.data(), master_, downloaded.size() * sizeof(float)));
    full = &downloaded;
  }
  const std::vector<float>& master = *full;
  for (int p = 0; p < kNumParams; ++p) {
    if (!HasWorking(p)) continue;
    if (Zero3() && IsLayerParam(p)) {  // this rank's part of each layer's
      const int64_t n = SliceOf(p), r = o_.dp->rank();
      std::vector<T> work(static_cast<size_t>(Layers(p) * n));
      for (int l = 0; l < Layers(p); ++l) {
        const float* from = master.data() + FullOff(p, l) + r * n;
        for (int64_t i = 0; i < n; ++i) work[static_cast<size_t>(l * n + i)] = T(from[i]);
      }
      FP8RT_RETURN_IF_ERROR(
          ops_->Upload(wshard_ + wshard_off_[p], work.data(), work.size() * sizeof(T)));
      continue;
    }
    std::vector<T> work(static_cast<size_t>(layout_.size[p]));
    for (size_t i = 0; i < work.size(); ++i) work[i] = T(master[layout_.offset[p] + i]);
    FP8RT_RETURN_IF_ERROR(
        ops_->Upload(W(static_cast<Param>(p)), work.data(), work.size() * sizeof(T)));
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::InitRandom(uint64_t seed) {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd;
  // The whole model, drawn the same whatever the parallelism (ImportWeights takes this rank's part).
  const Layout whole(m);
  std::vector<float> host(static_cast<size_t>(whole.total), 0.0f);
  // One SplitMix64 stream of normals, in parameter order, as if drawn one after another; drawn in
  // chunks on several threads (each chunk skips the stream to its first draw), the same values
  // bit for bit whatever the thread count: a 6.7B model is drawn in seconds, not minutes.
  struct Fill {
    float* t;
    int64_t n;
    float std;
    uint64_t first;  // normals drawn before this tensor's first
  };
  std::vector<Fill> fills;
  uint64_t drawn = 0;
  const float proj_std = 0.02f / std::sqrt(2.0f * m.n_layer);
  for (int p = 0; p < kNumParams; ++p) {
    float* t = host.data() + whole.offset[p];
    int64_t n = whole.size[p];
    if (n == 0) continue;  // (a tensor this arch does not have)
    float std = 0.02f;
    switch (p) {
      case kWte:  // rows of the vocabulary padding stay zero
      case kLmHeadW:
        n = int64_t{m.vocab_size} * C;
        break;
      case kWpe:
      case kQkvW:
      case kFcW:
        break;
      case kAttProjW:
      case kFcProjW:
        std = proj_std;
        break;
      case kLn1W:
      case kLn2W:
      case kLnfW:
        std::fill(t, t + n, 1.0f);
        continue;
      default:
        continue;  // biases start at zero
    }
    fills.push_back({t, n, std, drawn});
    drawn += static_cast<uint64_t>(n);
  }
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<std::pair<size_t, int64_t>> chunks;  // (fill, first element)
  for (size_t f = 0; f < fills.size(); ++f) {
    for (int64_t i = 0; i < fills[f].n; i += kChunk) chunks.emplace_back(f, i);
  }
  ParallelFor(static_cast<int64_t>(chunks.size()), 8.0 * kChunk, [&](int64_t c) {
    const auto [f, i0] = chunks[static_cast<size_t>(c)];
    const Fill& fill = fills[f];
    SplitMix64 rng(seed);
    rng.Skip(2 * (fill.first + static_cast<uint64_t>(i0)));  // Normal() takes two draws
    for (int64_t i = i0; i < std::min(fill.n, i0 + kChunk); ++i) fill.t[i] = fill.std * rng.Normal();
  });
  FP8RT_RETURN_IF_ERROR(fp8_.Init());
  return ImportWeights(std::move(host));
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ExportArray(const float* dev, std::vector<float>* whole) {
  std::vector<float> a;  // this rank's part (the whole model without TP)
  if (Zero()) {  // every rank must call it: the shards are all-gathered
    FP8RT_RETURN_IF_ERROR(GatherState(dev, &a));
  } else {
    a.resize(static_cast<size_t>(layout_.total));
    FP8RT_RETURN_IF_ERROR(ops_->Download(a.data(), dev, a.size() * sizeof(float)));
  }
  if (!Tp()) {
    *whole = std::move(a);
    return Status::Ok();
  }
  return TpGather(a, whole);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ExportState(std::vector<float>* master, std::vector<float>* m,
                                std::vector<float>* v) {
  FP8RT_RETURN_IF_ERROR(ExportArray(master_, master));
  FP8RT_ASSIGN_OR_RETURN(const float* mf, MomentsAsFloat(m_));
  FP8RT_RETURN_IF_ERROR(ExportArray(mf, m));
  FP8RT_ASSIGN_OR_RETURN(const float* vf, MomentsAsFloat(v_));
  return ExportArray(vf, v);
}

template <typename Ops, typename T>
Result<const float*> Gpt<Ops, T>::MomentsAsFloat(const void* dev) {
  if (!o_.bf16_moments) return static_cast<const float*>(dev);
  float* wide = Zero() ? gshard_ : grads_;
  const int64_t owned = Zero() ? shard_total_ : layout_.total;
  FP8RT_RETURN_IF_ERROR(ops_->Bf16ToFloat(wide, static_cast<const bf16*>(dev), owned));
  return static_cast<const float*>(wide);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::UploadMoments(void* dev, const float* host) {
  const int64_t owned = Zero() ? shard_total_ : layout_.total;
  if (!o_.bf16_moments) return ops_->Upload(dev, host, static_cast<size_t>(owned) * sizeof(float));
  float* wide = Zero() ? gshard_ : grads_;
  FP8RT_RETURN_IF_ERROR(ops_->Upload(wide, host, static_cast<size_t>(owned) * sizeof(float)));
  return ops_->FloatToBf16(static_cast<bf16*>(dev), wide, owned);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ExportWeights(std::vector<float>* master) {
  return ExportArray(master_, master);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ImportState(const std::vector<float>& whole_master,
                                const std::vector<float>& whole_m,
                                const std::vector<float>& whole_v) {
  const size_t whole = static_cast<size_t>(Layout(o_.model).total);
  if (whole_master.size() != whole || whole_m.size() != whole || whole_v.size() != whole) {
    return Status::InvalidArgument(StrCat("state has ", whole_master.size(), "/", whole_m.size(),
                                          "/", whole_v.size(), " values, the model has ", whole));
  }
  return ImportParts(whole_master, &whole_m, &whole_v);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ImportWeights(std::vector<float> whole_master) {
  const size_t whole = static_cast<size_t>(Layout(o_.model).total);
  if (whole_master.size() != whole) {
    return Status::InvalidArgument(
        StrCat("weights have ", whole_master.size(), " values, the model has ", whole));
  }
  return ImportParts(std::move(whole_master), nullptr, nullptr);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ImportParts(std::vector<float> whole_master,
                                const std::vector<float>* whole_m,
                                const std::vector<float>* whole_v) {
  FP8RT_RETURN_IF_ERROR(FinishGather());  // (nothing may write the weights a gather still writes)
  std::fill(ring_layer_.begin(), ring_layer_.end(), -1);
  const size_t n = static_cast<size_t>(layout_.total);
  // Under TP, this rank's part of each (the whole model otherwise).
  auto part = [&](const std::vector<float>& whole) {
    std::vector<float> p(n);
    TpExtract(o_.model, o_.tp->size(), o_.tp->rank(), whole.data(), p.data());
    return p;
  };
  std::vector<float> master = Tp() ? part(whole_master) : std::move(whole_master);
  std::vector<float> m_part, v_part;
  const std::vector<float>* m = whole_m;
  const std::vector<float>* v = whole_v;
  if (Tp() && m != nullptr) m_part = part(*m), m = &m_part;
  if (Tp() && v != nullptr) v_part = part(*v), v = &v_part;
  const size_t owned = static_cast<size_t>(Zero() ? shard_total_ : layout_.total);
  // One moment array: from `src`, or zero when null.
  auto moments = [&](const std::vector<float>* src, void* dst) -> Status {
    if (src == nullptr) return ops_->Zero(dst, owned * MomentBytes());
    if (Zero()) return UploadMoments(dst, ShardOf(*src).data());
    return UploadMoments(dst, src->data());
  };
  if (Zero()) {
    FP8RT_RETURN_IF_ERROR(ScatterState(master, master_));
  } else {
    FP8RT_RETURN_IF_ERROR(ops_->Upload(master_, master.data(), n * sizeof(float)));
  }
  FP8RT_RETURN_IF_ERROR(moments(m, m_));
  FP8RT_RETURN_IF_ERROR(moments(v, v_));
  FP8RT_RETURN_IF_ERROR(RefreshWorkingCopy(&master));
  // ZeRO-1: this rank's parts; the full master waits for the next step's FP8 casts.
  if (Zero()) pending_master_ = std::move(master);
  return Status::Ok();
}

// FNV-1a over 64-bit words (the tail byte by byte): fast enough to hash every buffer each step.
inline uint64_t HashWords(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <typename Ops, typename T>
Result<std::vector<std::pair<std::string, uint64_t>>> Gpt<Ops, T>::StateHashes() {
  const size_t owned = static_cast<size_t>(Zero() ? shard_total_ : layout_.total);
  std::vector<float> host(owned);
  std::vector<std::pair<std::string, uint64_t>> out;
  auto hash = [&](const char* name, const void* dev, size_t bytes = sizeof(float)) -> Status {
    FP8RT_RETURN_IF_ERROR(ops_->Download(host.data(), dev, owned * bytes));
    out.emplace_back(name, HashWords(host.data(), owned * bytes));
    return Status::Ok();
  };
  FP8RT_RETURN_IF_ERROR(hash("grads", Zero() ? gshard_ : grads_));
  FP8RT_RETURN_IF_ERROR(hash("master", master_));
  FP8RT_RETURN_IF_ERROR(hash("adam_m", m_, MomentBytes()));
  FP8RT_RETURN_IF_ERROR(hash("adam_v", v_, MomentBytes()));
  FP8RT_ASSIGN_OR_RETURN(auto recs, fp8_.ExportScales());
  uint64_t h = 1469598103934665603ull;
  for (const auto& r : recs) {
    h = HashWords(&r.scale, sizeof r.scale, h);
    h = HashWords(&r.pos, sizeof r.pos, h);
    h = HashWords(r.amax_history.data(), r.amax_history.size() * sizeof(float), h);
  }
  out.emplace_back("scales", h);
  return out;
}

// The snapshot the model hands a checkpoint writer: three arrays of `n` floats at `base` (device
// or host memory), read through a pinned chunk when on the device.
template <typename Ops>
class OwnedStateSnapshot final : public StateSnapshot {
 public:
  static constexpr int64_t kChunk = int64_t{16} << 20;  // floats: 64 MiB reads

  // `chunks`: two pinned buffers of kChunk floats (device snapshots only).
  OwnedStateSnapshot(Ops* ops, const float* base, int64_t n, bool on_device, float* chunks,
                     std::shared_ptr<std::atomic<bool>> alive)
      : ops_(ops), base_(base), n_(n), on_device_(on_device), chunks_(chunks),
        alive_(std::move(alive)) {}
  ~OwnedStateSnapshot() override { alive_->store(false); }
  int64_t elements() const override { return n_; }
  bool on_device() const override { return on_device_; }
  int64_t chunk_elements() const override { return kChunk; }
  Result<const float*> Read(int which, int64_t offset, int64_t n, int slot) override {
    if (which < 0 || which > 2 || offset < 0 || n < 0 || n > kChunk || offset + n > n_ ||
        slot < 0 || slot > 1) {
      return Status::InvalidArgument(StrCat("snapshot read of array ", which, " [", offset, ", ",
                                            offset + n, ") is outside its ", n_, " elements"));
    }
    const float* src = base_ + which * n_ + offset;
    if (!on_device_) return src;
    float* chunk = chunks_ + slot * kChunk;
    FP8RT_RETURN_IF_ERROR(ops_->DownloadFromAnotherThread(chunk, src, n * sizeof(float)));
    return static_cast<const float*>(chunk);
  }

 private:
  Ops* ops_;
  const float* base_;
  int64_t n_;
  bool on_device_;
  float* chunks_;
  std::shared_ptr<std::atomic<bool>> alive_;
};

template <typename Ops, typename T>
Result<std::unique_ptr<StateSnapshot>> Gpt<Ops, T>::SnapshotOwnedState() {
  if (snapshot_alive_->exchange(true)) {
    return Status::FailedPrecondition(
        "a checkpoint snapshot is still being written (at most one write in flight)");
  }
  auto give_back = [&](Status s) {
    snapshot_alive_->store(false);
    return s;
  };
  const int64_t n = Zero() ? shard_total_ : layout_.total;
  const size_t bytes = 3 * static_cast<size_t>(n) * sizeof(float);
  if (snapshot_ == nullptr && snapshot_host_ == nullptr) {
    // Beside the model when the device keeps room for it (a copy there takes milliseconds and
    // the writer reads it out while training goes on), else in pinned host memory.
    if (!Ops::kDevice || ops_->FreeDeviceBytes() >= bytes + (size_t{1} << 30)) {
      const MemCategory was = mem_category_;
      mem_category_ = kMemCheckpoint;
      if (!Alloc(&snapshot_, 3 * n).ok()) snapshot_ = nullptr;
      mem_category_ = was;
    }
    if (snapshot_ == nullptr) {
      snapshot_host_ = static_cast<float*>(ops_->AllocHost(bytes));
      if (snapshot_host_ == nullptr) {
        return give_back(Status(StatusCode::kResourceExhausted,
                                StrCat("no room for the checkpoint snapshot: ", bytes,
                                       " bytes on the device or in pinned host memory")));
      }
    }
    if (Ops::kDevice && snapshot_ != nullptr) {
      snapshot_chunk_ = static_cast<float*>(
          ops_->AllocHost(2 * OwnedStateSnapshot<Ops>::kChunk * sizeof(float)));
      if (snapshot_chunk_ == nullptr) {
        return give_back(Status(StatusCode::kResourceExhausted,
                                "no pinned host memory for the checkpoint writer's two 64 MiB "
                                "pieces"));
      }
    }
  }
  const void* arrays[3] = {master_, m_, v_};
  for (int k = 0; k < 3; ++k) {
    const size_t b = static_cast<size_t>(n) * sizeof(float);
    Status s;
    if (k == 0 || !o_.bf16_moments) {
      s = snapshot_ != nullptr ? ops_->CopyOnDevice(snapshot_ + k * n, arrays[k], b)
                               : ops_->Download(snapshot_host_ + k * n, arrays[k], b);
    } else if (snapshot_ != nullptr) {  // BF16 moments: the snapshot (a checkpoint) holds FP32
      s = ops_->Bf16ToFloat(snapshot_ + k * n, static_cast<const bf16*>(arrays[k]), n);
    } else {
      // Downloaded into the upper half of their FP32 place, then widened in place from the
      // front: FP32 element i covers BF16 elements 2i - n and 2i + 1 - n, none after i (i < n),
      // and half[i] is read before out[i] is written.
      float* out = snapshot_host_ + k * n;
      auto* half = reinterpret_cast<bf16*>(reinterpret_cast<char*>(out) + 2 * n);
      s = ops_->Download(half, arrays[k], static_cast<size_t>(n) * sizeof(bf16));
      if (s.ok()) {
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(half[i]);
      }
    }
    if (!s.ok()) return give_back(s);
  }
  if (const Status s = ops_->Sync(); !s.ok()) return give_back(s);
  const bool on_device = Ops::kDevice && snapshot_ != nullptr;
  return std::unique_ptr<StateSnapshot>(std::make_unique<OwnedStateSnapshot<Ops>>(
      ops_.get(), snapshot_ != nullptr ? snapshot_ : snapshot_host_, n, on_device, snapshot_chunk_,
      snapshot_alive_));
}

template <typename Ops, typename T>
GptModel::SnapshotMemory Gpt<Ops, T>::snapshot_memory() const {
  SnapshotMemory m;
  m.bytes = 3 * static_cast<size_t>(Zero() ? shard_total_ : layout_.total) * sizeof(float);
  m.taken = snapshot_ != nullptr || snapshot_host_ != nullptr;
  m.beside_model = snapshot_ != nullptr;
  m.on_device = Ops::kDevice && snapshot_ != nullptr;
  if (snapshot_host_ != nullptr) m.pinned_host_bytes = m.bytes;
  if (snapshot_chunk_ != nullptr) {
    m.pinned_host_bytes += 2 * OwnedStateSnapshot<Ops>::kChunk * sizeof(float);
  }
  return m;
}

}  // namespace fp8rt::gpt_detail
