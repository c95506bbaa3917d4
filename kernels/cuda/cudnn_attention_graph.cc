// cuDNN attention's graph builder: the Graph class (tensor and operation descriptors through the
// backend API, then the plan: the first engine cuDNN's heuristics offer that finalizes,
// deterministic engines only by default), the two operation graphs (written in the composite
// pattern cuDNN's fused SDPA engines match: matmul, scale, causal mask, softmax with stats,
// matmul) and CudnnAttention::Prepare, which builds and caches them per shape. The runs are in
// cudnn_attention.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cuda/cudnn_attention_impl.h"

#if FP8RT_HAVE_CUDNN_HEADERS
namespace fp8rt::cuda {
namespace cudnn_detail {
namespace {

// Attribute names the 9.19 headers mark deprecated (handle-bound graphs and plans); the 9.x
// libraries this runs against (9.14 on the GPU nodes) still need them.
constexpr auto kOperationGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto kExecutionPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);

}  // namespace

Result<Desc> MakeDesc(const CudnnApi& api, cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  const cudnnStatus_t st = api.CreateDescriptor(type, &d);
  if (st != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(StrCat("cuDNN: cudnnBackendCreateDescriptor(", static_cast<int>(type),
                                   "): ", CudnnWhy(api, st)));
  }
  return Desc(&api, d);
}

T Graph::Tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t type,
                bool is_virtual, int64_t alignment) {
  Desc* d = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "TENSOR_UNIQUE_ID");
  Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "TENSOR_DATA_TYPE");
  Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "TENSOR_DIMENSIONS");
  Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "TENSOR_STRIDES");
  Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment,
      "TENSOR_BYTE_ALIGNMENT");
  if (is_virtual) {
    const bool v = true;
    Set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "TENSOR_IS_VIRTUAL");
  }
  return Finalize(d, "tensor");
}

T Graph::Scalar(int64_t uid, cudnnDataType_t type) {
  Desc* d = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "scalar tensor");
  const Dims one{1, 1, 1, 1};
  const int64_t alignment = 16;
  const bool by_value = true;
  Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "TENSOR_UNIQUE_ID");
  Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "TENSOR_DATA_TYPE");
  Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one.data(), "TENSOR_DIMENSIONS");
  Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one.data(), "TENSOR_STRIDES");
  Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment,
      "TENSOR_BYTE_ALIGNMENT");
  Set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "TENSOR_IS_BY_VALUE");
  return Finalize(d, "scalar tensor");
}

T Graph::Virtual(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
  return Tensor(next_virtual_uid_++, dims, strides, type, /*is_virtual=*/true);
}

T Graph::Pointwise(cudnnPointwiseMode_t mode, T y, T x, T b, T t, cudnnDataType_t math,
                   int64_t axis) {
  if (!status_.ok() || y == nullptr || x == nullptr) return Fail("pointwise input");
  Desc* pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "POINTWISE_MODE");
  Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "POINTWISE_MATH_PREC");
  if (axis >= 0) Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "POINTWISE_AXIS");
  T pwd = Finalize(pw, "pointwise descriptor");
  Desc* op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  Set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd,
      "OPERATION_POINTWISE_PW_DESCRIPTOR");
  Set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
      "OPERATION_POINTWISE_XDESC");
  if (b != nullptr) {
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
        "OPERATION_POINTWISE_BDESC");
  }
  if (t != nullptr) {
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
        "OPERATION_POINTWISE_TDESC");
  }
  Set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
      "OPERATION_POINTWISE_YDESC");
  return AddOp(op, "pointwise op") != nullptr ? y : nullptr;
}

T Graph::Reduction(cudnnReduceTensorOp_t mode, T y, T x) {
  if (!status_.ok() || y == nullptr || x == nullptr) return Fail("reduction input");
  Desc* rd = Make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  Set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
      "REDUCTION_OPERATOR");
  Set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, "REDUCTION_COMP_TYPE");
  T rdd = Finalize(rd, "reduction descriptor");
  Desc* op = Make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
  Set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rdd,
      "OPERATION_REDUCTION_DESC");
  Set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
      "OPERATION_REDUCTION_XDESC");
  Set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
      "OPERATION_REDUCTION_YDESC");
  return AddOp(op, "reduction op") != nullptr ? y : nullptr;
}

