// fp8train --plan (runtime/memory_plan.h): the model's set-up over reserved, untouched memory.
#include "runtime/memory_plan.h"

#include <sys/mman.h>

#include <cstdio>
#include <map>

#include "runtime/gpt_impl.h"

namespace fp8rt {
namespace {

// The CPU backend whose memory is only reserved: Alloc maps address space that is never
// touched (no RSS: planning an 8B model takes no 100 GB), and what would write into it does
// nothing. With `gpu`, the attention's saved state and its output read back are the GPU's
// flash kernels' (ops_cuda.h), not the CPU reference's T x T probabilities.
class PlanOps : public CpuOps {
 public:
  explicit PlanOps(bool gpu) : gpu_(gpu) {}
  ~PlanOps() {
    for (const auto& [p, bytes] : maps_) ::munmap(p, bytes);
  }
  void* Alloc(size_t bytes) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    maps_[p] = rounded;
    return p;
  }
  void Free(void* p) {
    auto it = maps_.find(p);
    if (it == maps_.end()) return;
    ::munmap(p, it->second);
    maps_.erase(it);
  }
  void* AllocHost(size_t bytes) { return Alloc(bytes); }
  void FreeHost(void* p) { Free(p); }
  Status Zero(void*, size_t) { return Status::Ok(); }
  Status Upload(void*, const void*, size_t) { return Status::Ok(); }
  Status UploadAsync(void*, const void*, size_t) { return Status::Ok(); }
  size_t AttentionSavedBytes(const AttentionShape& s, DType t) const {
    return gpu_ ? static_cast<size_t>(s.B * s.NH * s.T) * sizeof(float)
                : CpuOps::AttentionSavedBytes(s, t);
  }
  bool AttentionReadsOutput(const AttentionShape& s, DType t) const {
    return gpu_ || CpuOps::AttentionReadsOutput(s, t);
  }

 private:
  bool gpu_;
  std::map<void*, size_t> maps_;
};

// A group of ranks that knows its size and this rank's place; nothing is ever sent.
class PlanComm : public comm::Communicator {
 public:
  PlanComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "plan"; }
  bool device_buffers() const override { return false; }
  Status AllReduce(const void*, void*, size_t, comm::DataType, comm::ReduceOp, comm::Stream,
                   const char* what) override {
    return None(what);
  }
  Status AllGather(const void*, void*, size_t, comm::DataType, comm::Stream,
                   const char* what) override {
    return None(what);
  }
  Status ReduceScatter(const void*, void*, size_t, comm::DataType, comm::ReduceOp, comm::Stream,
                       const char* what) override {
    return None(what);
  }
  Status Broadcast(void*, size_t, comm::DataType, int, comm::Stream, const char* what) override {
    return None(what);
  }
  Status Barrier(comm::Stream, const char* what) override { return None(what); }
  Result<std::unique_ptr<comm::Communicator>> Split(int, int, const std::string& name) override {
    return None(name.c_str());
  }

 private:
  static Status None(const char* what) {
    return Status::Internal(StrCat("a memory plan runs no collective (", what, ")"));
  }
  int rank_, size_;
};

}  // namespace

ModelOptions ModelOptionsFor(const RunConfig& c, Precision p) {
  ModelOptions mo;
  mo.model = c.model;
  mo.precision = p;
  mo.fp8 = c.fp8;
  mo.B = c.train.batch_size, mo.T = c.train.seq_len, mo.grad_accum = c.train.grad_accum;
  mo.grad_clip = c.train.grad_clip, mo.weight_decay = c.train.weight_decay;
  mo.beta1 = c.train.beta1, mo.beta2 = c.train.beta2, mo.eps = c.train.eps;
  mo.bf16_moments = c.train.moments_dtype == "bf16";
  mo.recompute = c.train.recompute;
  mo.share_grad_memory = c.train.share_gradient_memory;
  mo.grad_bucket_bytes = static_cast<int64_t>(c.parallel.bucket_mb * 1048576.0);
  mo.zero = c.parallel.zero.stage;
  mo.keep_gathered_weights = c.parallel.keep_gathered_weights;
  mo.grad_reduce_bf16 = c.parallel.grad_reduce_dtype == "bf16";
  mo.sparse_embedding_grad = c.parallel.sparse_embedding_grad;
  return mo;
}

