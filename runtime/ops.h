// The two backends of fp8train behind one set of method names: CpuOps (the kernels' CPU
// references on host memory) and, in ops_cuda.h, CudaOps (the CUDA kernels on one stream). The
// model is written once against this interface (runtime/gpt_impl.h).
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/block_quantize.h"
#include "kernels/convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/fp8_attention.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/gqa.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/quantize.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/scaling.h"
#include "kernels/swiglu.h"
#include "runtime/op_profile.h"

namespace fp8rt {

class CpuOps {
 public:
  static constexpr bool kDevice = false;
  using Counter = uint64_t;  // saturation counters

  // Zeroed, 256-byte aligned host memory.
  void* Alloc(size_t bytes) {
    const size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
    if (p) std::memset(p, 0, rounded);
    return p;
  }
  void Free(void* p) { std::free(p); }
  Status Zero(void* p, size_t bytes) {
    std::memset(p, 0, bytes);
    return Status::Ok();
  }
  Status Upload(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  Status Download(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  // Host staging memory for inputs, and an upload that does not wait (the caller keeps `src`
  // unchanged until the next Download or Sync).
  void* AllocHost(size_t bytes) { return Alloc(bytes); }
  void FreeHost(void* p) { Free(p); }
  Status UploadAsync(void* dst, const void* src, size_t bytes) { return Upload(dst, src, bytes); }
  Status Sync() { return Status::Ok(); }
  // The checkpoint snapshot (runtime/gpt_state.h): host memory on the CPU.
  Status CopyOnDevice(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  Status DownloadFromAnotherThread(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  size_t FreeDeviceBytes() const { return 0; }
  // --profile-ops: Mark(op) before each op of a step, EndProfileStep() after the step's sync.
  void EnableProfile(bool on) { prof_.Enable(on); }
  void Mark(const char* op) { prof_.Mark(op); }
  void EndProfileStep() { prof_.EndStep(); }
  std::vector<OpTime> ProfileReport() const { return prof_.Report(); }
  // The CPU references need no scratch.
  Status ReserveScratchFor(const AttentionShape&, DType, int64_t V, int64_t P, int64_t C,
                           int64_t widest, int64_t gathered_rows, size_t* bytes) {
    *bytes = 0;
    return Status::Ok();
  }

  template <typename T>
  Status EmbeddingForward(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t B,
                          int64_t T_, int64_t C, int64_t V) {
    return cpu::EmbeddingForward(out, tok, wte, wpe, B, T_, C, V);
  }
  template <typename T>
  Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tok, int64_t B,
                           int64_t T_, int64_t C, int64_t V) {
    return cpu::EmbeddingBackward(dwte, dwpe, dout, tok, B, T_, C, V);
  }
  template <typename T>
  Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                                const int32_t* tok, int64_t n, int64_t C, int64_t V) {
    return cpu::EmbeddingBackwardSlice(dst, lo, count, dout, tok, n, C, V);
  }
  template <typename T>
  Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* w, const T* b,
                          int64_t N, int64_t C) {
    return cpu::LayerNormForward(out, mean, rstd, in, w, b, N, C, 1e-5f);
  }
  template <typename T>
  Status LayerNormBackward(T* din, float* dw, float* db, const T* dout, const T* in, const T* w,
                           const float* mean, const float* rstd, int64_t N, int64_t C,
                           bool accumulate) {
    return cpu::LayerNormBackward(din, dw, db, dout, in, w, mean, rstd, N, C, accumulate);
  }
  template <typename T>
  Status Gelu(T* out, const T* in, int64_t n) {
    return cpu::GeluForward(out, in, n);
  }
  // Llama's ops: RMSNorm (eps 1e-5), SwiGLU, RoPE in place on NH heads of each row (pitch ld),
  // and grouped-query attention's key/value expansion.
  template <typename T>
  Status RmsNormForward(T* out, float* rstd, const T* in, const T* w, int64_t N, int64_t C) {
    return cpu::RmsNormForward(out, rstd, in, w, N, C, 1e-5f);
  }
  // The norms with their output cast to FP8 (out.data) in the same op (kernels/layernorm.h).
  template <typename T>
  Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                             const T* w, const T* b, int64_t N, int64_t C, Counter* saturated) {
    return cpu::LayerNormForwardFp8(out, mean, rstd, in, w, b, N, C, 1e-5f, saturated);
  }
  template <typename T>
  Status RmsNormForwardFp8(const Fp8Tensor& out, float* rstd, const T* in, const T* w, int64_t N,
                           int64_t C, Counter* saturated) {
    return cpu::RmsNormForwardFp8(out, rstd, in, w, N, C, 1e-5f, saturated);
  }
  template <typename T>
  Status RmsNormBackward(T* din, float* dw, const T* dout, const T* in, const T* w,
                         const float* rstd, int64_t N, int64_t C, bool accumulate) {
    return cpu::RmsNormBackward(din, dw, dout, in, w, rstd, N, C, accumulate);
  }
  template <typename T>
  Status SwiGlu(T* out, const T* gu, int64_t N, int64_t F) {
    return cpu::SwiGluForward(out, gu, N, F);
  }
  template <typename T>
  Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F) {
    return cpu::SwiGluBackward(dgu, gu, dout, N, F);
  }
  template <typename T>
  Status Rope(T* x, int64_t B, int64_t T_, int64_t NH, int64_t HS, int64_t ld, float theta) {
    return cpu::RopeForward(x, x, B, T_, NH, HS, ld, theta);
  }
  template <typename T>
  Status RopeBackward(T* dx, int64_t B, int64_t T_, int64_t NH, int64_t HS, int64_t ld,
                      float theta) {
    return cpu::RopeBackward(dx, dx, B, T_, NH, HS, ld, theta);
  }
  template <typename T>
  Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
    return cpu::GqaExpand(out, in, M, NH, KV, HS);
  }
  template <typename T>
  Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
    return cpu::GqaReduce(din, dout, M, NH, KV, HS);
  }
  template <typename T>
  Status GeluBackward(T* din, const T* in, const T* dout, int64_t n) {
    return cpu::GeluBackward(din, in, dout, n);
  }
  // What the attention forward saves per layer for the backward: here the (B, NH, T, T)
  // probabilities in T. The backward does not read the forward's output.
  size_t AttentionSavedBytes(const AttentionShape& s, DType t) const {
    return static_cast<size_t>(s.B * s.NH * s.T * s.T) * (t == DType::kBFloat16 ? 2 : 4);
  }
  bool AttentionReadsOutput(const AttentionShape&, DType) const { return false; }
  std::string AttentionKernel(const AttentionShape&, DType) const { return "CPU reference"; }
  template <typename T>
  Status Attention(T* out, void* saved, const T* qkv, const AttentionShape& s) {
    return cpu::AttentionForward(out, static_cast<T*>(saved), qkv, s);
  }
  template <typename T>
  Status AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* /*out*/,
                           const void* saved, const AttentionShape& s) {
    return cpu::AttentionBackward(dqkv, dout, qkv, static_cast<const T*>(saved), s);
  }
  // fp8.attention: the emulation of cuDNN's FP8 attention (kernels/fp8_attention.h). Prepare
  // once per shape at setup (the workspace the passes need in the op scratch: none here).
  // Forward and Backward max their amaxes into the scale state's (sc's amax pointers; dQ, dK
  // and dV may share one), NaN sticking, as the casts do across micro-batches.
  std::string Fp8AttentionKernel() const { return "CPU emulation of cuDNN's FP8 attention"; }
  Status PrepareFp8Attention(const Fp8AttentionShape& s, Fp8AttentionFormats f, size_t* ws) {
    fp8_att_formats_ = f;
    *ws = 0;
    return ValidateFp8Attention(s);
  }
  Status Fp8AttentionForward(uint8_t* out, float* stats, const uint8_t* qkv,
                             const Fp8AttentionShape& s, const Fp8AttentionScales& sc) {
    float a[2] = {};
    Fp8AttentionScales mine = sc;
    mine.amax_s = &a[0], mine.amax_o = &a[1];
    FP8RT_RETURN_IF_ERROR(cpu::Fp8AttentionForward(out, stats, qkv, s, mine, fp8_att_formats_));
    FP8RT_RETURN_IF_ERROR(cpu::ComputeAmax(&a[0], 1, sc.amax_s));
    return cpu::ComputeAmax(&a[1], 1, sc.amax_o);
  }
  Status Fp8AttentionBackward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv,
                              const uint8_t* out, const float* stats, const Fp8AttentionShape& s,
                              const Fp8AttentionScales& sc) {
    float a[4] = {};
    Fp8AttentionScales mine = sc;
    mine.amax_dp = &a[0], mine.amax_dq = &a[1], mine.amax_dk = &a[2], mine.amax_dv = &a[3];
    FP8RT_RETURN_IF_ERROR(
        cpu::Fp8AttentionBackward(dqkv, dout, qkv, out, stats, s, mine, fp8_att_formats_));
    float* to[4] = {sc.amax_dp, sc.amax_dq, sc.amax_dk, sc.amax_dv};
    for (int i = 0; i < 4; ++i) FP8RT_RETURN_IF_ERROR(cpu::ComputeAmax(&a[i], 1, to[i]));
    return Status::Ok();
  }
  template <typename T>
  Status CrossEntropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                      int64_t Vp, float dloss, bool grad) {
    return cpu::SoftmaxCrossEntropy(losses, logits, targets, N, V, Vp, dloss, grad);
  }
  Status MeanLoss(float* out, const float* losses, int64_t N) {
    return cpu::MeanLoss(out, losses, N);
  }
  Status Gemm(const GemmArgs& g) { return cpu::Gemm(g); }
  template <typename T>
  Status Quantize(const T* in, const Fp8Tensor& out, Counter* saturated, void* /*on*/ = nullptr) {
    return cpu::Quantize(in, out, saturated);
  }
  // fp8.scaling: block (kernels/block_quantize.h).
  template <typename T>
  Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                        uint8_t* data, float* scale_inv) {
    return cpu::QuantizeVec128(in, rows, cols, f, pow2, data, scale_inv);
  }
  template <typename T>
  Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                               uint8_t* data_t, float* scale_inv_t) {
    return cpu::QuantizeVec128Columns(in, rows, cols, f, pow2, data_t, scale_inv_t);
  }
  template <typename T>
  Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                        uint8_t* data, float* scale_inv, uint8_t* data_t, float* scale_inv_t) {
    return cpu::QuantizeBlk128(in, rows, cols, f, pow2, data, scale_inv, data_t, scale_inv_t);
  }
  template <typename T>
  Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias, Counter* saturated) {
    return cpu::QuantizeDbias(in, out, dbias, saturated);
  }
  template <typename T>
  Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin, Counter* saturated,
                                void* /*on*/ = nullptr) {
    return cpu::QuantizeCurrentScaling(in, out, margin, saturated);
  }
  template <typename U>
  Status ComputeAmax(const U* in, int64_t n, float* amax) {
    return cpu::ComputeAmax(in, n, amax);
  }
  Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin) {
    return cpu::ScaleFromAmax(amax, scale, format, margin);
  }
  // With gelu_out, also GELU(pre)'s codes, transposed only (FC2's input under train.recompute).
  template <typename T>
  Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                               Counter* saturated, const Fp8Tensor* gelu_out = nullptr) {
    return cpu::QuantizeDbiasGeluGrad(dout, pre, out, dbias, saturated, gelu_out);
  }
  // pre as E4M3 codes at scale 1 (fp8.gelu_input_fp8).
  template <typename T>
  Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre, const Fp8Tensor& out,
                               float* dbias, Counter* saturated) {
    return cpu::QuantizeDbiasGeluGrad(dout, pre, out, dbias, saturated);
  }
  // A norm's output (RMSNorm's: mean and b null) cast to FP8 again from its input
  // (train.recompute's FP8 inputs): on the CPU recomputed as LayerNormForward (RmsNormForward)
  // computes it, from fp64 statistics, into `scratch` (N x C), then cast; the saved statistics
  // are neither read nor written.
  template <typename T>
  Status QuantizeNormOutput(const T* in, const float* /*mean*/, const float* /*rstd*/, const T* w,
                            const T* b, int64_t N, int64_t C, T* scratch, const Fp8Tensor& out) {
    FP8RT_RETURN_IF_ERROR(
        b != nullptr ? cpu::LayerNormForward(scratch, nullptr, nullptr, in, w, b, N, C, 1e-5f)
                     : cpu::RmsNormForward(scratch, nullptr, in, w, N, C, 1e-5f));
    return cpu::Quantize(scratch, out, nullptr);
  }
  // The GELU forward fused into the cast (FC2's input: the forward's, or train.recompute's
  // transposed copy in the backward).
  template <typename T>
  Status QuantizeGelu(const T* pre, const Fp8Tensor& out, Counter* saturated) {
    return cpu::QuantizeGelu(pre, out, saturated);
  }
  template <typename T>
  Status Dequantize(const Fp8Tensor& in, T* out) {
    return cpu::Dequantize(in, out);
  }
  Status UpdateScaling(const ScalingState& s, const DelayedScalingConfig& c) {
    return cpu::UpdateDelayedScaling(s, c);
  }
  Status InitScaling(const ScalingState& s) { return cpu::InitScalingState(s); }
  Status AmaxNanToInf(float* amax, int64_t n) { return cpu::AmaxNanToInf(amax, n); }
  Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols,
                      void* /*on*/ = nullptr) {
    return cpu::TransposeFp8(out, in, rows, cols);
  }
  Status FloatToBf16(bf16* out, const float* in, int64_t n) { return cpu::FloatToBf16(out, in, n); }
  Status Bf16ToFloat(float* out, const bf16* in, int64_t n) { return cpu::Bf16ToFloat(out, in, n); }
  // ZeRO-3: out = in (or out + in) in FP32, in FP32 or BF16; `on`: a stream ForkComm returned.
  template <typename In>
  Status AccumulateShard(float* out, const In* in, int64_t n, bool add, void* /*on*/) {
    return cpu::AccumulateShard(out, in, n, add);
  }
  Status NormSquared(float* out, const float* g, int64_t n, bool accumulate = false) {
    return cpu::GlobalNormSquared(out, g, n, accumulate);
  }

  // Collectives across ranks. On the CPU they run synchronously when called: ForkComm,
  // JoinComm, MarkComm and WaitComm order nothing, CommStream is null (comm::Communicator's
  // host-buffer streams) and a timer sums the host time between its Start and Stop calls.
  void* ForkComm() { return nullptr; }
  void* ComputeStream() { return nullptr; }
  Status JoinComm() { return Status::Ok(); }
  Status MarkComm(int, void*) { return Status::Ok(); }
  Status WaitComm(int) { return Status::Ok(); }
  // cuDNN attention's workspaces (ops_cuda.h): none on the CPU.
  void AttentionWorkspaceBytes(const AttentionShape&, DType, size_t* fwd, size_t* bwd) {
    *fwd = *bwd = 0;
  }
  void SetAttentionWorkspaces(void*, size_t, void*, size_t) {}
  // The weight-cast stream (ops_cuda.h): on the CPU every cast runs when called.
  void* ForkCast() { return nullptr; }
  Status MarkCast(int) { return Status::Ok(); }
  Status WaitCast(int) { return Status::Ok(); }
  // The segment timer (ops_cuda.h): host time between SegmentStart and SegmentStop, summed per
  // set; SegmentsRotate returns the set closed the time before.
  void SegmentStart(void*) { seg_start_ = std::chrono::steady_clock::now(); }
  void SegmentStop(void*) {
    seg_ms_[1] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                            seg_start_)
                      .count();
  }
  double SegmentsRotate() {
    const double ms = seg_ms_[0];
    seg_ms_[0] = seg_ms_[1], seg_ms_[1] = 0;
    return ms;
  }
  void CommTimerStart(int k) { timer_start_[k] = std::chrono::steady_clock::now(); }
  void CommTimerStop(int k) {
    timer_ms_[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              timer_start_[k])
                        .count();
  }
  // After the step's synchronisation: the timer's milliseconds this step (and reset).
  double CommTimerMs(int k) {
    const double ms = timer_ms_[k];
    timer_ms_[k] = 0;
    return ms;
  }
  template <typename T, typename M>
  Status AdamW(float* master, M* m, M* v, const float* g, T* working, int64_t n, int step,
               const AdamWConfig& cfg, float wd, const float* norm_sq, float max_norm) {
    return cpu::AdamW(master, m, v, g, working, n, step, cfg, wd, norm_sq, max_norm);
  }

 private:
  HostOpProfiler prof_;
  std::chrono::steady_clock::time_point timer_start_[2], seg_start_;
  double timer_ms_[2] = {0, 0};  // gradients, amaxes
  double seg_ms_[2] = {0, 0};    // the segment timer: the set closed last, the open one
  Fp8AttentionFormats fp8_att_formats_;
};

}  // namespace fp8rt
