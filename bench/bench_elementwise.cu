// Benchmark rows of the element-wise, normalization, loss and optimizer kernels at GPT-2 1.3B sizes
// (B=4, T=2048, C=2048, bf16 activations): GB/s over the fewest bytes each op must move (each
// input read once, each output written once) against the copy ceiling; outputs verified after.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"

namespace fp8rt::bench {
namespace {

constexpr int64_t kB = 4, kT = 2048, kC = 2048, kN = kB * kT, kV = 50257, kVp = 50304;
constexpr int kSets = 3;  // rotating buffer sets for tensors that would otherwise sit in L2

template <typename T>
T* Alloc(int64_t n) {
  return static_cast<T*>(DeviceAlloc(static_cast<size_t>(n) * sizeof(T)));
}

template <typename T>
std::vector<T> Fetch(const T* d, int64_t n) {
  std::vector<T> h(static_cast<size_t>(n));
  FP8RT_CUDA_CHECK(cudaDeviceSynchronize());
  FP8RT_CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
void Put(T* d, const std::vector<T>& h) {
  FP8RT_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

std::vector<float> Floats(const std::vector<bf16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = ToFloat(v[i]);
  return f;
}

// |got - want| <= atol + rtol |want| everywhere; prints the first miss.
bool Close(const char* what, const std::vector<float>& got, const std::vector<float>& want,
           double atol, double rtol) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      std::fprintf(stderr, "verify %s: [%zu] got %g, want %g\n", what, i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

void AddRow(Context& ctx, const std::string& op, const std::string& shape, double ms, double bytes,
            bool with_target, bool verified) {
  Row r;
  r.op = op;
  r.shape = shape;
  r.median_ms = ms;
  r.value = bytes / (ms * 1e-3) / 1e9;
  r.unit = "GB/s";
  r.ceiling = ctx.copy_gbps;
  r.ceiling_name = "copy";
  if (with_target) {
    r.target = ">= 70% of copy";
    r.target_met = r.value >= 0.7 * ctx.copy_gbps;
  }
  if (!verified) {
    r.target += r.target.empty() ? "output verified" : ", output verified";
    r.target_met = false;
  }
  ctx.rows.push_back(r);
}

const char* kBf16Shape = "8192x2048 bf16";

// A device-to-device copy moving `bytes` (read + written) in the same rotating fashion: what the
// copy ceiling (measured on 2 GiB) shrinks to at this size, where launch and ramp-up are no longer
// negligible. Reported next to the small ops as a reference row, without a target.
void AddCopyReference(Context& ctx, const std::string& what, double bytes) {
  const size_t each = static_cast<size_t>(bytes / 2);
  void* src[kSets];
  void* dst[kSets];
  for (int i = 0; i < kSets; ++i) {
    src[i] = DeviceAlloc(each);
    dst[i] = DeviceAlloc(each);
  }
  int it = 0;
  const double ms = MedianMs(ctx, [&] {
    const int i = it++ % kSets;
    FP8RT_CUDA_CHECK(cudaMemcpyAsync(dst[i], src[i], each, cudaMemcpyDeviceToDevice, ctx.stream));
  });
  AddRow(ctx, "reference: d2d copy, " + what, std::to_string(each >> 20) + " MiB each way", ms,
         2.0 * each, false, true);
  for (int i = 0; i < kSets; ++i) {
    DeviceFree(src[i]);
    DeviceFree(dst[i]);
  }
}

void BenchLayerNorm(Context& ctx) {
  const int64_t nc = kN * kC;
  struct Set {
    bf16 *in, *out, *dout, *din;
    float *mean, *rstd;
  } sets[kSets];
  for (Set& s : sets) {
    s = {Alloc<bf16>(nc), Alloc<bf16>(nc),  Alloc<bf16>(nc),
         Alloc<bf16>(nc), Alloc<float>(kN), Alloc<float>(kN)};
    FillUniformBf16(s.in, nc, -2, 3, 11, ctx.stream);
    FillUniformBf16(s.dout, nc, -1, 1, 12, ctx.stream);
    FillUniformBf16(s.din, nc, -1, 1, 13, ctx.stream);
  }
  bf16 *w = Alloc<bf16>(kC), *b = Alloc<bf16>(kC);
  float *dw = Alloc<float>(kC), *db = Alloc<float>(kC);
  FillUniformBf16(w, kC, 0.5, 1.5, 14, ctx.stream);
  FillUniformBf16(b, kC, -0.5, 0.5, 15, ctx.stream);
  FP8RT_CUDA_CHECK(cudaMemsetAsync(dw, 0, kC * sizeof(float), ctx.stream));
  FP8RT_CUDA_CHECK(cudaMemsetAsync(db, 0, kC * sizeof(float), ctx.stream));
  const size_t scratch_bytes = cuda::LayerNormBackwardScratchBytes(kN, kC);
  void* scratch = DeviceAlloc(scratch_bytes);
  const float eps = 1e-5f;

  int it = 0;
  const double fwd_ms = MedianMs(ctx, [&] {
    const Set& s = sets[it++ % kSets];
    FP8RT_CHECK_OK(
        cuda::LayerNormForward(s.out, s.mean, s.rstd, s.in, w, b, kN, kC, eps, ctx.stream));
  });
  for (const Set& s : sets) {  // every set's statistics, for the backward
    FP8RT_CHECK_OK(
        cuda::LayerNormForward(s.out, s.mean, s.rstd, s.in, w, b, kN, kC, eps, ctx.stream));
  }
  const double bwd_ms = MedianMs(ctx, [&] {
    const Set& s = sets[it++ % kSets];
    FP8RT_CHECK_OK(cuda::LayerNormBackward(s.din, dw, db, s.dout, s.in, w, s.mean, s.rstd, kN, kC,
                                           true, scratch, scratch_bytes, ctx.stream));
  });

  // Verify one full forward + backward of set 0 (dweight/dbias from zero) against the reference.
  const Set& s = sets[0];
  FillUniformBf16(s.din, nc, -1, 1, 13, ctx.stream);
  FP8RT_CUDA_CHECK(cudaMemsetAsync(dw, 0, kC * sizeof(float), ctx.stream));
  FP8RT_CUDA_CHECK(cudaMemsetAsync(db, 0, kC * sizeof(float), ctx.stream));
  std::vector<bf16> din = Fetch(s.din, nc);
  FP8RT_CHECK_OK(
      cuda::LayerNormForward(s.out, s.mean, s.rstd, s.in, w, b, kN, kC, eps, ctx.stream));
  FP8RT_CHECK_OK(cuda::LayerNormBackward(s.din, dw, db, s.dout, s.in, w, s.mean, s.rstd, kN, kC,
                                         true, scratch, scratch_bytes, ctx.stream));
  const std::vector<bf16> in = Fetch(s.in, nc), dout = Fetch(s.dout, nc), hw = Fetch(w, kC),
                          hb = Fetch(b, kC);
  std::vector<bf16> out_ref(nc);
  std::vector<float> mean(kN), rstd(kN), dw_ref(kC, 0.f), db_ref(kC, 0.f);
  FP8RT_CHECK_OK(cpu::LayerNormForward(out_ref.data(), mean.data(), rstd.data(), in.data(),
                                       hw.data(), hb.data(), kN, kC, eps));
  FP8RT_CHECK_OK(cpu::LayerNormBackward(din.data(), dw_ref.data(), db_ref.data(), dout.data(),
                                        in.data(), hw.data(), mean.data(), rstd.data(), kN, kC,
                                        true));
  const bool fwd_ok =
      Close("layernorm out", Floats(Fetch(s.out, nc)), Floats(out_ref), 2e-3, 1.6e-2) &&
      Close("layernorm rstd", Fetch(s.rstd, kN), rstd, 1e-5, 1e-4);
  const bool bwd_ok = Close("layernorm din", Floats(Fetch(s.din, nc)), Floats(din), 2e-3, 1.6e-2) &&
                      Close("layernorm dweight", Fetch(dw, kC), dw_ref, 1e-3, 1e-4) &&
                      Close("layernorm dbias", Fetch(db, kC), db_ref, 1e-3, 1e-4);

  const double act = static_cast<double>(nc) * sizeof(bf16);
  AddRow(ctx, "layernorm fwd", kBf16Shape, fwd_ms, 2 * act + 2.0 * kC * 2 + 2.0 * kN * 4, true,
         fwd_ok);
  // dout, in, din read + din written (accumulated), weight, mean, rstd, dweight/dbias read+written.
  AddRow(ctx, "layernorm bwd (accumulate din)", kBf16Shape, bwd_ms,
         4 * act + kC * 2.0 + 2.0 * kN * 4 + 4.0 * kC * 4, true, bwd_ok);
  AddCopyReference(ctx, "layernorm fwd bytes", 2 * act);
  AddCopyReference(ctx, "layernorm bwd bytes", 4 * act);

  for (Set& x : sets) {
    for (void* p :
         {static_cast<void*>(x.in), static_cast<void*>(x.out), static_cast<void*>(x.dout),
          static_cast<void*>(x.din), static_cast<void*>(x.mean), static_cast<void*>(x.rstd)}) {
      DeviceFree(p);
    }
  }
  for (void* p : {static_cast<void*>(w), static_cast<void*>(b), static_cast<void*>(dw),
                  static_cast<void*>(db), scratch}) {
    DeviceFree(p);
  }
}

void BenchGelu(Context& ctx) {
  const int64_t n = kN * 4 * kC;  // the MLP's (B*T, 4C) pre-activation: 8192 x 8192
  bf16 *in = Alloc<bf16>(n), *out = Alloc<bf16>(n), *dout = Alloc<bf16>(n), *din = Alloc<bf16>(n);
  FillUniformBf16(in, n, -4, 4, 21, ctx.stream);
  FillUniformBf16(dout, n, -1, 1, 22, ctx.stream);
  const double fwd_ms =
      MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::GeluForward(out, in, n, ctx.stream)); });
  const double bwd_ms =
      MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::GeluBackward(din, in, dout, n, ctx.stream)); });
  // Verify the first and last 64K elements.
  bool fwd_ok = true, bwd_ok = true;
  for (int64_t off : {int64_t{0}, n - 65536}) {
    const std::vector<bf16> x = Fetch(in + off, 65536), dy = Fetch(dout + off, 65536);
    std::vector<bf16> y_ref(65536), dx_ref(65536);
    FP8RT_CHECK_OK(cpu::GeluForward(y_ref.data(), x.data(), 65536));
    FP8RT_CHECK_OK(cpu::GeluBackward(dx_ref.data(), x.data(), dy.data(), 65536));
    fwd_ok =
        fwd_ok && Close("gelu out", Floats(Fetch(out + off, 65536)), Floats(y_ref), 1e-5, 8e-3);
    bwd_ok =
        bwd_ok && Close("gelu din", Floats(Fetch(din + off, 65536)), Floats(dx_ref), 1e-5, 8e-3);
  }
  const double bytes = static_cast<double>(n) * sizeof(bf16);
  AddRow(ctx, "gelu fwd", "8192x8192 bf16", fwd_ms, 2 * bytes, true, fwd_ok);
  AddRow(ctx, "gelu bwd", "8192x8192 bf16", bwd_ms, 3 * bytes, true, bwd_ok);
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), static_cast<void*>(dout),
                  static_cast<void*>(din)}) {
    DeviceFree(p);
  }
}

