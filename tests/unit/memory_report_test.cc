// fp8train --memory-report: the model's allocations by what they hold add up to its total, the
// FP32 state is where the layout says, FP8 buffers exist only in FP8, and ZeRO-1's share is
// visible; the trainer writes the breakdown to the metrics after the first step. The memory
// levers (train.recompute, fp8.keep_weight_transpose: false, fp8.cache_weights: false, the
// logits' buffer shared with the backward's scratch, the gradients' memory lent to saved
// buffers) save what they should and change no gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "runtime/gpt.h"
#include "runtime/gpt_layout.h"
#include "runtime/trainer.h"
#include "common/rng.h"
#include "tests/common/corpus.h"
#include "tests/common/temp_dir.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

std::map<std::string, size_t> Report(const GptModel& m) {
  std::map<std::string, size_t> out;
  for (const auto& [name, bytes] : m.MemoryReport()) out[name] = bytes;
  return out;
}

TEST(MemoryReport, CategoriesAddUpAndFollowThePrecision) {
  for (const Precision p : {Precision::kFp8, Precision::kBf16}) {
    ModelOptions mo;
    // (A vocabulary whose logits outgrow the buffers laid over them.)
    mo.model = {3, 64, 4, 64, 4096};
    mo.precision = p;
    mo.B = 2, mo.T = 32;
    auto model = CreateCpuGpt(mo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const auto r = Report(**model);
    size_t sum = 0;
    for (const auto& [name, bytes] : r) sum += bytes;
    EXPECT_EQ(sum, (*model)->allocated_bytes()) << PrecisionName(p);
    const gpt_detail::Layout layout(mo.model);
    const size_t state = static_cast<size_t>(layout.total) * sizeof(float);
    EXPECT_EQ(r.at("master weights (fp32)"), state);
    EXPECT_EQ(r.at("gradients (fp32)"), state);
    EXPECT_EQ(r.at("optimizer moments (fp32)"), 2 * state);
    // (B x T, padded vocab) in the model's activation type, 2 or 4 bytes: at this vocabulary
    // more than the transient buffers laid over it.
    const size_t logits = r.at("logits (+ shared scratch)");
    EXPECT_TRUE(logits == size_t{64} * 4096 * 2 || logits == size_t{64} * 4096 * 4) << logits;
    EXPECT_GT(r.at("saved activations"), 0u);
    const bool fp8 = p == Precision::kFp8;
    EXPECT_EQ(r.count("fp8 weights (+T)"), fp8 ? 1u : 0u) << PrecisionName(p);
    EXPECT_EQ(r.count("fp8 saved inputs"), fp8 ? 1u : 0u);
    if (fp8) {
      // 3 layers x (QKV 3C x C + proj C x C + FC 4C x C + FC2 C x 4C) bytes, and the transposes.
      EXPECT_EQ(r.at("fp8 weights (+T)"), size_t{2} * 3 * 12 * 64 * 64);
    }
  }
}

// A small gpt2, or llama with grouped-query attention (2 KV heads), of `layers` x `C`, B x T
// tokens a micro-batch.
ModelOptions Small(bool llama, Precision p, int layers, int C, int B, int T) {
  ModelOptions o;
  o.model = {layers, C, 4, 64, 256};
  if (llama) o.model.arch = Arch::kLlama, o.model.n_kv_head = 2;
  o.precision = p;
  o.B = B, o.T = T;
  return o;
}

// Larger weights than the 0.02 init (and norms' weights away from 1), so every path matters.
void Perturb(GptModel* g) {
  std::vector<float> w;
  ASSERT_TRUE(g->ExportWeights(&w).ok());
  SplitMix64 rng(3);
  for (float& v : w) v = v * 5.0f + 0.01f * rng.Normal();
  ASSERT_TRUE(g->ImportWeights(w).ok());
}

// Recomputing the norms' and the activation's outputs in the backward, and transposing each FP8
// weight a layer ahead of its dgrad instead of keeping the transposed copy, give the same
// gradients bit for bit as saving them (gpt2 and llama, fp8, bf16 and fp32, grouped-query
// attention), and save the bytes they should: L x B x T x (C + C + FC2's input width)
// activations per non-FP8 model, every FP8 weight's transposed copy but two layers'. One exception, by design: gpt2's
// non-FP8 FC computes GELU in its GEMM epilogue from the unrounded sum, the recomputation from
// FC's stored (BF16 or FP32) output; FC2's weight gradient, which reads GELU's output, differs
// by that rounding.
TEST(MemoryReport, TheLeversSaveWhatTheyShouldAndChangeNoGradient) {
  for (const bool llama : {false, true}) {
    for (const Precision p : {Precision::kFp8, Precision::kBf16, Precision::kFp32}) {
      ModelOptions base = Small(llama, p, 3, 64, 2, 32);
      base.share_grad_memory = false;  // (below, on its own)
      ModelOptions lean = base, kept = base;
      lean.recompute = true, kept.recompute = false;
      lean.fp8.keep_weight_transpose = false, kept.fp8.keep_weight_transpose = true;
      auto a = CreateCpuGpt(kept);
      auto b = CreateCpuGpt(lean);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
      std::vector<float> ga, gb;
      float la = 0, lb = 0;
      std::vector<int32_t> x(64), y(64);
      for (int i = 0; i < 64; ++i) x[i] = (i * 37 + 11) % 256, y[i] = (i * 53 + 7) % 256;
      for (auto* m : {a->get(), b->get()}) {
        ASSERT_TRUE(m->InitRandom(5).ok());
        Perturb(m);
      }
      ASSERT_TRUE((*a)->Gradients(x.data(), y.data(), &la, &ga).ok());
      ASSERT_TRUE((*b)->Gradients(x.data(), y.data(), &lb, &gb).ok());
      const std::string what = StrCat(llama ? "llama " : "gpt2 ", PrecisionName(p));
      EXPECT_EQ(la, lb) << what;
      ASSERT_EQ(ga.size(), gb.size());
      const gpt_detail::Layout layout(base.model);
      const int64_t fc2 = layout.offset[gpt_detail::kFcProjW];
      const bool rounded = !llama && p != Precision::kFp8;
      size_t differ = 0;
      double d2 = 0, n2 = 0;
      for (size_t i = 0; i < ga.size(); ++i) {
        const int64_t at = static_cast<int64_t>(i);
        if (rounded && at >= fc2 && at < fc2 + layout.size[gpt_detail::kFcProjW]) {
          d2 += (double{ga[i]} - gb[i]) * (double{ga[i]} - gb[i]), n2 += double{ga[i]} * ga[i];
          continue;
        }
        differ += ga[i] != gb[i];
      }
      EXPECT_EQ(differ, 0u) << what << ": gradients differ in " << differ << " of " << ga.size();
      if (rounded) {
        EXPECT_GT(n2, 0.0);
        EXPECT_LT(std::sqrt(d2 / n2), p == Precision::kBf16 ? 1e-2 : 1e-6)
            << what << ": FC2's weight gradient, relative L2";
        std::cout << what << ": FC2's weight gradient, relative L2 difference "
                  << std::sqrt(d2 / n2) << "\n";
      }
      const int64_t M = 64, C = 64, L = 3;
      const int64_t ffn_in = llama ? base.model.ffn() : 4 * C;  // FC2's input width
      const int64_t act = p == Precision::kBf16 ? 2 : 4;  // bytes per activation (CPU model)
      // fp8: 3 x (3C x C + C x C + 4C x C + C x 4C) bytes, less two layers' kept (a layer's
      // transposes are made a layer ahead); llama: (Q + 2KV) x C + C x C + 2F x C + C x F.
      const int64_t kv = 2 * 16;
      const int64_t weights = llama ? (C + 2 * kv) * C + C * C + 3 * ffn_in * C : 12 * C * C;
      // (fp8 also keeps no FP8 transposed input of the norms and of FC2, cast again in the
      // backward; the CPU's attention keeps no output, so the projection's copy stays)
      const int64_t want = p == Precision::kFp8 ? (L - 2) * weights + L * M * (2 * C + ffn_in)
                                                : L * M * (2 * C + ffn_in) * act;
      // (The shared copies lie in the logits' buffer, which at this vocabulary they outgrow:
      // compared without it.)
      auto rest = [](const GptModel& m) {
        return static_cast<int64_t>(m.allocated_bytes()) -
               static_cast<int64_t>(Report(m).at("logits (+ shared scratch)"));
      };
      EXPECT_EQ(rest(**a) - rest(**b), want) << what;
    }
  }
}

// Models `more` and `less`, which differ in a memory lever only: gradients (one micro-batch),
// three steps' losses and evaluations, and the weights after them bit-identical, and `less`
// allocates less.
void ExpectSameNumbersInLessMemory(const ModelOptions& more, const ModelOptions& less,
                                   const std::string& what) {
  auto a = CreateCpuGpt(more);
  auto b = CreateCpuGpt(less);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_LT((*b)->allocated_bytes(), (*a)->allocated_bytes()) << what;
  std::cout << what << ": " << (*a)->allocated_bytes() << " -> " << (*b)->allocated_bytes()
            << " bytes (" << (*b)->shared_gradient_bytes() << " in gradient memory)\n";
  const int64_t n = more.B * more.T * more.grad_accum, V = more.model.vocab_size;
  std::vector<int32_t> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<int32_t>((i * 37 + 11) % V), y[i] = static_cast<int32_t>((i * 53 + 7) % V);
  }
  for (auto* m : {a->get(), b->get()}) {
    ASSERT_TRUE(m->InitRandom(5).ok());
    Perturb(m);
  }
  std::vector<float> ga, gb;
  float la = 0, lb = 0;
  ASSERT_TRUE((*a)->Gradients(x.data(), y.data(), &la, &ga).ok());
  ASSERT_TRUE((*b)->Gradients(x.data(), y.data(), &lb, &gb).ok());
  EXPECT_EQ(la, lb) << what;
  EXPECT_TRUE(ga == gb) << what << ": gradients differ";
  for (int step = 1; step <= 3; ++step) {
    StepStats sa, sb;
    ASSERT_TRUE((*a)->Step(step, 1e-3f, x.data(), y.data(), &sa).ok());
    ASSERT_TRUE((*b)->Step(step, 1e-3f, x.data(), y.data(), &sb).ok());
    EXPECT_EQ(sa.loss, sb.loss) << what << " step " << step;
    // (an evaluation between steps writes the shared memory too)
    float ea = 0, eb = 0;
    ASSERT_TRUE((*a)->Forward(y.data(), x.data(), &ea, nullptr).ok());
    ASSERT_TRUE((*b)->Forward(y.data(), x.data(), &eb, nullptr).ok());
    EXPECT_EQ(ea, eb) << what << " evaluation after step " << step;
  }
  std::vector<float> wa, wb;
  ASSERT_TRUE((*a)->ExportWeights(&wa).ok() && (*b)->ExportWeights(&wb).ok());
  EXPECT_TRUE(wa == wb) << what << ": weights differ after 3 steps";
  auto sa = (*a)->ExportScales();
  auto sb = (*b)->ExportScales();
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->size(), sb->size());
  for (size_t i = 0; i < sa->size(); ++i) {
    EXPECT_EQ((*sa)[i].scale, (*sb)[i].scale) << what << " " << (*sa)[i].name;
    EXPECT_TRUE((*sa)[i].amax_history == (*sb)[i].amax_history) << what << " " << (*sa)[i].name;
  }
}

