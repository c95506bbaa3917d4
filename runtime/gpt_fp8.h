// The FP8 state of the GPT model: which linear layers run in FP8, the scaling state of every FP8
// tensor (one contiguous amax buffer, scales, histories), the FP8 buffers (cached weights, saved
// inputs, gradient casts), the first-step calibration, the tensors' names and slots, and the
// export/import of scales and the telemetry. The one place the amax reduction touches.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/block_quantize.h"
#include "kernels/fp8.h"
#include "kernels/fp8_attention.h"
#include "kernels/scaling.h"
#include "runtime/gpt.h"
#include "runtime/gpt_layout.h"

namespace fp8rt::gpt_detail {

enum Fp8Role { kRoleX, kRoleW, kRoleDy, kNumRoles };
inline const char* kRoleNames[kNumRoles] = {"input", "weight", "grad_output"};
// fp8.attention: each layer's FP8 attention tensors, after every linear's in the scale state:
// Q/K/V codes, the quantized probabilities, the output, its gradient, the quantized score
// gradient and the Q/K/V gradient. The first three in the forward format, the rest in the
// gradients'.
enum Fp8AttRole { kAttQkv, kAttProbs, kAttOut, kAttDout, kAttDscores, kAttDqkv, kNumAttRoles };
inline const char* kAttRoleNames[kNumAttRoles] = {"qkv",         "probs",       "output",
                                                  "grad_output", "grad_scores", "grad_qkv"};
inline bool AttRoleIsGradient(int role) { return role >= kAttDout; }

template <typename Ops>
class Fp8State {
 public:
  // A 64-byte slot per tensor's scale_inv (ScalingState::scale_inv_stride): cuBLASLt reads it as
  // the GEMM's scale and needs 16-byte-aligned scale pointers.
  static constexpr int kScaleSlot = 16;
  using Counter = typename Ops::Counter;

  Fp8State(const ModelOptions& o, Ops* ops) : o_(o), ops_(ops) {}