T Graph::Matmul(T c, T a, T b, T m_override, T n_override, T k_override) {
  if (!status_.ok() || a == nullptr || b == nullptr || c == nullptr) return Fail("matmul input");
  Desc* mm = Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, "MATMUL_COMP_TYPE");
  T mmd = Finalize(mm, "matmul descriptor");
  Desc* op = Make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
  Set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a,
      "OPERATION_MATMUL_ADESC");
  Set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
      "OPERATION_MATMUL_BDESC");
  Set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
      "OPERATION_MATMUL_CDESC");
  Set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mmd,
      "OPERATION_MATMUL_DESC");
  if (m_override != nullptr) {
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &m_override, "OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC");
  }
  if (n_override != nullptr) {
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &n_override, "OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC");
  }
  if (k_override != nullptr) {
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &k_override, "OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC");
  }
  return AddOp(op, "matmul op") != nullptr ? c : nullptr;
}

T Graph::Reshape(T y, T x) {
  if (!status_.ok() || y == nullptr || x == nullptr) return Fail("reshape input");
  Desc* op = Make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
  Set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
      "OPERATION_RESHAPE_XDESC");
  Set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
      "OPERATION_RESHAPE_YDESC");
  return AddOp(op, "reshape op") != nullptr ? y : nullptr;
}

