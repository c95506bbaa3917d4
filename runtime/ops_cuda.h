// CudaOps: the CUDA kernels on one stream, with one shared scratch buffer (ops run in stream
// order, so they can share it) and one GemmRunner. Same method names as CpuOps (runtime/ops.h).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cudnn_attention.h"
#include "runtime/ops.h"
#include "runtime/ops_cuda_fp8_attention.h"

namespace fp8rt {

// CUDA-event marks on the ops' stream, read back after the step's one synchronisation.
class DeviceOpProfiler {
 public:
  DeviceOpProfiler() = default;
  DeviceOpProfiler(const DeviceOpProfiler&) = delete;
  DeviceOpProfiler& operator=(const DeviceOpProfiler&) = delete;
  ~DeviceOpProfiler() {
    for (auto& m : marks_) pool_.push_back(m.second);
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }
  void Enable(bool on, cudaStream_t stream) { on_ = on, stream_ = stream; }
  void Mark(const char* op) {
    if (!on_) return;
    cudaEvent_t e = nullptr;
    if (!pool_.empty()) {
      e = pool_.back();
      pool_.pop_back();
    } else if (cudaEventCreate(&e) != cudaSuccess) {
      on_ = false;  // profiling is best-effort; the step itself must not fail for it
      return;
    }
    cudaEventRecord(e, stream_);
    marks_.emplace_back(op, e);
  }
  void EndStep() {
    if (!on_ || marks_.empty()) return;
    Mark("(step end)");
    cudaEventSynchronize(marks_.back().second);
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks_[i].second, marks_[i + 1].second);
      totals_.Add(marks_[i].first, ms);
    }
    totals_.EndStep();
    for (auto& m : marks_) pool_.push_back(m.second);
    marks_.clear();
  }
  std::vector<OpTime> Report() const { return totals_.Report(); }

 private:
  bool on_ = false;
  cudaStream_t stream_ = nullptr;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
  std::vector<cudaEvent_t> pool_;
  OpTotals totals_;
};

class CudaOps {
 public:
  static constexpr bool kDevice = true;
  using Counter = unsigned long long;

