// The parameters of the model (model.arch gpt2 or llama) and the shapes of its linear layers: the
// one place that says which tensors exist, how they are laid out in the flat FP32 arrays (master
// weights, gradients, moments), and what (N, K) each linear layer has. Tensor parallelism changes
// shapes here and nowhere else. Both architectures share one list of tensors; a tensor that an
// architecture does not have (llama's wpe and biases, gpt2's untied LM head) has size 0.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "common/parallel_for.h"
#include "common/train_config.h"

namespace fp8rt::gpt_detail {

// Parameter tensors in storage order, with their shapes (F: the MLP width, 4C by default; Q, KV:
// the query and key/value widths n_head * HS and n_kv_head * HS; "-": size 0 in that arch).
enum Param {      // gpt2            llama
  kWte,           // (Vp, C)         (Vp, C)
  kWpe,           // (maxT, C)       -
  kLn1W,          // (L, C)          (L, C)       RMSNorm's weight in llama
  kLn1B,          // (L, C)          -
  kQkvW,          // (L, 3C, C)      (L, Q + 2KV, C): rows [Q heads | K heads | V heads]
  kQkvB,          // (L, 3C)         -
  kAttProjW,      // (L, C, C)       (L, C, Q)
  kAttProjB,      // (L, C)          -
  kLn2W,          // (L, C)          (L, C)
  kLn2B,          // (L, C)          -
  kFcW,           // (L, F, C)       (L, 2F, C): rows [gate | up]
  kFcB,           // (L, F)          -
  kFcProjW,       // (L, C, F)       (L, C, F)
  kFcProjB,       // (L, C)          -
  kLnfW,          // (C)             (C)
  kLnfB,          // (C)             -
  kLmHeadW,       // -               (Vp, C)      (gpt2's LM head is wte)
  kNumParams
};
inline const char* kParamNames[kNumParams] = {"wte",
                                              "wpe",
                                              "ln1.weight",
                                              "ln1.bias",
                                              "qkv.weight",
                                              "qkv.bias",
                                              "attn_proj.weight",
                                              "attn_proj.bias",
                                              "ln2.weight",
                                              "ln2.bias",
                                              "fc.weight",
                                              "fc.bias",
                                              "fc_proj.weight",
                                              "fc_proj.bias",
                                              "lnf.weight",
                                              "lnf.bias",
                                              "lm_head.weight"};
// Decoupled weight decay applies to 2-D weights only.
inline const bool kDecay[kNumParams] = {true,  true,  false, false, true,  false,
                                        true,  false, false, false, true,  false,
                                        true,  false, false, false, true};

// The four linear layers of a block, and the LM head.
enum LinearKind { kQkv, kAttProj, kFc, kFcProj, kNumLinear, kLmHead = kNumLinear };

// What the model's memory holds (fp8train --memory-report), one category per allocation.
enum MemCategory {
  kMemMaster,        // FP32 master weights (this rank's shard under ZeRO-1)
  kMemGrads,         // FP32 gradients (+ the ZeRO shard and BF16 reduction buffers; ZeRO-3:
                     // the tensors outside the layers and a ring of layers)
  kMemOptimizer,     // AdamW moments
  kMemWorking,       // T (BF16) working copies of the weights that do not run in FP8 (ZeRO-3:
                     // this rank's part of the layers')
  kMemGathered,      // ZeRO-3: the ring of layers gathered for their passes (FP8 weights with
                     // their transposed copies, T working copies)
  kMemActivations,   // activations saved for the backward (T), attention statistics
  kMemLogits,        // the LM head's logits (T), reused in place for their gradient; the same
                     // memory holds the buffers dead while they live (shared activations, most
                     // of the backward's scratch, cuDNN attention's workspaces)
  kMemActGrads,      // the backward's activation gradients (T)
  kMemFp8Weights,    // FP8 weights, cast once per step, and their transposed copies (ZeRO-3:
                     // this rank's rows of the layers')
  kMemFp8Saved,      // FP8 (transposed) copies of the linear layers' inputs, saved for wgrad
  kMemFp8Scratch,    // the shared FP8 casts of the current input and output gradient
  kMemScaling,       // FP8 scale state: amaxes, histories, scales, saturation counters
  kMemWorkspace,     // op scratch (embedding and LayerNorm backward, norms; attention's where
                     // cuDNN does not run it)
  kMemOther,         // token ids, per-step scalars, gather buffers
  kMemCheckpoint,    // the checkpoint snapshot (from the first checkpoint on)
  kNumMemCategories
};
inline const char* kMemCategoryNames[kNumMemCategories] = {
    "master weights (fp32)", "gradients (fp32)",  "optimizer moments (fp32)",
    "working weights",       "gathered layers (ring)", "saved activations",
    "logits (+ shared scratch)",
    "activation gradients",  "fp8 weights (+T)",  "fp8 saved inputs",
    "fp8 cast scratch",      "fp8 scale state",   "op workspaces",
    "other",                 "checkpoint snapshot"};
inline const char* kLinearNames[kNumLinear + 1] = {"qkv", "attn_proj", "fc", "fc_proj", "lm_head"};
// Op names for --profile-ops, per linear kind (kQkv .. kLmHead).
inline const char* kFpropNames[] = {"gemm fprop qkv", "gemm fprop attn_proj", "gemm fprop fc",
                                    "gemm fprop fc_proj", "gemm fprop lm_head"};
inline const char* kDgradNames[] = {"gemm dgrad qkv", "gemm dgrad attn_proj", "gemm dgrad fc",
                                    "gemm dgrad fc_proj", "gemm dgrad lm_head"};
inline const char* kWgradNames[] = {"gemm wgrad qkv", "gemm wgrad attn_proj", "gemm wgrad fc",
                                    "gemm wgrad fc_proj", "gemm wgrad lm_head"};

// Per-layer tensors ((L, ...) in the layout) and the others (embeddings, final LayerNorm).
inline bool IsLayerParam(int p) { return p >= kLn1W && p <= kFcProjB; }

// Tensor parallelism (Megatron-style, over `tp` ranks): QKV and FC are column-parallel (rank r
// keeps its heads' rows of Q, K and V, and rows r of FC; in llama rows r of gate and of up, and
// its query heads' key/value heads), the attention projection and FC2 are
// row-parallel (rank r keeps columns r of their weights); their biases follow (QKV's and FC's are
// split, the projections' are whole and added by TP rank 0 only, before the sum over the group).
// Embeddings, LayerNorms and the LM head are whole on every rank. A Layout with tp > 1 is rank r's
// part; every rank's parts have the same sizes.
inline bool TpSplit(int p) {
  return p == kQkvW || p == kQkvB || p == kAttProjW || p == kFcW || p == kFcB || p == kFcProjW;
}

struct Layout {
  int64_t size[kNumParams];
  int64_t offset[kNumParams];
  int64_t total = 0;
  explicit Layout(const ModelConfig& m, int tp = 1) {
    const int64_t C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab(), t = tp, F = m.ffn();
    const int64_t QKV = (int64_t{m.n_head} + 2 * m.kv_heads()) * m.head_size();
    const bool g = !m.llama();  // the tensors only gpt2 has
    const int64_t s[kNumParams] = {Vp * C,
                                   g ? int64_t{m.block_size} * C : 0,
                                   L * C,
                                   g ? L * C : 0,
                                   L * QKV * C / t,
                                   g ? L * QKV / t : 0,
                                   L * C * C / t,
                                   g ? L * C : 0,
                                   L * C,
                                   g ? L * C : 0,
                                   L * (g ? 1 : 2) * F * C / t,
                                   g ? L * F / t : 0,
                                   L * F * C / t,
                                   g ? L * C : 0,
                                   C,
                                   g ? C : 0,
                                   g ? 0 : Vp * C};
    for (int i = 0; i < kNumParams; ++i) {
      size[i] = s[i];
      offset[i] = total;
      // Keep every tensor 64-element aligned so vectorised kernels see aligned pointers.
      total += (s[i] + 63) / 64 * 64;
    }
  }
};

// (N, K) of each linear layer on one of `tp` ranks: y (M, N) = x (M, K) W^T.
inline void LinearShape(const ModelConfig& m, int kind, int64_t* N, int64_t* K, int tp = 1) {
  const int64_t C = m.n_embd, t = tp, F = m.ffn();
  switch (kind) {
    case kQkv:
      *N = (int64_t{m.n_head} + 2 * m.kv_heads()) * m.head_size() / t, *K = C;
      return;
    case kAttProj:
      *N = C, *K = C / t;
      return;
    case kFc:
      *N = (m.llama() ? 2 : 1) * F / t, *K = C;
      return;
    case kFcProj:
      *N = C, *K = F / t;
      return;
    default:
      *N = m.padded_vocab(), *K = C;
      return;
  }
}

// Where TP rank r's part of one layer's tensor p comes from in the whole tensor: runs of
// (offset in the whole layer tensor, offset in the part, length). A tensor that is not split is
// one run over all of it.
struct TpRun {
  int64_t whole, part, n;
};
inline std::vector<TpRun> TpRuns(const ModelConfig& m, int tp, int r, int p) {
  const int64_t C = m.n_embd, t = tp, F = m.ffn();
  const int64_t Q = C, KV = int64_t{m.kv_heads()} * m.head_size();
  std::vector<TpRun> runs;
  auto rows = [&](std::initializer_list<int64_t> blocks, int64_t cols) {
    // Rank r's rows of each row block (Q, K, V; FC's one block; llama's gate and up).
    int64_t whole = 0, part = 0;
    for (const int64_t rows_per_block : blocks) {
      const int64_t mine = rows_per_block / t;
      runs.push_back({(whole + r * mine) * cols, part * cols, mine * cols});
      whole += rows_per_block, part += mine;
    }
  };
  auto cols = [&](int64_t nrows, int64_t ncols) {  // rank r's columns of every row
    const int64_t mine = ncols / t;
    for (int64_t i = 0; i < nrows; ++i) runs.push_back({i * ncols + r * mine, i * mine, mine});
  };
  const Layout whole(m);
  if (whole.size[p] == 0) return runs;
  switch (p) {
    case kQkvW: rows({Q, KV, KV}, C); break;
    case kQkvB: rows({Q, KV, KV}, 1); break;
    case kFcW:
      if (m.llama()) {
        rows({F, F}, C);
      } else {
        rows({F}, C);
      }
      break;
    case kFcB: rows({F}, 1); break;
    case kAttProjW: cols(C, Q); break;
    case kFcProjW: cols(C, F); break;
    default: {
      const int64_t n = IsLayerParam(p) ? whole.size[p] / m.n_layer : whole.size[p];
      runs.push_back({0, 0, n});
    }
  }
  return runs;
}

// Copies between a whole-model array (Layout(m) order) and TP rank r's part of it (Layout(m, tp)
// order): Extract takes rank r's part out of the whole, Insert puts it back.
template <bool kExtract>
void TpCopy(const ModelConfig& m, int tp, int r, const float* from, float* to) {
  const Layout whole(m), part(m, tp);
  for (int p = 0; p < kNumParams; ++p) {
    const int layers = IsLayerParam(p) ? m.n_layer : 1;
    const int64_t wl = whole.size[p] / layers, pl = part.size[p] / layers;
    const std::vector<TpRun> runs = TpRuns(m, tp, r, p);
    for (int l = 0; l < layers; ++l) {
      const int64_t wo = whole.offset[p] + l * wl, po = part.offset[p] + l * pl;
      for (const TpRun& u : runs) {
        if (kExtract) {
          std::copy_n(from + wo + u.whole, u.n, to + po + u.part);
        } else {
          std::copy_n(from + po + u.part, u.n, to + wo + u.whole);
        }
      }
    }
  }
}
inline void TpExtract(const ModelConfig& m, int tp, int r, const float* whole, float* part) {
  TpCopy<true>(m, tp, r, whole, part);
}
inline void TpInsert(const ModelConfig& m, int tp, int r, const float* part, float* whole) {
  TpCopy<false>(m, tp, r, part, whole);
}

// ZeRO-1 over `dp` ranks: every (param, layer) tensor of a (TP part's) layout is cut into dp equal
// contiguous slices; rank d keeps slice d of each, in (param, layer) order, each param's slices
// 64-element aligned. (Only for layouts whose per-layer sizes divide by dp: the model checks.)
struct ZeroShards {
  int64_t offset[kNumParams] = {};
  int64_t slice[kNumParams] = {};  // elements of each (param, layer) slice
  int64_t total = 0;
  ZeroShards(const ModelConfig& m, const Layout& part, int dp) {
    for (int p = 0; p < kNumParams; ++p) {
      const int layers = IsLayerParam(p) ? m.n_layer : 1;
      slice[p] = part.size[p] / layers / dp;
      offset[p] = total;
      total += (layers * slice[p] + 63) / 64 * 64;
    }
  }
};

// The whole model (Layout(m) order) from the arrays each rank owns (null: not read; that part
// stays zero): owned(d, t) is data-parallel
// rank d's, tensor-parallel rank t's array: its ZeRO shard (ZeroShards order) of TP part t when
// `zero`, else TP part t (Layout(m, tp) order; then only d = 0 is asked).
template <typename Owned>
void AssembleWhole(const ModelConfig& m, int dp, int tp, bool zero, Owned owned, float* whole) {
  const Layout part(m, tp);
  const ZeroShards shards(m, part, dp);
  // Without TP a part is the whole: the shards go straight to it. (Many GB: the (rank, param,
  // layer) copies run on every core.)
  std::vector<float> mine(tp > 1 && zero ? static_cast<size_t>(part.total) : 0);
  float* into = tp > 1 ? mine.data() : whole;
  struct Copy {
    const float* from;
    int64_t n;
    int64_t to;
  };
  for (int t = 0; t < tp; ++t) {
    if (!zero) {
      if (owned(0, t) != nullptr) TpInsert(m, tp, t, owned(0, t), whole);
      continue;
    }
    if (tp > 1) std::fill(mine.begin(), mine.end(), 0.0f);
    std::vector<Copy> copies;
    for (int d = 0; d < dp; ++d) {
      const float* o = owned(d, t);
      if (o == nullptr) continue;  // a part not read: left zero
      for (int p = 0; p < kNumParams; ++p) {
        const int layers = IsLayerParam(p) ? m.n_layer : 1;
        const int64_t per_layer = part.size[p] / layers, n = shards.slice[p];
        for (int l = 0; l < layers; ++l) {
          copies.push_back(
              {o + shards.offset[p] + l * n, n, part.offset[p] + l * per_layer + d * n});
        }
      }
    }
    ParallelFor(
        static_cast<int64_t>(copies.size()),
        static_cast<double>(part.total) / static_cast<double>(std::max<size_t>(1, copies.size())),
        [&](int64_t i) {
          const Copy& c = copies[static_cast<size_t>(i)];
          std::copy_n(c.from, c.n, into + c.to);
        });
    if (tp > 1) TpInsert(m, tp, t, mine.data(), whole);
  }
}

// The weight tensor of linear `kind` (gpt2's LM head is tied to the token embedding).
inline Param WeightOf(const ModelConfig& m, int kind) {
  switch (kind) {
    case kQkv:
      return kQkvW;
    case kAttProj:
      return kAttProjW;
    case kFc:
      return kFcW;
    case kFcProj:
      return kFcProjW;
    default:
      return m.llama() ? kLmHeadW : kWte;
  }
}

// A data-parallel gradient bucket: the element ranges (offset, length) of the flat gradient
// array that one group of collectives reduces. Buckets follow the backward pass: blocks
// [first_layer, last_layer] (their 12 per-layer tensors are contiguous slices of each
// (L, ...) tensor, final once the backward has passed first_layer), from the last layer down,
// and a final bucket with the embeddings, the final norm and llama's LM head (first_layer = -1), final
// after the embedding backward. With a sparse embedding gradient (parallel.sparse_embedding_grad)
// the final norm, the LM head and the token embedding's dense part go first instead, in a `head`
// bucket final after the final norm's backward, and the last bucket holds the position table
// alone (none in llama).
struct GradBucket {
  int first_layer = -1, last_layer = -1;
  bool head = false;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<int> range_param;  // the Param of each range
  int64_t elements = 0;
};

// How the token embedding's gradient travels (parallel.sparse_embedding_grad): `sparse` moves
// it out of the last bucket; `wte_dense` keeps its dense part (the tied LM head's gradient, the
// earlier micro-batches' rows) in the head bucket. Without it (llama, one micro-batch) the
// gathered rows are all of it.
struct EmbeddingGradPlan {
  bool sparse = false;
  bool wte_dense = true;
};

// Buckets of at least `bucket_bytes` of FP32 gradients (whole layers; the last block bucket may
// be smaller), in launch order. Every element of every tensor is in exactly one bucket, except
// the token embedding's under a sparse plan without a dense part (in none).
inline std::vector<GradBucket> PlanGradBuckets(const ModelConfig& m, const Layout& layout,
                                               int64_t bucket_bytes,
                                               EmbeddingGradPlan emb = EmbeddingGradPlan{}) {
  std::vector<GradBucket> out;
  auto add = [&](GradBucket* k, int p) {
    if (layout.size[p] == 0) return;
    k->ranges.emplace_back(layout.offset[p], layout.size[p]);
    k->range_param.push_back(p);
    k->elements += layout.size[p];
  };
  if (emb.sparse) {
    GradBucket head;
    head.head = true;
    for (int p : {kLnfW, kLnfB, kLmHeadW}) add(&head, p);
    if (emb.wte_dense) add(&head, kWte);
    if (head.elements > 0) out.push_back(std::move(head));
  }
  const int L = m.n_layer;
  auto per_layer = [&](int p) { return layout.size[p] / L; };
  GradBucket cur;
  for (int l = L - 1; l >= 0; --l) {
    if (cur.last_layer < 0) cur.last_layer = l;
    cur.first_layer = l;
    int64_t bytes = 0;
    for (int p = kLn1W; p <= kFcProjB; ++p) bytes += per_layer(p) * 4;
    cur.elements += bytes / 4;
    if (cur.elements * 4 >= bucket_bytes || l == 0) {
      for (int p = kLn1W; p <= kFcProjB; ++p) {
        const int64_t n = per_layer(p);
        if (n == 0) continue;  // (a tensor this arch does not have)
        cur.ranges.emplace_back(layout.offset[p] + cur.first_layer * n,
                                (cur.last_layer - cur.first_layer + 1) * n);
        cur.range_param.push_back(p);
      }
      out.push_back(std::move(cur));
      cur = GradBucket{};
    }
  }
  GradBucket last;
  if (emb.sparse) {
    add(&last, kWpe);
  } else {
    for (int p : {kWte, kWpe, kLnfW, kLnfB, kLmHeadW}) add(&last, p);
  }
  if (last.elements > 0) out.push_back(std::move(last));
  return out;
}

}  // namespace fp8rt::gpt_detail