// train.share_gradient_memory on model base: the same numbers in less memory. Returns the bytes
// placed in gradient memory.
size_t ExpectSharingChangesNoNumber(ModelOptions base, const std::string& what) {
  ModelOptions shared = base, separate = base;
  shared.share_grad_memory = true, separate.share_grad_memory = false;
  ExpectSameNumbersInLessMemory(separate, shared, what);
  auto b = CreateCpuGpt(shared);
  return b.ok() ? (*b)->shared_gradient_bytes() : 0;
}

// train.share_gradient_memory: layer l's saved buffers in layers 0..l-1's weight-gradient memory.
// The numbers do not change (gpt2 and llama with grouped-query attention, fp8 and bf16); with
// grad_accum 2 (the gradients outlive a forward) nothing is shared.
TEST(MemoryReport, SharingGradientMemoryChangesNoNumberAndSavesMemory) {
  for (const bool llama : {false, true}) {
    for (const Precision p : {Precision::kFp8, Precision::kBf16}) {
      ExpectSharingChangesNoNumber(Small(llama, p, 3, 128, 2, 64),
                                   StrCat(llama ? "llama " : "gpt2 ", PrecisionName(p)));
    }
  }
  ModelOptions accum;
  accum.model = {3, 128, 4, 64, 256};
  accum.B = 2, accum.T = 64, accum.grad_accum = 2;
  ModelOptions off = accum;
  off.share_grad_memory = false;
  auto with = CreateCpuGpt(accum);
  auto without = CreateCpuGpt(off);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ((*with)->allocated_bytes(), (*without)->allocated_bytes()) << "grad_accum 2 shares";
}