void BenchCrossEntropy(Context& ctx) {
  const int64_t n = kN * kVp;
  bf16* logits = Alloc<bf16>(n);
  float* losses = Alloc<float>(kN);
  int32_t* targets = Alloc<int32_t>(kN);
  std::mt19937 rng(31);
  std::vector<int32_t> ht(kN);
  for (auto& t : ht) t = static_cast<int32_t>(rng() % kV);
  Put(targets, ht);
  FillUniformBf16(logits, n, -8, 8, 32, ctx.stream);
  const float dloss = 1.0f / kN;
  // In place: later repeats read earlier dlogits as logits, which costs the same.
  const double ms = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(
        cuda::SoftmaxCrossEntropy(losses, logits, targets, kN, kV, kVp, dloss, true, ctx.stream));
  });
  // Verify rows 0, N/2 and N-1 from fresh logits.
  FillUniformBf16(logits, n, -8, 8, 32, ctx.stream);
  const int64_t rows[3] = {0, kN / 2, kN - 1};
  std::vector<bf16> ref[3];
  for (int k = 0; k < 3; ++k) ref[k] = Fetch(logits + rows[k] * kVp, kVp);
  FP8RT_CHECK_OK(
      cuda::SoftmaxCrossEntropy(losses, logits, targets, kN, kV, kVp, dloss, true, ctx.stream));
  const std::vector<float> got_losses = Fetch(losses, kN);
  bool ok = true;
  for (int k = 0; k < 3; ++k) {
    float loss_ref = 0;
    FP8RT_CHECK_OK(
        cpu::SoftmaxCrossEntropy(&loss_ref, ref[k].data(), &ht[rows[k]], 1, kV, kVp, dloss, true));
    ok = ok && Close("xent loss", {got_losses[rows[k]]}, {loss_ref}, 1e-6, 1e-4) &&
         Close("xent dlogits", Floats(Fetch(logits + rows[k] * kVp, kVp)), Floats(ref[k]),
               1e-4 * dloss, 1.6e-2);
  }
  AddRow(ctx, "softmax-xent fwd+bwd", "8192x50257 (Vp 50304) bf16", ms,
         2.0 * n * sizeof(bf16) + 2.0 * kN * 4, true, ok);
  DeviceFree(logits);
  DeviceFree(losses);
  DeviceFree(targets);
}