Status Graph::BuildPlan(cudnnHandle_t handle, bool deterministic) {
  FP8RT_RETURN_IF_ERROR(status_);
  FP8RT_ASSIGN_OR_RETURN(op_graph_, MakeDesc(api_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  FP8RT_RETURN_IF_ERROR(SetOn(op_graph_.get(), kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle,
                              "OPERATIONGRAPH_HANDLE"));
  FP8RT_RETURN_IF_ERROR(SetOn(op_graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
                              ops_.data(), "OPERATIONGRAPH_OPS"));
  cudnnStatus_t st = api_.Finalize(op_graph_.get());
  if (st != CUDNN_STATUS_SUCCESS) {
    return Status::Unimplemented(
        StrCat("the operation graph does not finalize: ", CudnnWhy(api_, st)));
  }
  std::string tried;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> configs;
    FP8RT_RETURN_IF_ERROR(HeuristicConfigs(mode, &configs, &tried));
    for (Desc& cfg : configs) {
      int64_t engine_id = -1;
      bool nondeterministic = false;
      DescribeEngine(cfg.get(), &engine_id, &nondeterministic);
      if (deterministic && nondeterministic) {
        tried += StrCat(" engine ", engine_id, ": nondeterministic, skipped;");
        continue;
      }
      FP8RT_ASSIGN_OR_RETURN(Desc plan, MakeDesc(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
      cudnnBackendDescriptor_t cfg_d = cfg.get();
      FP8RT_RETURN_IF_ERROR(SetOn(plan.get(), kExecutionPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle,
                                  "EXECUTION_PLAN_HANDLE"));
      FP8RT_RETURN_IF_ERROR(SetOn(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg_d,
                                  "EXECUTION_PLAN_ENGINE_CONFIG"));
      st = api_.Finalize(plan.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        tried += StrCat(" engine ", engine_id, ": ", CudnnWhy(api_, st), ";");
        continue;
      }
      int64_t ws = 0, n = 0;
      st = api_.GetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                             1, &n, &ws);
      if (st != CUDNN_STATUS_SUCCESS) {
        return Status::Internal(
            StrCat("cuDNN: EXECUTION_PLAN_WORKSPACE_SIZE: ", CudnnWhy(api_, st)));
      }
      plan_ = std::move(plan);
      workspace_bytes_ = static_cast<size_t>(ws);
      engine_id_ = engine_id;
      return Status::Ok();
    }
  }
  return Status::Unimplemented(
      StrCat("no engine takes the graph:", tried.empty() ? " none offered" : tried));
}

Desc* Graph::Make(cudnnBackendDescriptorType_t type, const char* what) {
  if (!status_.ok()) return nullptr;
  Result<Desc> d = MakeDesc(api_, type);
  if (!d.ok()) {
    status_ = d.status();
    return nullptr;
  }
  keep_.push_back(std::move(d).value());
  return &keep_.back();
}

void Graph::Set(Desc* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void* value, const char* what) {
  if (!status_.ok() || d == nullptr) return;
  status_ = SetOn(d->get(), name, type, count, value, what);
}

Status Graph::SetOn(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                    cudnnBackendAttributeType_t type, int64_t count, const void* value,
                    const char* what) {
  const cudnnStatus_t st = api_.SetAttribute(d, name, type, count, value);
  if (st != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(StrCat("cuDNN: set ", what, ": ", CudnnWhy(api_, st)));
  }
  return Status::Ok();
}

T Graph::Finalize(Desc* d, const char* what) {
  if (!status_.ok() || d == nullptr) return nullptr;
  const cudnnStatus_t st = api_.Finalize(d->get());
  if (st != CUDNN_STATUS_SUCCESS) {
    status_ = Status::Unimplemented(
        StrCat("cuDNN: finalize ", what, " (op ", ops_.size(), "): ", CudnnWhy(api_, st)));
    return nullptr;
  }
  return d->get();
}

T Graph::AddOp(Desc* op, const char* what) {
  T d = Finalize(op, what);
  if (d != nullptr) ops_.push_back(d);
  return d;
}

T Graph::Fail(const char* what) {
  if (status_.ok()) status_ = Status::Internal(StrCat("cuDNN graph: missing ", what));
  return nullptr;
}

Status Graph::HeuristicConfigs(cudnnBackendHeurMode_t mode, std::vector<Desc>* configs,
                               std::string* tried) {
  FP8RT_ASSIGN_OR_RETURN(Desc heur, MakeDesc(api_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  cudnnBackendDescriptor_t g = op_graph_.get();
  FP8RT_RETURN_IF_ERROR(SetOn(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "ENGINEHEUR_OPERATION_GRAPH"));
  FP8RT_RETURN_IF_ERROR(SetOn(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                              &mode, "ENGINEHEUR_MODE"));
  cudnnStatus_t st = api_.Finalize(heur.get());
  if (st != CUDNN_STATUS_SUCCESS) {
    *tried += StrCat(" heuristics mode ", static_cast<int>(mode), ": ", CudnnWhy(api_, st), ";");
    return Status::Ok();
  }
  int64_t count = 0;
  st = api_.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         0, &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
    *tried += StrCat(" heuristics mode ", static_cast<int>(mode), ": no configurations;");
    return Status::Ok();
  }
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    FP8RT_ASSIGN_OR_RETURN(Desc cfg, MakeDesc(api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfg.get());
    configs->push_back(std::move(cfg));
  }
  int64_t returned = 0;
  st = api_.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         count, &returned, raw.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    return Status::Internal(StrCat("cuDNN: ENGINEHEUR_RESULTS: ", CudnnWhy(api_, st)));
  }
  configs->resize(static_cast<size_t>(std::min(returned, count)));
  return Status::Ok();
}

void Graph::DescribeEngine(cudnnBackendDescriptor_t cfg, int64_t* id, bool* nondeterministic) {
  *id = -1;
  *nondeterministic = false;
  Result<Desc> engine = MakeDesc(api_, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!engine.ok()) return;
  cudnnBackendDescriptor_t e = engine->get();
  int64_t n = 0;
  if (api_.GetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                        &e) != CUDNN_STATUS_SUCCESS) {
    return;
  }
  api_.GetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, id);
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  n = 0;
  if (api_.GetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                        static_cast<int64_t>(notes.size()), &n,
                        notes.data()) != CUDNN_STATUS_SUCCESS) {
    return;
  }
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(notes.size()); ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *nondeterministic = true;
  }
}

T CausalMask(Graph& g, const Dims& score, const Dims& stride, T x, T fill,
             cudnnDataType_t gen_index_math) {
  constexpr cudnnDataType_t kI32 = CUDNN_DATA_INT32, kBool = CUDNN_DATA_BOOLEAN;
  T row = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, g.Virtual(score, stride, kI32), x, nullptr,
                      nullptr, gen_index_math, 2);
  T col = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, g.Virtual(score, stride, kI32), x, nullptr,
                      nullptr, gen_index_math, 3);
  T keep =
      g.Pointwise(CUDNN_POINTWISE_CMP_GE, g.Virtual(score, stride, kBool), row, col, nullptr, kBool);
  return g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, g.Virtual(score, stride), x, fill, keep);
}

