// The parameters of the GPT model and the shapes of its linear layers: the one place that
// says which tensors exist, how they are laid out in the flat FP32 arrays (master weights,
// gradients, moments), and what (N, K) each linear layer has. Tensor parallelism changes shapes
// here and nowhere else.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/config.h"

namespace fp8rt::gpt_detail {

// Parameter tensors in storage order, with their shapes.
enum Param {
  kWte,       // (Vp, C)
  kWpe,       // (maxT, C)
  kLn1W,      // (L, C)
  kLn1B,      // (L, C)
  kQkvW,      // (L, 3C, C)
  kQkvB,      // (L, 3C)
  kAttProjW,  // (L, C, C)
  kAttProjB,  // (L, C)
  kLn2W,      // (L, C)
  kLn2B,      // (L, C)
  kFcW,       // (L, 4C, C)
  kFcB,       // (L, 4C)
  kFcProjW,   // (L, C, 4C)
  kFcProjB,   // (L, C)
  kLnfW,      // (C)
  kLnfB,      // (C)
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
                                              "lnf.bias"};
// Decoupled weight decay applies to 2-D weights only.
inline const bool kDecay[kNumParams] = {true,  true,  false, false, true, false, true,  false,
                                        false, false, true,  false, true, false, false, false};

// The four linear layers of a block, and the LM head.
enum LinearKind { kQkv, kAttProj, kFc, kFcProj, kNumLinear, kLmHead = kNumLinear };
inline const char* kLinearNames[kNumLinear + 1] = {"qkv", "attn_proj", "fc", "fc_proj", "lm_head"};
// Op names for --profile-ops, per linear kind (kQkv .. kLmHead).
inline const char* kFpropNames[] = {"gemm fprop qkv", "gemm fprop attn_proj", "gemm fprop fc",
                                    "gemm fprop fc_proj", "gemm fprop lm_head"};
inline const char* kDgradNames[] = {"gemm dgrad qkv", "gemm dgrad attn_proj", "gemm dgrad fc",
                                    "gemm dgrad fc_proj", "gemm dgrad lm_head"};
inline const char* kWgradNames[] = {"gemm wgrad qkv", "gemm wgrad attn_proj", "gemm wgrad fc",
                                    "gemm wgrad fc_proj", "gemm wgrad lm_head"};

struct Layout {
  int64_t size[kNumParams];
  int64_t offset[kNumParams];
  int64_t total = 0;
  explicit Layout(const ModelConfig& m) {
    const int64_t C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab();
    const int64_t s[kNumParams] = {Vp * C,
                                   int64_t{m.block_size} * C,
                                   L * C,
                                   L * C,
                                   L * 3 * C * C,
                                   L * 3 * C,
                                   L * C * C,
                                   L * C,
                                   L * C,
                                   L * C,
                                   L * 4 * C * C,
                                   L * 4 * C,
                                   L * 4 * C * C,
                                   L * C,
                                   C,
                                   C};
    for (int i = 0; i < kNumParams; ++i) {
      size[i] = s[i];
      offset[i] = total;
      // Keep every tensor 64-element aligned so vectorised kernels see aligned pointers.
      total += (s[i] + 63) / 64 * 64;
    }
  }
};

// (N, K) of each linear layer: y (M, N) = x (M, K) W^T.
inline void LinearShape(const ModelConfig& m, int kind, int64_t* N, int64_t* K) {
  const int64_t C = m.n_embd;
  switch (kind) {
    case kQkv:
      *N = 3 * C, *K = C;
      return;
    case kAttProj:
      *N = C, *K = C;
      return;
    case kFc:
      *N = 4 * C, *K = C;
      return;
    case kFcProj:
      *N = C, *K = 4 * C;
      return;
    default:
      *N = m.padded_vocab(), *K = C;
      return;
  }
}

// The weight tensor of linear `kind` (the LM head is tied to the token embedding).
inline Param WeightOf(int kind) {
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
      return kWte;
  }
}

// A data-parallel gradient bucket: the element ranges (offset, length) of the flat gradient
// array that one group of collectives reduces. Buckets follow the backward pass: blocks
// [first_layer, last_layer] (their 12 per-layer tensors are contiguous slices of each
// (L, ...) tensor, final once the backward has passed first_layer), from the last layer down,
// and a final bucket with the embeddings and the final LayerNorm (first_layer = -1), final
// after the embedding backward.
struct GradBucket {
  int first_layer = -1, last_layer = -1;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<int> range_param;  // the Param of each range
  int64_t elements = 0;
};

// Per-layer tensors ((L, ...) in the layout) and the others (embeddings, final LayerNorm).
inline bool IsLayerParam(int p) { return p >= kLn1W && p <= kFcProjB; }

// Buckets of at least `bucket_bytes` of FP32 gradients (whole layers; the last block bucket may
// be smaller), in launch order. Every element of every tensor is in exactly one bucket.
inline std::vector<GradBucket> PlanGradBuckets(const ModelConfig& m, const Layout& layout,
                                               int64_t bucket_bytes) {
  std::vector<GradBucket> out;
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
        cur.ranges.emplace_back(layout.offset[p] + cur.first_layer * n,
                                (cur.last_layer - cur.first_layer + 1) * n);
        cur.range_param.push_back(p);
      }
      out.push_back(std::move(cur));
      cur = GradBucket{};
    }
  }
  GradBucket last;
  for (int p : {kWte, kWpe, kLnfW, kLnfB}) {
    last.ranges.emplace_back(layout.offset[p], layout.size[p]);
    last.range_param.push_back(p);
    last.elements += layout.size[p];
  }
  out.push_back(std::move(last));
  return out;
}

}  // namespace fp8rt::gpt_detail
