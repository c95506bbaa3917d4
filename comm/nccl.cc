// NCCL collectives on GPU buffers, enqueued on the caller's stream. Communicators are
// non-blocking (ncclConfig_t::blocking = 0): a call that returns ncclInProgress is polled with
// ncclCommGetAsyncError until it is enqueued, and the FailureMonitor's abort hook can call
// ncclCommAbort from another thread, so that kernels waiting on a dead peer let go.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "comm/backends.h"

namespace fp8rt::comm {
namespace {

ncclDataType_t Type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kUint64:
      return ncclUint64;
  }
  return ncclUint8;
}

ncclRedOp_t Op(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclMin;
}

// Non-blocking unless FP8RT_NCCL_BLOCKING=1 (diagnostics: rules NCCL's asynchronous enqueue in or
// out when results look wrong; an aborted peer can then hang a call until the watchdog exits).
// FP8RT_NCCL_CTA_POLICY=0|1|2 sets ncclConfig_t::CTAPolicy (default, efficiency, zero: fewer
// blocks taken from the computation that the collectives overlap; measurements only).
Result<ncclConfig_t> NonBlocking() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  const char* b = std::getenv("FP8RT_NCCL_BLOCKING");
  c.blocking = b != nullptr && std::string(b) == "1" ? 1 : 0;
  if (const char* p = std::getenv("FP8RT_NCCL_CTA_POLICY"); p != nullptr && *p != '\0') {
    const std::string v = p;
    if (v != "0" && v != "1" && v != "2") {
      return Status::InvalidArgument(
          StrCat("FP8RT_NCCL_CTA_POLICY: '", v,
                 "' is not one of 0 (default), 1 (efficiency), 2 (zero)"));
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    c.CTAPolicy = v[0] - '0';
#else
    return Status::InvalidArgument("FP8RT_NCCL_CTA_POLICY: this NCCL (< 2.27) has no CTA policy");
#endif
  }
  return c;
}

