// The GPT model written once over a backend (CpuOps or CudaOps) and an activation type T (float
// or bf16). Included by gpt_cpu.cc and gpt_cuda.cu, which instantiate it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/parallel_for.h"
#include "common/rng.h"
#include "runtime/gpt.h"
#include "runtime/gpt_fp8.h"
#include "runtime/gpt_layout.h"
#include "runtime/ops.h"

namespace fp8rt::gpt_detail {

template <typename Ops, typename T>
class Gpt final : public GptModel {
 public:
  Gpt(const ModelOptions& o, std::unique_ptr<Ops> ops)
      : o_(o), ops_(std::move(ops)), layout_(o.model, o.tp_size()), fp8_(o_, ops_.get()) {}
  ~Gpt() override {
    // The last step's weight all-gather may still run on the communication stream.
    if (!gather_pending_.empty() && FinishGather().ok()) (void)ops_->Sync();
    for (void* p : allocations_) ops_->Free(p);
    if (staging_) ops_->FreeHost(staging_);
    for (float* p : {snapshot_host_, snapshot_chunk_}) {
      if (p) ops_->FreeHost(p);
    }
  }

  Status Setup();

  Status InitRandom(uint64_t seed) override;
  Status InitFromWeights(std::vector<float> master) override {
    FP8RT_RETURN_IF_ERROR(fp8_.Init());
    return ImportWeights(std::move(master));
  }
  Status Step(int step, float lr, const int32_t* x, const int32_t* y, StepStats* out) override;
  Status Forward(const int32_t* x, const int32_t* y, float* loss,
                 std::vector<float>* logits) override;
  Status Gradients(const int32_t* x, const int32_t* y, float* loss,
                   std::vector<float>* grads) override;
  Status ExportState(std::vector<float>* master, std::vector<float>* m,
                     std::vector<float>* v) override;
  Status ImportState(const std::vector<float>& master, const std::vector<float>& m,
                     const std::vector<float>& v) override;
  Status ImportWeights(std::vector<float> master) override;
  Status ExportWeights(std::vector<float>* master) override;
  Status ExportOwnedState(std::vector<float>* master, std::vector<float>* m,
                          std::vector<float>* v) override {
    const size_t n = static_cast<size_t>(Zero() ? shard_total_ : layout_.total);
    master->resize(n), m->resize(n), v->resize(n);
    FP8RT_RETURN_IF_ERROR(ops_->Download(master->data(), master_, n * sizeof(float)));
    FP8RT_ASSIGN_OR_RETURN(const float* mf, MomentsAsFloat(m_));
    FP8RT_RETURN_IF_ERROR(ops_->Download(m->data(), mf, n * sizeof(float)));
    FP8RT_ASSIGN_OR_RETURN(const float* vf, MomentsAsFloat(v_));
    return ops_->Download(v->data(), vf, n * sizeof(float));
  }
  Result<std::unique_ptr<StateSnapshot>> SnapshotOwnedState() override;
  Result<std::vector<TensorScaleRecord>> ExportScales() override { return fp8_.ExportScales(); }
  Status ImportScales(const std::vector<TensorScaleRecord>& records) override {
    return fp8_.ImportScales(records);
  }
  Status ResetFp8History() override { return fp8_.ResetHistory(); }
  Result<std::vector<Fp8TelemetryRow>> Telemetry() override { return fp8_.Telemetry(); }
  Result<std::vector<uint8_t>> CachedFp8Weight(const std::string& name) override {
    FP8RT_RETURN_IF_ERROR(FinishGather());
    if (Zero3() && name.rfind("lm_head", 0) != 0) {
      return Status::FailedPrecondition(StrCat(
          "no cached FP8 weight '", name, "': under parallel.zero 3 each rank keeps its rows of "
          "the layers' FP8 weights and gathers a layer only for its passes"));
    }
    return fp8_.CachedWeight(name);
  }
  int64_t num_params() const override { return Layout(o_.model).total; }
  int num_fp8_weights() const override { return fp8_.num_weights; }
  size_t allocated_bytes() const override { return allocated_bytes_; }
  size_t shared_gradient_bytes() const override { return shared_grad_bytes_; }
  SnapshotMemory snapshot_memory() const override;  // gpt_state.h
  std::vector<std::pair<std::string, size_t>> MemoryReport() const override {
    std::vector<std::pair<std::string, size_t>> out;
    for (int c = 0; c < kNumMemCategories; ++c) {
      if (category_bytes_[c] == 0) continue;
      out.emplace_back(c == kMemOptimizer && o_.bf16_moments ? "optimizer moments (bf16)"
                                                              : kMemCategoryNames[c],
                       category_bytes_[c]);
    }
    return out;
  }
  std::string attention_kernel() const override {
    return Fp8Attention() ? ops_->Fp8AttentionKernel() : ops_->AttentionKernel(Att(), kT);
  }
  void EnableOpProfile(bool on) override { ops_->EnableProfile(on); }
  std::vector<OpTime> OpProfile() const override { return ops_->ProfileReport(); }
  Result<std::vector<uint64_t>> GatherAcrossReplicas(uint64_t value) override {
    if (!Multi()) return std::vector<uint64_t>{value};
    comm::Communicator* w = World();
    const size_t n = static_cast<size_t>(w->size());
    std::vector<uint64_t> all(n);
    FP8RT_RETURN_IF_ERROR(ops_->Upload(gather_ + w->rank(), &value, sizeof value));
    FP8RT_RETURN_IF_ERROR(w->AllGather(gather_ + w->rank(), gather_, 1, comm::DataType::kUint64,
                                       ops_->ForkComm(), "scale-state hash all-gather"));
    FP8RT_RETURN_IF_ERROR(ops_->JoinComm());
    FP8RT_RETURN_IF_ERROR(ops_->Download(all.data(), gather_, n * sizeof(uint64_t)));
    return all;
  }
  Result<std::vector<std::pair<std::string, uint64_t>>> StateHashes() override;
  std::vector<std::pair<std::string, int64_t>> ParamTensors() const override {
    const Layout whole(o_.model);
    std::vector<std::pair<std::string, int64_t>> out;
    for (int i = 0; i < kNumParams; ++i) {
      if (whole.size[i] > 0) out.emplace_back(kParamNames[i], whole.size[i]);
    }
    return out;
  }