// Where a layer saves more than its own weights' gradients hold (as gpt-1.3b does: B x T = 4 C),
// the buffers of the upper layers fill what the lower layers left, spanning slots: nearly all the
// weight-gradient memory of layers 0..L-2 holds saved buffers, and the numbers do not change.
TEST(MemoryReport, SharingGradientMemoryFillsTheLowerLayersSlots) {
  for (const bool llama : {false, true}) {
    for (const Precision p : {Precision::kFp8, Precision::kBf16}) {
      const ModelOptions base = Small(llama, p, 6, 64, 4, 64);
      const std::string what = StrCat(llama ? "llama " : "gpt2 ", PrecisionName(p), " 6 layers");
      const size_t placed = ExpectSharingChangesNoNumber(base, what);
      const gpt_detail::Layout layout(base.model);
      size_t capacity = 0;  // the four weights' gradients of layers 0..L-2
      for (const int w : {gpt_detail::kQkvW, gpt_detail::kAttProjW, gpt_detail::kFcW,
                          gpt_detail::kFcProjW}) {
        capacity += static_cast<size_t>(layout.size[w] / 6 * 5) * sizeof(float);
      }
      EXPECT_LE(placed, capacity) << what;
      EXPECT_GE(placed, capacity * 9 / 10) << what << ": " << placed << " of " << capacity;
    }
  }
}