// Every sequence here is full length, so this changes nothing; cuDNN <= 9.15's backward engines
// need it (with the matmul extent overrides) when T is not a multiple of 128, as cudnn-frontend's
// "workaround padding mask" does.
T PaddingMask(Graph& g, const Dims& score, const Dims& stride, T x, T seq_q, T seq_kv, T fill) {
  constexpr cudnnDataType_t kI32 = CUDNN_DATA_INT32, kBool = CUDNN_DATA_BOOLEAN;
  T row = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, g.Virtual(score, stride, kI32), x, nullptr,
                      nullptr, kI32, 2);
  T col = g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, g.Virtual(score, stride, kI32), x, nullptr,
                      nullptr, kI32, 3);
  T row_in = g.Pointwise(CUDNN_POINTWISE_CMP_LT, g.Virtual(score, stride, kBool), row, seq_q,
                         nullptr, kBool);
  T col_in = g.Pointwise(CUDNN_POINTWISE_CMP_LT, g.Virtual(score, stride, kBool), col, seq_kv,
                         nullptr, kBool);
  T keep = g.Pointwise(CUDNN_POINTWISE_LOGICAL_AND, g.Virtual(score, stride, kBool), row_in,
                       col_in, nullptr, kBool);
  return g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, g.Virtual(score, stride), x, fill, keep);
}

T SoftmaxWithStats(Graph& g, const Dims& score, const Dims& stride, const Dims& row,
                   const Dims& row_stride, T s, T stats, cudnnDataType_t p_type) {
  T m = g.Reduction(CUDNN_REDUCE_TENSOR_MAX, g.Virtual(row, row_stride), s);
  T e = g.Pointwise(CUDNN_POINTWISE_SUB, g.Virtual(score, stride), s, m);
  e = g.Pointwise(CUDNN_POINTWISE_EXP, g.Virtual(score, stride), e);
  T z = g.Reduction(CUDNN_REDUCE_TENSOR_ADD, g.Virtual(row, row_stride), e);
  T log_z = g.Pointwise(CUDNN_POINTWISE_LOG, g.Virtual(row, row_stride), z);
  g.Pointwise(CUDNN_POINTWISE_ADD, stats, m, log_z);
  return g.Pointwise(CUDNN_POINTWISE_DIV, g.Virtual(score, stride, p_type), e, z);
}

namespace {

// ---- The attention graphs ----

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kBF16 = CUDNN_DATA_BFLOAT16,
                          kI32 = CUDNN_DATA_INT32, kBool = CUDNN_DATA_BOOLEAN;

// The alternatives tried, in order, when cuDNN offers no engine for a graph: the spelling of the
// current cudnn-frontend composite SDPA node first, then the one of its older releases (index
// generation in int32, K re-read as bf16 for dQ).
struct Spelling {
  cudnnDataType_t gen_index_math;
  cudnnDataType_t k_view_type;
};
constexpr Spelling kSpellings[] = {{kF32, kF32}, {kI32, kBF16}};

// The per-head 4-D views, dimensions (B, NH, rows, cols).
struct Views {
  int64_t B, H, T, D;
  Dims head;                                 // (B, NH, T, HS) dims
  Dims qkv_stride;                           // q, k, v, dq, dk, dv inside (B, T, 3C)
  Dims qkv_t_stride;                         // K^T, V^T: (B, NH, HS, T) inside (B, T, 3C)
  Dims out_stride;                           // out, dout inside (B, T, C)
  Dims score, score_stride, score_t_stride;  // (B, NH, T, T) row-major, and its transpose
  Dims row, row_stride;                      // (B, NH, T, 1): stats, softmax sums
};
Views MakeViews(const AttentionShape& s) {
  const int64_t B = s.B, H = s.NH, T = s.T, D = s.HS, C = s.C();
  return Views{B,
               H,
               T,
               D,
               {B, H, T, D},
               {T * 3 * C, D, 3 * C, 1},
               {T * 3 * C, D, 1, 3 * C},
               {T * C, D, C, 1},
               {B, H, T, T},
               {H * T * T, T * T, T, 1},
               {H * T * T, T * T, 1, T},
               {B, H, T, 1},
               {H * T, T, 1, 1}};
}

// out = softmax(mask(scale * Q K^T)) V; stats = max + log(sum exp(. - max)) per query.
void BuildForward(Graph& g, const Views& v, const Spelling& sp) {
  T q = g.Tensor(kQ, v.head, v.qkv_stride, kBF16);
  T kt = g.Tensor(kK, {v.B, v.H, v.D, v.T}, v.qkv_t_stride, kBF16);
  T val = g.Tensor(kV, v.head, v.qkv_stride, kBF16);
  T out = g.Tensor(kO, v.head, v.out_stride, kBF16);
  T stats = g.Tensor(kStats, v.row, v.row_stride, kF32);
  T scale = g.Scalar(kScale, kF32);
  T neg_inf = g.Scalar(kNegInf, kF32);

  T s = g.Matmul(g.Virtual(v.score, v.score_stride), q, kt);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, scale);
  s = CausalMask(g, v.score, v.score_stride, s, neg_inf, sp.gen_index_math);
  T p = SoftmaxWithStats(g, v.score, v.score_stride, v.row, v.row_stride, s, stats, kBF16);
  g.Matmul(out, p, val);
}