 private:
  static constexpr DType kT = DTypeOf<T>();

  template <typename U>
  Status Alloc(U** p, int64_t n) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(U);
    void* raw = ops_->Alloc(bytes);
    if (raw == nullptr) {
      return Status(StatusCode::kResourceExhausted,
                    StrCat("out of memory allocating ", bytes, " bytes (", allocated_bytes_,
                           " already allocated)"));
    }
    allocations_.push_back(raw);
    allocated_bytes_ += bytes;
    category_bytes_[mem_category_] += bytes;
    *p = static_cast<U*>(raw);
    return Status::Ok();
  }

  // train.share_gradient_memory (runtime/gpt_setup.h): requests for layer l's saved buffers
  // (l >= 1), placed once Setup has them all in layers 0..l-1's weight-gradient memory, largest
  // first, best fit; what does not fit is allocated.
  struct LayerRequest {
    void** p;
    int64_t bytes;
    int64_t layer;
    MemCategory what;
  };
  std::vector<LayerRequest> layer_requests_;
  bool grads_shared_ = false;  // decided in Setup
  size_t shared_grad_bytes_ = 0;  // what the placed buffers would have allocated
  template <typename U>
  Status AllocLayer(U** p, int64_t n, int64_t layer) {
    if (!grads_shared_ || layer < 1) return Alloc(p, n);
    layer_requests_.push_back({reinterpret_cast<void**>(p),
                               std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(U)), layer,
                               mem_category_});
    return Status::Ok();
  }
  Status PlaceLayerRequests();

  bool Fp8On(int kind) const { return fp8_.On(kind); }
  // train.recompute: the layer's input (a norm's or the activation's output) is recomputed in the
  // backward, not saved per layer (an FP8 layer saves its FP8 copy instead).
  bool Recomputes(int kind) const { return o_.recompute && !Fp8On(kind); }
  // train.recompute in an FP8 block linear (per-tensor scaling): the FP8 transposed copy of its
  // input is not saved per layer; the backward casts it again (RecastInput), with the forward's
  // scale, into one scratch buffer (fp8_.recast_to), from the input recomputed as a non-FP8
  // layer's is (the norm's output; the GELU fused into the cast) or, for the attention projection,
  // from the saved attention output (where attention keeps it, as cuDNN's does). Decided once in
  // Setup (DecideRecast, kept in fp8_.recast); RecastsInput reads that.
  bool DecideRecast(int kind) const {
    if (!o_.recompute || !Fp8On(kind) || o_.fp8.mode == ScalingMode::kBlock) return false;
    // (with fp8.gelu_input_fp8 FC's output is kept only as E4M3 codes: GELU of those is not the
    // forward's FC2 input, so FC2 keeps its copy)
    if (kind == kFcProj && GeluInputFp8()) return false;
    return kind != kAttProj || ops_->AttentionReadsOutput(Att(), kT);
  }
  bool RecastsInput(int kind) const { return kind < kNumLinear && fp8_.recast[kind]; }
  // gpt2's FC2 input, cast again, from FC's dY cast, which reads FC's output (GELU's input) for
  // the GELU backward anyway (QuantizeDbiasGeluGrad's gelu_out): one read of it instead of two.
  // FC2's wgrad then runs after FC's dY cast, with FC2's transposed dY kept apart meanwhile
  // (fp8_.dy8t_held). MayFuse...: the model's setting (delayed scaling), which Setup sizes the
  // arena for; Fuses...: this pass (outside the calibrating first step).
  bool MayFuseRecastIntoDyCast() const {
    return !Llama() && RecastsInput(kFcProj) && Fp8On(kFc) && o_.fp8.mode == ScalingMode::kDelayed;
  }
  bool FusesRecastIntoDyCast() const {
    return MayFuseRecastIntoDyCast() && FusesGeluIntoDyCast(kFc);
  }
  // x8t of (l, kind) cast again from x, or with gelu_pre from GELU(gelu_pre) in the same pass.
  Status RecastInput(int l, int kind, const T* x, const T* gelu_pre = nullptr);
  // x8t of (l, kind) cast again from the norm's output, recomputed from its input `in` and the
  // forward's statistics (llama's RMSNorm: mean and b null) in the same pass where the device
  // can (scratch: the recomputed output's place where it cannot, the CPU).
  Status RecastNormOutput(int l, int kind, const T* in, const float* mean, const float* rstd,
                          const T* w, const T* b, T* scratch);
  // What both recasts write: (l, kind)'s transposed input alone, with the forward's scale, no
  // amax (the forward's cast counted it).
  Fp8Tensor RecastTarget(int l, int kind) const;
  void LinearShape(int kind, int64_t* N, int64_t* K) const {
    gpt_detail::LinearShape(o_.model, kind, N, K, o_.tp_size());
  }
  // This rank's attention: all heads, or its n_head / tp of them under TP.
  AttentionShape Att() const {
    const ModelConfig& m = o_.model;
    return {o_.B, o_.T, m.n_head / o_.tp_size(), m.n_embd / m.n_head};
  }
  // The working copy of a parameter in T; null for the weights of FP8 linear layers, which are
  // cast to FP8 straight from the FP32 master weights and need no T copy. W and G are null for
  // a tensor this arch does not have (size 0: llama's biases, gpt2's untied LM head).
  // Under ZeRO-3 the layers' tensors have no W or G: Wl and Gl give their ring slots.
  T* W(Param p) const { return work_offset_[p] < 0 ? nullptr : working_ + work_offset_[p]; }
  float* G(Param p) const { return layout_.size[p] == 0 ? nullptr : GradAt(layout_.offset[p]); }
  // Layer l's slice of a per-layer tensor (this rank's part under TP); under ZeRO-3 in the ring
  // slot that holds layer l (gathered weights; gradients until they are reduce-scattered).
  T* Wl(Param p, int64_t l) const {
    if (Zero3() && IsLayerParam(p)) {
      return wring_off_[p] < 0 ? nullptr : wring_ + l % ring_n_ * wring_layer_ + wring_off_[p];
    }
    return W(p) == nullptr ? nullptr : W(p) + l * PerLayer(p);
  }
  float* Gl(Param p, int64_t l) const {
    if (Zero3() && IsLayerParam(p)) {
      return layout_.size[p] == 0 ? nullptr
                                  : gring_ + l % kGradRing * gring_layer_ + gring_off_[p];
    }
    return G(p) == nullptr ? nullptr : G(p) + l * PerLayer(p);
  }
  // Element `off` of the full gradient layout (and of its BF16 copy, and of the BF16 shard):
  // under ZeRO-3 only the tensors outside the layers are allocated, in two pieces around the
  // layers' range ([gap_lo_, gap_hi_) of the layout, [sgap_lo_, sgap_hi_) of the shard).
  float* GradAt(int64_t off) const {
    return off < gap_lo_ ? grads_ + off : grads_hi_ + (off - gap_hi_);
  }
  bf16* G16At(int64_t off) const { return off < gap_lo_ ? g16_ + off : g16_hi_ + (off - gap_hi_); }
  bf16* G16ShardAt(int64_t off) const {
    return off < sgap_lo_ ? g16shard_ + off : g16shard_hi_ + (off - sgap_hi_);
  }
  // Whether p keeps a T working copy: every tensor this arch has except an FP8 linear layer's
  // weight (LM head included), and always the token embedding, which the embedding reads (gpt2's
  // tied LM head).
  bool HasWorking(int p) const {
    if (layout_.size[p] == 0) return false;
    if (p == kWte) return true;
    for (int kind = 0; kind <= kNumLinear; ++kind) {
      if (WeightOf(o_.model, kind) == p && Fp8On(kind)) return false;
    }
    return true;
  }
  bool Llama() const { return o_.model.llama(); }
  // Grouped-query attention: fewer key/value heads than query heads, expanded before attention.
  bool Gqa() const { return o_.model.kv_heads() != o_.model.n_head; }

  // y = x W^T + b (+ residual) for linear `kind` of layer l (its weight: WeightOf(o_.model, kind), layer
  // l's slice); the residual, when given, is added in the GEMM's epilogue (C with beta 1), so a
  // projection writes the residual stream directly. With gelu_out, also gelu_out = GELU(y) in the
  // GEMM's epilogue where cuBLASLt can (then *gelu_done is set; otherwise the caller applies
  // GELU itself).
  // With gelu_pre (an FP8 layer, FusesGeluIntoXCast), x = GELU(gelu_pre) is not read: the
  // input's FP8 cast applies the GELU to gelu_pre in the same pass (QuantizeGelu). With x8_ready
  // (NormForward fused the cast) the input's codes are in place already and x is not read.
  Status LinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                       T* gelu_out = nullptr, bool* gelu_done = nullptr,
                       const T* residual = nullptr, const T* gelu_pre = nullptr,
                       bool x8_ready = false);
  // The norm (LayerNorm; llama's RMSNorm, mean and b unused) before linear `kind`: into out, or,
  // where that linear's FP8 input is cast again in the backward (train.recompute) under delayed
  // scaling outside the calibrating step, straight into its FP8 input codes (the norm's output
  // never written: *x8_ready set), the same codes as the norm then the cast.
  Status NormForward(int l, int kind, T* out, float* mean, float* rstd, const T* in, const T* w,
                     const T* b, bool* x8_ready);
  // With dgelu_aux (the forward's pre-GELU input of this layer's input), dx comes out multiplied
  // by GELU'(dgelu_aux) from the dgrad GEMM's epilogue where cuBLASLt can (*dgelu_done set).
  // With dy_gelu_pre, this layer's output gradient is GELU'(dy_gelu_pre) * dy, applied by the
  // FP8 cast of dy (QuantizeDbiasGeluGrad): only where FusesGeluIntoDyCast(kind).
  // dy_gelu_pre8: the same from the E4M3 codes of fp8.gelu_input_fp8.
  // split: an FP8 layer's backward in pieces (FusesRecastIntoDyCast), below.
  struct Fp8BwdSplit {
    bool dy_cast_done = false;  // dY was cast already (CastDy): do not cast it here
    // Set: the wgrad GEMM is returned here, not run, and dY's transposed codes go to
    // fp8_.dy8t_held (the next layer's dY cast takes the shared ones before it runs).
    GemmArgs* deferred_wgrad = nullptr;
  };
  Status LinearBackward(int l, int kind, T* dx, float* dw, float* db, const T* dy, const T* x,
                        const T* dgelu_aux = nullptr, bool* dgelu_done = nullptr,
                        const T* dy_gelu_pre = nullptr, const uint8_t* dy_gelu_pre8 = nullptr,
                        const Fp8BwdSplit& split = {});
  // An FP8 layer's output gradient dy cast to dyq (DyTensor), with the bias gradient into db,
  // and the GELU backward as LinearBackward's dy_gelu_pre / dy_gelu_pre8. gelu_recast (with
  // dy_gelu_pre only): also GELU(dy_gelu_pre)'s codes into that tensor, transposed only (FC2's
  // input cast again, RecastTarget).
  Status CastDy(int l, int kind, const Fp8Tensor& dyq, float* db, const T* dy, const T* dy_gelu_pre,
                const uint8_t* dy_gelu_pre8, const Fp8Tensor* gelu_recast = nullptr);
  // (l, kind)'s FP8 output gradient: the shared dY buffers, the transposed codes at dy8t if set.
  Fp8Tensor DyTensor(int l, int kind, uint8_t* dy8t = nullptr) const;
  // The FP8 weights' casts from the FP32 master. CastWeight: (l, kind)'s for the forward GEMM
  // (with its kept transposed copy), counting saturation when `count` (the step's first cast);
  // CastWeightT: the transposed copy alone, for the dgrad, of a weight not kept between the
  // passes (fp8.cache_weights: false). on: a stream Ops::ForkCast returned, else the compute
  // stream.
  Status CastWeight(int l, int kind, bool count, void* on);
  Status CastWeightT(int l, int kind, void* on);
  // The dgrad's transposed weight of (l, kind) where it is not kept (CastWeightT, or the cached
  // weight's TransposeFp8); nothing where it is.
  Status MakeDgradWeight(int l, int kind, void* on);
  // Under delayed scaling a pass's layer weight casts run a layer ahead on the cast stream, beside
  // the computation (their scales are known before the pass): LaunchWeightCasts(l, ...) casts
  // layer l's FP8 weights there (forward: CastWeight; backward, transposed copies not kept:
  // CastWeightT, or the cached weight's TransposeFp8) and marks l; the compute stream waits for
  // the mark before layer l. Current scaling measures each weight
  // first (and under TP reduces that amax on the compute stream): its casts stay in place.
  bool CastsAhead() const { return fp8_.num_weights > 0 && !fp8_.current && !fp8_.block; }
  Status LaunchWeightCasts(int l, bool backward, bool count);
  bool casts_ahead_ = false;  // this pass's layer weights come from LaunchWeightCasts
  // Whether layer kind's FP8 cast of its output gradient can also apply the GELU backward (an FP8
  // layer with a bias, outside the calibrating first step and current scaling, whose casts
  // measure dy first).
  bool FusesGeluIntoDyCast(int kind) const { return Fp8On(kind) && CastsUnmeasured(); }
  // Whether this pass's per-tensor FP8 casts use a scale known before them (delayed scaling
  // outside the calibrating first step), so another op may do a cast (the norm's forward, the
  // GELU's) in its own pass; current scaling and calibration measure each input first.
  bool CastsUnmeasured() const { return !fp8_.calibrate_now && !fp8_.current && !fp8_.block; }
  // Whether gpt2's FP8 FC2 casts its input from FC's output with the GELU in the cast (the GELU
  // output is then never written): under delayed scaling, outside the calibrating first step
  // (the others measure the input first). Its GELU is then always GELU of FC's stored output, the
  // GELU kernel's where the cast cannot apply it, never the FC epilogue's from the unrounded sum
  // (but under current scaling without train.recompute, which keeps the epilogue).
  bool FusesGeluIntoXCast() const { return !Llama() && Fp8On(kFcProj) && CastsUnmeasured(); }
  // fp8.scaling: block (runtime/gpt_block_scaling.h): the forward of FP8 linear layer (l, kind)
  // (its input cast by rows for the GEMM and by columns for wgrad, the weight's 128x128 cast
  // when cast_w; bias and residual as LinearForward's, no fused GELU) and its backward from dy
  // (dbias, any GELU backward done by the caller).
  Status BlockLinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                            const T* residual);
  Status BlockLinearBackward(int l, int kind, T* dx, float* dw, const T* dy);
  // fp8.scaling: current. Sets the scale of FP8 tensor (l, kind, role) from the amax of its input
  // `in` (n elements), all-reduced (MAX) over `group` first when that has several ranks: the
  // tensor is split over it. Called just before the tensor's cast.
  template <typename U>
  Status CurrentScale(int l, int kind, int role, const U* in, int64_t n,
                      comm::Communicator* group);
  // Under TP: whether role's tensor of layer kind is split over the TP group (the weights and
  // output gradients of column-parallel layers, the weights and inputs of row-parallel ones).
  bool SplitOverTp(int kind, int role) const {
    if (!Tp()) return false;
    int64_t N, K, N1, K1;
    LinearShape(kind, &N, &K);
    gpt_detail::LinearShape(o_.model, kind, &N1, &K1, 1);
    return role == kRoleW ? N * K != N1 * K1 : role == kRoleX ? K != K1 : N != N1;
  }
  Status AddBias(T* y, const T* b, int64_t M, int64_t N);
  // Runs `fused` (a GEMM with an epilogue that does more) while cuBLASLt takes it (*ok), else
  // `plain`; a refusal clears *ok for good, so the model stops asking. *done says fused ran.
  Status GemmTryFused(const GemmArgs& fused, const GemmArgs& plain, bool* ok, bool* done) {
    if (*ok) {
      const Status s = ops_->Gemm(fused);
      if (s.ok()) {
        *done = true;
        return s;
      }
      *ok = false;  // e.g. cuBLASLt has no algorithm with this epilogue for this case
    }
    return ops_->Gemm(plain);
  }
  Status ForwardPass(const int32_t* x_host, const int32_t* y_host, bool cast_weights,
                     bool compute_grad, int micro);
  Status BackwardPass();
  // One block, forward (from its input `res`; output in res3_[l]) and backward (from dres_, the
  // gradient of res3_[l], to the gradient of its input in dres_): gpt2's in gpt_passes.h,
  // llama's in llama_block.h.
  Status GptBlockForward(int l, const T* res, bool cast_weights);
  Status GptBlockBackward(int l, const T* res);
  Status LlamaBlockForward(int l, const T* res, bool cast_weights);
  Status LlamaBlockBackward(int l, const T* res);
  // A block's attention (gpt_attention.h): from qkv_[l] to atty_[l], and from dc2_ (the
  // output's gradient) to the gradient of qkv_[l] in *dq (dqkv_, or dqkvg_ under grouped-query
  // attention): BF16 (T) attention, or fp8.attention's.
  Status RunAttention(int l);
  Status RunAttentionBackward(int l, T** dq);
  // The phases of Step.
  Status MicroBatches();
  Status ReduceAcrossRanks();
  Status ClipAndOptimize(int step, float lr);
  Status UpdateScales();
  // One whole-model array (master or a moment) from its device copy: gathered over ZeRO-1's
  // shards and TP's parts (every rank must call it then).
  Status ExportArray(const float* dev, std::vector<float>* whole);
  // ImportState and ImportWeights: this rank's part of whole-model arrays; null moments: zeros.
  Status ImportParts(std::vector<float> whole_master, const std::vector<float>* whole_m,
                     const std::vector<float>* whole_v);
  // Writes the T working copies from the full FP32 master (downloaded when `full` is null).
  Status RefreshWorkingCopy(const std::vector<float>* full = nullptr);
  // Tensor parallelism: the sum over the TP group of a (M_, C) activation or gradient that each
  // rank holds a part of, in place, on the compute stream.
  bool Tp() const { return o_.tp != nullptr && o_.tp->size() > 1; }
  Status TpAllReduce(T* x, const char* what);
  // The whole-model array (Layout(model) order) from every TP rank's part; every rank gets it.
  Status TpGather(const std::vector<float>& part, std::vector<float>* whole);
  // Every rank of the job, and whether there is more than one.
  comm::Communicator* World() const { return o_.world != nullptr ? o_.world : o_.dp; }
  bool Multi() const { return World() != nullptr && World()->size() > 1; }

  ModelOptions o_;
  std::unique_ptr<Ops> ops_;
  Layout layout_;
  std::vector<void*> allocations_;
  size_t allocated_bytes_ = 0;
  MemCategory mem_category_ = kMemOther;  // of the next allocations
  size_t category_bytes_[kNumMemCategories] = {};
  int64_t M_ = 0;  // B * T tokens per micro-batch

  // The checkpoint snapshot (SnapshotOwnedState): 3 x owned floats on the device or, where the
  // device has no room, in pinned host memory; two pinned pieces the writer reads device copies
  // through; whether a snapshot is alive.
  float* snapshot_ = nullptr;
  float* snapshot_host_ = nullptr;
  float* snapshot_chunk_ = nullptr;
  std::shared_ptr<std::atomic<bool>> snapshot_alive_ = std::make_shared<std::atomic<bool>>(false);

  // Parameters: FP32 master, FP32 gradients and moments, T working copy.
  float *master_ = nullptr, *grads_ = nullptr;
  // AdamW's moments, FP32 or (o_.bf16_moments) BF16: MomentsAt gives them typed.
  void *m_ = nullptr, *v_ = nullptr;
  size_t MomentBytes() const { return o_.bf16_moments ? sizeof(bf16) : sizeof(float); }
  // f(m + off, v + off) with the moments' stored type.
  template <typename F>
  Status MomentsAt(int64_t off, F&& f) {
    if (o_.bf16_moments) return f(static_cast<bf16*>(m_) + off, static_cast<bf16*>(v_) + off);
    return f(static_cast<float*>(m_) + off, static_cast<float*>(v_) + off);
  }
  // One moment array (m_ or v_) as FP32 on the device: itself, or (BF16 moments) widened into
  // the gradient memory this rank owns (gshard_ under ZeRO, grads_ otherwise), which is dead
  // between steps (GatherState reuses it too). Every owned element.
  Result<const float*> MomentsAsFloat(const void* dev);
  // The reverse: FP32 `host` (this rank's owned elements) into the moment array `dev`.
  Status UploadMoments(void* dev, const float* host);
  T* working_ = nullptr;
  int64_t work_offset_[kNumParams] = {};  // into working_, -1 where HasWorking is false

  // Inputs, and the pinned host staging of one step's (grad_accum, 2, B*T) token ids, so their
  // uploads need no host synchronisation.
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  int32_t* staging_ = nullptr;
  // Activations, per layer where the backward needs them.
  T* encoded_ = nullptr;  // (B, T, C)
  std::vector<T*> ln1_, qkv_, atty_, res2_, ln2_, fch_, fch_gelu_, res3_;
  // fp8.gelu_input_fp8: each layer's FC output saved as E4M3 codes at scale 1 (fch_ is then one
  // buffer for every layer); pre_scale_: that scale and its inverse, [1, 1].
  std::vector<uint8_t*> fch8_;
  float* pre_scale_ = nullptr;
  bool GeluInputFp8() const { return o_.precision == Precision::kFp8 && o_.fp8.gelu_input_fp8; }
  Fp8Tensor GeluInputTensor(int l) const {
    int64_t N, K;
    LinearShape(kFc, &N, &K);
    Fp8Tensor t;
    t.data = fch8_[l], t.rows = M_, t.cols = N, t.format = Fp8Format::kE4M3;
    t.scale = pre_scale_, t.scale_inv = pre_scale_ + 1;
    return t;
  }
  // The attention's input per layer: qkv_ itself, or (grouped-query attention) qkv_ with its
  // key/value heads expanded (M, 3 * NH/tp * HS); qkv_ is then one buffer for every layer.
  std::vector<T*> attq_;
  std::vector<uint8_t*> att_;  // what attention saves for its backward (Ops decides)
  // fp8.attention: FP8 attention (on this placement's FP8 precision); each layer's Q/K/V codes
  // (M, (NH + 2 KV) HS) and output codes (M, NH HS), its saved log-sum-exp in att_, and the
  // backward's output-gradient and Q/K/V-gradient codes (one buffer each for every layer).
  bool Fp8Attention() const { return o_.precision == Precision::kFp8 && o_.fp8.attention; }
  Fp8AttentionShape Att8() const {
    const ModelConfig& m = o_.model;
    return {o_.B, o_.T, m.n_head / o_.tp_size(), m.kv_heads() / o_.tp_size(), m.head_size()};
  }
  std::vector<uint8_t*> qkv8_, o8_;
  uint8_t *do8_ = nullptr, *dqkv8_ = nullptr;
  std::vector<float*> ln1_mean_, ln1_rstd_, ln2_mean_, ln2_rstd_;
  T* lnf_ = nullptr;                                 // (B, T, C)
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // (B, T)
  T* logits_ = nullptr;                              // (B, T, Vp), dlogits after the loss
  float* losses_ = nullptr;                          // (B, T)
  float* step_losses_ = nullptr;                     // (grad_accum) mean loss per micro
  float* norm_sq_ = nullptr;                         // (1)
  T* ones_ = nullptr;                                // (B*T) for bias gradients
  // Backward scratch.
  T *dres_ = nullptr, *dc1_ = nullptr, *dc2_ = nullptr, *dqkv_ = nullptr, *d4c_ = nullptr;
  T* dqkvg_ = nullptr;  // grouped-query attention: the (M, QKV) gradient of qkv_
  T* dffn_ = nullptr;   // llama: the (M, F) gradient of the SwiGLU output

  Fp8State<Ops> fp8_;

  // Data parallelism (o_.dp): the gradient buckets in launch order, their names for errors, and
  // this step's progress through them.
  bool Dp() const { return o_.dp != nullptr && o_.dp->size() > 1; }
  Status ReduceBucket(int b);
  // parallel.sparse_embedding_grad (gpt_parallel.h): in the last micro-batch's backward the
  // embedding backward leaves the token table out (sparse_now_), its rows and tokens are
  // all-gathered over DP into emb_rows_ / emb_tokens_ (in the logits' allocation, free by then),
  // and after the join every rank's rows are added to the reduced gradient (this rank's part of
  // it under ZeRO-1).
  EmbeddingGradPlan emb_plan_;
  bool sparse_now_ = false;
  T* emb_rows_ = nullptr;
  int32_t* emb_tokens_ = nullptr;
  Status LaunchEmbeddingGather();
  Status AddGatheredEmbeddingRows();

  // ZeRO-1 (o_.zero under DP; runtime/gpt_parallel.h): every tensor (each layer's slice of an
  // (L, ...) tensor) is split into DP equal contiguous parts; rank r keeps part r of the FP32
  // master weights and AdamW moments, in shard order (param, layer), and receives part r of the
  // reduced gradients (reduce-scatter). After its AdamW update it casts its part of each FP8
  // weight (rows) with the weight's scale and the parts are all-gathered as FP8 bytes (then
  // transposed); T working copies are all-gathered in T.
  bool Zero() const { return Dp() && o_.zero; }
  int64_t PerLayer(int p) const {
    return IsLayerParam(p) ? layout_.size[p] / o_.model.n_layer : layout_.size[p];
  }
  int Layers(int p) const { return IsLayerParam(p) ? o_.model.n_layer : 1; }
  int64_t SliceOf(int p) const { return PerLayer(p) / o_.dp->size(); }
  // Where layer l's tensor of p starts in the full layout, and where this rank's part of it
  // sits in the shard.
  int64_t FullOff(int p, int l) const { return layout_.offset[p] + l * PerLayer(p); }
  int64_t ShardOff(int p, int l) const { return shard_offset_[p] + l * SliceOf(p); }
  Status SetupZero();
  Status BeginGather();
  // Gather slot 0 holds the tensors outside the layers (and the LM head), slot 1 + l layer l.
  bool InSlot(int p, int slot) const { return IsLayerParam(p) == (slot > 0); }
  int SlotLayer(int slot) const { return slot > 0 ? slot - 1 : 0; }
  // Its FP8 linears: layer slot - 1's, or the LM head's.
  template <typename Fn>
  Status ForSlotLinears(int slot, Fn&& fn) const {
    return fp8_.ForLayerLinears(slot > 0 ? slot - 1 : o_.model.n_layer, fn);
  }
  Status CastSlot(int slot);
  Status LaunchGather(int slot);
  // The weight all-gather overlaps the end of AdamW and the next forward: which of its slots (0:
  // outside the layers, 1 + l: layer l) the compute stream has not waited for yet; FinishGather
  // waits for them all (before anything else reads or frees the weights: an import, a test hook,
  // the destructor).
  Status WaitGathered(int slot);
  Status FinishGather();
  std::vector<bool> gather_pending_;
  Status GatherState(const float* shard, std::vector<float>* full);
  Status ScatterState(const std::vector<float>& full, float* shard);
  std::vector<float> ShardOf(const std::vector<float>& full) const;
  // The step's FP8 weight casts: true (every step, from master_) without ZeRO; under ZeRO only
  // when the full master is pending (after InitRandom/ImportState), from it in grads_.
  Status PrepareWeightCasts(bool* cast);
  int64_t shard_offset_[kNumParams] = {};
  int64_t shard_total_ = 0;
  float* gshard_ = nullptr;             // this rank's part of the reduced gradients
  // parallel.grad_reduce_dtype bf16: the gradients in BF16 (full layout) and, under ZeRO-1,
  // this rank's part of their sum (shard layout).
  bf16* g16_ = nullptr;
  bf16* g16shard_ = nullptr;
  const float* cast_src_ = nullptr;     // the FP32 weights the forward casts to FP8
  std::vector<float> pending_master_;   // ZeRO: the full master for the next full cast
  std::vector<GradBucket> buckets_;
  std::vector<std::string> bucket_names_;
  bool reduce_grads_now_ = false;  // in the last micro-batch's backward of a DP step
  uint64_t* gather_ = nullptr;     // (DP) GatherAcrossReplicas' buffer
  int next_bucket_ = 0;
  float grad_scale_ = 1.0f;  // 1 / DP while a DP step runs: SUM then gives the mean
  int amax_collectives_ = 0;
  int current_amax_collectives_ = 0;
  static constexpr int kGradTimer = 0, kAmaxTimer = 1;
  // Set during the backward of a step's first micro-batch: the linear layers' weight gradients
  // (and the tied wte's, which the LM head's wgrad writes before the embedding backward adds to
  // it) are written by their wgrad GEMMs (beta 0) rather than accumulated, so ZeroGrads need not
  // clear them first.
  bool wgrad_overwrites_ = false;
  bool WrittenByWgrad(int p) const {
    return p == WeightOf(o_.model, kLmHead) || p == kQkvW || p == kAttProjW || p == kFcW ||
           p == kFcProjW;
  }
  // Zeroes the gradients that the first micro-batch accumulates into (biases, LayerNorms, wpe).
  // (ZeRO-3: the layers' in their ring slots, PrepareLayerGrads.)
  Status ZeroGrads() {
    for (int p = 0; p < kNumParams; ++p) {
      if (WrittenByWgrad(p) || layout_.size[p] == 0 || (Zero3() && IsLayerParam(p))) continue;
      FP8RT_RETURN_IF_ERROR(ops_->Zero(G(static_cast<Param>(p)), layout_.size[p] * sizeof(float)));
    }
    return Status::Ok();
  }
  // ZeRO-3 (runtime/gpt_zero3.h). Gradients: the tensors outside the layers in full (in two
  // pieces, GradAt), each layer's in a ring of kGradRing slots (gring_; gring_off_[p]: tensor p's
  // place in a slot), reduce-scattered after the layer's backward (every micro-batch) through
  // gtmp_ (one layer's part, FP32 or BF16) and added into gshard_. Weights: this rank's rows of
  // every layer's FP8 weights (w8shard_, w8shard_layer_ bytes per layer, w8shard_off_ per kind)
  // and its part of every layer's T working copies (wshard_, param-major like the master shard),
  // all-gathered into the ring slot of the layer (w8ring_: FP8 weights and their transposed
  // copies; wring_) one layer ahead of the pass that reads them, in a ring of ring_n_ layers: 2,
  // or every layer with parallel.keep_gathered_weights (then each is gathered once per step, in
  // the first forward, and kept to its backward). ring_layer_[k]: the layer ring slot k holds (-1:
  // none, or stale after an update), ring_t_[k]: with its transposed copies.
  static constexpr int kGradRing = 2;
  int ring_n_ = 2;
  bool Zero3() const { return Zero() && o_.zero == 3; }
  // Hybrid sharding (ModelOptions::replicas): each gradient part, once reduce-scattered within
  // o_.dp, is all-reduced across the replicas (AllReduceAcrossReplicas, on `stream`): the buckets'
  // on the last micro-batch, ZeRO-3's layers' once their shard holds the step's sum.
  bool Hybrid() const { return Zero() && o_.replicas != nullptr && o_.replicas->size() > 1; }
  int64_t DpSize() const { return o_.dp->size() * (Hybrid() ? o_.replicas->size() : 1); }
  Status AllReduceAcrossReplicas(void* part, int64_t n, comm::DataType dt, void* stream,
                                 const char* what) {
    return o_.replicas->AllReduce(part, part, static_cast<size_t>(n), dt, comm::ReduceOp::kSum,
                                  stream, what);
  }
  int64_t gap_lo_ = INT64_MAX, gap_hi_ = 0, sgap_lo_ = INT64_MAX, sgap_hi_ = 0;
  float* grads_hi_ = nullptr;
  bf16 *g16_hi_ = nullptr, *g16shard_hi_ = nullptr;
  float* gring_ = nullptr;
  bf16* g16ring_ = nullptr;  // (parallel.grad_reduce_dtype bf16) the slot rounded for its sum
  void* gtmp_ = nullptr;
  int64_t gring_off_[kNumParams] = {}, gtmp_off_[kNumParams] = {}, gring_layer_ = 0;
  T *wring_ = nullptr, *wshard_ = nullptr;
  int64_t wring_off_[kNumParams] = {}, wshard_off_[kNumParams] = {}, wring_layer_ = 0;
  uint8_t *w8ring_ = nullptr, *w8shard_ = nullptr;
  int64_t w8shard_off_[kNumLinear] = {}, w8shard_layer_ = 0;
  std::vector<int> ring_layer_;
  std::vector<bool> ring_t_;
  int micro_ = 0;  // the micro-batch the passes run
  Status SetupZero3();
  // The comm marks of ring slot k: its gather (the compute stream waits before the layer's
  // pass), its gradients' reduction (the compute stream waits before writing the slot again).
  int GatherMark(int k) const { return o_.model.n_layer + 1 + k; }
  int GradMark(int k) const { return o_.model.n_layer + 1 + ring_n_ + k; }
  // Layer l's weights gathered into its slot on the communication stream (nothing if the slot
  // holds them already; with_t: and the FP8 weights transposed for the dgrads).
  Status GatherLayer(int l, bool with_t);
  // Before layer l's pass (backward: its backward): its weights gathered, the next layer's
  // (l + 1 forward, l - 1 backward) launched behind them, the compute stream waiting for l's.
  Status UseLayer(int l, bool backward);
  // Before layer l's backward: its gradient slot free again and the accumulated tensors zeroed;
  // after it: the slot reduce-scattered and added into gshard_.
  Status PrepareLayerGrads(int l);
  Status ReduceLayer(int l);
  // ZeRO-3's first cast after an import: every FP8 weight cast whole from the full master (as
  // one rank casts it), this rank's rows kept.
  Status CastWholeWeights();
  // This rank's part of (p, l)'s T working copy (ZeRO), which AdamW writes.
  T* WorkShard(int p, int l) const {
    if (!HasWorking(p)) return nullptr;
    if (Zero3() && IsLayerParam(p)) return wshard_ + wshard_off_[p] + l * SliceOf(p);
    return W(static_cast<Param>(p)) + l * PerLayer(p) + o_.dp->rank() * SliceOf(p);
  }
  // Where this rank's rows of (l, kind)'s FP8 weight are cast (ZeRO).
  uint8_t* Fp8Part(int l, int kind) const {
    int64_t N, K;
    LinearShape(kind, &N, &K);
    if (Zero3() && kind != kLmHead) return w8shard_ + l * w8shard_layer_ + w8shard_off_[kind];
    return fp8_.w8[fp8_.Slot(l, kind)] + o_.dp->rank() * (N / o_.dp->size()) * K;
  }
  // Whether a wgrad GEMM of `kind` overwrites its gradient: the step's first micro-batch, and
  // every micro-batch in ZeRO-3's gradient ring (the sum is taken in the shard).
  bool OverwritesWgrad(int kind) const {
    return wgrad_overwrites_ || (Zero3() && kind != kLmHead);
  }
  int64_t weight_casts_ = 0;
  bool gelu_epilogue_ok_ = true;   // false once cuBLASLt refused the fused GELU epilogue
  bool dgelu_epilogue_ok_ = true;  // the same for the GELU backward in the dgrad epilogue
};

template <typename Ops, typename T>
Result<std::unique_ptr<GptModel>> MakeGpt(const ModelOptions& o, std::unique_ptr<Ops> ops) {
  auto model = std::make_unique<Gpt<Ops, T>>(o, std::move(ops));
  FP8RT_RETURN_IF_ERROR(model->Setup());
  return std::unique_ptr<GptModel>(std::move(model));
}

}  // namespace fp8rt::gpt_detail

#include "runtime/gpt_step.h"
#include "runtime/gpt_linear.h"
#include "runtime/gpt_block_scaling.h"
#include "runtime/gpt_passes.h"
#include "runtime/llama_block.h"
#include "runtime/gpt_attention.h"
#include "runtime/gpt_setup.h"
#include "runtime/gpt_parallel.h"
#include "runtime/gpt_zero3.h"
#include "runtime/gpt_state.h"