void BenchResidual(Context& ctx) {
  const int64_t n = kN * kC;
  struct Set {
    bf16 *a, *b, *out;
  } sets[kSets];
  for (Set& s : sets) {
    s = {Alloc<bf16>(n), Alloc<bf16>(n), Alloc<bf16>(n)};
    FillUniformBf16(s.a, n, -1, 1, 41, ctx.stream);
    FillUniformBf16(s.b, n, -1, 1, 42, ctx.stream);
  }
  int it = 0;
  const double ms = MedianMs(ctx, [&] {
    const Set& s = sets[it++ % kSets];
    FP8RT_CHECK_OK(cuda::ResidualAdd(s.out, s.a, s.b, n, ctx.stream));
  });
  const std::vector<bf16> a = Fetch(sets[0].a, 65536), b = Fetch(sets[0].b, 65536);
  std::vector<bf16> ref(65536);
  FP8RT_CHECK_OK(cpu::ResidualAdd(ref.data(), a.data(), b.data(), 65536));
  const bool ok = Close("residual", Floats(Fetch(sets[0].out, 65536)), Floats(ref), 0, 0);
  AddRow(ctx, "residual add", kBf16Shape, ms, 3.0 * n * sizeof(bf16), false, ok);
  for (Set& s : sets) {
    DeviceFree(s.a);
    DeviceFree(s.b);
    DeviceFree(s.out);
  }
}