// dq, dk, dv of the forward above, recomputing P from stats. Deterministic: dQ = dS K straight
// into dq (cuDNN keeps dS in its workspace), instead of FP32 atomics into dq_accum.
void BuildBackward(Graph& g, const Views& v, const Spelling& sp, bool deterministic, bool padded) {
  T q = g.Tensor(kQ, v.head, v.qkv_stride, kBF16);
  T kt = g.Tensor(kK, {v.B, v.H, v.D, v.T}, v.qkv_t_stride, kBF16);
  T vt = g.Tensor(kV, {v.B, v.H, v.D, v.T}, v.qkv_t_stride, kBF16);
  T out = g.Tensor(kO, v.head, v.out_stride, kBF16);
  T dout = g.Tensor(kDO, v.head, v.out_stride, kBF16);
  T stats = g.Tensor(kStats, v.row, v.row_stride, kF32);
  T dq = g.Tensor(kDQ, v.head, v.qkv_stride, kBF16);
  T dk = g.Tensor(kDK, v.head, v.qkv_stride, kBF16);
  T dv = g.Tensor(kDV, v.head, v.qkv_stride, kBF16);
  T softmax_sum = g.Tensor(kSoftmaxSum, v.row, v.row_stride, kF32);
  T scale = g.Scalar(kScale, kF32);
  T neg_inf = g.Scalar(kNegInf, kF32);
  T one = g.Scalar(kOne, kF32);
  T seq_q = nullptr, seq_kv = nullptr;
  if (padded) {
    seq_q = g.Tensor(kSeqQ, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
    seq_kv = g.Tensor(kSeqKV, {v.B, 1, 1, 1}, {1, 1, 1, 1}, kI32);
  }

  // softmax_sum = rowsum(dout * out)
  T doo = g.Pointwise(CUDNN_POINTWISE_MUL,
                      g.Virtual(v.head, {v.H * v.T * v.D, v.T * v.D, v.H * v.D, 1}), dout, out);
  T rs = g.Reduction(CUDNN_REDUCE_TENSOR_ADD, g.Virtual(v.row, v.row_stride), doo);
  g.Pointwise(CUDNN_POINTWISE_MUL, softmax_sum, rs, one);

  // P = exp(mask(scale * Q K^T) - stats)
  T s = g.Matmul(g.Virtual(v.score, v.score_stride), q, kt, seq_q, seq_kv);
  s = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), s, scale);
  s = g.Pointwise(CUDNN_POINTWISE_SUB, g.Virtual(v.score, v.score_stride), s, stats);
  if (padded) s = PaddingMask(g, v.score, v.score_stride, s, seq_q, seq_kv, neg_inf);
  s = CausalMask(g, v.score, v.score_stride, s, neg_inf, sp.gen_index_math);
  T p = g.Pointwise(CUDNN_POINTWISE_EXP, g.Virtual(v.score, v.score_stride), s);

  // dV = P^T dout
  T pt = g.Reshape(g.Virtual(v.score, v.score_t_stride, kBF16), p);
  g.Matmul(dv, pt, dout, seq_kv, nullptr, seq_q);

  // dS = scale * P * (dout V^T - softmax_sum)
  T dp = g.Matmul(g.Virtual(v.score, v.score_stride), dout, vt, seq_q, seq_kv);
  dp = g.Pointwise(CUDNN_POINTWISE_SUB, g.Virtual(v.score, v.score_stride), dp, softmax_sum);
  dp = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, p);
  T ds = g.Pointwise(CUDNN_POINTWISE_MUL, g.Virtual(v.score, v.score_stride), dp, scale);

  // dK = dS^T Q
  T dst = g.Reshape(g.Virtual(v.score, v.score_t_stride, kBF16), ds);
  g.Matmul(dk, dst, q, seq_kv, nullptr, seq_q);

  // dQ = dS K
  T k = g.Reshape(g.Virtual(v.head, v.qkv_stride, sp.k_view_type), kt);
  if (deterministic) {
    g.Matmul(dq, ds, k, seq_q, nullptr, seq_kv);
  } else {
    T dq_accum = g.Tensor(kDQAccum, v.head, {v.H * v.T * v.D, v.T * v.D, v.D, 1}, kF32);
    g.Matmul(dq_accum, ds, k, seq_q, nullptr, seq_kv);
    g.Pointwise(CUDNN_POINTWISE_IDENTITY, dq, dq_accum);
  }
}

