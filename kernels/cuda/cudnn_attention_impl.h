// The pieces of cuDNN attention that its graph builder (cudnn_attention_graph.cc) and its runs
// (cudnn_attention.cc) share: the library's entry points, the RAII descriptor, the Graph
// builder's interface, the variant packs' uids, one shape's plans, and CudnnAttention::Impl.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cudnn_attention.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define FP8RT_HAVE_CUDNN_HEADERS 1
#else
#define FP8RT_HAVE_CUDNN_HEADERS 0
#endif

#if FP8RT_HAVE_CUDNN_HEADERS
namespace fp8rt::cuda {
namespace cudnn_detail {

// The library's entry points, looked up in libcudnn.so.9 at run time (cudnn_attention.cc).
struct CudnnApi {
  decltype(&::cudnnGetVersion) GetVersion = nullptr;
  decltype(&::cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&::cudnnGetLastErrorString) GetLastErrorString = nullptr;  // optional
  decltype(&::cudnnCreate) Create = nullptr;
  decltype(&::cudnnDestroy) Destroy = nullptr;
  decltype(&::cudnnSetStream) SetStream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) CreateDescriptor = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) DestroyDescriptor = nullptr;
  decltype(&::cudnnBackendSetAttribute) SetAttribute = nullptr;
  decltype(&::cudnnBackendGetAttribute) GetAttribute = nullptr;
  decltype(&::cudnnBackendFinalize) Finalize = nullptr;
  decltype(&::cudnnBackendExecute) Execute = nullptr;
};

// Opens the library on the first call, once per process; it is never closed.
Result<const CudnnApi*> LoadCudnn();
// cudnnGetVersion()'s number as "cuDNN major.minor.patch".
std::string VersionString(size_t v);

// The status string plus cuDNN's own last error message, which names the attribute or the rule
// a descriptor broke (set CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr for the full log).
std::string CudnnWhy(const CudnnApi& api, cudnnStatus_t st);

// ---- RAII descriptor ----

class Desc {
 public:
  Desc() = default;
  Desc(const CudnnApi* api, cudnnBackendDescriptor_t d) : api_(api), d_(d) {}
  ~Desc() {
    if (d_ != nullptr) api_->DestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : api_(o.api_), d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) api_->DestroyDescriptor(d_);
      api_ = o.api_;
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

Result<Desc> MakeDesc(const CudnnApi& api, cudnnBackendDescriptorType_t type);

using Dims = std::array<int64_t, 4>;
using T = cudnnBackendDescriptor_t;

// Builds one operation graph: tensors, operations, then a plan. Errors are sticky: after the
// first failure every builder call returns nullptr and does nothing, and status() says what
// failed, so the graph code (cudnn_attention_graph.cc) reads like the math. Owns every descriptor
// it made (the plan is kept with the graph it came from).
class Graph {
 public:
  explicit Graph(const CudnnApi& api) : api_(api) {}

  const Status& status() const { return status_; }

  T Tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t type,
           bool is_virtual = false, int64_t alignment = 16);
  // A one-element tensor passed by value (a host pointer in the variant pack).
  T Scalar(int64_t uid, cudnnDataType_t type);
  // An intermediate the engine keeps on chip (uids from 1000 up).
  T Virtual(const Dims& dims, const Dims& strides, cudnnDataType_t type = CUDNN_DATA_FLOAT);

