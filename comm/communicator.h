// One interface for the collectives of data and tensor parallelism, over real libraries: NCCL for
// GPU buffers, Open MPI (under mpirun) or Gloo (ranks started any other way) for host buffers,
// and a world of one that needs no library. See comm/README.md for the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace fp8rt::comm {

enum class DataType { kFloat32, kBFloat16, kUint8, kInt32, kUint64 };
size_t SizeOf(DataType t);

enum class ReduceOp { kSum, kMax, kMin };
const char* ReduceOpName(ReduceOp op);

// Where a collective runs: the cudaStream_t of the caller's work for a backend whose buffers are
// GPU memory (device_buffers()), else nullptr (the call returns when the host buffers are done).
using Stream = void*;

// A group of ranks and the collectives among them. Every rank of the group must make the same
// calls in the same order with the same counts. `what` names the collective in errors ("gradient
// bucket 3 reduce-scatter"): a failure, a timeout or a dead peer is reported naming it and the
// rank. Buffers may alias as NCCL allows: AllReduce in place (send == recv), AllGather with
// send == recv + rank * count, ReduceScatter with recv == send + rank * count.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "nccl", "mpi", "gloo", "self"
  // True when buffers are GPU memory (NCCL); false for host memory.
  virtual bool device_buffers() const = 0;

  // recv[i] = op over ranks of send[i], i < count.
  virtual Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                           Stream stream, const char* what) = 0;
  // recv (count * size()) = every rank's `count` elements of send, in rank order.
  virtual Status AllGather(const void* send, void* recv, size_t count, DataType t, Stream stream,
                           const char* what) = 0;
  // send holds count * size() elements; recv gets this rank's block of the reduction.
  virtual Status ReduceScatter(const void* send, void* recv, size_t count, DataType t,
                               ReduceOp op, Stream stream, const char* what) = 0;
  // buf (count elements) from `root` to every rank.
  virtual Status Broadcast(void* buf, size_t count, DataType t, int root, Stream stream,
                           const char* what) = 0;
  // Collectives between GroupStart and GroupEnd may be launched together (NCCL fuses them into
  // one launch); other backends run each as it is called. `what` names the group in errors.
  virtual Status GroupStart() { return Status::Ok(); }
  virtual Status GroupEnd(const char* /*what*/) { return Status::Ok(); }
  // Returns when every rank has called it (after the rank's enqueued work, for NCCL).
  virtual Status Barrier(Stream stream, const char* what) = 0;

  // A sub-group: the ranks that pass the same `color`, ordered by `key` (as MPI_Comm_split).
  // Every rank of this group must call it. `name` tells groups apart in errors and rendezvous
  // keys ("dp", "tp"): ranks of one split must pass the same name.
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key,
                                                      const std::string& name) = 0;
};

// The world of one rank: every collective is a copy (or nothing, in place), no library.
// `device_buffers`: buffers are GPU memory (copies then go through cudaMemcpyAsync).
std::unique_ptr<Communicator> NewSelfCommunicator(bool device_buffers = false);

}  // namespace fp8rt::comm
