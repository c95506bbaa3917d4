// The world of one rank: collectives are copies (nothing at all in place), no library.
#include <cstring>

#include "comm/communicator.h"

#if FP8RT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp8rt::comm {

size_t SizeOf(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kBFloat16:
      return 2;
    case DataType::kUint8:
      return 1;
    case DataType::kUint64:
      return 8;
  }
  return 1;
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

namespace {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(bool device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "self"; }
  bool device_buffers() const override { return device_; }

  Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp, Stream s,
                   const char*) override {
    return Copy(recv, send, count * SizeOf(t), s);
  }
  Status AllGather(const void* send, void* recv, size_t count, DataType t, Stream s,
                   const char*) override {
    return Copy(recv, send, count * SizeOf(t), s);
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType t, ReduceOp, Stream s,
                       const char*) override {
    return Copy(recv, send, count * SizeOf(t), s);
  }
  Status Broadcast(void*, size_t, DataType, int root, Stream, const char* what) override {
    if (root != 0) return Status::InvalidArgument(StrCat(what, ": root ", root, " in a world of 1"));
    return Status::Ok();
  }
  Status Barrier(Stream, const char*) override { return Status::Ok(); }
  Result<std::unique_ptr<Communicator>> Split(int, int, const std::string&) override {
    return std::unique_ptr<Communicator>(new SelfCommunicator(device_));
  }

 private:
  Status Copy(void* dst, const void* src, size_t bytes, Stream s) {
    if (dst == src || bytes == 0) return Status::Ok();
#if FP8RT_WITH_CUDA
    if (device_) {
      const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                            static_cast<cudaStream_t>(s));
      if (e != cudaSuccess) return Status::Internal(StrCat("self copy: ", cudaGetErrorString(e)));
      return Status::Ok();
    }
#endif
    std::memmove(dst, src, bytes);
    return Status::Ok();
  }
  bool device_;
};

}  // namespace

std::unique_ptr<Communicator> NewSelfCommunicator(bool device_buffers) {
  return std::make_unique<SelfCommunicator>(device_buffers);
}

}  // namespace fp8rt::comm
