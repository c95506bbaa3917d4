// The GPT model written once over a backend (CpuOps or CudaOps) and an activation type T (float
// or bf16). Included by gpt_cpu.cc and gpt_cuda.cu, which instantiate it.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <string>
#include <vector>

#include "common/rng.h"
#include "runtime/gpt.h"
#include "runtime/ops.h"

namespace fp8rt::gpt_detail {

// Parameter tensors in storage order, with their shapes.
enum Param {
  kWte,       // (Vp, C)
  kWpe,       // (maxT, C)
  kLn1W,      // (L, C)
  kLn1B,      // (L, C)
  kQkvW,      // (L, 3C, C)
  kQkvB,      // (L, 3C)
  kAttProjW,  // (L, C, C)
  kAttProjB,  // (L, C)
  kLn2W,      // (L, C)
  kLn2B,      // (L, C)
  kFcW,       // (L, 4C, C)
  kFcB,       // (L, 4C)
  kFcProjW,   // (L, C, 4C)
  kFcProjB,   // (L, C)
  kLnfW,      // (C)
  kLnfB,      // (C)
  kNumParams
};
inline const char* kParamNames[kNumParams] = {
    "wte",  "wpe",  "ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "attn_proj.weight",
    "attn_proj.bias", "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "fc_proj.weight",
    "fc_proj.bias", "lnf.weight", "lnf.bias"};
// Decoupled weight decay applies to 2-D weights only.
inline const bool kDecay[kNumParams] = {true,  true,  false, false, true,  false, true, false,
                                        false, false, true,  false, true,  false, false, false};

// The four linear layers of a block, and the LM head.
enum LinearKind { kQkv, kAttProj, kFc, kFcProj, kNumLinear, kLmHead = kNumLinear };
inline const char* kLinearNames[kNumLinear + 1] = {"qkv", "attn_proj", "fc", "fc_proj", "lm_head"};
// Op names for --profile-ops, per linear kind (kQkv .. kLmHead).
inline const char* kFpropNames[] = {"gemm fprop qkv", "gemm fprop attn_proj", "gemm fprop fc",
                                    "gemm fprop fc_proj", "gemm fprop lm_head"};
inline const char* kDgradNames[] = {"gemm dgrad qkv", "gemm dgrad attn_proj", "gemm dgrad fc",
                                    "gemm dgrad fc_proj", "gemm dgrad lm_head"};
inline const char* kWgradNames[] = {"gemm wgrad qkv", "gemm wgrad attn_proj", "gemm wgrad fc",
                                    "gemm wgrad fc_proj", "gemm wgrad lm_head"};
enum Fp8Role { kRoleX, kRoleW, kRoleDy, kNumRoles };
inline const char* kRoleNames[kNumRoles] = {"input", "weight", "grad_output"};

struct Layout {
  int64_t size[kNumParams];
  int64_t offset[kNumParams];
  int64_t total = 0;
  explicit Layout(const ModelConfig& m) {
    const int64_t C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab();
    const int64_t s[kNumParams] = {Vp * C,    int64_t{m.block_size} * C,
                                   L * C,     L * C,
                                   L * 3 * C * C, L * 3 * C,
                                   L * C * C, L * C,
                                   L * C,     L * C,
                                   L * 4 * C * C, L * 4 * C,
                                   L * 4 * C * C, L * C,
                                   C,         C};
    for (int i = 0; i < kNumParams; ++i) {
      size[i] = s[i];
      offset[i] = total;
      // Keep every tensor 64-element aligned so vectorised kernels see aligned pointers.
      total += (s[i] + 63) / 64 * 64;
    }
  }
};

template <typename Ops, typename T>
class Gpt final : public GptModel {
 public:
  Gpt(const ModelOptions& o, std::unique_ptr<Ops> ops)
      : o_(o), ops_(std::move(ops)), layout_(o.model) {}
  ~Gpt() override {
    for (void* p : allocations_) ops_->Free(p);
    if (staging_) ops_->FreeHost(staging_);
  }

  Status Setup();

  Status InitRandom(uint64_t seed) override;
  Status Step(int step, float lr, const int32_t* x, const int32_t* y, StepStats* out) override;
  Status Forward(const int32_t* x, const int32_t* y, float* loss,
                 std::vector<float>* logits) override;
  Status Gradients(const int32_t* x, const int32_t* y, float* loss,
                   std::vector<float>* grads) override;
  Status ExportState(std::vector<float>* master, std::vector<float>* m,
                     std::vector<float>* v) override;
  Status ImportState(const std::vector<float>& master, const std::vector<float>& m,
                     const std::vector<float>& v) override;
  Result<std::vector<TensorScaleRecord>> ExportScales() override;
  Status ImportScales(const std::vector<TensorScaleRecord>& records) override;
  Status ResetFp8History() override;
  Result<std::vector<Fp8TelemetryRow>> Telemetry() override;
  Result<std::vector<uint8_t>> CachedFp8Weight(const std::string& name) override {
    std::vector<uint8_t> bytes;
    FP8RT_RETURN_IF_ERROR(ForEachFp8Linear([&](int l, int kind) -> Status {
      if (Fp8Name(l, kind, kRoleW) != name) return Status::Ok();
      int64_t N, K;
      LinearShape(kind, &N, &K);
      bytes.resize(static_cast<size_t>(N * K));
      return ops_->Download(bytes.data(), w8_[Slot(l, kind)], bytes.size());
    }));
    if (bytes.empty()) return Status::NotFound(StrCat("no FP8 weight named '", name, "'"));
    return bytes;
  }
  int64_t num_params() const override { return layout_.total; }
  int num_fp8_weights() const override { return num_fp8_weights_; }
  size_t allocated_bytes() const override { return allocated_bytes_; }
  std::string attention_kernel() const override {
    const ModelConfig& m = o_.model;
    return ops_->AttentionKernel({o_.B, o_.T, m.n_head, m.n_embd / m.n_head}, kT);
  }
  void EnableOpProfile(bool on) override { ops_->EnableProfile(on); }
  std::vector<OpTime> OpProfile() const override { return ops_->ProfileReport(); }
  std::vector<std::pair<std::string, int64_t>> ParamTensors() const override {
    std::vector<std::pair<std::string, int64_t>> out;
    for (int i = 0; i < kNumParams; ++i) out.emplace_back(kParamNames[i], layout_.size[i]);
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
    *p = static_cast<U*>(raw);
    return Status::Ok();
  }

