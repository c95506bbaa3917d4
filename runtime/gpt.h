// The model that fp8train trains, behind a backend-independent interface. model.arch gpt2: token +
// learned position embedding, pre-LN blocks (LN -> QKV -> causal attention -> projection ->
// residual; LN -> FC 4C -> GELU -> projection -> residual), final LN, LM head tied to the token
// embedding. llama: token embedding, pre-norm blocks (RMSNorm -> QKV -> RoPE -> grouped-query
// causal attention -> projection -> residual; RMSNorm -> gate/up -> SwiGLU -> down -> residual),
// final RMSNorm, untied LM head, no biases. Vocabulary padded to a multiple of 128.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/status.h"
#include "common/train_config.h"
#include "runtime/op_profile.h"
#include "runtime/scale_store.h"

namespace fp8rt {

// A checkpoint's copy of what one rank owns (GptModel::ExportOwnedState's three arrays: the FP32
// master weights and the AdamW moments m and v), taken at a step boundary and read out later, by
// one other thread, while training goes on (runtime/checkpoint_saver.h).
class StateSnapshot {
 public:
  virtual ~StateSnapshot() = default;
  virtual int64_t elements() const = 0;  // of each array
  // Where the copy lies: beside the model on the device, or in (pinned) host memory when the
  // device had no room for it.
  virtual bool on_device() const = 0;
  // Elements [offset, offset + n) of array `which` (0 master, 1 m, 2 v), n <= chunk_elements(),
  // in host memory (4 KiB-aligned when offset is a multiple of chunk_elements()) valid until the
  // next Read into the same `slot` (0 or 1: a writer reads one piece while it writes the other).
  virtual Result<const float*> Read(int which, int64_t offset, int64_t n, int slot) = 0;
  virtual int64_t chunk_elements() const = 0;
};

struct ModelOptions {
  ModelConfig model;
  Precision precision = Precision::kFp8;  // the precision actually run (after any fallback)
  Fp8Config fp8;
  int B = 4;           // micro-batch
  int T = 64;          // sequence length
  int grad_accum = 1;  // micro-batches per step
  float grad_clip = 1.0f;
  float weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  // train.moments_dtype: bf16. AdamW's moments stored as BF16 (rounded to nearest even); the
  // state's exports and checkpoints stay FP32.
  bool bf16_moments = false;
  // CUDA only: the attention kernels, "auto" (cuDNN's fused flash attention where it loads and
  // takes the shape, else fp8rt's flash kernels, else GEMMs), "cudnn", "cudnn-nondeterministic"
  // (cuDNN with its faster backward, not bit-reproducible), "flash" or "gemm".
  std::string attention = "auto";
  // train.recompute: the linear layers' normalised and activated inputs are recomputed in the
  // backward (from the saved block input, statistics and FC output) instead of saved: T copies
  // in non-FP8 layers, FP8 transposed copies (cast again) in FP8 ones.
  bool recompute = false;
  // train.share_gradient_memory (used with grad_accum 1 and without ZeRO-1 only).
  bool share_grad_memory = true;
  // Data parallelism: the group of ranks that hold replicas of this model (of this TP rank's
  // part under TP) and split the batch (null or a group of one: none). Not owned. Gradients are
  // averaged over it in buckets of about grad_bucket_bytes, each launched as soon as the last
  // micro-batch's backward has made its gradients final.
  comm::Communicator* dp = nullptr;
  // Tensor parallelism (runtime/gpt_layout.h says what is split): the group of ranks that split
  // each layer's heads and FC columns (null or a group of one: none). Not owned. Two all-reduces
  // per block in the forward (after the attention projection and FC2) and two in the backward
  // (the input gradients of QKV and FC), on the compute stream.
  comm::Communicator* tp = nullptr;
  // Every rank of the job (dp x tp), for what all ranks reduce together: the one FP8 amax
  // all-reduce, the losses and stop votes, the cross-rank scale check. Null: `dp`.
  comm::Communicator* world = nullptr;
  int tp_size() const { return tp != nullptr ? tp->size() : 1; }
  int tp_rank() const { return tp != nullptr ? tp->rank() : 0; }
  // ZeRO over `dp` (runtime/gpt_parallel.h): 0 none, 1 ZeRO-1 (master weights and moments
  // sharded), 3 ZeRO-3 (gradients and the layers' working weights too). ExportState and
  // ImportState stay whole-model (layout order, as with one rank); under ZeRO or TP every rank
  // must call ExportState (it all-gathers). The owned state (ExportOwnedState, checkpoints) has
  // the same shard layout under ZeRO-1 and ZeRO-3.
  int zero = 0;
  // Hybrid sharding (parallel.shard_group): `dp` is this rank's shard group, and `replicas` the
  // ranks that hold the same shards in the other groups (null or a group of one: none). The
  // gradients are averaged over both: reduce-scattered in `dp`, then all-reduced in `replicas`.
  comm::Communicator* replicas = nullptr;
  // ZeRO-3: every layer's gathered weights kept from its forward to its backward (and over the
  // step's micro-batches): one all-gather per layer and step, the memory of all layers' FP8
  // weights and transposed copies (parallel.keep_gathered_weights).
  bool keep_gathered_weights = false;
  // Gradients travel between ranks in BF16 (rounded before the sum, widened after it).
  bool grad_reduce_bf16 = false;
  // The token embedding's gradient reduced as the LM head's part early plus every rank's rows of
  // the last micro-batch gathered and added (parallel.sparse_embedding_grad).
  bool sparse_embedding_grad = true;
  int64_t grad_bucket_bytes = int64_t{25} << 20;
};

struct StepStats {
  float loss = 0;            // mean over the step's micro-batches
  float grad_norm = 0;       // global norm before clipping
  int64_t weight_casts = 0;  // FP8 weight casts done this step (== number of FP8 weights)
  // Data parallel: collectives that reduced amaxes this step (1 in FP8, whatever the number of
  // layers and micro-batches; 0 without FP8 or without a group), gradient buckets reduced, and
  // the time in each kind of reduction (CPU: the calls' wall time; GPU: the span on the
  // communication stream, overlapped with the backward pass for gradients).
  // In: this rank was asked to stop (SIGTERM/SIGUSR1) before the step. Out: some rank of the
  // data-parallel group was (voted in the step's loss all-reduce), so every rank stops after the
  // same step.
  bool stop = false;
  int amax_collectives = 0;
  // fp8.scaling: current: the one-float amax all-reduces of split tensors before their casts
  // (TP: the inputs of the row-parallel and the output gradients of the column-parallel linears,
  // and every split weight; ZeRO-1: every weight's shards), this step.
  int current_amax_collectives = 0;
  int grad_buckets = 0;
  double amax_reduce_ms = 0;
  double grad_reduce_ms = 0;
  // ZeRO-1: the FP8 (and T) weight all-gather of the previous step's update (it overlapped the
  // rest of that update and this step's forward): the communication stream's time in it, summed
  // over the layers' gathers (with their transposes). 0 on the first step, which casts itself.
  // ZeRO-3: the previous step's gathers (every layer's for its passes, and slot 0's after AdamW).
  double weight_gather_ms = 0;
};

// Per-tensor FP8 telemetry: amax seen by the casts since the last report, current scale, and
// the number of elements that saturated.
struct Fp8TelemetryRow {
  std::string name;
  float amax_history_max = 0;
  float scale = 0;
  uint64_t saturated = 0;
};

class GptModel {
 public:
  virtual ~GptModel() = default;
  // GPT-2 initialisation from `seed` (normal(0, 0.02), residual projections / sqrt(2L); norm
  // weights 1, biases 0); llama's the same, its untied LM head normal(0, 0.02) too.
  virtual Status InitRandom(uint64_t seed) = 0;
  // A fresh start from given whole-model master weights (train.init_from): what InitRandom does
  // without drawing: a fresh FP8 scale state, zero AdamW moments, the weights taken over.
  virtual Status InitFromWeights(std::vector<float> master) = 0;
  // One optimizer step over grad_accum micro-batches. x, y: (grad_accum, B, T) host arrays.
  // step is 1-based (AdamW bias correction).
  virtual Status Step(int step, float lr, const int32_t* x, const int32_t* y, StepStats* out) = 0;
  // Forward only over one (B, T) micro-batch; mean loss, and the logits (B*T, Vp) if asked.
  virtual Status Forward(const int32_t* x, const int32_t* y, float* loss,
                         std::vector<float>* logits) = 0;
  // Forward + backward over one micro-batch with zeroed gradients and no update (for tests);
  // gradients come back flattened in parameter order.
  virtual Status Gradients(const int32_t* x, const int32_t* y, float* loss,
                           std::vector<float>* grads) = 0;