// fp8.cache_weights: false casts each FP8 weight in every forward and again, transposed only, in
// every backward, from the master weights: the same gradients, losses, evaluations, weights and
// scale histories bit for bit as the cached weights (gpt2 and llama, delayed and current
// scaling, one and two micro-batches), and none of the FP8 weights' memory but two layers'
// (delayed scaling casts a layer ahead, into the half of that buffer the layer before last
// has finished with; on the CPU right away, so a wrong half changes the numbers). It casts
// 2 x micro-batches times per weight and step; the cached weights once.
TEST(MemoryReport, UncachedFp8WeightsChangeNoNumberAndSaveTheirMemory) {
  for (const bool llama : {false, true}) {
    for (const ScalingMode mode : {ScalingMode::kDelayed, ScalingMode::kCurrent}) {
      for (const int accum : {1, 2}) {
        ModelOptions cached = Small(llama, Precision::kFp8, 3, 128, 2, 64);
        cached.fp8.mode = mode;
        cached.grad_accum = accum;
        ModelOptions uncached = cached;
        uncached.fp8.cache_weights = false;
        const std::string what = StrCat(llama ? "llama " : "gpt2 ", ScalingModeName(mode),
                                        " grad_accum ", accum);
        ExpectSameNumbersInLessMemory(cached, uncached, what);
        auto a = CreateCpuGpt(cached);
        auto b = CreateCpuGpt(uncached);
        ASSERT_TRUE(a.ok() && b.ok());
        auto ra = Report(**a), rb = Report(**b);
        EXPECT_EQ(rb.count("fp8 weights (+T)"), 0u) << what;
        // Two layers' weights instead (a layer's casts run a layer ahead).
        size_t layer = 0;
        for (int kind = 0; kind < gpt_detail::kNumLinear; ++kind) {
          int64_t N, K;
          gpt_detail::LinearShape(cached.model, kind, &N, &K);
          layer += static_cast<size_t>(N * K);
        }
        EXPECT_EQ(rb.at("fp8 cast scratch") - ra.at("fp8 cast scratch"), 2 * layer) << what;
        EXPECT_EQ((*a)->allocated_bytes() - (*b)->allocated_bytes(),
                  ra.at("fp8 weights (+T)") - 2 * layer) << what;
        std::vector<int32_t> x(2 * 64 * accum, 3), y(2 * 64 * accum, 5);
        StepStats sa, sb;
        ASSERT_TRUE((*a)->Step(1, 1e-3f, x.data(), y.data(), &sa).ok());
        ASSERT_TRUE((*b)->Step(1, 1e-3f, x.data(), y.data(), &sb).ok());
        EXPECT_EQ(sa.weight_casts, (*a)->num_fp8_weights()) << what;
        EXPECT_EQ(sb.weight_casts, 2 * accum * (*b)->num_fp8_weights()) << what;
        auto cw = (*b)->CachedFp8Weight("h0.qkv.weight");
        ASSERT_FALSE(cw.ok());
        EXPECT_NE(cw.status().message().find("fp8.cache_weights"), std::string::npos)
            << cw.status().message();
      }
    }
  }
  ModelOptions block = Small(false, Precision::kFp8, 2, 128, 2, 64);
  block.fp8.mode = ScalingMode::kBlock, block.fp8.cache_weights = false;
  auto refused = CreateCpuGpt(block);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fp8.cache_weights: false does not run with "
                                            "fp8.scaling: block"),
            std::string::npos)
      << refused.status().message();
}

