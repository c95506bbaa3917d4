// Open MPI collectives on host buffers. bfloat16 sums use a user-defined MPI_Op (MPI has no
// bfloat16 type); every call returns its error (MPI_ERRORS_RETURN), which ends the rank through the
// FailureMonitor naming the collective.
#include <mpi.h>

#include <cstring>
#include <vector>

#include "comm/backends.h"

namespace fp8rt::comm {
namespace {

float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToBf16(float f) {  // round to nearest even, NaN kept NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

void Bf16Sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FloatToBf16(Bf16ToFloat(a[i]) + Bf16ToFloat(b[i]));
}

std::string MpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, FailureMonitor* monitor, std::string name)
      : comm_(comm), monitor_(monitor), name_(std::move(name)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  bool device_buffers() const override { return false; }

  Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, Stream,
                   const char* what) override {
    FailureMonitor::Scope scope(monitor_, Name(what, "all-reduce"));
    if (t == DataType::kBFloat16 && op != ReduceOp::kSum) {
      return Status::Unimplemented(StrCat(what, ": bfloat16 ", ReduceOpName(op), " over MPI"));
    }
    return Check(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, Count(count), Type(t),
                               Op(t, op), comm_),
                 what);
  }
  Status AllGather(const void* send, void* recv, size_t count, DataType t, Stream,
                   const char* what) override {
    FailureMonitor::Scope scope(monitor_, Name(what, "all-gather"));
    const bool in_place = send == static_cast<char*>(recv) + rank_ * count * SizeOf(t);
    return Check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, Count(count), Type(t), recv,
                               Count(count), Type(t), comm_),
                 what);
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType t, ReduceOp op, Stream,
                       const char* what) override {
    FailureMonitor::Scope scope(monitor_, Name(what, "reduce-scatter"));
    const bool in_place = recv == static_cast<const char*>(send) + rank_ * count * SizeOf(t);
    if (in_place) {
      // MPI's in-place form keeps the result at the start of the buffer: reduce into a copy.
      std::vector<char> out(count * SizeOf(t));
      FP8RT_RETURN_IF_ERROR(Check(MPI_Reduce_scatter_block(send, out.data(), Count(count),
                                                           Type(t), Op(t, op), comm_),
                                  what));
      std::memcpy(recv, out.data(), out.size());
      return Status::Ok();
    }
    return Check(
        MPI_Reduce_scatter_block(send, recv, Count(count), Type(t), Op(t, op), comm_), what);
  }
  Status Broadcast(void* buf, size_t count, DataType t, int root, Stream,
                   const char* what) override {
    FailureMonitor::Scope scope(monitor_, Name(what, "broadcast"));
    return Check(MPI_Bcast(buf, Count(count), Type(t), root, comm_), what);
  }
  Status Barrier(Stream, const char* what) override {
    FailureMonitor::Scope scope(monitor_, Name(what, "barrier"));
    return Check(MPI_Barrier(comm_), what);
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key,
                                              const std::string& name) override {
    MPI_Comm sub;
    FP8RT_RETURN_IF_ERROR(Check(MPI_Comm_split(comm_, color, key, &sub), "communicator split"));
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, monitor_, name));
  }

 private:
  static int Count(size_t n) { return static_cast<int>(n); }
  static MPI_Datatype Type(DataType t) {
    switch (t) {
      case DataType::kFloat32:
        return MPI_FLOAT;
      case DataType::kBFloat16:
        return MPI_UINT16_T;
      case DataType::kUint8:
        return MPI_UINT8_T;
      case DataType::kInt32:
        return MPI_INT32_T;
      case DataType::kUint64:
        return MPI_UINT64_T;
    }
    return MPI_BYTE;
  }
  MPI_Op Op(DataType t, ReduceOp op) {
    if (t == DataType::kBFloat16) {
      if (bf16_sum_ == MPI_OP_NULL) MPI_Op_create(&Bf16Sum, /*commute=*/1, &bf16_sum_);
      return bf16_sum_;
    }
    return op == ReduceOp::kSum ? MPI_SUM : op == ReduceOp::kMax ? MPI_MAX : MPI_MIN;
  }
  std::string Name(const char* what, const char* op) const {
    return StrCat(what, " (mpi ", op, ", group ", name_, ")");
  }
  // An MPI error ends the rank: the peers are in the same collective and cannot go on either.
  Status Check(int code, const char* what) {
    if (code == MPI_SUCCESS) return Status::Ok();
    const std::string msg = StrCat(what, " (mpi, group ", name_, ") failed: ", MpiError(code));
    if (monitor_ != nullptr) monitor_->Fail(msg);
    return Status::Unavailable(msg);
  }

  MPI_Comm comm_;
  FailureMonitor* monitor_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
};

}  // namespace

Status MpiInit() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::Ok();
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return Status::Unavailable(StrCat("MPI_Init_thread: ", MpiError(rc)));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return Status::Ok();
}

void MpiFinalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

Status MpiBroadcastBytes(std::string* bytes) {
  int n = static_cast<int>(bytes->size());
  int rc = MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return Status::Unavailable(StrCat("MPI_Bcast: ", MpiError(rc)));
  bytes->resize(static_cast<size_t>(n));
  rc = MPI_Bcast(bytes->data(), n, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return Status::Unavailable(StrCat("MPI_Bcast: ", MpiError(rc)));
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> NewMpiCommunicator(FailureMonitor* monitor) {
  return std::unique_ptr<Communicator>(new MpiCommunicator(MPI_COMM_WORLD, monitor, "world"));
}

}  // namespace fp8rt::comm