  CudaOps() = default;
  ~CudaOps() {
    if (scratch_) cudaFree(scratch_);
    for (cudaEvent_t e : {forked_, joined_}) {
      if (e) cudaEventDestroy(e);
    }
    for (cudaEvent_t e : marked_) cudaEventDestroy(e);
    for (cudaEvent_t e : cast_marks_) cudaEventDestroy(e);
    if (cast_forked_) cudaEventDestroy(cast_forked_);
    if (cast_stream_) cudaStreamDestroy(cast_stream_);
    for (auto& set : segments_) {
      for (auto& [a, b] : set) cudaEventDestroy(a), cudaEventDestroy(b);
    }
    for (auto& t : timer_) {
      for (cudaEvent_t e : t) {
        if (e) cudaEventDestroy(e);
      }
    }
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    if (read_stream_) cudaStreamDestroy(read_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // attention: which kernels BF16 attention runs on (ModelOptions::attention): "auto" (cuDNN's
  // fused flash attention where libcudnn.so.9 loads and takes the shape, else the flash kernels,
  // else the GEMM version), "cudnn", "flash" or "gemm" (an error at setup where it cannot run);
  // "cudnn-nondeterministic": cuDNN with the backward engines that accumulate dQ with atomics
  // (faster, no dP workspace; the bits differ from run to run, so resume is no longer bit-exact).
  Status Init(int device, const std::string& attention = "auto") {
    cuda::CudnnAttentionOptions cudnn_options;
    if (attention == "auto") {
      attention_mode_ = AttentionMode::kAuto;
    } else if (attention == "cudnn" || attention == "cudnn-nondeterministic") {
      attention_mode_ = AttentionMode::kCudnn;
      cudnn_options.deterministic = attention == "cudnn";
    } else if (attention == "flash") {
      attention_mode_ = AttentionMode::kFlash;
    } else if (attention == "gemm") {
      attention_mode_ = AttentionMode::kGemm;
    } else {
      return Status::InvalidArgument(
          StrCat("attention '", attention,
                 "': expected auto, cudnn, cudnn-nondeterministic, flash or gemm"));
    }
    FP8RT_CUDA_TRY(cudaSetDevice(device));
    device_ = device;
    FP8RT_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FP8RT_CUDA_TRY(cudaStreamCreateWithFlags(&read_stream_, cudaStreamNonBlocking));
    // Diagnostics: FP8RT_COMM_STREAM=compute runs every collective on the compute stream, in
    // order (no overlap), to tell a stream-ordering race from anything else.
    const char* cs = std::getenv("FP8RT_COMM_STREAM");
    comm_on_compute_ = cs != nullptr && std::string(cs) == "compute";
    FP8RT_ASSIGN_OR_RETURN(gemm_, GemmRunner::Create());
    if (Wants(AttentionMode::kCudnn)) {
      auto c = cuda::CudnnAttention::Create(cudnn_options);
      cudnn_deterministic_ = cudnn_options.deterministic;
      if (!c.ok()) {
        if (attention_mode_ == AttentionMode::kCudnn) return c.status();
        cudnn_refusal_ = c.status().ToString();
      } else {
        cudnn_ = std::move(*c);
      }
    }
    return Status::Ok();
  }
  // Grows the shared scratch to at least `bytes` (called at model setup, never in a step).
  Status ReserveScratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return Status::Ok();
    if (scratch_) FP8RT_CUDA_TRY(cudaFree(scratch_));
    FP8RT_CUDA_TRY(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
    return Status::Ok();
  }
  // Scratch for every op of a model with these shapes (this rank's attention s; embedding,
  // LayerNorm and RMSNorm backward over the whole width C; gradient norm over P parameters; the
  // bias gradient of the widest linear output, `widest` columns; the embedding gradient of
  // `gathered_rows` positions, every data-parallel rank's, when it is added sparsely).
  Status ReserveScratchFor(const AttentionShape& s, DType t, int64_t V, int64_t P, int64_t C,
                           int64_t widest, int64_t gathered_rows, size_t* bytes) {
    const int64_t M = s.B * s.T;
    const AttentionMode path = PathFor(s, t);
    if (t == DType::kBFloat16 && attention_mode_ != AttentionMode::kAuto &&
        path != attention_mode_) {
      return Status::InvalidArgument(
          StrCat("--attention cannot run B=", s.B, " T=", s.T, " NH=", s.NH, " HS=", s.HS, ": ",
                 attention_mode_ == AttentionMode::kCudnn ? cudnn_refusal_ : flash_refusal_));
    }
    // (cuDNN's workspaces where the model gave them their own memory: SetAttentionWorkspaces)
    size_t need = path == AttentionMode::kCudnn
                      ? (attn_ws_set_ ? 0 : cudnn_->WorkspaceBytes(s))
                  : path == AttentionMode::kFlash ? cuda::FlashAttentionScratchBytes(s)
                                                  : AttentionScratchBytes(s, t);
    auto emb = cuda::EmbeddingBackwardScratchBytes(std::max(M, gathered_rows), 1, V, C);
    if (!emb.ok()) return emb.status();
    need = std::max(need, *emb);
    need = std::max(need, cuda::LayerNormBackwardScratchBytes(M, C));
    need = std::max(need, cuda::RmsNormBackwardScratchBytes(M, C));
    need = std::max(need, cuda::GlobalNormSquaredScratchBytes(P));
    need = std::max(need, cuda::QuantizeDbiasScratchBytes(M, widest));
    need = std::max(need, fp8_att_.WorkspaceBytes());  // (fp8.attention: PrepareFp8Attention)
    *bytes = need;
    return ReserveScratch(need);
  }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  // cuDNN attention's forward and backward workspaces for shape s (0 and 0 on the other paths,
  // whose scratch is small and stays in the op scratch). May build cuDNN's plans.
  void AttentionWorkspaceBytes(const AttentionShape& s, DType t, size_t* fwd, size_t* bwd) {
    *fwd = *bwd = 0;
    if (PathFor(s, t) != AttentionMode::kCudnn) return;
    *fwd = cudnn_->ForwardWorkspaceBytes(s);
    *bwd = cudnn_->BackwardWorkspaceBytes(s);
  }
  // The memory cuDNN attention's forward and backward use from now on instead of the op scratch
  // (the model's buffers that are dead during each pass's attention); before ReserveScratchFor,
  // which then leaves them out.
  void SetAttentionWorkspaces(void* fwd, size_t fwd_bytes, void* bwd, size_t bwd_bytes) {
    attn_fwd_ws_ = fwd, attn_fwd_bytes_ = fwd_bytes;
    attn_bwd_ws_ = bwd, attn_bwd_bytes_ = bwd_bytes;
    attn_ws_set_ = true;
  }

  // --profile-ops: Mark(op) before each op of a step, EndProfileStep() after the step's sync.
  void EnableProfile(bool on) { prof_.Enable(on, stream_); }
  void Mark(const char* op) { prof_.Mark(op); }
  void EndProfileStep() { prof_.EndStep(); }
  std::vector<OpTime> ProfileReport() const { return prof_.Report(); }

  // Zeroed on the compute stream, so that the zeroing comes before anything enqueued after it
  // (an Upload right away, a collective forked from it). Not cudaMemset: the legacy default
  // stream it runs on is not ordered with the non-blocking compute stream, and a late memset
  // wiped uploads (the FP8 formats of one rank, so its gradient scales were 128x off).
  void* Alloc(size_t bytes) {
    void* p = nullptr;
    bytes = std::max<size_t>(bytes, 256);
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    if (cudaMemsetAsync(p, 0, bytes, stream_) != cudaSuccess ||
        cudaStreamSynchronize(stream_) != cudaSuccess) {
      cudaFree(p);
      return nullptr;
    }
    return p;
  }
  void Free(void* p) { cudaFree(p); }
  Status Zero(void* p, size_t bytes) {
    FP8RT_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, stream_));
    return Status::Ok();
  }
  Status Upload(void* dst, const void* src, size_t bytes) {
    FP8RT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    // The host buffer may be reused right after: wait for the copy (inputs are tiny).
    FP8RT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  Status Download(void* dst, const void* src, size_t bytes) {
    FP8RT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    FP8RT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  void* AllocHost(size_t bytes) {
    void* p = nullptr;
    return cudaMallocHost(&p, std::max<size_t>(bytes, 256)) == cudaSuccess ? p : nullptr;
  }
  void FreeHost(void* p) { cudaFreeHost(p); }
  // From pinned memory (AllocHost) this is truly asynchronous: no host synchronisation.
  Status UploadAsync(void* dst, const void* src, size_t bytes) {
    FP8RT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    return Status::Ok();
  }
  Status Sync() {
    FP8RT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  // The checkpoint snapshot (runtime/gpt_state.h): a device copy on the compute stream, ordered
  // after the step that wrote the state; read back later by another thread (the checkpoint
  // writer) on a stream of its own, beside training's; the room there is for it.
  Status CopyOnDevice(void* dst, const void* src, size_t bytes) {
    FP8RT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return Status::Ok();
  }
  Status DownloadFromAnotherThread(void* dst, const void* src, size_t bytes) {
    FP8RT_CUDA_TRY(cudaSetDevice(device_));
    FP8RT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, read_stream_));
    FP8RT_CUDA_TRY(cudaStreamSynchronize(read_stream_));
    return Status::Ok();
  }
  size_t FreeDeviceBytes() const {
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? free_b : 0;
  }

  template <typename T>
  Status EmbeddingForward(T* out, const int32_t* tok, const T* wte, const T* wpe, int64_t B,
                          int64_t T_, int64_t C, int64_t V) {
    return cuda::EmbeddingForward(out, tok, wte, wpe, B, T_, C, V, stream_);
  }
  template <typename T>
  Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tok, int64_t B,
                           int64_t T_, int64_t C, int64_t V) {
    return cuda::EmbeddingBackward(dwte, dwpe, dout, tok, B, T_, C, V, scratch_, scratch_bytes_,
                                   stream_);
  }
  template <typename T>
  Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                                const int32_t* tok, int64_t n, int64_t C, int64_t V) {
    return cuda::EmbeddingBackwardSlice(dst, lo, count, dout, tok, n, C, V, scratch_,
                                        scratch_bytes_, stream_);
  }
  template <typename T>
  Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* w, const T* b,
                          int64_t N, int64_t C) {
    return cuda::LayerNormForward(out, mean, rstd, in, w, b, N, C, 1e-5f, stream_);
  }
  template <typename T>
  Status LayerNormBackward(T* din, float* dw, float* db, const T* dout, const T* in, const T* w,
                           const float* mean, const float* rstd, int64_t N, int64_t C,
                           bool accumulate) {
    return cuda::LayerNormBackward(din, dw, db, dout, in, w, mean, rstd, N, C, accumulate, scratch_,
                                   scratch_bytes_, stream_);
  }
  template <typename T>
  Status Gelu(T* out, const T* in, int64_t n) {
    return cuda::GeluForward(out, in, n, stream_);
  }
  // Llama's ops (CpuOps says what each does).
  template <typename T>
  Status RmsNormForward(T* out, float* rstd, const T* in, const T* w, int64_t N, int64_t C) {
    return cuda::RmsNormForward(out, rstd, in, w, N, C, 1e-5f, stream_);
  }
  template <typename T>
  Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                             const T* w, const T* b, int64_t N, int64_t C, Counter* saturated) {
    return cuda::LayerNormForwardFp8(out, mean, rstd, in, w, b, N, C, 1e-5f, saturated, stream_);
  }
  template <typename T>
  Status RmsNormForwardFp8(const Fp8Tensor& out, float* rstd, const T* in, const T* w, int64_t N,
                           int64_t C, Counter* saturated) {
    return cuda::RmsNormForwardFp8(out, rstd, in, w, N, C, 1e-5f, saturated, stream_);
  }
  template <typename T>
  Status RmsNormBackward(T* din, float* dw, const T* dout, const T* in, const T* w,
                         const float* rstd, int64_t N, int64_t C, bool accumulate) {
    return cuda::RmsNormBackward(din, dw, dout, in, w, rstd, N, C, accumulate, scratch_,
                                 scratch_bytes_, stream_);
  }
  template <typename T>
  Status SwiGlu(T* out, const T* gu, int64_t N, int64_t F) {
    return cuda::SwiGluForward(out, gu, N, F, stream_);
  }
  template <typename T>
  Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F) {
    return cuda::SwiGluBackward(dgu, gu, dout, N, F, stream_);
  }
  template <typename T>
  Status Rope(T* x, int64_t B, int64_t T_, int64_t NH, int64_t HS, int64_t ld, float theta) {
    return cuda::RopeForward(x, x, B, T_, NH, HS, ld, theta, 0, stream_);
  }
  template <typename T>
  Status RopeBackward(T* dx, int64_t B, int64_t T_, int64_t NH, int64_t HS, int64_t ld,
                      float theta) {
    return cuda::RopeBackward(dx, dx, B, T_, NH, HS, ld, theta, 0, stream_);
  }
  template <typename T>
  Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
    return cuda::GqaExpand(out, in, M, NH, KV, HS, stream_);
  }
  template <typename T>
  Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
    return cuda::GqaReduce(din, dout, M, NH, KV, HS, stream_);
  }
  template <typename T>
  Status GeluBackward(T* din, const T* in, const T* dout, int64_t n) {
    return cuda::GeluBackward(din, in, dout, n, stream_);
  }
  // BF16 attention runs cuDNN's fused flash attention or our flash kernels (PathFor); both save
  // one FP32 log-sum-exp per query (cuDNN's in natural log, ours in base 2: each backward reads
  // its own forward's) and read the forward's output in the backward. Otherwise (FP32, or a shape
  // neither takes) the GEMM version, which saves the (B, NH, T, T) probabilities.
  size_t AttentionSavedBytes(const AttentionShape& s, DType t) {
    if (PathFor(s, t) != AttentionMode::kGemm) {
      return static_cast<size_t>(s.B * s.NH * s.T) * sizeof(float);
    }
    return static_cast<size_t>(s.B * s.NH * s.T * s.T) * (t == DType::kBFloat16 ? 2 : 4);
  }
  bool AttentionReadsOutput(const AttentionShape& s, DType t) {
    return PathFor(s, t) != AttentionMode::kGemm;
  }
  // For logs: which kernels attention of this shape runs on, and why not a faster one.
  std::string AttentionKernel(const AttentionShape& s, DType t) {
    switch (PathFor(s, t)) {
      case AttentionMode::kCudnn:
        return StrCat(cudnn_->Version(), " fused flash attention (",
                      cudnn_deterministic_ ? "deterministic" : "nondeterministic", " backward)");
      case AttentionMode::kFlash:
        return StrCat("fp8rt flash kernels",
                      cudnn_refusal_.empty() ? "" : StrCat(" (cuDNN: ", cudnn_refusal_, ")"));
      default:
        return StrCat("cuBLASLt GEMMs + softmax", t != DType::kBFloat16 ? " (FP32)"
                                                  : flash_refusal_.empty()
                                                      ? ""
                                                      : StrCat(" (flash: ", flash_refusal_, ")"));
    }
  }
  template <typename T>
  Status Attention(T* out, void* saved, const T* qkv, const AttentionShape& s) {
    if constexpr (std::is_same_v<T, bf16>) {
      switch (PathFor(s, DType::kBFloat16)) {
        case AttentionMode::kCudnn:
          return attn_ws_set_ ? cudnn_->Forward(out, static_cast<float*>(saved), qkv, s,
                                                attn_fwd_ws_, attn_fwd_bytes_, stream_)
                              : cudnn_->Forward(out, static_cast<float*>(saved), qkv, s, scratch_,
                                                scratch_bytes_, stream_);
        case AttentionMode::kFlash:
          return cuda::FlashAttentionForward(out, static_cast<float*>(saved), qkv, s, stream_);
        default:
          break;
      }
    }
    return cuda::AttentionForward(*gemm_, out, static_cast<T*>(saved), qkv, scratch_,
                                  scratch_bytes_, s, stream_);
  }
  template <typename T>
  Status AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* out, const void* saved,
                           const AttentionShape& s) {
    if constexpr (std::is_same_v<T, bf16>) {
      switch (PathFor(s, DType::kBFloat16)) {
        case AttentionMode::kCudnn:
          return cudnn_->Backward(dqkv, dout, qkv, out, static_cast<const float*>(saved), s,
                                  attn_ws_set_ ? attn_bwd_ws_ : scratch_,
                                  attn_ws_set_ ? attn_bwd_bytes_ : scratch_bytes_, stream_);
        case AttentionMode::kFlash:
          return cuda::FlashAttentionBackward(dqkv, dout, qkv, out,
                                              static_cast<const float*>(saved), scratch_,
                                              scratch_bytes_, s, stream_);
        default:
          break;
      }
    }
    return cuda::AttentionBackward(*gemm_, dqkv, dout, qkv, static_cast<const T*>(saved), scratch_,
                                   scratch_bytes_, s, stream_);
  }
  // fp8.attention (runtime/ops_cuda_fp8_attention.h): deterministic unless the BF16 attention
  // was asked for cuDNN's nondeterministic backward. Prepare once per shape at set-up, before
  // ReserveScratchFor, which then reserves its workspace in the op scratch.
  std::string Fp8AttentionKernel() const { return fp8_att_.Kernel(); }
  Status PrepareFp8Attention(const Fp8AttentionShape& s, Fp8AttentionFormats f, size_t* ws) {
    return fp8_att_.Prepare(s, f, attention_mode_ != AttentionMode::kCudnn || cudnn_deterministic_,
                            ws);
  }
  Status Fp8AttentionForward(uint8_t* out, float* stats, const uint8_t* qkv,
                             const Fp8AttentionShape& s, const Fp8AttentionScales& sc) {
    return fp8_att_.Forward(out, stats, qkv, s, sc, scratch_, scratch_bytes_, stream_);
  }
  Status Fp8AttentionBackward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv,
                              const uint8_t* out, const float* stats, const Fp8AttentionShape& s,
                              const Fp8AttentionScales& sc) {
    return fp8_att_.Backward(dqkv, dout, qkv, out, stats, s, sc, scratch_, scratch_bytes_,
                             stream_);
  }
  template <typename T>
  Status CrossEntropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                      int64_t Vp, float dloss, bool grad) {
    return cuda::SoftmaxCrossEntropy(losses, logits, targets, N, V, Vp, dloss, grad, stream_);
  }
  Status MeanLoss(float* out, const float* losses, int64_t N) {
    return cuda::MeanLoss(out, losses, N, stream_);
  }
  Status Gemm(const GemmArgs& g) { return gemm_->Run(g, stream_); }
  // on: a stream ForkCast returned (the weights' casts, a layer ahead); the compute stream by
  // default.
  template <typename T>
  Status Quantize(const T* in, const Fp8Tensor& out, Counter* saturated, void* on = nullptr) {
    return cuda::Quantize(in, out, saturated, on != nullptr ? static_cast<cudaStream_t>(on) : stream_);
  }
  template <typename T>
  Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                        uint8_t* data, float* scale_inv) {
    return cuda::QuantizeVec128(in, rows, cols, f, pow2, data, scale_inv, stream_);
  }
  template <typename T>
  Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                               uint8_t* data_t, float* scale_inv_t) {
    return cuda::QuantizeVec128Columns(in, rows, cols, f, pow2, data_t, scale_inv_t, stream_);
  }
  template <typename T>
  Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                        uint8_t* data, float* scale_inv, uint8_t* data_t, float* scale_inv_t) {
    return cuda::QuantizeBlk128(in, rows, cols, f, pow2, data, scale_inv, data_t, scale_inv_t,
                                stream_);
  }
  template <typename T>
  Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias, Counter* saturated) {
    return cuda::QuantizeDbias(in, out, dbias, saturated, scratch_, scratch_bytes_, stream_);
  }
  template <typename T>
  Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin, Counter* saturated,
                                void* on = nullptr) {
    return cuda::QuantizeCurrentScaling(in, out, margin, saturated,
                                        on != nullptr ? static_cast<cudaStream_t>(on) : stream_);
  }
  template <typename U>
  Status ComputeAmax(const U* in, int64_t n, float* amax) {
    return cuda::ComputeAmax(in, n, amax, stream_);
  }
  Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin) {
    return cuda::ScaleFromAmax(amax, scale, format, margin, stream_);
  }
  // With gelu_out, also GELU(pre)'s codes, transposed only (FC2's input under train.recompute).
  template <typename T>
  Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                               Counter* saturated, const Fp8Tensor* gelu_out = nullptr) {
    return cuda::QuantizeDbiasGeluGrad(dout, pre, out, dbias, saturated, scratch_, scratch_bytes_,
                                       stream_, gelu_out);
  }
  // pre as E4M3 codes at scale 1 (fp8.gelu_input_fp8).
  template <typename T>
  Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre, const Fp8Tensor& out,
                               float* dbias, Counter* saturated) {
    return cuda::QuantizeDbiasGeluGrad(dout, pre, out, dbias, saturated, scratch_, scratch_bytes_,
                                       stream_);
  }
  // As the CPU's, in one pass from the forward's saved statistics (cuda::QuantizeLayerNorm: the
  // forward kernels' output for them, bit for bit); scratch is not used.
  template <typename T>
  Status QuantizeNormOutput(const T* in, const float* mean, const float* rstd, const T* w,
                            const T* b, int64_t /*N*/, int64_t /*C*/, T* /*scratch*/,
                            const Fp8Tensor& out) {
    return cuda::QuantizeLayerNorm(in, mean, rstd, w, b, out, nullptr, stream_);
  }
  template <typename T>
  Status QuantizeGelu(const T* pre, const Fp8Tensor& out, Counter* saturated) {
    return cuda::QuantizeGelu(pre, out, saturated, stream_);
  }
  template <typename T>
  Status Dequantize(const Fp8Tensor& in, T* out) {
    return cuda::Dequantize(in, out, stream_);
  }
  Status UpdateScaling(const ScalingState& s, const DelayedScalingConfig& c) {
    return cuda::UpdateDelayedScaling(s, c, stream_);
  }
  Status InitScaling(const ScalingState& s) { return cuda::InitScalingState(s, stream_); }
  Status AmaxNanToInf(float* amax, int64_t n) { return cuda::AmaxNanToInf(amax, n, stream_); }
  // on: a stream ForkComm returned, behind the collectives enqueued there so far (ZeRO-1's
  // gathered weights, transposed beside the computation); the compute stream by default.
  Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols,
                      void* on = nullptr) {
    return cuda::TransposeFp8(out, in, rows, cols,
                              on != nullptr ? static_cast<cudaStream_t>(on) : stream_);
  }
  Status FloatToBf16(bf16* out, const float* in, int64_t n) {
    return cuda::FloatToBf16(out, in, n, stream_);
  }
  Status Bf16ToFloat(float* out, const bf16* in, int64_t n) {
    return cuda::Bf16ToFloat(out, in, n, stream_);
  }
  template <typename In>
  Status AccumulateShard(float* out, const In* in, int64_t n, bool add, void* on) {
    return cuda::AccumulateShard(out, in, n, add,
                                 on != nullptr ? static_cast<cudaStream_t>(on) : stream_);
  }

  // Collectives across ranks run on a second stream, so that gradient reductions overlap the
  // rest of the backward pass: ForkComm makes the communication stream wait for the work
  // enqueued so far and returns it; JoinComm makes the compute stream wait for every collective
  // enqueued so far. Timers are event pairs on the communication stream (start of the first
  // Start to the end of the last Stop of a step), read after the step's synchronisation.
  // The compute stream, for collectives that the computation waits on in order (tensor
  // parallelism's all-reduces).
  void* ComputeStream() { return stream_; }
  void* ForkComm() {
    if (comm_on_compute_) return stream_;
    if (!EnsureCommStream()) return nullptr;
    cudaEventRecord(forked_, stream_);
    cudaStreamWaitEvent(comm_stream_, forked_, 0);
    return comm_stream_;
  }
  Status JoinComm() {
    if (comm_stream_ == nullptr) return Status::Ok();
    FP8RT_CUDA_TRY(cudaEventRecord(joined_, comm_stream_));
    FP8RT_CUDA_TRY(cudaStreamWaitEvent(stream_, joined_, 0));
    return Status::Ok();
  }
  // Finer than JoinComm: MarkComm(i, s) records mark i on s (a stream ForkComm returned, after
  // what is enqueued there so far), WaitComm(i) makes the compute stream wait for it. ZeRO-1's
  // weight all-gather marks each layer, so the next forward waits for a layer's weights only.
  Status MarkComm(int i, void* s) {
    while (static_cast<int>(marked_.size()) <= i) {
      cudaEvent_t e = nullptr;
      FP8RT_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      marked_.push_back(e);
    }
    FP8RT_CUDA_TRY(cudaEventRecord(marked_[i], static_cast<cudaStream_t>(s)));
    return Status::Ok();
  }
  Status WaitComm(int i) {
    if (i >= static_cast<int>(marked_.size())) return Status::Ok();
    FP8RT_CUDA_TRY(cudaStreamWaitEvent(stream_, marked_[i], 0));
    return Status::Ok();
  }
  // The FP8 weights' casts run on a stream of their own, a layer ahead of the computation that
  // reads them (runtime/gpt_linear.h, LaunchWeightCasts), and fp8.gelu_input_fp8's casts: ForkCast makes that stream wait for
  // the work enqueued on the compute stream so far and returns it, MarkCast(i) records mark i on
  // it after what is enqueued there, WaitCast(i) makes the compute stream wait for mark i.
  void* ForkCast() {
    if (cast_stream_ == nullptr) {
      if (cudaStreamCreateWithFlags(&cast_stream_, cudaStreamNonBlocking) != cudaSuccess ||
          cudaEventCreateWithFlags(&cast_forked_, cudaEventDisableTiming) != cudaSuccess) {
        return nullptr;
      }
    }
    if (cudaEventRecord(cast_forked_, stream_) != cudaSuccess ||
        cudaStreamWaitEvent(cast_stream_, cast_forked_, 0) != cudaSuccess) {
      return nullptr;
    }
    return cast_stream_;
  }
  Status MarkCast(int i) {
    if (cast_stream_ == nullptr) return Status::Internal("MarkCast before ForkCast");
    while (static_cast<int>(cast_marks_.size()) <= i) {
      cudaEvent_t e = nullptr;
      FP8RT_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      cast_marks_.push_back(e);
    }
    FP8RT_CUDA_TRY(cudaEventRecord(cast_marks_[i], cast_stream_));
    return Status::Ok();
  }
  Status WaitCast(int i) {
    if (i >= static_cast<int>(cast_marks_.size())) {
      return Status::Internal(StrCat("WaitCast(", i, "): no such mark"));
    }
    FP8RT_CUDA_TRY(cudaStreamWaitEvent(stream_, cast_marks_[i], 0));
    return Status::Ok();
  }
  // A timer of segments on a communication stream, summed (ZeRO-1's per-layer weight
  // all-gathers): SegmentStart/SegmentStop record an event pair on s. SegmentsRotate() closes
  // the step's set and returns the total of the set it closed the time before, which the caller
  // knows has finished (the step since waited for it), so reading it does not make the host wait.
  void SegmentStart(void* s) {
    auto& set = segments_[seg_cur_];
    if (seg_n_[seg_cur_] == set.size()) {
      cudaEvent_t a = nullptr, b = nullptr;
      if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) return;
      set.emplace_back(a, b);
    }
    cudaEventRecord(set[seg_n_[seg_cur_]].first, static_cast<cudaStream_t>(s));
    seg_open_ = true;
  }
  void SegmentStop(void* s) {
    if (!seg_open_) return;
    cudaEventRecord(segments_[seg_cur_][seg_n_[seg_cur_]++].second, static_cast<cudaStream_t>(s));
    seg_open_ = false;
  }
  double SegmentsRotate() {
    const int prev = 1 - seg_cur_;
    double total = 0;
    for (size_t i = 0; i < seg_n_[prev]; ++i) {
      float ms = 0;
      const auto& [a, b] = segments_[prev][i];
      if (cudaEventSynchronize(b) == cudaSuccess && cudaEventElapsedTime(&ms, a, b) == cudaSuccess) {
        total += ms;
      }
    }
    seg_n_[prev] = 0;
    seg_cur_ = prev;
    return total;
  }
  void CommTimerStart(int k) {
    if (comm_on_compute_ || !EnsureCommStream() || timer_started_[k]) return;
    cudaEventRecord(timer_[k][0], comm_stream_);
    timer_started_[k] = true;
  }
  void CommTimerStop(int k) {
    if (comm_stream_ != nullptr) cudaEventRecord(timer_[k][1], comm_stream_);
  }
  double CommTimerMs(int k) {
    if (!timer_started_[k]) return 0;
    timer_started_[k] = false;
    float ms = 0;
    if (cudaEventSynchronize(timer_[k][1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, timer_[k][0], timer_[k][1]) != cudaSuccess) {
      return 0;
    }
    return ms;
  }
  Status NormSquared(float* out, const float* g, int64_t n, bool accumulate = false) {
    return cuda::GlobalNormSquared(out, g, n, scratch_, scratch_bytes_, stream_, accumulate);
  }
  template <typename T, typename M>
  Status AdamW(float* master, M* m, M* v, const float* g, T* working, int64_t n, int step,
               const AdamWConfig& cfg, float wd, const float* norm_sq, float max_norm) {
    return cuda::AdamW(master, m, v, g, working, n, step, cfg, wd, norm_sq, max_norm, stream_);
  }

 private:
  // What --attention asked for, and (kCudnn, kFlash, kGemm) the path a shape runs on.
  enum class AttentionMode { kAuto, kCudnn, kFlash, kGemm };
  bool Wants(AttentionMode m) const {
    return attention_mode_ == m || attention_mode_ == AttentionMode::kAuto;
  }
  // The attention kernels for a shape, decided once per shape (cuDNN plans are built then, which
  // may synchronise: the model asks at setup) and remembered. The refusals are kept for logs.
  AttentionMode PathFor(const AttentionShape& s, DType t) {
    if (t != DType::kBFloat16) return AttentionMode::kGemm;
    for (const auto& [shape, path] : paths_) {
      if (shape.B == s.B && shape.T == s.T && shape.NH == s.NH && shape.HS == s.HS) return path;
    }
    AttentionMode path = AttentionMode::kGemm;
    if (Wants(AttentionMode::kCudnn) && cudnn_ != nullptr) {
      const Status st = cudnn_->Prepare(s);
      if (st.ok()) {
        path = AttentionMode::kCudnn;
      } else {
        cudnn_refusal_ = st.ToString();
      }
    }
    if (path == AttentionMode::kGemm && Wants(AttentionMode::kFlash)) {
      const Status st = cuda::FlashAttentionCheck(s);
      if (st.ok()) {
        path = AttentionMode::kFlash;
      } else {
        flash_refusal_ = st.ToString();
      }
    }
    paths_.emplace_back(s, path);
    return path;
  }

  int device_ = 0;
  cudaStream_t read_stream_ = nullptr;  // DownloadFromAnotherThread
  cudaStream_t stream_ = nullptr;
  // The communication stream and its events, created on first use (a world of one never does).
  // The stream has the device's highest priority, so the collectives' blocks are scheduled as
  // soon as SMs free up instead of queueing behind the backward's GEMM blocks (which would push
  // the gradient reduction to the end of the step).
  bool EnsureCommStream() {
    if (comm_stream_ != nullptr) return true;
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) return false;
    if (cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest) !=
        cudaSuccess)
      return false;
    cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming);
    for (auto& t : timer_) cudaEventCreate(&t[0]), cudaEventCreate(&t[1]);
    return true;
  }
  cudaStream_t comm_stream_ = nullptr;
  bool cudnn_deterministic_ = true;
  cudaStream_t cast_stream_ = nullptr;
  cudaEvent_t cast_forked_ = nullptr;
  std::vector<cudaEvent_t> cast_marks_;
  bool comm_on_compute_ = false;
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
  std::vector<cudaEvent_t> marked_;  // MarkComm's
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> segments_[2];  // the segment timer's two sets
  size_t seg_n_[2] = {0, 0};
  int seg_cur_ = 0;
  bool seg_open_ = false;
  // Gradients, amaxes: (start, stop) events each.
  cudaEvent_t timer_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  bool timer_started_[2] = {false, false};
  std::unique_ptr<GemmRunner> gemm_;
  AttentionMode attention_mode_ = AttentionMode::kAuto;
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
  CudaFp8AttentionOps fp8_att_;
  std::string cudnn_refusal_, flash_refusal_;
  std::vector<std::pair<AttentionShape, AttentionMode>> paths_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  bool attn_ws_set_ = false;
  void *attn_fwd_ws_ = nullptr, *attn_bwd_ws_ = nullptr;
  size_t attn_fwd_bytes_ = 0, attn_bwd_bytes_ = 0;
  DeviceOpProfiler prof_;
};

}  // namespace fp8rt