// train.recompute in FP8: the block linears keep no FP8 transposed input per layer; the backward
// casts it again, with the forward's scale, from the norm's output recomputed (LayerNorm,
// RMSNorm), from GELU fused into the cast, or from SwiGLU recomputed. The same gradients, losses,
// evaluations, weights and scale histories bit for bit (gpt2 and llama, delayed and current
// scaling, one and two micro-batches, cached and uncached weights), and L x B x T x (C + C +
// FC2's input width) bytes fewer (the CPU's attention keeps no output: the attention
// projection's copy stays). A recast skipped, or into the wrong place, changes the gradients.
// Block scaling keeps its copies; with fp8.gelu_input_fp8 so does FC2.
TEST(MemoryReport, RecomputedFp8InputsChangeNoNumberAndSaveTheirMemory) {
  for (const bool llama : {false, true}) {
    for (const ScalingMode mode : {ScalingMode::kDelayed, ScalingMode::kCurrent}) {
      for (const int accum : {1, 2}) {
        ModelOptions saved = Small(llama, Precision::kFp8, 3, 128, 2, 64);
        saved.share_grad_memory = false;  // (exact accounting)
        saved.fp8.mode = mode;
        saved.grad_accum = accum;
        ModelOptions recomputed = saved;
        recomputed.recompute = true;
        const std::string what = StrCat(llama ? "llama " : "gpt2 ", ScalingModeName(mode),
                                        " grad_accum ", accum);
        ExpectSameNumbersInLessMemory(saved, recomputed, what);
        auto a = CreateCpuGpt(saved);
        auto b = CreateCpuGpt(recomputed);
        ASSERT_TRUE(a.ok() && b.ok());
        const int64_t M = 128, C = 128, L = 3;
        const int64_t ffn_in = llama ? saved.model.ffn() : 4 * C;
        EXPECT_EQ(Report(**a).at("fp8 saved inputs") - Report(**b).at("fp8 saved inputs"),
                  static_cast<size_t>(L * M * (2 * C + ffn_in)))
            << what;
        if (mode == ScalingMode::kDelayed && accum == 1) {
          ModelOptions uncached = saved, both = recomputed;
          uncached.fp8.cache_weights = false, both.fp8.cache_weights = false;
          ExpectSameNumbersInLessMemory(uncached, both, what + " uncached");
        }
      }
    }
  }
  // Block scaling: nothing recast, the same bytes and numbers.
  ModelOptions block = Small(false, Precision::kFp8, 2, 128, 2, 64);
  block.fp8.mode = ScalingMode::kBlock;
  ModelOptions block_re = block;
  block_re.recompute = true;
  auto a = CreateCpuGpt(block);
  auto b = CreateCpuGpt(block_re);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_EQ(Report(**a).at("fp8 saved inputs"), Report(**b).at("fp8 saved inputs"));
  // With the GELU input in E4M3 (FC's output kept only as codes), FC2 keeps its copy: GELU of
  // the codes is not the forward's input. The norms' inputs are still cast again: the same
  // numbers in less memory.
  for (const ScalingMode mode : {ScalingMode::kDelayed, ScalingMode::kCurrent}) {
    ModelOptions e4 = Small(false, Precision::kFp8, 3, 128, 2, 64);
    e4.share_grad_memory = false;
    e4.fp8.gelu_input_fp8 = true, e4.fp8.mode = mode;
    ModelOptions e4_re = e4;
    e4_re.recompute = true;
    ExpectSameNumbersInLessMemory(e4, e4_re, StrCat("gelu_input_fp8 ", ScalingModeName(mode)));
    auto c = CreateCpuGpt(e4);
    auto d = CreateCpuGpt(e4_re);
    ASSERT_TRUE(c.ok() && d.ok()) << d.status().ToString();
    EXPECT_EQ(Report(**c).at("fp8 saved inputs") - Report(**d).at("fp8 saved inputs"),
              size_t{3} * 128 * 2 * 128);  // L x M x 2C: the norms' copies only
  }
}