  // y = mode(x, b, t); returns y. `axis` only for GEN_INDEX.
  T Pointwise(cudnnPointwiseMode_t mode, T y, T x, T b = nullptr, T t = nullptr,
              cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = reduce(x) over the dimensions where y has extent 1.
  T Reduction(cudnnReduceTensorOp_t mode, T y, T x);
  // c = a b over the last two dimensions (batched over the first two), FP32 accumulation. The
  // optional overrides are per-batch (B, 1, 1, 1) int32 extents of M, N, K.
  T Matmul(T c, T a, T b, T m_override = nullptr, T n_override = nullptr, T k_override = nullptr);
  // y = x seen through other dimensions/strides (how the graph spells a transpose).
  T Reshape(T y, T x);

  // Finalizes the operation graph and takes the first engine configuration cuDNN's heuristics
  // (mode A, then the fallback list) offer that finalizes into a plan, skipping engines with
  // the NONDETERMINISTIC note when asked. Unimplemented, with every engine's reason, when none.
  Status BuildPlan(cudnnHandle_t handle, bool deterministic);

  cudnnBackendDescriptor_t plan() const { return plan_.get(); }
  size_t workspace_bytes() const { return workspace_bytes_; }
  int64_t engine_id() const { return engine_id_; }

 private:
  Desc* Make(cudnnBackendDescriptorType_t type, const char* what);
  void Set(Desc* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value, const char* what);
  Status SetOn(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
               cudnnBackendAttributeType_t type, int64_t count, const void* value,
               const char* what);
  T Finalize(Desc* d, const char* what);
  T AddOp(Desc* op, const char* what);
  T Fail(const char* what);

  Status HeuristicConfigs(cudnnBackendHeurMode_t mode, std::vector<Desc>* configs,
                          std::string* tried);

  // The engine's global index and whether cuDNN notes it as nondeterministic; a query that fails
  // leaves id -1 and the note unset (the determinism test then has the last word).
  void DescribeEngine(cudnnBackendDescriptor_t cfg, int64_t* id, bool* nondeterministic);

  const CudnnApi& api_;
  Status status_;
  std::deque<Desc> keep_;  // a deque: Desc* handed out stay valid as it grows
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = 1000;
  Desc op_graph_;
  Desc plan_;
  size_t workspace_bytes_ = 0;
  int64_t engine_id_ = -1;
};

// The masks of both attention graphs (BF16 and FP8), spelled as cuDNN's fused engines expect,
// over scores with dimensions `score` (B, heads, T, T) and strides `stride` (cudnn_attention_graph.cc).
// CausalMask keeps query t's scores for keys j <= t (row index >= column index), `fill` elsewhere;
// PaddingMask keeps rows < seq_q and columns < seq_kv (per-batch (B, 1, 1, 1) int32 tensors).
T CausalMask(Graph& g, const Dims& score, const Dims& stride, T x, T fill,
             cudnnDataType_t gen_index_math);
T PaddingMask(Graph& g, const Dims& score, const Dims& stride, T x, T seq_q, T seq_kv, T fill);

// The softmax of masked scores `s` as the fused engines expect it, saving each row's
// log-sum-exp (max + log sum exp(s - max)) into `stats` (rows: dims `row`, strides `row_stride`);
// returns P, virtual, of type p_type.
T SoftmaxWithStats(Graph& g, const Dims& score, const Dims& stride, const Dims& row,
                   const Dims& row_stride, T s, T stats, cudnnDataType_t p_type);

// Tensor uids of the variant packs.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kOne,
  kDQAccum,
  kSeqQ,
  kSeqKV,
};

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceBytes = std::unique_ptr<void, CudaFree>;
// The padding masks' sequence lengths on the device: (2, B) int32, every one T (all sequences
// are full length). Synchronises: the copy has landed when it returns.
Result<DeviceBytes> FullSeqLens(int64_t B, int64_t T);

// Everything one shape needs: the two graphs with their plans, the by-value scalars (their
// addresses go into the variant packs) and the backward's workspace layout.
struct ShapePlans {
  std::unique_ptr<Graph> fwd, bwd;
  float scale = 0, neg_inf = -std::numeric_limits<float>::infinity(), one = 1;
  bool padded = false;
  std::unique_ptr<void, CudaFree> seq_lens;  // (2, B) int32: T, T; only when padded
  size_t bwd_softmax_sum = 0, bwd_dq_accum = 0, bwd_total = 0;  // byte offsets / total
};

using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t>;
ShapeKey KeyOf(const AttentionShape& s);
std::string ShapeName(const AttentionShape& s);

struct HandleDeleter {
  const CudnnApi* api;
  void operator()(cudnnContext* h) const { api->Destroy(h); }
};
using Handle = std::unique_ptr<cudnnContext, HandleDeleter>;
// A new cuDNN handle; Unavailable naming the loaded library and cuDNN's reason when it fails.
Result<Handle> CreateHandle(const CudnnApi& api);

// Runs `plan` on `st` with the variant pack (uids[i] -> ptrs[i]) and workspace `ws`; *bound is the
// stream the handle is set to, updated when it changes.
Status Execute(const CudnnApi& api, cudnnHandle_t handle, cudaStream_t* bound,
               cudnnBackendDescriptor_t plan, const std::vector<int64_t>& uids,
               const std::vector<void*>& ptrs, void* ws, cudaStream_t st);

}  // namespace cudnn_detail

struct CudnnAttention::Impl {
  const cudnn_detail::CudnnApi* api = nullptr;
  CudnnAttentionOptions options;
  cudnn_detail::Handle handle{nullptr, cudnn_detail::HandleDeleter{nullptr}};
  cudaStream_t stream = nullptr;
  std::map<cudnn_detail::ShapeKey, std::unique_ptr<cudnn_detail::ShapePlans>> plans;

  Result<const cudnn_detail::ShapePlans*> Find(const AttentionShape& s, const char* who) const;
  Status Run(cudnnBackendDescriptor_t plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* ws, cudaStream_t st);
};

}  // namespace fp8rt::cuda
#endif  // FP8RT_HAVE_CUDNN_HEADERS