  // Master weights and AdamW moments, flattened in parameter order.
  virtual Status ExportState(std::vector<float>* master, std::vector<float>* m,
                             std::vector<float>* v) = 0;
  virtual Status ImportState(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) = 0;
  // Whole-model master weights (taken over, not copied) with zero AdamW moments: a fresh start
  // from given weights (InitRandom, train.init_from) that holds no whole-model host arrays of
  // zeros and, under ZeRO-1, keeps the array itself for the first step's casts.
  virtual Status ImportWeights(std::vector<float> master) = 0;
  // The whole-model master weights only (ExportState's first array; every rank must call it
  // under TP or ZeRO-1).
  virtual Status ExportWeights(std::vector<float>* master) = 0;
  // What this rank keeps, without talking to other ranks (for sharded checkpoints): its ZeRO-1
  // shard (gpt_detail::ZeroShards order) of its TP part under ZeRO, else its TP part
  // (gpt_detail::Layout(model, tp) order; the whole model without TP).
  virtual Status ExportOwnedState(std::vector<float>* master, std::vector<float>* m,
                                  std::vector<float>* v) = 0;
  // A copy of what ExportOwnedState returns, taken now (on the device in a buffer the model keeps
  // for the next one, 3 x 4 bytes per owned parameter, when the device has room for it and 1 GiB
  // besides; else in pinned host memory, blocking) for a checkpoint written while training goes
  // on. FailedPrecondition while an earlier snapshot is still alive.
  virtual Result<std::unique_ptr<StateSnapshot>> SnapshotOwnedState() = 0;
  // What a snapshot takes (fp8train --memory-report): its size, whether one was taken and
  // where it lives, and the pinned host memory it holds (all of it on the host, or the writer's
  // two 64 MiB pieces beside a device copy).
  struct SnapshotMemory {
    size_t bytes = 0;
    bool taken = false;
    bool beside_model = false;  // in the model's memory (the device's; the CPU model's own)
    bool on_device = false;
    size_t pinned_host_bytes = 0;
  };
  virtual SnapshotMemory snapshot_memory() const = 0;
  // FP8 scale state (empty when no FP8 tensors).
  virtual Result<std::vector<TensorScaleRecord>> ExportScales() = 0;
  virtual Status ImportScales(const std::vector<TensorScaleRecord>& records) = 0;
  virtual Status ResetFp8History() = 0;
  // Reads and clears the saturation counters.
  virtual Result<std::vector<Fp8TelemetryRow>> Telemetry() = 0;