void BenchOptimizer(Context& ctx) {
  const int64_t n = int64_t{256} << 20;  // 256M parameters (of GPT-2 1.3B's 1.3B, to fit time)
  float *master = Alloc<float>(n), *m = Alloc<float>(n), *v = Alloc<float>(n),
        *grad = Alloc<float>(n), *norm = Alloc<float>(1);
  bf16* working = Alloc<bf16>(n);
  FillUniform(master, n, -1, 1, 51, ctx.stream);
  FillUniform(m, n, -1e-3f, 1e-3f, 52, ctx.stream);
  FillUniform(v, n, 0, 1e-6f, 53, ctx.stream);
  FillUniform(grad, n, -1e-2f, 1e-2f, 54, ctx.stream);
  const size_t scratch_bytes = cuda::GlobalNormSquaredScratchBytes(n);
  void* scratch = DeviceAlloc(scratch_bytes);
  const double norm_ms = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(cuda::GlobalNormSquared(norm, grad, n, scratch, scratch_bytes, ctx.stream));
  });
  AdamWConfig cfg;
  const double adam_ms = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(cuda::AdamW(master, m, v, grad, working, n, 10, cfg, cfg.weight_decay, norm,
                               1.0f, ctx.stream));
  });
  // Verify: the norm over all n against an fp64 sum; AdamW on the first 64K elements.
  const std::vector<float> g = Fetch(grad, n);
  double sum = 0;
  for (float x : g) sum += static_cast<double>(x) * x;
  const float got_norm = Fetch(norm, 1)[0];
  const bool norm_ok = Close("grad norm^2", {got_norm}, {static_cast<float>(sum)}, 0, 1e-5);
  const int64_t k = 65536;
  std::vector<float> hm = Fetch(master, k), hmm = Fetch(m, k), hv = Fetch(v, k);
  std::vector<bf16> hw(k);
  FP8RT_CHECK_OK(cpu::AdamW(hm.data(), hmm.data(), hv.data(), g.data(), hw.data(), k, 11, cfg,
                            cfg.weight_decay, &got_norm, 1.0f));
  FP8RT_CHECK_OK(cuda::AdamW(master, m, v, grad, working, n, 11, cfg, cfg.weight_decay, norm, 1.0f,
                             ctx.stream));
  const bool adam_ok = Close("adamw master", Fetch(master, k), hm, 1e-7, 1e-5) &&
                       Close("adamw v", Fetch(v, k), hv, 1e-7, 1e-5) &&
                       Close("adamw working", Floats(Fetch(working, k)), Floats(hw), 1e-5, 8e-3);
  AddRow(ctx, "grad norm^2", "256M fp32", norm_ms, 4.0 * n, false, norm_ok);
  // master, m, v, grad read; master, m, v written; bf16 working copy written.
  AddRow(ctx, "adamw (+bf16 working copy)", "256M fp32", adam_ms, 30.0 * n, false, adam_ok);
  for (void* p :
       {static_cast<void*>(master), static_cast<void*>(m), static_cast<void*>(v),
        static_cast<void*>(grad), static_cast<void*>(norm), static_cast<void*>(working), scratch}) {
    DeviceFree(p);
  }
}