Result<MemoryPlan> PlanMemory(const RunConfig& c, Precision precision, int ranks, bool gpu) {
  const int tp = c.parallel.tp;
  if (ranks < 1 || ranks % tp != 0) {
    return Status::InvalidArgument(
        StrCat("--ranks ", ranks, " is not a multiple of parallel.tp = ", tp));
  }
  const int dp = c.parallel.dp == 0 ? ranks / tp : c.parallel.dp;
  if (dp * tp != ranks) {
    return Status::InvalidArgument(StrCat("parallel.dp is ", dp, " but --ranks is ", ranks,
                                          "; dp x tp (tp = ", tp, ") must equal it"));
  }
  MemoryPlan plan;
  plan.ranks = ranks, plan.dp = dp, plan.tp = tp, plan.gpu = gpu, plan.precision = precision;
  // Rank 0's groups, as the trainer makes them (SetUpGrid): the world, dp (the world without
  // TP), tp.
  // (hybrid sharding: dp is one shard group, beside its replicas)
  const int shard =
      c.parallel.zero && dp > 1 && c.parallel.shard_group > 0 ? c.parallel.shard_group : dp;
  if (shard != dp && (dp % shard != 0 || shard < 2)) {
    return Status::InvalidArgument(StrCat("parallel.shard_group = ", shard,
                                          " must be at least 2 and divide the data-parallel size ",
                                          dp));
  }
  PlanComm world(0, ranks), dp_group(0, dp), tp_group(0, tp), shard_group(0, shard),
      replicas(0, dp / shard);
  ModelOptions mo = ModelOptionsFor(c, precision);
  mo.world = ranks > 1 ? &world : nullptr;
  mo.dp = dp == 1 ? nullptr : tp > 1 ? &dp_group : &world;
  if (shard != dp) mo.dp = &shard_group, mo.replicas = &replicas;
  mo.tp = tp > 1 ? &tp_group : nullptr;
  // The activations' type: the GPU runs BF16 and FP8 in BF16, the CPU FP8 in FP32
  // (gpt_cpu.cc, gpt_cuda.cu).
  const bool half = gpu ? precision != Precision::kFp32 : precision == Precision::kBf16;
  Result<std::unique_ptr<GptModel>> model =
      half ? gpt_detail::MakeGpt<PlanOps, bf16>(mo, std::make_unique<PlanOps>(gpu))
           : gpt_detail::MakeGpt<PlanOps, float>(mo, std::make_unique<PlanOps>(gpu));
  if (!model.ok()) return model.status();
  plan.categories = (*model)->MemoryReport();
  plan.total = (*model)->allocated_bytes();
  plan.left_out =
      gpu ? "the CUDA context, cuBLASLt's and cuDNN's workspaces (cuDNN attention's may take the "
            "place of the op scratch, which the plan counts as 0), NCCL's buffers, the "
            "checkpoint snapshot (--memory-report shows it once taken), and the caching "
            "allocators' slack"
          : "the checkpoint snapshot and the process's own memory";
  return plan;
}

std::string FormatMemoryPlan(const MemoryPlan& plan, const RunConfig& c) {
  constexpr double kGiB = 1073741824.0;
  std::string out =
      StrCat("memory plan: ", c.name, " (", c.model.num_params(), " parameters), ",
             PrecisionName(plan.precision), " on ", plan.gpu ? "GPUs" : "CPUs", ", ", plan.ranks,
             " rank(s): dp ", plan.dp, " x tp ", plan.tp,
             c.parallel.zero && plan.dp > 1 ? StrCat(", ZeRO-", c.parallel.zero.stage) : "",
             c.parallel.zero && c.parallel.shard_group > 0 && c.parallel.shard_group < plan.dp
                 ? StrCat(" in groups of ", c.parallel.shard_group)
                 : "",
             "; B ", c.train.batch_size, " x T ",
             c.train.seq_len, ", grad_accum ", c.train.grad_accum, "\n");
  char line[160];
  std::snprintf(line, sizeof line, "  %-28s %10s\n", "per rank", "GiB");
  out += line;
  for (const auto& [name, bytes] : plan.categories) {
    std::snprintf(line, sizeof line, "  %-28s %10.3f\n", name.c_str(), bytes / kGiB);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-28s %10.3f\n", "total (model_gib)", plan.total / kGiB);
  out += line;
  out += StrCat("not in the plan: ", plan.left_out, "\n");
  return out;
}

}  // namespace fp8rt
