// Gloo collectives on host buffers over TCP, for CPU ranks started without MPI (the node daemon,
// srun, the FP8RT_* environment). Gloo's addresses travel through the rendezvous's store. Gloo
// has no reduce-scatter in its option-style API: it is an all-reduce into a scratch buffer and a
// copy of this rank's block (twice the traffic; these are CPU runs). A failing or timed-out
// operation ends the rank through the FailureMonitor, naming the collective.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/backends.h"

namespace fp8rt::comm {
namespace {

// Gloo's Store interface over the rendezvous (values are set once).
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  explicit RendezvousStore(Rendezvous* r) : r_(r) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = r_->Set(key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = r_->Get(key);
    if (!v.ok()) throw gloo::IoException(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  Rendezvous* r_;
};

float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
void Bf16Sum(void* c_, const void* a_, const void* b_, size_t n) {
  auto* c = static_cast<uint16_t*>(c_);
  const auto* a = static_cast<const uint16_t*>(a_);
  const auto* b = static_cast<const uint16_t*>(b_);
  for (size_t i = 0; i < n; ++i) c[i] = FloatToBf16(Bf16ToFloat(a[i]) + Bf16ToFloat(b[i]));
}

template <typename T>
gloo::AllreduceOptions::Func Reduce(ReduceOp op) {
  using F = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<F>(&gloo::sum<T>);
    case ReduceOp::kMax:
      return static_cast<F>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<F>(&gloo::min<T>);
  }
  return static_cast<F>(&gloo::sum<T>);
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> ctx, Rendezvous* rendezvous,
                   std::shared_ptr<gloo::transport::Device> device, std::string address,
                   std::string prefix, std::chrono::milliseconds timeout, FailureMonitor* monitor)
      : ctx_(std::move(ctx)),
        rendezvous_(rendezvous),
        device_(std::move(device)),
        address_(std::move(address)),
        prefix_(std::move(prefix)),
        timeout_(timeout),
        monitor_(monitor) {}

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const char* backend() const override { return "gloo"; }
  bool device_buffers() const override { return false; }

  Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, Stream,
                   const char* what) override {
    if (send != recv) std::memcpy(recv, send, count * SizeOf(t));
    return Run(what, "all-reduce", [&] { AllReduceInPlace(recv, count, t, op); });
  }
  Status AllGather(const void* send, void* recv, size_t count, DataType t, Stream,
                   const char* what) override {
    const size_t bytes = count * SizeOf(t);
    // Gloo copies the input into the output's rank block: give it a separate input.
    std::vector<char> in(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    return Run(what, "all-gather", [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(in.data(), bytes);
      o.setOutput(static_cast<char*>(recv), bytes * size());
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::allgather(o);
    });
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType t, ReduceOp op, Stream,
                       const char* what) override {
    const size_t bytes = count * SizeOf(t);
    std::vector<char> all(static_cast<const char*>(send),
                          static_cast<const char*>(send) + bytes * size());
    FP8RT_RETURN_IF_ERROR(Run(what, "reduce-scatter (all-reduce)",
                              [&] { AllReduceInPlace(all.data(), count * size(), t, op); }));
    std::memcpy(recv, all.data() + rank() * bytes, bytes);
    return Status::Ok();
  }
  Status Broadcast(void* buf, size_t count, DataType t, int root, Stream,
                   const char* what) override {
    return Run(what, "broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(static_cast<char*>(buf), count * SizeOf(t));
      o.setRoot(root);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
  }
  Status Barrier(Stream, const char* what) override {
    return Run(what, "barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key,
                                              const std::string& name) override {
    // Everyone's (color, key), then the members of this rank's color in (key, rank) order.
    std::vector<int32_t> mine = {color, key}, all(2 * static_cast<size_t>(size()));
    FP8RT_RETURN_IF_ERROR(AllGather(mine.data(), all.data(), 2, DataType::kInt32, nullptr,
                                    "communicator split"));
    std::vector<std::pair<int, int>> members;  // (key, rank)
    for (int r = 0; r < size(); ++r) {
      if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
    }
    std::sort(members.begin(), members.end());
    int sub_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == rank()) sub_rank = static_cast<int>(i);
    }
    return NewGlooCommunicator(rendezvous_, address_,
                               StrCat(prefix_, "/", name, "/", color, "/", ++splits_), sub_rank,
                               static_cast<int>(members.size()), timeout_, monitor_);
  }

 private:
  void AllReduceInPlace(void* buf, size_t count, DataType t, ReduceOp op) {
    gloo::AllreduceOptions o(ctx_);
    o.setTag(NextTag());
    o.setTimeout(timeout_);
    switch (t) {
      case DataType::kFloat32:
        o.setOutput(static_cast<float*>(buf), count);
        o.setReduceFunction(Reduce<float>(op));
        break;
      case DataType::kInt32:
        o.setOutput(static_cast<int32_t*>(buf), count);
        o.setReduceFunction(Reduce<int32_t>(op));
        break;
      case DataType::kUint64:
        o.setOutput(static_cast<uint64_t*>(buf), count);
        o.setReduceFunction(Reduce<uint64_t>(op));
        break;
      case DataType::kUint8:
        o.setOutput(static_cast<uint8_t*>(buf), count);
        o.setReduceFunction(Reduce<uint8_t>(op));
        break;
      case DataType::kBFloat16:
        if (op != ReduceOp::kSum) throw gloo::Exception("bfloat16 supports sum only");
        o.setOutput(static_cast<uint16_t*>(buf), count);
        o.setReduceFunction(&Bf16Sum);
        break;
    }
    gloo::allreduce(o);
  }

  // Runs a Gloo operation; a failure ends the rank naming the collective, after a moment in which
  // the rendezvous may name the peer that died (a more useful message).
  template <typename Fn>
  Status Run(const char* what, const char* op, Fn&& fn) {
    const std::string name = StrCat(what, " (gloo ", op, ", group ", prefix_, ")");
    FailureMonitor::Scope scope(monitor_, name);
    try {
      fn();
      return Status::Ok();
    } catch (const std::exception& e) {
      const std::string msg = StrCat(name, " failed: ", e.what());
      if (monitor_ != nullptr) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        monitor_->Fail(msg);
      }
      return Status::Unavailable(msg);
    }
  }
  uint32_t NextTag() { return tag_++; }

  std::shared_ptr<gloo::Context> ctx_;
  Rendezvous* rendezvous_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::string address_, prefix_;
  std::chrono::milliseconds timeout_;
  FailureMonitor* monitor_;
  uint32_t tag_ = 0;
  int splits_ = 0;
};

}  // namespace

Result<std::unique_ptr<Communicator>> NewGlooCommunicator(Rendezvous* rendezvous,
                                                          const std::string& address,
                                                          const std::string& prefix, int rank,
                                                          int size,
                                                          std::chrono::milliseconds timeout,
                                                          FailureMonitor* monitor) {
  try {
    gloo::transport::tcp::attr attr(address.c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout);
    RendezvousStore store(rendezvous);
    gloo::rendezvous::PrefixStore prefixed(prefix, store);
    ctx->connectFullMesh(prefixed, device);
    return std::unique_ptr<Communicator>(new GlooCommunicator(
        ctx, rendezvous, device, address, prefix, timeout, monitor));
  } catch (const std::exception& e) {
    return Status::Unavailable(StrCat("gloo: connecting ", size, " ranks (", prefix,
                                      ") from ", address, ": ", e.what()));
  }
}

}  // namespace fp8rt::comm