// Token ids for the embedding rows: uniform over V, or Zipf's law (frequency ~ 1 / rank), as
// in text: the commonest token then has a run of ~9% of the positions, which one block sums.
std::vector<int32_t> EmbeddingTokens(int64_t n, bool zipf, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  if (!zipf) {
    for (auto& x : t) x = static_cast<int32_t>(rng() % kV);
    return t;
  }
  std::vector<double> cdf(static_cast<size_t>(kV));
  double sum = 0;
  for (int64_t v = 0; v < kV; ++v) cdf[static_cast<size_t>(v)] = sum += 1.0 / (v + 1);
  std::uniform_real_distribution<double> u(0, sum);
  for (auto& x : t) {
    x = static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
  }
  return t;
}

void BenchEmbedding(Context& ctx) {
  const int64_t nc = kN * kC;
  constexpr int64_t kRanks = 4;  // the gathered rows of data parallelism's sparse gradient
  bf16 *wte = Alloc<bf16>(kV * kC), *wpe = Alloc<bf16>(kT * kC), *out = Alloc<bf16>(nc),
       *dout = Alloc<bf16>(kRanks * nc);
  float *dwte = Alloc<float>(kV * kC), *dwpe = Alloc<float>(kT * kC);
  int32_t* tokens = Alloc<int32_t>(kRanks * kN);
  FillUniformBf16(wte, kV * kC, -1, 1, 62, ctx.stream);
  FillUniformBf16(wpe, kT * kC, -1, 1, 63, ctx.stream);
  FillUniformBf16(dout, kRanks * nc, -1, 1, 64, ctx.stream);
  auto bytes = cuda::EmbeddingBackwardScratchBytes(kRanks * kN, 1, kV, kC);
  FP8RT_CHECK_OK(bytes.status());
  void* scratch = DeviceAlloc(bytes.value());
  const std::vector<bf16> hdout = Fetch(dout, kRanks * nc);
  const double act = static_cast<double>(nc) * sizeof(bf16);
  for (const bool zipf : {false, true}) {
    const std::vector<int32_t> ht = EmbeddingTokens(kRanks * kN, zipf, zipf ? 65 : 61);
    Put(tokens, ht);
    FP8RT_CUDA_CHECK(cudaMemsetAsync(dwte, 0, kV * kC * sizeof(float), ctx.stream));
    FP8RT_CUDA_CHECK(cudaMemsetAsync(dwpe, 0, kT * kC * sizeof(float), ctx.stream));
    const std::string tok = zipf ? ", Zipf tokens" : "";
    if (!zipf) {
      const double fwd_ms = MedianMs(ctx, [&] {
        FP8RT_CHECK_OK(cuda::EmbeddingForward(out, tokens, wte, wpe, kB, kT, kC, kV, ctx.stream));
      });
      bool fwd_ok = true;
      for (int64_t pos : {int64_t{0}, kN - 1}) {
        const std::vector<bf16> te = Fetch(wte + ht[pos] * kC, kC),
                                pe = Fetch(wpe + pos % kT * kC, kC);
        std::vector<float> want(kC);
        for (int64_t c = 0; c < kC; ++c) want[c] = ToFloat(bf16(ToFloat(te[c]) + ToFloat(pe[c])));
        fwd_ok = fwd_ok && Close("embedding out", Floats(Fetch(out + pos * kC, kC)), want, 0, 0);
      }
      AddRow(ctx, "embedding fwd", "4x2048x2048 bf16, V 50257", fwd_ms,
             2 * act + kT * kC * 2.0 + kN * 4.0, false, fwd_ok);
    }
    const double bwd_ms = MedianMs(ctx, [&] {
      FP8RT_CHECK_OK(cuda::EmbeddingBackward(dwte, dwpe, dout, tokens, kB, kT, kC, kV, scratch,
                                             bytes.value(), ctx.stream));
    });
    // 4 ranks' rows gathered, added to one rank's quarter of the table (ZeRO-1): the quarter
    // with the commonest tokens.
    const double slice_ms = MedianMs(ctx, [&] {
      FP8RT_CHECK_OK(cuda::EmbeddingBackwardSlice(dwte, 0, kV * kC / kRanks, dout, tokens,
                                                  kRanks * kN, kC, kV, scratch, bytes.value(),
                                                  ctx.stream));
    });
    // Verify: after one more backward from zero, dwte of token ht[0] and dwpe row 0.
    FP8RT_CUDA_CHECK(cudaMemsetAsync(dwte, 0, kV * kC * sizeof(float), ctx.stream));
    FP8RT_CUDA_CHECK(cudaMemsetAsync(dwpe, 0, kT * kC * sizeof(float), ctx.stream));
    FP8RT_CHECK_OK(cuda::EmbeddingBackward(dwte, dwpe, dout, tokens, kB, kT, kC, kV, scratch,
                                           bytes.value(), ctx.stream));
    std::vector<float> dwte_ref(kC, 0.f), dwpe_ref(kC, 0.f);
    std::vector<int32_t> unique(ht.begin(), ht.begin() + kN);
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    for (int64_t pos = 0; pos < kN; ++pos) {
      for (int64_t c = 0; c < kC; ++c) {
        if (ht[pos] == ht[0]) dwte_ref[c] += ToFloat(hdout[pos * kC + c]);
        if (pos % kT == 0) dwpe_ref[c] += ToFloat(hdout[pos * kC + c]);
      }
    }
    const bool bwd_ok =
        Close("embedding dwte", Fetch(dwte + ht[0] * kC, kC), dwte_ref, 1e-5, 1e-4) &&
        Close("embedding dwpe", Fetch(dwpe, kC), dwpe_ref, 1e-5, 1e-4);
    // The quarter from zero: the row of the smallest token (inside it) against every rank's rows
    // summed on the host, and the row of the largest (outside it when >= V / 4) untouched.
    FP8RT_CUDA_CHECK(cudaMemsetAsync(dwte, 0, kV * kC * sizeof(float), ctx.stream));
    FP8RT_CHECK_OK(cuda::EmbeddingBackwardSlice(dwte, 0, kV * kC / kRanks, dout, tokens,
                                                kRanks * kN, kC, kV, scratch, bytes.value(),
                                                ctx.stream));
    const auto [lo_tok, hi_tok] = std::minmax_element(ht.begin(), ht.end());
    std::vector<float> slice_ref(kC, 0.f);
    for (int64_t pos = 0; pos < kRanks * kN; ++pos) {
      if (ht[pos] != *lo_tok) continue;
      for (int64_t c = 0; c < kC; ++c) slice_ref[c] += ToFloat(hdout[pos * kC + c]);
    }
    const bool slice_ok =
        Close("embedding quarter dwte", Fetch(dwte + *lo_tok * kC, kC), slice_ref, 1e-5, 1e-4) &&
        (*hi_tok < kV / kRanks + 1 ||
         Close("embedding outside the quarter", Fetch(dwte + *hi_tok * kC, kC),
               std::vector<float>(kC, 0.f), 0, 0));
    // dout and tokens read; the touched dwte rows and dwpe read and written.
    AddRow(ctx, "embedding bwd", "4x2048x2048 bf16, V 50257" + tok, bwd_ms,
           act + kN * 4.0 + 8.0 * kC * (static_cast<double>(unique.size()) + kT), false, bwd_ok);
    AddRow(ctx, "embedding bwd, 4 ranks' rows into a quarter", "4 x 4x2048x2048 bf16" + tok,
           slice_ms, kRanks * (act + kN * 4.0), false, slice_ok);
  }
  for (void* p : {static_cast<void*>(wte), static_cast<void*>(wpe), static_cast<void*>(out),
                  static_cast<void*>(dout), static_cast<void*>(dwte), static_cast<void*>(dwpe),
                  static_cast<void*>(tokens), scratch}) {
    DeviceFree(p);
  }
}

}  // namespace

void BenchElementwise(Context& ctx) {
  BenchLayerNorm(ctx);
  BenchGelu(ctx);
  BenchCrossEntropy(ctx);
  BenchResidual(ctx);
  BenchOptimizer(ctx);
  BenchEmbedding(ctx);
}

}  // namespace fp8rt::bench