  // The FP8 bytes (row-major data) cached for weight tensor `name` (e.g. "h0.fc.weight") by the
  // last cast: lets tests prove micro-batches 2..M use this step's cast, not last step's.
  virtual Result<std::vector<uint8_t>> CachedFp8Weight(const std::string& name) = 0;

  // The whole model's parameters, including the vocabulary padding (under TP too: the size of
  // ExportState's arrays).
  virtual int64_t num_params() const = 0;
  virtual int num_fp8_weights() const = 0;
  // Peak device (or host, on the CPU) bytes allocated by the model.
  virtual size_t allocated_bytes() const = 0;
  // allocated_bytes() by what the memory holds (gpt_layout.h's MemCategory), in a fixed order;
  // categories with nothing allocated are left out.
  virtual std::vector<std::pair<std::string, size_t>> MemoryReport() const = 0;
  // Bytes of saved activations placed in gradient memory (train.share_gradient_memory): not in
  // allocated_bytes, not in MemoryReport's categories.
  virtual size_t shared_gradient_bytes() const { return 0; }
  // Which kernels the attention runs on, for logs (e.g. "cuDNN 9.14.0 fused flash attention").
  virtual std::string attention_kernel() const = 0;
  // --profile-ops: time per op of each Step (see runtime/op_profile.h), mean ms per step.
  virtual void EnableOpProfile(bool on) = 0;
  virtual std::vector<OpTime> OpProfile() const = 0;
  // Every rank's `value`, in rank order (ModelOptions::world, else dp; just `value` alone): an
  // all-gather through the model's buffers, for cross-rank checks.
  virtual Result<std::vector<uint64_t>> GatherAcrossReplicas(uint64_t value) = 0;
  // Diagnostics for replicas that drift apart (FP8RT_STATE_HASHES=1 logs them every step): 64-bit
  // hashes of what this rank holds after the last step, bit for bit: "grads" (the gradients as the
  // optimizer read them, after the reduction across ranks), "master", "adam_m", "adam_v" (its
  // owned parts) and "scales" (the FP8 scale state).
  virtual Result<std::vector<std::pair<std::string, uint64_t>>> StateHashes() = 0;
  // Names and (whole-model) sizes of the parameter tensors this arch has, in order.
  virtual std::vector<std::pair<std::string, int64_t>> ParamTensors() const = 0;
};

Result<std::unique_ptr<GptModel>> CreateCpuGpt(const ModelOptions& options);
// FP8 needs compute capability >= 8.9, bf16 >= 8.0 (the caller decides the fallback first).
Result<std::unique_ptr<GptModel>> CreateCudaGpt(const ModelOptions& options, int device);

}  // namespace fp8rt
