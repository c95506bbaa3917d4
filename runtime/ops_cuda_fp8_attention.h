// fp8.attention on the GPU, for CudaOps (runtime/ops_cuda.h): cuDNN's fused FP8 attention
// (kernels/cudnn_fp8_attention.h), the scalars it reads and writes in a block of 16-byte slots,
// and the merge of its amaxes into the scale state.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <string>

#include "common/cuda_check.h"
#include "kernels/cudnn_fp8_attention.h"
#include "kernels/quantize.h"

namespace fp8rt {

class CudaFp8AttentionOps {
 public:
  CudaFp8AttentionOps() = default;
  ~CudaFp8AttentionOps() {
    if (block_) cudaFree(block_);
  }
  CudaFp8AttentionOps(const CudaFp8AttentionOps&) = delete;
  CudaFp8AttentionOps& operator=(const CudaFp8AttentionOps&) = delete;

  std::string Kernel() const {
    if (att_ == nullptr) return "cuDNN FP8 attention (not prepared)";
    return StrCat(att_->Version(), " fused FP8 attention",
                  repeats_ ? ""
                           : " (its runs differ in their last bits: training with it is not "
                             "bit-reproducible, resume not bit-exact)");
  }
  // Once per shape at set-up; *ws: the workspace the passes take from the op scratch.
  Status Prepare(const Fp8AttentionShape& s, Fp8AttentionFormats f, bool deterministic,
                 size_t* ws) {
    if (att_ == nullptr) {
      cuda::CudnnFp8AttentionOptions o;
      o.formats = f;
      o.deterministic = deterministic;
      o.zero_amax = false;  // (its engines overwrite their amaxes)
      FP8RT_ASSIGN_OR_RETURN(att_, cuda::CudnnFp8Attention::Create(o));
      FP8RT_CUDA_TRY(cudaMalloc(&block_, kSlots * 16));
    }
    FP8RT_RETURN_IF_ERROR(att_->Prepare(s));
    repeats_ = att_->Repeats(s);
    *ws = std::max(att_->ForwardWorkspaceBytes(s), att_->BackwardWorkspaceBytes(s));
    ws_bytes_ = std::max(ws_bytes_, *ws);
    return Status::Ok();
  }
  size_t WorkspaceBytes() const { return ws_bytes_; }

  Status Forward(uint8_t* out, float* stats, const uint8_t* qkv, const Fp8AttentionShape& s,
                 const Fp8AttentionScales& sc, void* ws, size_t ws_bytes, cudaStream_t stream) {
    Fp8AttentionScales mine = sc;
    mine.amax_s = Slot(0), mine.amax_o = Slot(1);
    FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_s, 6, stream));
    FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_o, 7, stream));
    FP8RT_RETURN_IF_ERROR(att_->Forward(out, stats, qkv, s, mine, ws, ws_bytes, stream));
    FP8RT_RETURN_IF_ERROR(cuda::ComputeAmax(mine.amax_s, 1, sc.amax_s, stream));
    return cuda::ComputeAmax(mine.amax_o, 1, sc.amax_o, stream);
  }
  Status Backward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv, const uint8_t* out,
                  const float* stats, const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                  void* ws, size_t ws_bytes, cudaStream_t stream) {
    Fp8AttentionScales mine = sc;
    float* a = Slot(2);
    mine.amax_dp = a, mine.amax_dq = a + 4, mine.amax_dk = a + 8, mine.amax_dv = a + 12;
    FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_s, 6, stream));
    FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_dp, 8, stream));
    // (dQ, dK and dV: one scale, staged once, where they share it)
    FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_dq, 9, stream));
    if (sc.scale_dk == sc.scale_dq) {
      mine.scale_dk = mine.scale_dq;
    } else {
      FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_dk, 10, stream));
    }
    if (sc.scale_dv == sc.scale_dq) {
      mine.scale_dv = mine.scale_dq;
    } else {
      FP8RT_RETURN_IF_ERROR(Stage(&mine.scale_dv, 11, stream));
    }
    FP8RT_RETURN_IF_ERROR(
        att_->Backward(dqkv, dout, qkv, out, stats, s, mine, ws, ws_bytes, stream));
    float* to[4] = {sc.amax_dp, sc.amax_dq, sc.amax_dk, sc.amax_dv};
    for (int i = 0; i < 4; ++i) {
      FP8RT_RETURN_IF_ERROR(cuda::ComputeAmax(a + 4 * i, 1, to[i], stream));
    }
    return Status::Ok();
  }

 private:
  // cuDNN reads its scalars from 16-byte-aligned places: the scale state's descales (64-byte
  // slots) directly, its scales (packed floats) copied into this block first; it writes its
  // amaxes here (slots 0-5), which the passes max into the scale state's, NaN sticking, as the
  // casts do across micro-batches.
  static constexpr int kSlots = 12;
  float* Slot(int i) const { return block_ + 4 * i; }
  Status Stage(const float** scale, int slot, cudaStream_t stream) {
    float* to = Slot(slot);
    FP8RT_CUDA_TRY(cudaMemcpyAsync(to, *scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    *scale = to;
    return Status::Ok();
  }

  std::unique_ptr<cuda::CudnnFp8Attention> att_;
  float* block_ = nullptr;
  size_t ws_bytes_ = 0;
  bool repeats_ = true;
};

}  // namespace fp8rt
