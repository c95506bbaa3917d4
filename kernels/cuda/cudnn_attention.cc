// cuDNN fused flash attention through the backend graph API, with libcudnn.so.9 opened at run time:
// the loader, the handle (CudnnAttention::Create) and the runs: the forward and backward through
// their plans, each with its workspace checked (the backward's also holding the softmax sums and
// dQ accumulator) and its variant pack. The graphs and plans are built in
// cudnn_attention_graph.cc; what both files share is in cudnn_attention_impl.h.
#include "kernels/cudnn_attention.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cuda/cudnn_attention_impl.h"

namespace fp8rt::cuda {

#if FP8RT_HAVE_CUDNN_HEADERS
namespace cudnn_detail {
namespace {

// ---- The library, opened once per process and never closed ----

template <typename F>
bool Sym(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

Status OpenCudnn(CudnnApi* api) {
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status::Unavailable(StrCat("cuDNN: dlopen(\"libcudnn.so.9\") failed: ",
                                      why != nullptr ? why : "unknown error"));
  }
  const std::pair<const char*, bool> syms[] = {
      {"cudnnGetVersion", Sym(lib, "cudnnGetVersion", &api->GetVersion)},
      {"cudnnGetErrorString", Sym(lib, "cudnnGetErrorString", &api->GetErrorString)},
      {"cudnnCreate", Sym(lib, "cudnnCreate", &api->Create)},
      {"cudnnDestroy", Sym(lib, "cudnnDestroy", &api->Destroy)},
      {"cudnnSetStream", Sym(lib, "cudnnSetStream", &api->SetStream)},
      {"cudnnBackendCreateDescriptor",
       Sym(lib, "cudnnBackendCreateDescriptor", &api->CreateDescriptor)},
      {"cudnnBackendDestroyDescriptor",
       Sym(lib, "cudnnBackendDestroyDescriptor", &api->DestroyDescriptor)},
      {"cudnnBackendSetAttribute", Sym(lib, "cudnnBackendSetAttribute", &api->SetAttribute)},
      {"cudnnBackendGetAttribute", Sym(lib, "cudnnBackendGetAttribute", &api->GetAttribute)},
      {"cudnnBackendFinalize", Sym(lib, "cudnnBackendFinalize", &api->Finalize)},
      {"cudnnBackendExecute", Sym(lib, "cudnnBackendExecute", &api->Execute)},
  };
  for (const auto& [name, found] : syms) {
    if (!found) return Status::Unavailable(StrCat("cuDNN: libcudnn.so.9 has no symbol ", name));
  }
  Sym(lib, "cudnnGetLastErrorString", &api->GetLastErrorString);
  const size_t v = api->GetVersion();
  if (v < 90000) {
    return Status::Unavailable(StrCat("cuDNN: libcudnn.so.9 reports version ", v,
                                      "; the fused attention graphs need 9.0 or newer"));
  }
  return Status::Ok();
}

}  // namespace

Result<const CudnnApi*> LoadCudnn() {
  static std::once_flag once;
  static CudnnApi api;
  static Status status;
  std::call_once(once, [] { status = OpenCudnn(&api); });
  if (!status.ok()) return status;
  return &api;
}

std::string VersionString(size_t v) {
  return StrCat("cuDNN ", v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

std::string CudnnWhy(const CudnnApi& api, cudnnStatus_t st) {
  std::string why = api.GetErrorString(st);
  if (api.GetLastErrorString != nullptr) {
    char detail[1024] = {0};
    api.GetLastErrorString(detail, sizeof(detail));
    if (detail[0] != '\0') why = StrCat(why, " (", detail, ")");
  }
  return why;
}

Status Execute(const CudnnApi& api, cudnnHandle_t handle, cudaStream_t* bound,
               cudnnBackendDescriptor_t plan, const std::vector<int64_t>& uids,
               const std::vector<void*>& ptrs, void* ws, cudaStream_t st) {
  if (st != *bound) {
    const cudnnStatus_t rc = api.SetStream(handle, st);
    if (rc != CUDNN_STATUS_SUCCESS) {
      return Status::Internal(StrCat("cuDNN: cudnnSetStream: ", CudnnWhy(api, rc)));
    }
    *bound = st;
  }
  FP8RT_ASSIGN_OR_RETURN(Desc pack, MakeDesc(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  const int64_t n = static_cast<int64_t>(uids.size());
  cudnnStatus_t rc = api.SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                      CUDNN_TYPE_INT64, n, uids.data());
  if (rc == CUDNN_STATUS_SUCCESS) {
    rc = api.SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                          n, ptrs.data());
  }
  if (rc == CUDNN_STATUS_SUCCESS) {
    rc = api.SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                          &ws);
  }
  if (rc == CUDNN_STATUS_SUCCESS) rc = api.Finalize(pack.get());
  if (rc != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(StrCat("cuDNN: variant pack: ", CudnnWhy(api, rc)));
  }
  rc = api.Execute(handle, plan, pack.get());
  if (rc != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(StrCat("cuDNN: cudnnBackendExecute: ", CudnnWhy(api, rc)));
  }
  return Status::Ok();
}

Result<DeviceBytes> FullSeqLens(int64_t B, int64_t T) {
  std::vector<int32_t> lens(static_cast<size_t>(2 * B), static_cast<int32_t>(T));
  void* p = nullptr;
  FP8RT_CUDA_TRY(cudaMalloc(&p, lens.size() * sizeof(int32_t)));
  DeviceBytes out(p);
  FP8RT_CUDA_TRY(
      cudaMemcpy(p, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  // cudaMemcpy from pageable memory may return before the copy lands, and the legacy stream it
  // runs on is not ordered with the (non-blocking) stream the attention runs on.
  FP8RT_CUDA_TRY(cudaDeviceSynchronize());
  return out;
}

Result<Handle> CreateHandle(const CudnnApi& api) {
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t rc = api.Create(&h);
  if (rc != CUDNN_STATUS_SUCCESS) {
    return Status::Unavailable(StrCat("cuDNN: cudnnCreate failed (",
                                      VersionString(api.GetVersion()), "): ", CudnnWhy(api, rc)));
  }
  return Handle(h, HandleDeleter{&api});
}

ShapeKey KeyOf(const AttentionShape& s) { return {s.B, s.T, s.NH, s.HS}; }
std::string ShapeName(const AttentionShape& s) {
  return StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " HS=", s.HS);
}

}  // namespace cudnn_detail

namespace {

using cudnn_detail::CudnnApi;
using cudnn_detail::CudnnWhy;
using cudnn_detail::Desc;
using cudnn_detail::HandleDeleter;
using cudnn_detail::KeyOf;
using cudnn_detail::LoadCudnn;
using cudnn_detail::MakeDesc;
using cudnn_detail::ShapeName;
using cudnn_detail::ShapePlans;
using cudnn_detail::VersionString;
using enum cudnn_detail::Uid;

}  // namespace

Result<const ShapePlans*> CudnnAttention::Impl::Find(const AttentionShape& s,
                                                     const char* who) const {
  auto it = plans.find(KeyOf(s));
  if (it == plans.end()) {
    return Status::FailedPrecondition(
        StrCat("CudnnAttention::", who, ": Prepare was not called (or failed) for ", ShapeName(s)));
  }
  return it->second.get();
}

Status CudnnAttention::Impl::Run(cudnnBackendDescriptor_t plan, const std::vector<int64_t>& uids,
                                 const std::vector<void*>& ptrs, void* ws, cudaStream_t st) {
  return cudnn_detail::Execute(*api, handle.get(), &stream, plan, uids, ptrs, ws, st);
}

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(CudnnAttentionOptions options) {
  FP8RT_ASSIGN_OR_RETURN(const CudnnApi* api, LoadCudnn());
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->options = options;
  FP8RT_ASSIGN_OR_RETURN(impl->handle, cudnn_detail::CreateHandle(*api));
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

size_t CudnnAttention::WorkspaceBytes(const AttentionShape& s) const {
  return std::max(ForwardWorkspaceBytes(s), BackwardWorkspaceBytes(s));
}
size_t CudnnAttention::ForwardWorkspaceBytes(const AttentionShape& s) const {
  auto it = impl_->plans.find(KeyOf(s));
  return it == impl_->plans.end() ? 0 : it->second->fwd->workspace_bytes();
}
size_t CudnnAttention::BackwardWorkspaceBytes(const AttentionShape& s) const {
  auto it = impl_->plans.find(KeyOf(s));
  return it == impl_->plans.end() ? 0 : it->second->bwd_total;
}

namespace {
Status CheckAligned(const void* p, const char* name) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    return Status::InvalidArgument(
        StrCat("cuDNN attention: ", name, " must be 16-byte aligned, got ", p));
  }
  return Status::Ok();
}
}  // namespace

Status CudnnAttention::Forward(bf16* out, float* stats, const bf16* qkv, const AttentionShape& s,
                               void* ws, size_t ws_bytes, cudaStream_t stream) {
  FP8RT_ASSIGN_OR_RETURN(const ShapePlans* p, impl_->Find(s, "Forward"));
  if (ws_bytes < p->fwd->workspace_bytes() || (ws == nullptr && p->fwd->workspace_bytes() > 0)) {
    return Status::InvalidArgument(StrCat("CudnnAttention::Forward: ws_bytes=", ws_bytes, " < ",
                                          p->fwd->workspace_bytes(), " needed for ", ShapeName(s)));
  }
  FP8RT_RETURN_IF_ERROR(CheckAligned(qkv, "qkv"));
  FP8RT_RETURN_IF_ERROR(CheckAligned(out, "out"));
  FP8RT_RETURN_IF_ERROR(CheckAligned(stats, "stats"));
  const int64_t C = s.C();
  bf16* q = const_cast<bf16*>(qkv);
  return impl_->Run(p->fwd->plan(), {kQ, kK, kV, kO, kStats, kScale, kNegInf},
                    {q, q + C, q + 2 * C, out, stats, const_cast<float*>(&p->scale),
                     const_cast<float*>(&p->neg_inf)},
                    ws, stream);
}

Status CudnnAttention::Backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                const float* stats, const AttentionShape& s, void* ws,
                                size_t ws_bytes, cudaStream_t stream) {
  FP8RT_ASSIGN_OR_RETURN(const ShapePlans* p, impl_->Find(s, "Backward"));
  if (ws == nullptr || ws_bytes < p->bwd_total) {
    return Status::InvalidArgument(StrCat("CudnnAttention::Backward: ws_bytes=", ws_bytes, " < ",
                                          p->bwd_total, " needed for ", ShapeName(s)));
  }
  for (const auto& [ptr, name] : {std::pair<const void*, const char*>{dqkv, "dqkv"},
                                  {dout, "dout"},
                                  {qkv, "qkv"},
                                  {out, "out"},
                                  {stats, "stats"}}) {
    FP8RT_RETURN_IF_ERROR(CheckAligned(ptr, name));
  }
  const int64_t C = s.C();
  bf16* q = const_cast<bf16*>(qkv);
  char* w = static_cast<char*>(ws);
  std::vector<int64_t> uids = {kQ,  kK,  kV,     kO,      kDO,  kStats,     kDQ,
                               kDK, kDV, kScale, kNegInf, kOne, kSoftmaxSum};
  std::vector<void*> ptrs = {q,
                             q + C,
                             q + 2 * C,
                             const_cast<bf16*>(out),
                             const_cast<bf16*>(dout),
                             const_cast<float*>(stats),
                             dqkv,
                             dqkv + C,
                             dqkv + 2 * C,
                             const_cast<float*>(&p->scale),
                             const_cast<float*>(&p->neg_inf),
                             const_cast<float*>(&p->one),
                             w + p->bwd_softmax_sum};
  if (!impl_->options.deterministic) {
    uids.push_back(kDQAccum);
    ptrs.push_back(w + p->bwd_dq_accum);
  }
  if (p->padded) {
    int32_t* lens = static_cast<int32_t*>(p->seq_lens.get());
    uids.push_back(kSeqQ), ptrs.push_back(lens);
    uids.push_back(kSeqKV), ptrs.push_back(lens + s.B);
  }
  return impl_->Run(p->bwd->plan(), uids, ptrs, ws, stream);
}

std::string CudnnAttention::Version() const { return VersionString(impl_->api->GetVersion()); }

std::string CudnnAttention::PlanSummary(const AttentionShape& s) const {
  auto it = impl_->plans.find(KeyOf(s));
  if (it == impl_->plans.end()) return "";
  const ShapePlans& p = *it->second;
  return StrCat("fwd engine ", p.fwd->engine_id(), " (ws ", p.fwd->workspace_bytes(),
                " B), bwd engine ", p.bwd->engine_id(), " (ws ", p.bwd->workspace_bytes(), " B",
                p.padded ? ", padding-mask workaround" : "", ")");
}

#else  // no cuDNN headers at build time: every call says so, callers use the flash kernels

struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;
Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(CudnnAttentionOptions) {
  return Status::Unavailable("cuDNN attention: built without the cuDNN headers (cudnn_graph.h)");
}
Status CudnnAttention::Prepare(const AttentionShape&) {
  return Status::Unavailable("cuDNN attention: built without the cuDNN headers");
}
size_t CudnnAttention::WorkspaceBytes(const AttentionShape&) const { return 0; }
size_t CudnnAttention::ForwardWorkspaceBytes(const AttentionShape&) const { return 0; }
size_t CudnnAttention::BackwardWorkspaceBytes(const AttentionShape&) const { return 0; }
Status CudnnAttention::Forward(bf16*, float*, const bf16*, const AttentionShape&, void*, size_t,
                               cudaStream_t) {
  return Status::Unavailable("cuDNN attention: built without the cuDNN headers");
}
Status CudnnAttention::Backward(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                const AttentionShape&, void*, size_t, cudaStream_t) {
  return Status::Unavailable("cuDNN attention: built without the cuDNN headers");
}
std::string CudnnAttention::Version() const { return "cuDNN (not built)"; }
std::string CudnnAttention::PlanSummary(const AttentionShape&) const { return ""; }

#endif

}  // namespace fp8rt::cuda