size_t RoundUp256(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace
}  // namespace cudnn_detail

namespace {

using cudnn_detail::BuildBackward;
using cudnn_detail::BuildForward;
using cudnn_detail::CudnnApi;
using cudnn_detail::Graph;
using cudnn_detail::KeyOf;
using cudnn_detail::kSpellings;
using cudnn_detail::MakeViews;
using cudnn_detail::RoundUp256;
using cudnn_detail::ShapeName;
using cudnn_detail::ShapePlans;
using cudnn_detail::Spelling;
using cudnn_detail::VersionString;
using cudnn_detail::Views;

}  // namespace

Status CudnnAttention::Prepare(const AttentionShape& s) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  if (impl_->plans.count(KeyOf(s)) != 0) return Status::Ok();
  if (s.HS % 8 != 0 || s.HS > 256) {
    return Status::InvalidArgument(StrCat("cuDNN attention: head size ", s.HS,
                                          " is not supported (a multiple of 8, at most 256)"));
  }
  const CudnnApi& api = *impl_->api;
  const size_t version = api.GetVersion();
  auto plans = std::make_unique<ShapePlans>();
  plans->scale = 1.0f / std::sqrt(static_cast<float>(s.HS));
  plans->padded = version <= 91500 && s.T % 128 != 0;
  const Views v = MakeViews(s);
  const bool det = impl_->options.deterministic;

  std::string why;
  for (const Spelling& sp : kSpellings) {
    auto g = std::make_unique<Graph>(api);
    BuildForward(*g, v, sp);
    const Status st = g->BuildPlan(impl_->handle.get(), /*deterministic=*/false);
    if (st.ok()) {
      plans->fwd = std::move(g);
      break;
    }
    why = StrCat(why, " [spelling ", &sp - kSpellings, "] ", st.message());
  }
  if (plans->fwd == nullptr) {
    return Status::Unimplemented(StrCat("cuDNN attention (", VersionString(version),
                                        ") refuses the forward for ", ShapeName(s), ":", why));
  }
  why.clear();
  for (const Spelling& sp : kSpellings) {
    auto g = std::make_unique<Graph>(api);
    BuildBackward(*g, v, sp, det, plans->padded);
    const Status st = g->BuildPlan(impl_->handle.get(), det);
    if (st.ok()) {
      plans->bwd = std::move(g);
      break;
    }
    why = StrCat(why, " [spelling ", &sp - kSpellings, "] ", st.message());
  }
  if (plans->bwd == nullptr) {
    return Status::Unimplemented(StrCat("cuDNN attention (", VersionString(version),
                                        ") refuses the ", det ? "deterministic " : "",
                                        "backward for ", ShapeName(s), ":", why));
  }

  const size_t rows = static_cast<size_t>(s.B * s.NH * s.T);
  plans->bwd_softmax_sum = RoundUp256(plans->bwd->workspace_bytes());
  plans->bwd_dq_accum = plans->bwd_softmax_sum + RoundUp256(rows * sizeof(float));
  plans->bwd_total = plans->bwd_dq_accum + (det ? 0 : rows * static_cast<size_t>(s.HS) * 4);
  if (plans->padded) {
    FP8RT_ASSIGN_OR_RETURN(plans->seq_lens, cudnn_detail::FullSeqLens(s.B, s.T));
  }
  impl_->plans.emplace(KeyOf(s), std::move(plans));
  return Status::Ok();
}

}  // namespace fp8rt::cuda
#endif  // FP8RT_HAVE_CUDNN_HEADERS