// Waits out ncclInProgress on `comm`; the call's final result.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclSystemError;
  }
  return r;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::string name, FailureMonitor* monitor)
      : comm_(comm), rank_(rank), size_(size), name_(std::move(name)), monitor_(monitor) {
    if (monitor_ != nullptr) {
      ncclComm_t c = comm_;
      monitor_->AddAbortHook([c] { ncclCommAbort(c); });
    }
  }
  ~NcclCommunicator() override {
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (monitor_ != nullptr && monitor_->disarmed() == false) {
      // Ending without an orderly finish (an error unwound the trainer): do not wait for peers.
      ncclCommAbort(comm_);
      return;
    }
    Settle(comm_, ncclCommFinalize(comm_));
    ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  bool device_buffers() const override { return true; }

  Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, Stream s,
                   const char* what) override {
    return Check(ncclAllReduce(send, recv, count, Type(t), Op(op), comm_, S(s)), what,
                 "all-reduce");
  }
  Status AllGather(const void* send, void* recv, size_t count, DataType t, Stream s,
                   const char* what) override {
    return Check(ncclAllGather(send, recv, count, Type(t), comm_, S(s)), what, "all-gather");
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                       Stream s, const char* what) override {
    return Check(ncclReduceScatter(send, recv, count, Type(t), Op(op), comm_, S(s)), what,
                 "reduce-scatter");
  }
  Status Broadcast(void* buf, size_t count, DataType t, int root, Stream s,
                   const char* what) override {
    return Check(ncclBroadcast(buf, buf, count, Type(t), root, comm_, S(s)), what, "broadcast");
  }
  Status GroupStart() override {
    const ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) return Status::Ok();
    return Status::Internal(StrCat("ncclGroupStart: ", ncclGetErrorString(r)));
  }
  Status GroupEnd(const char* what) override { return Check(ncclGroupEnd(), what, "group"); }
  Status Barrier(Stream s, const char* what) override {
    if (scratch_ == nullptr && cudaMalloc(&scratch_, sizeof(int)) != cudaSuccess) {
      return Status::Internal(StrCat(what, ": cudaMalloc for the barrier"));
    }
    FP8RT_RETURN_IF_ERROR(Check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_,
                                              S(s)),
                                what, "barrier"));
    FailureMonitor::Scope scope(monitor_, StrCat(what, " (nccl barrier, group ", name_, ")"));
    const cudaError_t e = cudaStreamSynchronize(S(s));
    if (e != cudaSuccess) return Status::Internal(StrCat(what, ": ", cudaGetErrorString(e)));
    return Status::Ok();
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key,
                                              const std::string& name) override {
    FP8RT_ASSIGN_OR_RETURN(ncclConfig_t config, NonBlocking());
    ncclComm_t sub = nullptr;
    const ncclResult_t r = ncclCommSplit(comm_, color, key, &sub, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return Status::Unavailable(StrCat("nccl: splitting group ", name_, " into ", name, ": ",
                                        ncclGetErrorString(r), " (", ncclGetLastError(comm_), ")"));
    }
    // The split runs as an asynchronous job of the parent: NCCL (2.28) leaves the new handle NULL
    // until the child is fully initialised and writes it from the job's thread, so wait for the
    // handle itself and watch the parent for an error. A peer lost meanwhile ends the process
    // through the failure monitor.
    std::atomic_ref<ncclComm_t> published(sub);
    while (published.load(std::memory_order_acquire) == nullptr) {
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclSystemError;
      if (state != ncclSuccess && state != ncclInProgress) {
        return Status::Unavailable(StrCat("nccl: splitting group ", name_, " into ", name, ": ",
                                          ncclGetErrorString(state), " (", ncclGetLastError(comm_),
                                          ")"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    FP8RT_RETURN_IF_ERROR(Wait(sub, StrCat("nccl: initialising group ", name)));
    int rank = 0, size = 0;
    ncclCommUserRank(sub, &rank);
    ncclCommCount(sub, &size);
    return std::unique_ptr<Communicator>(new NcclCommunicator(sub, rank, size, name, monitor_));
  }

  // Waits until a non-blocking communicator is ready.
  static Status Wait(ncclComm_t comm, const std::string& what) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclSystemError;
      std::this_thread::yield();
    }
    if (state != ncclSuccess) {
      return Status::Unavailable(StrCat(what, ": ", ncclGetErrorString(state), " (",
                                        ncclGetLastError(comm), ")"));
    }
    return Status::Ok();
  }

 private:
  static cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }
  Status Check(ncclResult_t r, const char* what, const char* op) {
    r = Settle(comm_, r);
    if (monitor_ != nullptr) monitor_->NoteEnqueued(StrCat(what, " (nccl ", op, ", group ", name_, ")"));
    if (r == ncclSuccess) return Status::Ok();
    return Status::Unavailable(StrCat(what, " (nccl ", op, ", group ", name_,
                                      ") failed: ", ncclGetErrorString(r), " (",
                                      ncclGetLastError(comm_), ")"));
  }

  ncclComm_t comm_;
  int rank_, size_;
  std::string name_;
  FailureMonitor* monitor_;
  void* scratch_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<Communicator>> NewNcclCommunicator(int rank, int size,
                                                          const std::string& name,
                                                          ShareBytes share,
                                                          FailureMonitor* monitor) {
  ncclUniqueId id{};
  std::string bytes;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return Status::Unavailable(StrCat("nccl: ncclGetUniqueId: ", ncclGetErrorString(r)));
    }
    bytes.assign(id.internal, sizeof id.internal);
  }
  FP8RT_RETURN_IF_ERROR(share(StrCat("nccl/", name), &bytes));
  if (bytes.size() != sizeof id.internal) {
    return Status::Unavailable(StrCat("nccl: the unique id of group ", name, " has ", bytes.size(),
                                      " bytes, expected ", sizeof id.internal));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  FP8RT_ASSIGN_OR_RETURN(ncclConfig_t config, NonBlocking());
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Status::Unavailable(
        StrCat("nccl: ncclCommInitRankConfig (rank ", rank, " of ", size, "): ",
               ncclGetErrorString(r)));
  }
  FP8RT_RETURN_IF_ERROR(NcclCommunicator::Wait(
      comm, StrCat("nccl: initialising rank ", rank, " of ", size, " (group ", name, ")")));
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, rank, size, name, monitor));
}

}  // namespace fp8rt::comm