  bool Fp8On(int kind) const {
    if (o_.precision != Precision::kFp8) return false;
    switch (kind) {
      case kQkv: return o_.fp8.qkv;
      case kAttProj: return o_.fp8.attn_proj;
      case kFc: return o_.fp8.fc;
      case kFcProj: return o_.fp8.fc_proj;
      case kLmHead: return o_.fp8.lm_head;
    }
    return false;
  }
  // The (layer, kind) slot of FP8 buffers; the LM head comes after the layers' linears.
  int Slot(int l, int kind) const {
    return kind == kLmHead ? o_.model.n_layer * kNumLinear : l * kNumLinear + kind;
  }
  int Fp8Index(int l, int kind, int role) const { return Slot(l, kind) * kNumRoles + role; }
  std::string Fp8Name(int l, int kind, int role) const {
    return kind == kLmHead ? StrCat("lm_head.", kRoleNames[role])
                           : StrCat("h", l, ".", kLinearNames[kind], ".", kRoleNames[role]);
  }
  Fp8Tensor Fp8Of(int l, int kind, int role, uint8_t* data, uint8_t* data_t, int64_t rows,
                  int64_t cols) const {
    const int i = Fp8Index(l, kind, role);
    Fp8Tensor t;
    t.data = data;
    t.data_t = data_t;
    t.rows = rows;
    t.cols = cols;
    t.format = FormatFor(scaling_cfg_.recipe, role == kRoleDy);
    t.scale = scaling_.scale + i;
    // A 64-byte slot per tensor (ScalingState::scale_inv_stride): cuBLASLt reads it as the
    // GEMM's scale and needs 16-byte-aligned scale pointers.
    t.scale_inv = scaling_.scale_inv + kScaleSlot * i;
    t.amax = scaling_.amax + i;
    return t;
  }
  // Calls fn(l, kind) for every linear layer running in FP8, in a fixed order (layers, then the
  // LM head): the order of ExportScales, ImportScales and Telemetry.
  template <typename Fn>
  Status ForEachFp8Linear(Fn&& fn) const {
    for (int l = 0; l <= o_.model.n_layer; ++l) {
      for (int kind = 0; kind <= kNumLinear; ++kind) {
        if ((l == o_.model.n_layer) != (kind == kLmHead) || !Fp8On(kind)) continue;
        FP8RT_RETURN_IF_ERROR(fn(l, kind));
      }
    }
    return Status::Ok();
  }
  // (N, K) of each linear layer.
  void LinearShape(int kind, int64_t* N, int64_t* K) const {
    const int64_t C = o_.model.n_embd;
    switch (kind) {
      case kQkv: *N = 3 * C, *K = C; return;
      case kAttProj: *N = C, *K = C; return;
      case kFc: *N = 4 * C, *K = C; return;
      case kFcProj: *N = C, *K = 4 * C; return;
      default: *N = o_.model.padded_vocab(), *K = C; return;
    }
  }
  // The working copy of a parameter in T; null for the weights of FP8 linear layers, which are
  // cast to FP8 straight from the FP32 master weights and need no T copy.
  T* W(Param p) const { return work_offset_[p] < 0 ? nullptr : working_ + work_offset_[p]; }
  float* G(Param p) const { return grads_ + layout_.offset[p]; }
  static Param WeightOf(int kind) {
    switch (kind) {
      case kQkv: return kQkvW;
      case kAttProj: return kAttProjW;
      case kFc: return kFcW;
      case kFcProj: return kFcProjW;
      default: return kWte;
    }
  }
  // Whether p keeps a T working copy: everything except an FP8 linear layer's weight (the tied
  // LM head / token embedding always keeps one: the embedding reads it).
  bool HasWorking(int p) const {
    for (int kind = 0; kind < kNumLinear; ++kind) {
      if (WeightOf(kind) == p && Fp8On(kind)) return false;
    }
    return true;
  }

  // y = x W^T + b (+ residual) for linear `kind` of layer l (its weight: WeightOf(kind), layer
  // l's slice); the residual, when given, is added in the GEMM's epilogue (C with beta 1), so a
  // projection writes the residual stream directly. With gelu_out, also gelu_out = GELU(y) in the
  // GEMM's epilogue where cuBLASLt can (then *gelu_done is set; otherwise the caller applies
  // GELU itself).
  Status LinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                       T* gelu_out = nullptr, bool* gelu_done = nullptr,
                       const T* residual = nullptr);
  // With dgelu_aux (the forward's pre-GELU input of this layer's input), dx comes out multiplied
  // by GELU'(dgelu_aux) from the dgrad GEMM's epilogue where cuBLASLt can (*dgelu_done set).
  // With dy_gelu_pre, this layer's output gradient is GELU'(dy_gelu_pre) * dy, applied by the
  // FP8 cast of dy (QuantizeDbiasGeluGrad): only where FusesGeluIntoDyCast(kind).
  Status LinearBackward(int l, int kind, T* dx, float* dw, float* db, const T* dy, const T* x,
                        const T* dgelu_aux = nullptr, bool* dgelu_done = nullptr,
                        const T* dy_gelu_pre = nullptr);
  // Whether layer kind's FP8 cast of its output gradient can also apply the GELU backward (an FP8
  // layer with a bias, outside the calibrating first step, whose cast measures dy first).
  bool FusesGeluIntoDyCast(int kind) const { return Fp8On(kind) && !calibrate_now_; }
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
  Status RefreshWorkingCopy();

  ModelOptions o_;
  std::unique_ptr<Ops> ops_;
  Layout layout_;
  std::vector<void*> allocations_;
  size_t allocated_bytes_ = 0;
  int64_t M_ = 0;  // B * T tokens per micro-batch

  // Parameters: FP32 master, FP32 gradients and moments, T working copy.
  float *master_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  T* working_ = nullptr;
  int64_t work_offset_[kNumParams] = {};  // into working_, -1 where HasWorking is false