  // Allocates the scaling state and the FP8 buffers for M tokens per micro-batch through
  // `alloc(void** p, int64_t bytes, MemCategory what[, int layer])` (layer: the layer whose
  // backward reads the buffer last). Nothing when the model does not run in FP8.
  template <typename AllocFn>
  Status Setup(int64_t M, AllocFn&& alloc) {
    if (o_.precision != Precision::kFp8) return Status::Ok();
    M_ = M;
    cfg = o_.fp8.scaling;
    FP8RT_RETURN_IF_ERROR(cfg.Validate());
    const int slots = static_cast<int>(o_.model.n_layer) * kNumLinear + 1;
    att_base = slots * kNumRoles;
    num_tensors =
        att_base + (o_.fp8.attention ? static_cast<int>(o_.model.n_layer) * kNumAttRoles : 0);
    const ScalingStateLayout sl = ScalingStateLayout::For(num_tensors, cfg.history_len, kScaleSlot);
    FP8RT_RETURN_IF_ERROR(
        alloc(reinterpret_cast<void**>(&base_), static_cast<int64_t>(sl.total_bytes), kMemScaling));
    scaling = sl.Bind(base_);
    std::vector<uint8_t> formats(num_tensors);
    for (int i = 0; i < num_tensors; ++i) formats[i] = static_cast<uint8_t>(FormatOf(i));
    FP8RT_RETURN_IF_ERROR(ops_->Upload(base_ + sl.formats, formats.data(), formats.size()));
    FP8RT_RETURN_IF_ERROR(InitScales());
    current = o_.fp8.mode == ScalingMode::kCurrent;
    block = o_.fp8.mode == ScalingMode::kBlock;
    if (block && !o_.fp8.keep_weight_transpose) {
      return Status::InvalidArgument(
          "fp8.scaling: block needs fp8.keep_weight_transpose: true (the 128x128 weight cast "
          "writes its transposed copy and that copy's scales in one pass)");
    }
    calibrate = CalibratesFresh();
    FP8RT_RETURN_IF_ERROR(
        alloc(reinterpret_cast<void**>(&saturated), int64_t{num_tensors} * sizeof(Counter),
              kMemScaling));
    if (current) {
      FP8RT_RETURN_IF_ERROR(
          alloc(reinterpret_cast<void**>(&cur_amax), int64_t{num_tensors} * sizeof(float), kMemScaling));
    }
    w8.assign(slots, nullptr), w8t.assign(slots, nullptr), x8t.assign(slots, nullptr);
    ws.assign(slots, nullptr), wst.assign(slots, nullptr), xst.assign(slots, nullptr);
    int64_t max_n = 0, max_k = 0, max_xs = 0, max_dys = 0, max_dyst = 0;
    for (int s = 0; s < slots; ++s) {
      const int kind = s == slots - 1 ? kLmHead : s % kNumLinear;
      if (!On(kind)) continue;
      int64_t N, K;
      LinearShape(o_.model, kind, &N, &K, o_.tp_size());
      max_n = std::max(max_n, N), max_k = std::max(max_k, K);
      if (CachesWeights() && !(ring_layers && kind != kLmHead)) {
        FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&w8[s]), N * K, kMemFp8Weights));
        if (KeepsTranspose()) {
          FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&w8t[s]), N * K, kMemFp8Weights));
        }
      }
      // (a layer's saved input: `alloc` may place it in the gradient memory of the layers below;
      // none where the backward casts it again, recast[kind]: the model's one buffer instead)
      if (kind != kLmHead && recast[kind]) {
        x8t[s] = recast_to;
      } else {
        FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x8t[s]), M_ * K, kMemFp8Saved,
                                    kind == kLmHead ? -1 : s / kNumLinear));
      }
      ++num_weights;
      if (!block) continue;
      // Block scales: the weight's 128x128 grid and its transpose's, the saved input's columns'.
      auto floats = [&](float** p, int64_t n, MemCategory what) {
        return alloc(reinterpret_cast<void**>(p), n * int64_t{sizeof(float)}, what);
      };
      FP8RT_RETURN_IF_ERROR(floats(&ws[s], BlockLayout::Blk128ScaleCount(N, K), kMemFp8Weights));
      FP8RT_RETURN_IF_ERROR(floats(&wst[s], BlockLayout::Blk128ScaleCount(K, N), kMemFp8Weights));
      FP8RT_RETURN_IF_ERROR(floats(&xst[s], BlockLayout::Vec128ScaleCount(K, M_), kMemFp8Saved));
      max_xs = std::max(max_xs, BlockLayout::Vec128ScaleCount(M_, K));
      max_dys = std::max(max_dys, BlockLayout::Vec128ScaleCount(M_, N));
      max_dyst = std::max(max_dyst, BlockLayout::Vec128ScaleCount(N, M_));
    }
    if (block) {
      const std::pair<float**, int64_t> shared[] = {{&xs, max_xs}, {&dys, max_dys}, {&dyst, max_dyst}};
      for (const auto& [p, n] : shared) {
        FP8RT_RETURN_IF_ERROR(
            alloc(reinterpret_cast<void**>(p), n * int64_t{sizeof(float)}, kMemFp8Scratch));
      }
    }
    if (!KeepsTranspose() && ring_layers && On(kLmHead)) {  // (the LM head's dgrad copy)
      int64_t N, K;
      LinearShape(o_.model, kLmHead, &N, &K, o_.tp_size());
      FP8RT_RETURN_IF_ERROR(
          alloc(reinterpret_cast<void**>(&w8t[slots - 1]), N * K, kMemFp8Scratch));
    }
    if (!KeepsTranspose() && !ring_layers) {
      // Two layers' weights (or transposed copies), by the layer's parity: a layer's casts or
      // transposes for a pass run a layer ahead of its GEMMs (LaunchWeightCasts), into the half
      // the layer before last has finished with. Uncached, a slot's forward cast and its dgrad's
      // transposed cast share its place (one pass at a time); the LM head (cast on the compute
      // stream) has a buffer of its own.
      int64_t off[kNumLinear] = {}, layer_bytes = 0;
      for (int kind = 0; kind < kNumLinear; ++kind) {
        if (!On(kind)) continue;
        int64_t N, K;
        LinearShape(o_.model, kind, &N, &K, o_.tp_size());
        off[kind] = layer_bytes;
        layer_bytes += (N * K + 255) / 256 * 256;
      }
      uint8_t* pair = nullptr;
      if (layer_bytes > 0) {
        FP8RT_RETURN_IF_ERROR(
            alloc(reinterpret_cast<void**>(&pair), 2 * layer_bytes, kMemFp8Scratch));
      }
      for (int s = 0; s < slots - 1; ++s) {
        const int kind = s % kNumLinear;
        if (!On(kind)) continue;
        w8t[s] = pair + (s / kNumLinear % 2) * layer_bytes + off[kind];
        if (!CachesWeights()) w8[s] = w8t[s];
      }
      if (On(kLmHead)) {
        int64_t N, K;
        LinearShape(o_.model, kLmHead, &N, &K, o_.tp_size());
        uint8_t* own = nullptr;
        FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&own), N * K, kMemFp8Scratch));
        w8t[slots - 1] = own;
        if (!CachesWeights()) w8[slots - 1] = own;
      }
    }
    FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&x8), M_ * max_k, kMemFp8Scratch));
    FP8RT_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&dy8), M_ * max_n, kMemFp8Scratch));
    return alloc(reinterpret_cast<void**>(&dy8t), M_ * max_n, kMemFp8Scratch);
  }

  bool On(int kind) const {
    if (o_.precision != Precision::kFp8) return false;
    switch (kind) {
      case kQkv:
        return o_.fp8.qkv;
      case kAttProj:
        return o_.fp8.attn_proj;
      case kFc:
        return o_.fp8.fc;
      case kFcProj:
        return o_.fp8.fc_proj;
      case kLmHead:
        return o_.fp8.lm_head;
    }
    return false;
  }
  // The (layer, kind) slot of FP8 buffers; the LM head comes after the layers' linears.
  int Slot(int l, int kind) const {
    return kind == kLmHead ? o_.model.n_layer * kNumLinear : l * kNumLinear + kind;
  }
  int Index(int l, int kind, int role) const { return Slot(l, kind) * kNumRoles + role; }
  std::string Name(int l, int kind, int role) const {
    return kind == kLmHead ? StrCat("lm_head.", kRoleNames[role])
                           : StrCat("h", l, ".", kLinearNames[kind], ".", kRoleNames[role]);
  }
  Counter* SaturatedOf(int l, int kind, int role) const { return saturated + Index(l, kind, role); }
  // fp8.attention's tensors of layer l.
  int AttIndex(int l, int role) const { return att_base + l * kNumAttRoles + role; }
  std::string AttName(int l, int role) const {
    return StrCat("h", l, ".attention.", kAttRoleNames[role]);
  }
  Counter* AttSaturatedOf(int l, int role) const { return saturated + AttIndex(l, role); }
  // Every tensor's format: a linear's role's, or an attention tensor's.
  Fp8Format FormatOf(int i) const {
    if (i >= att_base) {
      return FormatFor(cfg.recipe, AttRoleIsGradient((i - att_base) % kNumAttRoles));
    }
    return FormatFor(cfg.recipe, i % kNumRoles == kRoleDy);
  }
  Fp8Tensor AttOf(int l, int role, uint8_t* data, int64_t rows, int64_t cols) const {
    const int i = AttIndex(l, role);
    Fp8Tensor t;
    t.data = data;
    t.rows = rows;
    t.cols = cols;
    t.format = FormatOf(i);
    t.scale = scaling.scale + i;
    t.scale_inv = scaling.scale_inv + kScaleSlot * i;
    t.amax = scaling.amax + i;
    return t;
  }
  // Layer l's attention scales as FP8 attention reads them: scales and amaxes in the scale state
  // (4-byte aligned), descales in the 64-byte scale_inv slots. Q, K and V share the qkv codes'
  // scale; dQ, dK and dV the grad_qkv one (and its amax, which the Ops max into).
  Fp8AttentionScales AttScales(int l) const {
    auto scale = [&](int r) { return scaling.scale + AttIndex(l, r); };
    auto descale = [&](int r) { return scaling.scale_inv + kScaleSlot * AttIndex(l, r); };
    auto amax = [&](int r) { return scaling.amax + AttIndex(l, r); };
    Fp8AttentionScales sc;
    sc.descale_q = sc.descale_k = sc.descale_v = descale(kAttQkv);
    sc.scale_s = scale(kAttProbs), sc.descale_s = descale(kAttProbs);
    sc.scale_o = scale(kAttOut), sc.descale_o = descale(kAttOut);
    sc.descale_do = descale(kAttDout);
    sc.scale_dp = scale(kAttDscores), sc.descale_dp = descale(kAttDscores);
    sc.scale_dq = sc.scale_dk = sc.scale_dv = scale(kAttDqkv);
    sc.amax_s = amax(kAttProbs), sc.amax_o = amax(kAttOut), sc.amax_dp = amax(kAttDscores);
    sc.amax_dq = sc.amax_dk = sc.amax_dv = amax(kAttDqkv);
    return sc;
  }
  // (from the options: valid before Setup)
  Fp8AttentionFormats AttFormats() const {
    return {FormatFor(o_.fp8.scaling.recipe, false), FormatFor(o_.fp8.scaling.recipe, true)};
  }
  Fp8Tensor Of(int l, int kind, int role, uint8_t* data, uint8_t* data_t, int64_t rows,
               int64_t cols) const {
    const int i = Index(l, kind, role);
    Fp8Tensor t;
    t.data = data;
    t.data_t = data_t;
    t.rows = rows;
    t.cols = cols;
    t.format = FormatFor(cfg.recipe, role == kRoleDy);
    t.scale = scaling.scale + i;
    t.scale_inv = scaling.scale_inv + kScaleSlot * i;
    t.amax = scaling.amax + i;
    return t;
  }
  // Calls fn(l, kind) for every linear layer running in FP8, in a fixed order (layers, then the
  // LM head): the order of ExportScales, ImportScales and Telemetry.
  template <typename Fn>
  Status ForEachLinear(Fn&& fn) const {
    for (int l = 0; l <= o_.model.n_layer; ++l) FP8RT_RETURN_IF_ERROR(ForLayerLinears(l, fn));
    return Status::Ok();
  }
  // The same for layer l's FP8 linears only (l = n_layer: the LM head).
  template <typename Fn>
  Status ForLayerLinears(int l, Fn&& fn) const {
    for (int kind = 0; kind <= kNumLinear; ++kind) {
      if ((l == o_.model.n_layer) != (kind == kLmHead) || !On(kind)) continue;
      FP8RT_RETURN_IF_ERROR(fn(l, kind));
    }
    return Status::Ok();
  }
  // Calls fn(index, name, attention) for every FP8 tensor, in the order of ExportScales,
  // ImportScales and Telemetry: the linears' (ForEachLinear, by role), then the attention
  // tensors' (fp8.attention), layer by layer.
  template <typename Fn>
  Status ForEachTensor(Fn&& fn) const {
    FP8RT_RETURN_IF_ERROR(ForEachLinear([&](int l, int kind) -> Status {
      for (int role = 0; role < kNumRoles; ++role) {
        FP8RT_RETURN_IF_ERROR(fn(Index(l, kind, role), Name(l, kind, role), false));
      }
      return Status::Ok();
    }));
    if (!o_.fp8.attention) return Status::Ok();
    for (int l = 0; l < o_.model.n_layer; ++l) {
      for (int role = 0; role < kNumAttRoles; ++role) {
        FP8RT_RETURN_IF_ERROR(fn(AttIndex(l, role), AttName(l, role), true));
      }
    }
    return Status::Ok();
  }
  // Casts in to out: with current scaling while calibrating, else with the delayed scale.
  // on: a stream Ops::ForkCast returned, else the compute stream.
  template <typename U>
  Status Cast(const U* in, const Fp8Tensor& out, Counter* sat, void* on = nullptr) {
    if (calibrate_now) return ops_->QuantizeCurrentScaling(in, out, cfg.margin, sat, on);
    return ops_->Quantize(in, out, sat, on);
  }
  // Zeroes the amaxes (after an evaluation pass, which must not feed the next step's scales); with
  // keep_weights, the weights' (kRoleW) stay.
  Status ClearAmax(bool keep_weights = false) {
    if (num_tensors == 0) return Status::Ok();
    if (!keep_weights) return ops_->Zero(scaling.amax, num_tensors * sizeof(float));
    std::vector<float> a(static_cast<size_t>(num_tensors));
    FP8RT_RETURN_IF_ERROR(ops_->Download(a.data(), scaling.amax, a.size() * sizeof(float)));
    for (int i = 0; i < num_tensors; ++i) {
      if (i >= att_base || i % kNumRoles != kRoleW) a[static_cast<size_t>(i)] = 0.0f;
    }
    return ops_->Upload(scaling.amax, a.data(), a.size() * sizeof(float));
  }

  Result<std::vector<uint8_t>> CachedWeight(const std::string& name) const;
  Result<std::vector<TensorScaleRecord>> ExportScales() const;
  Status ImportScales(const std::vector<TensorScaleRecord>& records);
  Status ResetHistory() {
    if (num_tensors == 0) return Status::Ok();
    calibrate = CalibratesFresh();
    return InitScales();
  }
  // Fresh scales (InitRandom).
  Status Init() {
    if (num_tensors == 0) return Status::Ok();
    FP8RT_RETURN_IF_ERROR(InitScales());
    calibrate = CalibratesFresh();
    return Status::Ok();
  }
  // The initial state (scale 1, empty histories), but the attention probabilities' scale starts
  // where their history puts it: P <= 1, so the format's largest value.
  Status InitScales() {
    FP8RT_RETURN_IF_ERROR(ops_->InitScaling(scaling));
    if (!o_.fp8.attention) return Status::Ok();
    for (int l = 0; l < o_.model.n_layer; ++l) {
      const int i = AttIndex(l, kAttProbs);
      const float scale = FreshScale(i), inv = 1.0f / scale;
      FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.scale + i, &scale, sizeof scale));
      FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.scale_inv + kScaleSlot * i, &inv, sizeof inv));
    }
    return Status::Ok();
  }
  // A fresh tensor's scale: 1, but the format's largest value for the attention probabilities.
  float FreshScale(int i) const {
    const bool probs = i >= att_base && (i - att_base) % kNumAttRoles == kAttProbs;
    return probs ? Fp8MaxFinite(FormatOf(i)) : 1.0f;
  }
  Result<std::vector<Fp8TelemetryRow>> Telemetry();
  // A fresh delayed-scaling state calibrates its first step (fp8.first_step_current); current
  // scaling has nothing to calibrate.
  bool CalibratesFresh() const { return o_.fp8.first_step_current && !current && !block; }

  DelayedScalingConfig cfg;
  // fp8.scaling: current. Every cast's scale comes from its own input's amax (in cur_amax, one
  // slot per tensor), computed just before it; the casts still max-accumulate the step's amaxes
  // into scaling.amax, which go through the step's amax reduction into the histories as under
  // delayed scaling (for telemetry, --inspect-scales and the cross-rank check); the scales the
  // delayed update writes are replaced by the next casts'.
  bool current = false;
  float* cur_amax = nullptr;
  // fp8.scaling: block (runtime/gpt_block_scaling.h). Every cast computes its blocks' scales
  // from the blocks themselves, E4M3 with power-of-two scales; the per-tensor state above stays
  // allocated but unused (no amax reduction, no history update), so the scale store and the
  // cross-rank check see a constant state. Per slot: the weight's 128x128 scale grid and its
  // transposed copy's, and the saved input's columns' 1x128 scales; shared: the forward input's
  // 1x128 scales and the output gradient's (rows, and columns for wgrad).
  bool block = false;
  static constexpr bool kBlockPow2 = true;
  std::vector<float*> ws, wst, xst;
  float *xs = nullptr, *dys = nullptr, *dyst = nullptr;
  ScalingState scaling;
  int num_tensors = 0, num_weights = 0;
  int att_base = 0;  // the first attention tensor's index (fp8.attention): after the linears' 
  // The scale state is fresh (initial scale 1, empty history): the next step's first micro-batch
  // casts with current scaling when fp8.first_step_current asks for it (calibrate_now while it
  // runs). Cleared by that step's scaling update and by ImportScales.
  bool calibrate = false;
  bool calibrate_now = false;
  // Per (layer, kind) slot. Without fp8.keep_weight_transpose a layer's w8t lies in the half of
  // a two-layer buffer that the layer's parity picks (the LM head's in a buffer of its own),
  // filled from w8 before the layer's dgrads (KeepsTranspose false). Without fp8.cache_weights
  // the layer's w8 is the same place, which each pass's cast fills: the forward's from the
  // master weights, the backward's transposed only, also from them (CachesWeights false).
  std::vector<uint8_t*> w8, w8t, x8t;
  // Set before Setup (ZeRO-3): the layers' FP8 weights and transposed copies are not allocated
  // here; the model points w8 and w8t of layer slots into its ring of gathered layers.
  bool ring_layers = false;
  // Set before Setup: the block linears whose FP8 transposed input is not saved but cast again
  // in the backward (train.recompute); their x8t is recast_to, the model's one buffer for them
  // (in the logits' arena).
  bool recast[kNumLinear] = {};
  uint8_t* recast_to = nullptr;
  // FC2's transposed dY codes while FC's dY cast runs before FC2's wgrad (FusesRecastIntoDyCast;
  // in the arena after recast_to), else null.
  uint8_t* dy8t_held = nullptr;
  bool CachesWeights() const { return o_.fp8.cache_weights; }
  bool KeepsTranspose() const { return o_.fp8.keep_weight_transpose && CachesWeights(); }
  uint8_t* x8 = nullptr;  // the forward's row-major input cast, shared: only x8t is saved
  uint8_t *dy8 = nullptr, *dy8t = nullptr;  // shared, (B*T, max N)
  Counter* saturated = nullptr;             // per FP8 tensor

 private:
  const ModelOptions& o_;
  Ops* ops_;
  int64_t M_ = 0;
  uint8_t* base_ = nullptr;
};