// fp8.gelu_input_fp8: gpt2's FC outputs saved as E4M3 codes instead of T. The forward (and so the
// first loss) is unchanged; the gradients move by the GELU derivative's rounding, a little; the
// saved activations shrink by L x B x T x 4C values and the FP8 saved inputs grow by as many
// bytes. The GELU backward fused into FC's dY cast (delayed scaling after the first step) and the
// dequantized path (the calibrating first step, current scaling) both train. llama: refused.
TEST(MemoryReport, Fp8GeluInputSavesItsMemoryAndStaysClose) {
  for (const ScalingMode mode : {ScalingMode::kDelayed, ScalingMode::kCurrent}) {
    ModelOptions bf = Small(false, Precision::kFp8, 3, 128, 2, 64);
    bf.share_grad_memory = false;  // (exact accounting)
    bf.fp8.mode = mode;
    ModelOptions e4 = bf;
    e4.fp8.gelu_input_fp8 = true;
    const std::string what = ScalingModeName(mode);
    auto a = CreateCpuGpt(bf);
    auto b = CreateCpuGpt(e4);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    auto ra = Report(**a), rb = Report(**b);
    const size_t values = size_t{3} * 128 * 4 * 128;  // L x (B x T) x 4C
    EXPECT_EQ(ra.at("saved activations") - rb.at("saved activations"), values * sizeof(float))
        << what;
    EXPECT_EQ(rb.at("fp8 saved inputs") - ra.at("fp8 saved inputs"), values) << what;
    EXPECT_LT((*b)->allocated_bytes(), (*a)->allocated_bytes()) << what;
    std::vector<int32_t> x(128), y(128);
    for (int i = 0; i < 128; ++i) x[i] = (i * 37 + 11) % 256, y[i] = (i * 53 + 7) % 256;
    ModelOptions f32 = bf;
    f32.precision = Precision::kFp32;
    auto ref = CreateCpuGpt(f32);
    ASSERT_TRUE(ref.ok());
    for (auto* m : {a->get(), b->get(), ref->get()}) ASSERT_TRUE(m->InitRandom(5).ok());
    std::vector<float> ga, gb, gr;
    float la = 0, lb = 0, lr = 0;
    ASSERT_TRUE((*a)->Gradients(x.data(), y.data(), &la, &ga).ok());
    ASSERT_TRUE((*b)->Gradients(x.data(), y.data(), &lb, &gb).ok());
    ASSERT_TRUE((*ref)->Gradients(x.data(), y.data(), &lr, &gr).ok());
    EXPECT_EQ(la, lb) << what << ": the forward must not change";
    auto rel = [](const std::vector<float>& p, const std::vector<float>& q) {
      double d2 = 0, n2 = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        d2 += (double{p[i]} - q[i]) * (double{p[i]} - q[i]), n2 += double{q[i]} * q[i];
      }
      return std::sqrt(d2 / n2);
    };
    // (FP8's own error against FP32 is about 0.11 here; the codes add nothing visible to it)
    std::cout << what << ": gradients' relative L2 to FP32: fp8 " << rel(ga, gr)
              << ", with the GELU input in E4M3 " << rel(gb, gr) << "; between them "
              << rel(gb, ga) << "\n";
    EXPECT_GT(rel(gb, ga), 0.0) << what << ": the codes must be what the backward reads";
    EXPECT_LT(rel(gb, gr), 1.1 * rel(ga, gr)) << what;
    for (int step = 1; step <= 4; ++step) {  // (step 1 calibrates: the dequantized path)
      StepStats sa, sb;
      ASSERT_TRUE((*a)->Step(step, 1e-3f, x.data(), y.data(), &sa).ok());
      ASSERT_TRUE((*b)->Step(step, 1e-3f, x.data(), y.data(), &sb).ok());
      EXPECT_NEAR(sb.loss, sa.loss, 0.01 * sa.loss) << what << " step " << step;
    }
  }
  ModelOptions llama = Small(true, Precision::kFp8, 2, 128, 2, 64);
  llama.fp8.gelu_input_fp8 = true;
  auto refused = CreateCpuGpt(llama);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fp8.gelu_input_fp8"), std::string::npos)
      << refused.status().message();
}

TEST(MemoryReport, TheTrainerWritesItToTheMetricsAfterTheFirstStep) {
  test::TempDir dir("fp8rt_memreport");
  const std::string corpus = test::EnglishCorpus(dir.str() + "/corpus.txt");
  ASSERT_FALSE(corpus.empty());
  TrainOptions o;
  o.config.model = {2, 64, 4, 64, 256};
  o.config.data.train = {corpus};
  o.config.train.batch_size = 2, o.config.train.seq_len = 32, o.config.train.total_steps = 3;
  std::ostringstream metrics, progress;
  o.metrics = &metrics, o.progress = &progress;
  o.memory_report = true;
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto lines = test::MetricsLinesWith(metrics.str(), "memory_bytes");
  ASSERT_EQ(lines.size(), 1u) << metrics.str();
  EXPECT_NE(lines[0].find("\"master weights (fp32)\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"step\":1"), std::string::npos) << lines[0];
  EXPECT_NE(progress.str().find("memory after step 1"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("total (model)"), std::string::npos) << progress.str();
}

}  // namespace
}  // namespace fp8rt