  // Inputs, and the pinned host staging of one step's (grad_accum, 2, B*T) token ids, so their
  // uploads need no host synchronisation.
  int32_t *tokens_ = nullptr, *targets_ = nullptr;
  int32_t* staging_ = nullptr;
  // Activations, per layer where the backward needs them.
  T* encoded_ = nullptr;                                    // (B, T, C)
  std::vector<T*> ln1_, qkv_, atty_, res2_, ln2_, fch_, fch_gelu_, res3_;
  std::vector<uint8_t*> att_;  // what attention saves for its backward (Ops decides)
  std::vector<float*> ln1_mean_, ln1_rstd_, ln2_mean_, ln2_rstd_;
  T* lnf_ = nullptr;                                        // (B, T, C)
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;         // (B, T)
  T* logits_ = nullptr;                                     // (B, T, Vp), dlogits after the loss
  float* losses_ = nullptr;                                 // (B, T)
  float* step_losses_ = nullptr;                            // (grad_accum) mean loss per micro
  float* norm_sq_ = nullptr;                                // (1)
  T* ones_ = nullptr;                                       // (B*T) for bias gradients
  // Backward scratch.
  T *dres_ = nullptr, *dc1_ = nullptr, *dc2_ = nullptr, *dqkv_ = nullptr, *d4c_ = nullptr;

  // FP8: scaling state of all FP8 tensors, cached weights, saved inputs, gradient casts.
  DelayedScalingConfig scaling_cfg_;
  ScalingState scaling_;
  // The scale state is fresh (initial scale 1, empty history): the next step's first micro-batch
  // casts with current scaling when fp8.first_step_current asks for it (calibrate_now_ while it
  // runs). Cleared by that step's scaling update and by ImportScales.
  bool calibrate_ = false;
  bool calibrate_now_ = false;
  // Set during the backward of a step's first micro-batch: the linear layers' weight gradients
  // (and the tied wte's, which the LM head's wgrad writes before the embedding backward adds to
  // it) are written by their wgrad GEMMs (beta 0) rather than accumulated, so ZeroGrads need not
  // clear them first.
  bool wgrad_overwrites_ = false;
  static bool WrittenByWgrad(int p) {
    return p == kWte || p == kQkvW || p == kAttProjW || p == kFcW || p == kFcProjW;
  }
  // Zeroes the gradients that the first micro-batch accumulates into (biases, LayerNorms, wpe).
  Status ZeroGrads() {
    for (int p = 0; p < kNumParams; ++p) {
      if (WrittenByWgrad(p)) continue;
      FP8RT_RETURN_IF_ERROR(ops_->Zero(grads_ + layout_.offset[p], layout_.size[p] * sizeof(float)));
    }
    return Status::Ok();
  }
  // Casts in to out: with current scaling while calibrating, else with the delayed scale.
  template <typename U>
  Status Cast(const U* in, const Fp8Tensor& out, typename Ops::Counter* saturated) {
    if (calibrate_now_) return ops_->QuantizeCurrentScaling(in, out, scaling_cfg_.margin, saturated);
    return ops_->Quantize(in, out, saturated);
  }
  uint8_t* scaling_base_ = nullptr;
  int num_fp8_tensors_ = 0, num_fp8_weights_ = 0;
  std::vector<uint8_t*> w8_, w8t_, x8t_;  // per (layer, kind) slot
  uint8_t* x8_ = nullptr;  // the forward's row-major input cast, shared: only x8t_ is saved
  uint8_t *dy8_ = nullptr, *dy8t_ = nullptr;   // shared, (B*T, max N)
  typename Ops::Counter* saturated_ = nullptr;  // per FP8 tensor
  static constexpr int kScaleSlot = 16;          // ScalingState::scale_inv_stride
  int64_t weight_casts_ = 0;
  bool gelu_epilogue_ok_ = true;   // false once cuBLASLt refused the fused GELU epilogue
  bool dgelu_epilogue_ok_ = true;  // the same for the GELU backward in the dgrad epilogue
};