template <typename Ops>
Result<std::vector<uint8_t>> Fp8State<Ops>::CachedWeight(const std::string& name) const {
  if (!CachesWeights()) {
    return Status::FailedPrecondition(StrCat("no cached FP8 weight '", name,
                                             "': fp8.cache_weights is false, so each pass casts "
                                             "the weights again and keeps none"));
  }
  std::vector<uint8_t> bytes;
  FP8RT_RETURN_IF_ERROR(ForEachLinear([&](int l, int kind) -> Status {
    if (Name(l, kind, kRoleW) != name) return Status::Ok();
    int64_t N, K;
    LinearShape(o_.model, kind, &N, &K, o_.tp_size());
    bytes.resize(static_cast<size_t>(N * K));
    return ops_->Download(bytes.data(), w8[Slot(l, kind)], bytes.size());
  }));
  if (bytes.empty()) return Status::NotFound(StrCat("no FP8 weight named '", name, "'"));
  return bytes;
}

template <typename Ops>
Result<std::vector<TensorScaleRecord>> Fp8State<Ops>::ExportScales() const {
  std::vector<TensorScaleRecord> out;
  if (num_tensors == 0) return out;
  const int N = num_tensors, H = scaling.history_len;
  std::vector<float> hist(static_cast<size_t>(N) * H), scale(N), scale_inv(N * kScaleSlot), amax(N);
  int pos = 0;
  FP8RT_RETURN_IF_ERROR(ops_->Download(hist.data(), scaling.amax_history, hist.size() * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(scale.data(), scaling.scale, N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(scale_inv.data(), scaling.scale_inv, N * kScaleSlot * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(amax.data(), scaling.amax, N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Download(&pos, scaling.pos, sizeof(int)));
  FP8RT_RETURN_IF_ERROR(ForEachTensor([&](int i, const std::string& name, bool) -> Status {
    TensorScaleRecord r;
    r.name = name;
    r.format = FormatOf(i);
    r.pos = pos, r.amax = amax[i], r.scale = scale[i], r.scale_inv = scale_inv[i * kScaleSlot];
    r.amax_history.resize(H);
    for (int h = 0; h < H; ++h) r.amax_history[h] = hist[static_cast<size_t>(h) * N + i];
    out.push_back(std::move(r));
    return Status::Ok();
  }));
  return out;
}

// A state saved before fp8.attention was on has no attention tensors: theirs start fresh (the
// probabilities' scale at the format's largest value, the others at 1, empty histories); every
// other tensor must be there, and no record may name a tensor this model lacks.
template <typename Ops>
Status Fp8State<Ops>::ImportScales(const std::vector<TensorScaleRecord>& records) {
  if (num_tensors == 0 && records.empty()) return Status::Ok();
  const int N = num_tensors, H = scaling.history_len;
  std::vector<float> hist(static_cast<size_t>(N) * H), scale(N, 1.f),
      scale_inv(N * kScaleSlot, 1.f), amax(N);
  int pos = records.empty() ? 0 : records[0].pos;
  std::map<std::string, const TensorScaleRecord*> by_name;
  for (const auto& r : records) by_name[r.name] = &r;
  size_t matched = 0;
  FP8RT_RETURN_IF_ERROR(ForEachTensor([&](int i, const std::string& name, bool att) -> Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      if (att) {  // (fresh)
        scale[i] = FreshScale(i), scale_inv[i * kScaleSlot] = 1.0f / scale[i];
        return Status::Ok();
      }
      return Status::FailedPrecondition(StrCat("FP8 scale state has no tensor '", name,
                                               "' (use --reset-fp8-history to recalibrate)"));
    }
    ++matched;
    const TensorScaleRecord& r = *it->second;
    if (static_cast<int>(r.amax_history.size()) != H) {
      return Status::FailedPrecondition(
          StrCat("FP8 scale state of '", name, "' has history length ", r.amax_history.size(),
                 ", fp8.history_len is ", H, " (use --reset-fp8-history to recalibrate)"));
    }
    if (r.format != FormatOf(i)) {
      return Status::FailedPrecondition(StrCat("FP8 scale state of '", name, "' is ",
                                               Fp8FormatName(r.format), ", fp8.recipe needs ",
                                               Fp8FormatName(FormatOf(i))));
    }
    if (r.pos != pos || r.pos < 0 || r.pos >= H) {
      return Status::Corruption(StrCat("FP8 scale state of '", name, "' has ring position ",
                                       r.pos, " (expected ", pos, " in [0, ", H, "))"));
    }
    scale[i] = r.scale, scale_inv[i * kScaleSlot] = r.scale_inv, amax[i] = r.amax;
    for (int h = 0; h < H; ++h) hist[static_cast<size_t>(h) * N + i] = r.amax_history[h];
    return Status::Ok();
  }));
  if (matched != records.size()) {
    return Status::FailedPrecondition(
        StrCat("FP8 scale state has ", records.size(), " tensors, ", records.size() - matched,
               " of them not in this model (", N, " FP8 tensors; use --reset-fp8-history to "
               "recalibrate)"));
  }
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.amax_history, hist.data(), hist.size() * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.scale, scale.data(), N * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.scale_inv, scale_inv.data(), N * kScaleSlot * 4));
  FP8RT_RETURN_IF_ERROR(ops_->Upload(scaling.amax, amax.data(), N * 4));
  calibrate = false;  // the imported history carries on
  return ops_->Upload(scaling.pos, &pos, sizeof(int));
}

template <typename Ops>
Result<std::vector<Fp8TelemetryRow>> Fp8State<Ops>::Telemetry() {
  std::vector<Fp8TelemetryRow> rows;
  if (num_tensors == 0) return rows;
  std::vector<Counter> sat(num_tensors);
  FP8RT_RETURN_IF_ERROR(ops_->Download(sat.data(), saturated, sat.size() * sizeof(sat[0])));
  FP8RT_RETURN_IF_ERROR(ops_->Zero(saturated, sat.size() * sizeof(sat[0])));
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
  FP8RT_RETURN_IF_ERROR(ForEachTensor([&](int i, const std::string&, bool) -> Status {
    rows[k++].saturated = static_cast<uint64_t>(sat[i]);
    return Status::Ok();
  }));
  return rows;
}

}  // namespace fp8rt::gpt_detail