// ---------------------------------------------------------------------------------------------
// Implementation.

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
  FP8RT_RETURN_IF_ERROR(Alloc(&master_, P));
  FP8RT_RETURN_IF_ERROR(Alloc(&grads_, P));
  FP8RT_RETURN_IF_ERROR(Alloc(&m_, P));
  FP8RT_RETURN_IF_ERROR(Alloc(&v_, P));
  int64_t work_total = 0;
  for (int p = 0; p < kNumParams; ++p) {
    work_offset_[p] = HasWorking(p) ? work_total : -1;
    if (HasWorking(p)) work_total += (layout_.size[p] + 63) / 64 * 64;
  }
  FP8RT_RETURN_IF_ERROR(Alloc(&working_, work_total));
  FP8RT_RETURN_IF_ERROR(Alloc(&tokens_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&targets_, M_));
  staging_ = static_cast<int32_t*>(ops_->AllocHost(sizeof(int32_t) * 2 * M_ * o_.grad_accum));
  if (staging_ == nullptr) return Status(StatusCode::kResourceExhausted, "pinned host memory");
  FP8RT_RETURN_IF_ERROR(Alloc(&encoded_, M_ * C));

  // In FP8 layers the backward reads the saved FP8 copies of a linear layer's input, so its
  // high-precision input need not outlive the layer: one buffer serves every layer.
  auto per_layer = [&](std::vector<T*>* v, int64_t n, bool shared) -> Status {
    v->assign(L, nullptr);
    T* one = nullptr;
    for (int64_t l = 0; l < L; ++l) {
      if (shared && one != nullptr) {
        (*v)[l] = one;
        continue;
      }
      FP8RT_RETURN_IF_ERROR(Alloc(&(*v)[l], n));
      one = (*v)[l];
    }
    return Status::Ok();
  };
  auto stats = [&](std::vector<float*>* v) -> Status {
    v->assign(L, nullptr);
    for (int64_t l = 0; l < L; ++l) FP8RT_RETURN_IF_ERROR(Alloc(&(*v)[l], M_));
    return Status::Ok();
  };
  FP8RT_RETURN_IF_ERROR(per_layer(&ln1_, M_ * C, Fp8On(kQkv)));
  FP8RT_RETURN_IF_ERROR(per_layer(&qkv_, M_ * 3 * C, false));
  const AttentionShape as{B, Tn, m.n_head, C / m.n_head};
  att_.assign(L, nullptr);
  for (int64_t l = 0; l < L; ++l) {
    FP8RT_RETURN_IF_ERROR(
        Alloc(&att_[l], static_cast<int64_t>(ops_->AttentionSavedBytes(as, kT))));
  }
  // The attention output is the projection's input, and the flash backward reads it too.
  FP8RT_RETURN_IF_ERROR(
      per_layer(&atty_, M_ * C, Fp8On(kAttProj) && !ops_->AttentionReadsOutput(as, kT)));
  FP8RT_RETURN_IF_ERROR(per_layer(&res2_, M_ * C, false));
  FP8RT_RETURN_IF_ERROR(per_layer(&ln2_, M_ * C, Fp8On(kFc)));
  FP8RT_RETURN_IF_ERROR(per_layer(&fch_, M_ * 4 * C, false));
  FP8RT_RETURN_IF_ERROR(per_layer(&fch_gelu_, M_ * 4 * C, Fp8On(kFcProj)));
  FP8RT_RETURN_IF_ERROR(per_layer(&res3_, M_ * C, false));
  FP8RT_RETURN_IF_ERROR(stats(&ln1_mean_));
  FP8RT_RETURN_IF_ERROR(stats(&ln1_rstd_));
  FP8RT_RETURN_IF_ERROR(stats(&ln2_mean_));
  FP8RT_RETURN_IF_ERROR(stats(&ln2_rstd_));
  FP8RT_RETURN_IF_ERROR(Alloc(&lnf_, M_ * C));
  FP8RT_RETURN_IF_ERROR(Alloc(&lnf_mean_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&lnf_rstd_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&logits_, M_ * Vp));
  FP8RT_RETURN_IF_ERROR(Alloc(&losses_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&step_losses_, o_.grad_accum + 1));
  norm_sq_ = step_losses_ + o_.grad_accum;  // one download brings losses and the norm
  FP8RT_RETURN_IF_ERROR(Alloc(&ones_, M_));
  FP8RT_RETURN_IF_ERROR(Alloc(&dres_, M_ * C));
  FP8RT_RETURN_IF_ERROR(Alloc(&dc1_, M_ * C));
  FP8RT_RETURN_IF_ERROR(Alloc(&dc2_, M_ * C));
  FP8RT_RETURN_IF_ERROR(Alloc(&dqkv_, M_ * 3 * C));
  FP8RT_RETURN_IF_ERROR(Alloc(&d4c_, M_ * 4 * C));
  {
    std::vector<T> ones(static_cast<size_t>(M_), T(1.0f));
    FP8RT_RETURN_IF_ERROR(ops_->Upload(ones_, ones.data(), ones.size() * sizeof(T)));
  }

  if (fp8) {
    scaling_cfg_ = o_.fp8.scaling;
    FP8RT_RETURN_IF_ERROR(scaling_cfg_.Validate());
    const int slots = static_cast<int>(L) * kNumLinear + 1;
    num_fp8_tensors_ = slots * kNumRoles;
    const ScalingStateLayout sl = ScalingStateLayout::For(num_fp8_tensors_, scaling_cfg_.history_len, kScaleSlot);
    FP8RT_RETURN_IF_ERROR(Alloc(&scaling_base_, static_cast<int64_t>(sl.total_bytes)));
    scaling_ = sl.Bind(scaling_base_);
    std::vector<uint8_t> formats(num_fp8_tensors_);
    for (int i = 0; i < num_fp8_tensors_; ++i) {
      formats[i] = static_cast<uint8_t>(FormatFor(scaling_cfg_.recipe, i % kNumRoles == kRoleDy));
    }
    FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling_base_ + sl.formats, formats.data(), formats.size()));
    FP8RT_RETURN_IF_ERROR(ops_->InitScaling(scaling_));
    calibrate_ = o_.fp8.first_step_current;
    FP8RT_RETURN_IF_ERROR(Alloc(&saturated_, num_fp8_tensors_));
    w8_.assign(slots, nullptr), w8t_.assign(slots, nullptr), x8t_.assign(slots, nullptr);
    int64_t max_n = 0, max_k = 0;
    for (int s = 0; s < slots; ++s) {
      const int kind = s == slots - 1 ? kLmHead : s % kNumLinear;
      if (!Fp8On(kind)) continue;
      int64_t N, K;
      LinearShape(kind, &N, &K);
      max_n = std::max(max_n, N), max_k = std::max(max_k, K);
      FP8RT_RETURN_IF_ERROR(Alloc(&w8_[s], N * K));
      FP8RT_RETURN_IF_ERROR(Alloc(&w8t_[s], N * K));
      FP8RT_RETURN_IF_ERROR(Alloc(&x8t_[s], M_ * K));
      ++num_fp8_weights_;
    }
    FP8RT_RETURN_IF_ERROR(Alloc(&x8_, M_ * max_k));
    FP8RT_RETURN_IF_ERROR(Alloc(&dy8_, M_ * max_n));
    FP8RT_RETURN_IF_ERROR(Alloc(&dy8t_, M_ * max_n));
  }

  {
    size_t scratch = 0;
    FP8RT_RETURN_IF_ERROR(ops_->ReserveScratchFor(as, kT, m.vocab_size, P, &scratch));
    allocated_bytes_ += scratch;
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::RefreshWorkingCopy() {
  std::vector<float> master(static_cast<size_t>(layout_.total));
  FP8RT_RETURN_IF_ERROR(ops_->Download(master.data(), master_, master.size() * sizeof(float)));
  for (int p = 0; p < kNumParams; ++p) {
    if (!HasWorking(p)) continue;
    std::vector<T> work(static_cast<size_t>(layout_.size[p]));
    for (size_t i = 0; i < work.size(); ++i) work[i] = T(master[layout_.offset[p] + i]);
    FP8RT_RETURN_IF_ERROR(ops_->Upload(W(static_cast<Param>(p)), work.data(), work.size() * sizeof(T)));
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::InitRandom(uint64_t seed) {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd;
  std::vector<float> host(static_cast<size_t>(layout_.total), 0.0f);
  SplitMix64 rng(seed);
  const float proj_std = 0.02f / std::sqrt(2.0f * m.n_layer);
  for (int p = 0; p < kNumParams; ++p) {
    float* t = host.data() + layout_.offset[p];
    const int64_t n = layout_.size[p];
    switch (p) {
      case kWte:  // rows of the vocabulary padding stay zero
        for (int64_t i = 0; i < int64_t{m.vocab_size} * C; ++i) t[i] = 0.02f * rng.Normal();
        break;
      case kWpe: case kQkvW: case kFcW:
        for (int64_t i = 0; i < n; ++i) t[i] = 0.02f * rng.Normal();
        break;
      case kAttProjW: case kFcProjW:
        for (int64_t i = 0; i < n; ++i) t[i] = proj_std * rng.Normal();
        break;
      case kLn1W: case kLn2W: case kLnfW:
        for (int64_t i = 0; i < n; ++i) t[i] = 1.0f;
        break;
      default:
        break;  // biases start at zero
    }
  }
  FP8RT_RETURN_IF_ERROR(ops_->Upload(master_, host.data(), host.size() * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->Zero(m_, host.size() * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->Zero(v_, host.size() * sizeof(float)));
  if (num_fp8_tensors_ > 0) FP8RT_RETURN_IF_ERROR(ops_->InitScaling(scaling_));
  calibrate_ = num_fp8_tensors_ > 0 && o_.fp8.first_step_current;
  return RefreshWorkingCopy();
}

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
Status Gpt<Ops, T>::LinearForward(int l, int kind, T* y, const T* x, const T* b, bool cast_w,
                                  T* gelu_out, bool* gelu_done, const T* residual) {
  int64_t N, K;
  LinearShape(kind, &N, &K);
  const Param wp = WeightOf(kind);
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
  if (!Fp8On(kind)) {
    ops_->Mark(kFpropNames[kind]);
    const T* w = W(wp) + l * N * K;
    GemmArgs g;
    g.M = M_, g.N = N, g.K = K;
    g.a = {x, kT};
    g.b = {w, kT, /*trans=*/true};
    g.d = y, g.d_dtype = kT;
    g.bias = b;
    g.epilogue = b ? Epilogue::kBias : Epilogue::kNone;
    return run(g);
  }
  const int slot = Slot(l, kind);
  const Fp8Tensor xq = Fp8Of(l, kind, kRoleX, x8_, x8t_[slot], M_, K);
  ops_->Mark("fp8 cast x (+T)");
  FP8RT_RETURN_IF_ERROR(Cast(x, xq, saturated_ + Fp8Index(l, kind, kRoleX)));
  const Fp8Tensor wq = Fp8Of(l, kind, kRoleW, w8_[slot], w8t_[slot], N, K);
  if (cast_w) {  // from the FP32 master weights
    ops_->Mark("fp8 cast w (+T)");
    const float* w = master_ + layout_.offset[wp] + l * N * K;
    FP8RT_RETURN_IF_ERROR(Cast(w, wq, saturated_ + Fp8Index(l, kind, kRoleW)));
    ++weight_casts_;
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
Status Gpt<Ops, T>::LinearBackward(int l, int kind, T* dx, float* dw, float* db, const T* dy,
                                   const T* x, const T* dgelu_aux, bool* dgelu_done,
                                   const T* dy_gelu_pre) {
  if (dy_gelu_pre != nullptr && (db == nullptr || !FusesGeluIntoDyCast(kind))) {
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
  // FP8 layers get db from the cast of dY (QuantizeDbias), the rest from a GEMM.
  if (db != nullptr && !Fp8On(kind)) {  // db (1, N) += ones (1, M) dY (M, N)
    ops_->Mark("gemm bias grad");
    GemmArgs g;
    g.M = 1, g.N = N, g.K = M_;
    g.a = {ones_, kT};
    g.b = {dy, kT};
    g.d = db, g.d_dtype = DType::kFloat32, g.beta = 1.0f;
    FP8RT_RETURN_IF_ERROR(ops_->Gemm(g));
  }
  if (!Fp8On(kind)) {
    const T* w = W(WeightOf(kind)) + l * N * K;
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
    gw.d = dw, gw.d_dtype = DType::kFloat32, gw.beta = wgrad_overwrites_ ? 0.0f : 1.0f;
    ops_->Mark(kWgradNames[kind]);
    return ops_->Gemm(gw);
  }
  const int slot = Slot(l, kind);
  const Fp8Tensor dyq = Fp8Of(l, kind, kRoleDy, dy8_, dy8t_, M_, N);
  typename Ops::Counter* const dy_saturated = saturated_ + Fp8Index(l, kind, kRoleDy);
  if (dy_gelu_pre != nullptr) {  // never while calibrating (FusesGeluIntoDyCast)
    ops_->Mark("fp8 cast dy (+T, +dbias, +gelu bwd)");
    FP8RT_RETURN_IF_ERROR(ops_->QuantizeDbiasGeluGrad(dy, dy_gelu_pre, dyq, db, dy_saturated));
  } else if (db != nullptr) {
    if (calibrate_now_) {  // the first step: this tensor's scale from its own amax, cast again below
      ops_->Mark("fp8 calibrate dy");
      FP8RT_RETURN_IF_ERROR(Cast(dy, dyq, nullptr));
    }
    ops_->Mark("fp8 cast dy (+T, +dbias)");
    FP8RT_RETURN_IF_ERROR(ops_->QuantizeDbias(dy, dyq, db, dy_saturated));
  } else {
    ops_->Mark("fp8 cast dy (+T)");
    FP8RT_RETURN_IF_ERROR(Cast(dy, dyq, dy_saturated));
  }
  const Fp8Tensor wq = Fp8Of(l, kind, kRoleW, w8_[slot], w8t_[slot], N, K);
  const Fp8Tensor xq = Fp8Of(l, kind, kRoleX, nullptr, x8t_[slot], M_, K);
  FP8RT_ASSIGN_OR_RETURN(GemmArgs gd, Fp8Dgrad(dyq, wq, dx, kT));
  ops_->Mark(kDgradNames[kind]);
  FP8RT_RETURN_IF_ERROR(run_dgrad(gd));
  FP8RT_ASSIGN_OR_RETURN(GemmArgs gw, Fp8Wgrad(dyq, xq, dw, /*accumulate=*/!wgrad_overwrites_));
  ops_->Mark(kWgradNames[kind]);
  return ops_->Gemm(gw);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ForwardPass(const int32_t* x_host, const int32_t* y_host, bool cast_weights,
                                bool compute_grad, int micro) {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd, Vp = m.padded_vocab(), V = m.vocab_size;
  const AttentionShape as{o_.B, o_.T, m.n_head, C / m.n_head};
  // x_host, y_host point into staging_, which stays untouched until the step's one Download.
  FP8RT_RETURN_IF_ERROR(ops_->UploadAsync(tokens_, x_host, M_ * sizeof(int32_t)));
  FP8RT_RETURN_IF_ERROR(ops_->UploadAsync(targets_, y_host, M_ * sizeof(int32_t)));
  ops_->Mark("embedding fwd");
  FP8RT_RETURN_IF_ERROR(
      ops_->EmbeddingForward(encoded_, tokens_, W(kWte), W(kWpe), o_.B, o_.T, C, V));
  const T* res = encoded_;
  for (int l = 0; l < m.n_layer; ++l) {
    ops_->Mark("layernorm fwd");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormForward(ln1_[l], ln1_mean_[l], ln1_rstd_[l], res,
                                                 W(kLn1W) + l * C, W(kLn1B) + l * C, M_, C));
    FP8RT_RETURN_IF_ERROR(
        LinearForward(l, kQkv, qkv_[l], ln1_[l], W(kQkvB) + l * 3 * C, cast_weights));
    ops_->Mark("attention fwd");
    FP8RT_RETURN_IF_ERROR(ops_->Attention(atty_[l], att_[l], qkv_[l], as));
    FP8RT_RETURN_IF_ERROR(LinearForward(l, kAttProj, res2_[l], atty_[l], W(kAttProjB) + l * C,
                                        cast_weights, nullptr, nullptr, /*residual=*/res));
    ops_->Mark("layernorm fwd");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormForward(ln2_[l], ln2_mean_[l], ln2_rstd_[l], res2_[l],
                                                 W(kLn2W) + l * C, W(kLn2B) + l * C, M_, C));
    bool gelu_done = false;
    FP8RT_RETURN_IF_ERROR(LinearForward(l, kFc, fch_[l], ln2_[l], W(kFcB) + l * 4 * C,
                                        cast_weights, fch_gelu_[l], &gelu_done));
    if (!gelu_done) {
      ops_->Mark("gelu fwd");
      FP8RT_RETURN_IF_ERROR(ops_->Gelu(fch_gelu_[l], fch_[l], M_ * 4 * C));
    }
    FP8RT_RETURN_IF_ERROR(LinearForward(l, kFcProj, res3_[l], fch_gelu_[l],
                                        W(kFcProjB) + l * C, cast_weights, nullptr, nullptr,
                                        /*residual=*/res2_[l]));
    res = res3_[l];
  }
  ops_->Mark("layernorm fwd");
  FP8RT_RETURN_IF_ERROR(
      ops_->LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, res, W(kLnfW), W(kLnfB), M_, C));
  FP8RT_RETURN_IF_ERROR(LinearForward(0, kLmHead, logits_, lnf_, nullptr, cast_weights));
  const float dloss = 1.0f / static_cast<float>(M_ * o_.grad_accum);
  ops_->Mark("softmax-xent");
  FP8RT_RETURN_IF_ERROR(ops_->CrossEntropy(losses_, logits_, targets_, M_, V, Vp, dloss,
                                           compute_grad));
  return ops_->MeanLoss(step_losses_ + micro, losses_, M_);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::BackwardPass() {
  const ModelConfig& m = o_.model;
  const int64_t C = m.n_embd, L = m.n_layer;
  const AttentionShape as{o_.B, o_.T, m.n_head, C / m.n_head};
  // logits_ holds dlogits now.
  FP8RT_RETURN_IF_ERROR(
      LinearBackward(0, kLmHead, dc1_, G(kWte), nullptr, logits_, lnf_));
  ops_->Mark("layernorm bwd");
  FP8RT_RETURN_IF_ERROR(ops_->LayerNormBackward(dres_, G(kLnfW), G(kLnfB), dc1_, res3_[L - 1],
                                                W(kLnfW), lnf_mean_, lnf_rstd_, M_, C, false));
  for (int64_t l = L - 1; l >= 0; --l) {
    const T* res_in = l == 0 ? encoded_ : res3_[l - 1];
    // dres_ is the gradient of this block's output (res3).
    bool dgelu_done = false;
    FP8RT_RETURN_IF_ERROR(LinearBackward(l, kFcProj, d4c_, G(kFcProjW) + l * 4 * C * C,
                                         G(kFcProjB) + l * C, dres_, fch_gelu_[l], fch_[l],
                                         &dgelu_done));
    // The GELU backward: in fc_proj's dgrad epilogue (BF16), else in fc's FP8 cast of its output
    // gradient, else a kernel of its own.
    const bool gelu_in_cast = !dgelu_done && FusesGeluIntoDyCast(kFc);
    if (!dgelu_done && !gelu_in_cast) {
      ops_->Mark("gelu bwd");
      FP8RT_RETURN_IF_ERROR(ops_->GeluBackward(d4c_, fch_[l], d4c_, M_ * 4 * C));
    }
    FP8RT_RETURN_IF_ERROR(LinearBackward(l, kFc, dc1_, G(kFcW) + l * 4 * C * C,
                                         G(kFcB) + l * 4 * C, d4c_, ln2_[l], nullptr, nullptr,
                                         gelu_in_cast ? fch_[l] : nullptr));
    ops_->Mark("layernorm bwd");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormBackward(dres_, G(kLn2W) + l * C, G(kLn2B) + l * C, dc1_,
                                                  res2_[l], W(kLn2W) + l * C, ln2_mean_[l],
                                                  ln2_rstd_[l], M_, C, true));
    // dres_ is now the gradient of res2.
    FP8RT_RETURN_IF_ERROR(LinearBackward(l, kAttProj, dc2_, G(kAttProjW) + l * C * C,
                                         G(kAttProjB) + l * C, dres_, atty_[l]));
    ops_->Mark("attention bwd");
    FP8RT_RETURN_IF_ERROR(ops_->AttentionBackward(dqkv_, dc2_, qkv_[l], atty_[l], att_[l], as));
    FP8RT_RETURN_IF_ERROR(LinearBackward(l, kQkv, dc1_, G(kQkvW) + l * 3 * C * C,
                                         G(kQkvB) + l * 3 * C, dqkv_, ln1_[l]));
    ops_->Mark("layernorm bwd");
    FP8RT_RETURN_IF_ERROR(ops_->LayerNormBackward(dres_, G(kLn1W) + l * C, G(kLn1B) + l * C, dc1_,
                                                  res_in, W(kLn1W) + l * C, ln1_mean_[l],
                                                  ln1_rstd_[l], M_, C, true));
  }
  ops_->Mark("embedding bwd");
  return ops_->EmbeddingBackward(G(kWte), G(kWpe), dres_, tokens_, o_.B, o_.T, C,
                                 o_.model.vocab_size);
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::Step(int step, float lr, const int32_t* x, const int32_t* y, StepStats* out) {
  const int64_t P = layout_.total;
  weight_casts_ = 0;
  // The previous step ended with a Download, so the staging buffer is free to refill.
  const int64_t n = M_ * o_.grad_accum;
  std::memcpy(staging_, x, n * sizeof(int32_t));
  std::memcpy(staging_ + n, y, n * sizeof(int32_t));
  ops_->Mark("zero grads");
  FP8RT_RETURN_IF_ERROR(ZeroGrads());
  for (int micro = 0; micro < o_.grad_accum; ++micro) {
    // FP8 weights are cast on the first micro-batch only and reused by the others. A fresh scale
    // state calibrates on the first micro-batch; the others use the scales it set.
    calibrate_now_ = calibrate_ && micro == 0;
    wgrad_overwrites_ = micro == 0;
    FP8RT_RETURN_IF_ERROR(
        ForwardPass(staging_ + micro * M_, staging_ + n + micro * M_, micro == 0, true, micro));
    FP8RT_RETURN_IF_ERROR(BackwardPass());
  }
  calibrate_now_ = false;
  wgrad_overwrites_ = false;
  ops_->Mark("grad norm");
  FP8RT_RETURN_IF_ERROR(ops_->NormSquared(norm_sq_, grads_, P));
  AdamWConfig cfg;
  cfg.lr = lr, cfg.beta1 = o_.beta1, cfg.beta2 = o_.beta2, cfg.eps = o_.eps;
  cfg.weight_decay = o_.weight_decay;
  ops_->Mark("adamw");
  for (int p = 0; p < kNumParams; ++p) {
    const int64_t off = layout_.offset[p];
    FP8RT_RETURN_IF_ERROR(ops_->AdamW(master_ + off, m_ + off, v_ + off, grads_ + off,
                                      W(static_cast<Param>(p)), layout_.size[p], step, cfg,
                                      kDecay[p] ? o_.weight_decay : 0.0f, norm_sq_, o_.grad_clip));
  }
  ops_->Mark("fp8 scaling update");
  if (num_fp8_tensors_ > 0) FP8RT_RETURN_IF_ERROR(ops_->UpdateScaling(scaling_, scaling_cfg_));
  calibrate_ = false;
  // The one host synchronisation of the step: the numbers the metrics need.
  std::vector<float> stats(static_cast<size_t>(o_.grad_accum + 1));
  ops_->Mark("step sync");
  FP8RT_RETURN_IF_ERROR(ops_->Download(stats.data(), step_losses_, stats.size() * sizeof(float)));
  ops_->EndProfileStep();
  double loss = 0;
  for (int i = 0; i < o_.grad_accum; ++i) loss += stats[i];
  out->loss = static_cast<float>(loss / o_.grad_accum);
  out->grad_norm = std::sqrt(stats[o_.grad_accum]);
  out->weight_casts = weight_casts_;
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::Forward(const int32_t* x, const int32_t* y, float* loss,
                            std::vector<float>* logits) {
  std::memcpy(staging_, x, M_ * sizeof(int32_t));
  std::memcpy(staging_ + M_, y, M_ * sizeof(int32_t));
  FP8RT_RETURN_IF_ERROR(ForwardPass(staging_, staging_ + M_, true, false, 0));
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
  // Evaluation must not feed the next training step's amax.
  if (num_fp8_tensors_ > 0) {
    FP8RT_RETURN_IF_ERROR(ops_->Zero(scaling_.amax, num_fp8_tensors_ * sizeof(float)));
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::Gradients(const int32_t* x, const int32_t* y, float* loss,
                              std::vector<float>* grads) {
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
  if (num_fp8_tensors_ > 0) {
    FP8RT_RETURN_IF_ERROR(ops_->Zero(scaling_.amax, num_fp8_tensors_ * sizeof(float)));
  }
  return Status::Ok();
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ExportState(std::vector<float>* master, std::vector<float>* m,
                                std::vector<float>* v) {
  const size_t n = static_cast<size_t>(layout_.total);
  master->resize(n), m->resize(n), v->resize(n);
  FP8RT_RETURN_IF_ERROR(ops_->Download(master->data(), master_, n * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->Download(m->data(), m_, n * sizeof(float)));
  return ops_->Download(v->data(), v_, n * sizeof(float));
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ImportState(const std::vector<float>& master, const std::vector<float>& m,
                                const std::vector<float>& v) {
  const size_t n = static_cast<size_t>(layout_.total);
  if (master.size() != n || m.size() != n || v.size() != n) {
    return Status::InvalidArgument(StrCat("state has ", master.size(), "/", m.size(), "/",
                                          v.size(), " values, the model has ", n));
  }
  FP8RT_RETURN_IF_ERROR(ops_->Upload(master_, master.data(), n * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(m_, m.data(), n * sizeof(float)));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(v_, v.data(), n * sizeof(float)));
  return RefreshWorkingCopy();
}

template <typename Ops, typename T>
Result<std::vector<TensorScaleRecord>> Gpt<Ops, T>::ExportScales() {
  std::vector<TensorScaleRecord> out;
  if (num_fp8_tensors_ == 0) return out;
  const int N = num_fp8_tensors_, H = scaling_.history_len;
  std::vector<float> hist(static_cast<size_t>(N) * H), scale(N), scale_inv(N * kScaleSlot),
      amax(N);
  int pos = 0;
  FP8RT_RETURN_IF_ERROR(ops_->Download(hist.data(), scaling_.amax_history, hist.size() * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(scale.data(), scaling_.scale, N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(scale_inv.data(), scaling_.scale_inv, N * kScaleSlot * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(amax.data(), scaling_.amax, N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(&pos, scaling_.pos, sizeof(int)));
  FP8RT_RETURN_IF_ERROR(ForEachFp8Linear([&](int l, int kind) -> Status {
    for (int role = 0; role < kNumRoles; ++role) {
      const int i = Fp8Index(l, kind, role);
      TensorScaleRecord r;
      r.name = Fp8Name(l, kind, role);
      r.format = FormatFor(scaling_cfg_.recipe, role == kRoleDy);
      r.pos = pos, r.amax = amax[i], r.scale = scale[i], r.scale_inv = scale_inv[i * kScaleSlot];
      r.amax_history.resize(H);
      for (int h = 0; h < H; ++h) r.amax_history[h] = hist[static_cast<size_t>(h) * N + i];
      out.push_back(std::move(r));
    }
    return Status::Ok();
  }));
  return out;
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ImportScales(const std::vector<TensorScaleRecord>& records) {
  auto mine = ExportScales();
  if (!mine.ok()) return mine.status();
  if (mine->size() != records.size()) {
    return Status::FailedPrecondition(
        StrCat("FP8 scale state has ", records.size(), " tensors, this model has ", mine->size(),
               " (use --reset-fp8-history to recalibrate)"));
  }
  const int N = num_fp8_tensors_, H = scaling_.history_len;
  std::vector<float> hist(static_cast<size_t>(N) * H), scale(N, 1.f), scale_inv(N * kScaleSlot, 1.f),
      amax(N);
  int pos = records.empty() ? 0 : records[0].pos;
  std::map<std::string, const TensorScaleRecord*> by_name;
  for (const auto& r : records) by_name[r.name] = &r;
  FP8RT_RETURN_IF_ERROR(ForEachFp8Linear([&](int l, int kind) -> Status {
    for (int role = 0; role < kNumRoles; ++role) {
      const int i = Fp8Index(l, kind, role);
      const std::string name = Fp8Name(l, kind, role);
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        return Status::FailedPrecondition(StrCat("FP8 scale state has no tensor '", name, "'"));
      }
      const TensorScaleRecord& r = *it->second;
      if (static_cast<int>(r.amax_history.size()) != H) {
        return Status::FailedPrecondition(
            StrCat("FP8 scale state of '", name, "' has history length ", r.amax_history.size(),
                   ", fp8.history_len is ", H, " (use --reset-fp8-history to recalibrate)"));
      }
      if (r.format != FormatFor(scaling_cfg_.recipe, role == kRoleDy)) {
        return Status::FailedPrecondition(
            StrCat("FP8 scale state of '", name, "' is ", Fp8FormatName(r.format),
                   ", fp8.recipe needs ",
                   Fp8FormatName(FormatFor(scaling_cfg_.recipe, role == kRoleDy))));
      }
      if (r.pos != pos || r.pos < 0 || r.pos >= H) {
        return Status::Corruption(StrCat("FP8 scale state of '", name, "' has ring position ",
                                         r.pos, " (expected ", pos, " in [0, ", H, "))"));
      }
      scale[i] = r.scale, scale_inv[i * kScaleSlot] = r.scale_inv, amax[i] = r.amax;
      for (int h = 0; h < H; ++h) hist[static_cast<size_t>(h) * N + i] = r.amax_history[h];
    }
    return Status::Ok();
  }));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling_.amax_history, hist.data(), hist.size() * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling_.scale, scale.data(), N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling_.scale_inv, scale_inv.data(), N * kScaleSlot * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling_.amax, amax.data(), N * 4));
  calibrate_ = false;  // the imported history carries on
  return ops_->Upload(scaling_.pos, &pos, sizeof(int));
}

template <typename Ops, typename T>
Status Gpt<Ops, T>::ResetFp8History() {
  if (num_fp8_tensors_ == 0) return Status::Ok();
  calibrate_ = o_.fp8.first_step_current;
  return ops_->InitScaling(scaling_);
}

template <typename Ops, typename T>
Result<std::vector<Fp8TelemetryRow>> Gpt<Ops, T>::Telemetry() {
  std::vector<Fp8TelemetryRow> rows;
  if (num_fp8_tensors_ == 0) return rows;
  std::vector<typename Ops::Counter> sat(num_fp8_tensors_);
  FP8RT_RETURN_IF_ERROR(ops_->Download(sat.data(), saturated_, sat.size() * sizeof(sat[0])));
  FP8RT_RETURN_IF_ERROR(ops_->Zero(saturated_, sat.size() * sizeof(sat[0])));
  FP8RT_ASSIGN_OR_RETURN(auto recs, ExportScales());
  for (const auto& r : recs) {
    Fp8TelemetryRow row;
    row.name = r.name;
    row.scale = r.scale;
    for (float a : r.amax_history) row.amax_history_max = std::max(row.amax_history_max, a);
    rows.push_back(row);
  }
  // Same order as ExportScales: walk the indices again for the counters.
  size_t k = 0;
  FP8RT_RETURN_IF_ERROR(ForEachFp8Linear([&](int l, int kind) -> Status {
    for (int role = 0; role < kNumRoles; ++role) {
      rows[k++].saturated = static_cast<uint64_t>(sat[Fp8Index(l, kind, role)]);
    }
    return Status::Ok();
  }));
  return rows;
}

template <typename Ops, typename T>
Result<std::unique_ptr<GptModel>> MakeGpt(const ModelOptions& o, std::unique_ptr<Ops> ops) {
  auto model = std::make_unique<Gpt<Ops, T>>(o, std::move(ops));
  FP8RT_RETURN_IF_ERROR(model->Setup());
  return std::unique_ptr<GptModel>(std::move(model));
}

}  // namespace fp8rt::gpt_detail
