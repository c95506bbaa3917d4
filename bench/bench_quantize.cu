// Quantize-family rows: FP8 cast + amax (+ transposed copy) at 8192x8192 against the copy
// ceiling, dequantize, current scaling, and the bulk delayed-scaling update; outputs are
// spot-checked against the CPU conversion after timing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace fp8rt::bench {
namespace {

constexpr int64_t kRows = 8192, kCols = 8192;
constexpr float kRange = 3.f;  // inputs uniform in [-3, 3)

template <typename T>
std::vector<float> DownloadAsFloat(const T* d, size_t n) {
  std::vector<T> h(n);
  FP8RT_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = ToFloat(h[i]);
  return f;
}

std::vector<uint8_t> Download(const uint8_t* d, size_t n) {
  std::vector<uint8_t> h(n);
  FP8RT_CUDA_CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  return h;
}

// Compares 4096 sampled codes of data (and data_t) with the CPU encoding of x * scale, and the
// amax with the largest |x| (it must be at least every sample's and inside the fill range).
// Returns "" or what was wrong.
template <typename T>
std::string CheckQuantized(const T* d_in, const Fp8Tensor& t) {
  const int64_t n = t.numel();
  const std::vector<float> x = DownloadAsFloat(d_in, n);
  const std::vector<uint8_t> data = Download(t.data, n);
  const std::vector<uint8_t> data_t = t.data_t ? Download(t.data_t, n) : std::vector<uint8_t>();
  float scalars[3];  // scale, scale_inv, amax
  FP8RT_CUDA_CHECK(cudaMemcpy(scalars, t.scale, sizeof(scalars), cudaMemcpyDeviceToHost));
  std::mt19937_64 rng(42);
  float sample_max = 0;
  for (int k = 0; k < 4096; ++k) {
    const int64_t r = rng() % t.rows, c = rng() % t.cols;
    const float v = x[r * t.cols + c];
    sample_max = std::max(sample_max, std::fabs(v));
    const uint8_t want = Fp8Encode(v * scalars[0], t.format);
    if (data[r * t.cols + c] != want) return StrCat("data[", r, ",", c, "] wrong");
    if (t.data_t && data_t[c * t.rows + r] != want) return StrCat("data_t[", c, ",", r, "] wrong");
  }
  if (t.amax && !(scalars[2] >= sample_max && scalars[2] <= kRange)) {
    return StrCat("amax ", scalars[2], " outside [", sample_max, ", ", kRange, "]");
  }
  if (scalars[1] != ScaleInv(scalars[0])) return "scale_inv wrong";
  return "";
}

template <typename T>
std::string CheckDequantized(const Fp8Tensor& t, const T* d_out) {
  const int64_t n = t.numel();
  const std::vector<uint8_t> data = Download(t.data, n);
  const std::vector<float> out = DownloadAsFloat(d_out, n);
  float scale_inv;
  FP8RT_CUDA_CHECK(cudaMemcpy(&scale_inv, t.scale_inv, 4, cudaMemcpyDeviceToHost));
  std::mt19937_64 rng(7);
  for (int k = 0; k < 4096; ++k) {
    const int64_t i = rng() % n;
    const float want = ToFloat(T(Fp8Decode(data[i], t.format) * scale_inv));
    if (out[i] != want) return StrCat("out[", i, "] = ", out[i], ", want ", want);
  }
  return "";
}

void AddRow(Context& ctx, const std::string& op, const std::string& shape, double ms, double bytes,
            bool with_target, const std::string& error) {
  Row row;
  row.op = op;
  row.shape = shape;
  row.median_ms = ms;
  row.value = bytes / (ms * 1e-3) / 1e9;
  row.unit = "GB/s";
  row.ceiling = ctx.copy_gbps;
  row.ceiling_name = "copy";
  if (with_target) {
    row.target = ">= 80% of copy";
    row.target_met = row.value >= 0.8 * ctx.copy_gbps;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "bench %s: WRONG RESULT: %s\n", op.c_str(), error.c_str());
    row.target = row.target.empty() ? "correct output" : row.target + ", correct output";
    row.target_met = false;
  }
  ctx.rows.push_back(row);
}

// Cast rows for input type T: +transpose, without transpose, current scaling, dequantize.
template <typename T>
void BenchCasts(Context& ctx, void* in, uint8_t* data, uint8_t* data_t, float* scalars,
                unsigned long long* saturated, T* deq_out) {
  const int64_t n = kRows * kCols;
  const std::string shape = StrCat(kRows, "x", kCols);
  const char* tname = DTypeName(DTypeOf<T>());
  const T* x = static_cast<const T*>(in);
  const float init[3] = {448.f / kRange, 1.f, 0.f};  // scale, scale_inv, amax
  FP8RT_CUDA_CHECK(cudaMemcpy(scalars, init, sizeof(init), cudaMemcpyHostToDevice));

  Fp8Tensor t;
  t.data = data;
  t.data_t = data_t;
  t.rows = kRows;
  t.cols = kCols;
  t.format = Fp8Format::kE4M3;
  t.scale = scalars;
  t.scale_inv = scalars + 1;
  t.amax = scalars + 2;

  double ms = MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::Quantize(x, t, saturated, ctx.stream)); });
  AddRow(ctx, StrCat("quantize+amax+T ", tname, "->e4m3"), shape, ms,
         double(n) * sizeof(T) + 2.0 * n, true, CheckQuantized(x, t));

  Fp8Tensor flat = t;
  flat.data_t = nullptr;
  ms = MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::Quantize(x, flat, saturated, ctx.stream)); });
  AddRow(ctx, StrCat("quantize+amax ", tname, "->e4m3 (no T)"), shape, ms,
         double(n) * sizeof(T) + n, false, CheckQuantized(x, flat));

  // Current scaling reads the input twice (amax pass, then the cast).
  ms = MedianMs(
      ctx, [&] { FP8RT_CHECK_OK(cuda::QuantizeCurrentScaling(x, t, 0, saturated, ctx.stream)); });
  AddRow(ctx, StrCat("current scaling+T ", tname, "->e4m3"), shape, ms,
         2.0 * n * sizeof(T) + 2.0 * n, false, CheckQuantized(x, t));

  ms = MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::Dequantize(t, deq_out, ctx.stream)); });
  AddRow(ctx, StrCat("dequantize e4m3->", tname), shape, ms, double(n) + double(n) * sizeof(T),
         false, CheckDequantized(t, deq_out));
}

void BenchScalingUpdate(Context& ctx) {
  const int n = 300, h = 1024;
  const ScalingStateLayout layout = ScalingStateLayout::For(n, h);
  void* blob = DeviceAlloc(layout.total_bytes);
  const ScalingState s = layout.Bind(blob);
  FP8RT_CUDA_CHECK(cudaMemsetAsync(static_cast<uint8_t*>(blob) + layout.formats, 0, n,
                                   ctx.stream));  // all E4M3
  FP8RT_CHECK_OK(cuda::InitScalingState(s, ctx.stream));
  DelayedScalingConfig config;
  config.history_len = h;
  int calls = 0;
  const double ms = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(cuda::UpdateDelayedScaling(s, config, ctx.stream));
    ++calls;
  });
  int pos = -1;
  float scale = -1;
  FP8RT_CUDA_CHECK(cudaMemcpy(&pos, s.pos, 4, cudaMemcpyDeviceToHost));
  FP8RT_CUDA_CHECK(cudaMemcpy(&scale, s.scale + n - 1, 4, cudaMemcpyDeviceToHost));
  std::string error;
  if (pos != calls % h) error = StrCat("pos ", pos, " after ", calls, " updates");
  if (scale != 1.f) error = StrCat("scale ", scale, " != 1 with zero amaxes");
  // Bytes: the whole history read once, plus the per-tensor arrays.
  AddRow(ctx, "update delayed scaling (max)", StrCat(n, " tensors x ", h), ms,
         double(layout.total_bytes), false, error);
  DeviceFree(blob);
}

// The backward's FC dY cast (bias gradient and GELU backward fused) and train.recompute's FC2
// input recast (GELU fused, transposed only) at 8192x8192 bf16: apart, then in one pass
// (QuantizeDbiasGeluGrad's gelu_out), whose codes must equal the separate calls'.
void BenchGeluGradCasts(Context& ctx, const bf16* dout, const bf16* pre) {
  const int64_t n = kRows * kCols;
  const std::string shape = StrCat(kRows, "x", kCols);
  auto* bytes = static_cast<uint8_t*>(DeviceAlloc(5 * n));
  auto* scalars = static_cast<float*>(DeviceAlloc(8 * sizeof(float)));
  auto* dbias = static_cast<float*>(DeviceAlloc(kCols * sizeof(float)));
  const size_t scratch_bytes = cuda::QuantizeDbiasScratchBytes(kRows, kCols);
  void* scratch = DeviceAlloc(scratch_bytes);
  const float init[8] = {57344.f / 8, 1.f, 0.f, 0.f, 448.f / kRange, 1.f, 0.f, 0.f};
  FP8RT_CUDA_CHECK(cudaMemcpy(scalars, init, sizeof(init), cudaMemcpyHostToDevice));
  FP8RT_CUDA_CHECK(cudaMemset(dbias, 0, kCols * sizeof(float)));
  Fp8Tensor dy;  // the output gradient's codes, both orientations
  dy.data = bytes, dy.data_t = bytes + n, dy.rows = kRows, dy.cols = kCols;
  dy.format = Fp8Format::kE5M2;
  dy.scale = scalars, dy.scale_inv = scalars + 1, dy.amax = scalars + 2;
  Fp8Tensor x;  // FC2's input, transposed only, no amax (the forward's cast took it)
  x.data_t = bytes + 2 * n, x.rows = kRows, x.cols = kCols, x.format = Fp8Format::kE4M3;
  x.scale = scalars + 4, x.scale_inv = scalars + 5;

  const double apart_dy = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(cuda::QuantizeDbiasGeluGrad(dout, pre, dy, dbias, nullptr, scratch,
                                               scratch_bytes, ctx.stream));
  });
  AddRow(ctx, "dbias+gelu bwd cast+T bf16->e5m2", shape, apart_dy, 4.0 * n + 2.0 * n, false, "");
  Fp8Tensor x_fwd;  // the forward's cast of FC2's input under train.recompute: row-major only
  x_fwd.data = bytes + 2 * n, x_fwd.rows = kRows, x_fwd.cols = kCols;
  x_fwd.format = Fp8Format::kE4M3;
  x_fwd.scale = scalars + 4, x_fwd.scale_inv = scalars + 5, x_fwd.amax = scalars + 6;
  const double fwd =
      MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::QuantizeGelu(pre, x_fwd, nullptr, ctx.stream)); });
  Fp8Tensor x_both = x_fwd;  // the same cast with its transposed copy (the tiled kernel)
  x_both.data = bytes + 3 * n, x_both.data_t = bytes + 4 * n;
  FP8RT_CHECK_OK(cuda::QuantizeGelu(pre, x_both, nullptr, ctx.stream));
  std::vector<uint8_t> flat_codes(n), tiled_codes(n);
  FP8RT_CUDA_CHECK(cudaMemcpy(flat_codes.data(), x_fwd.data, n, cudaMemcpyDeviceToHost));
  FP8RT_CUDA_CHECK(cudaMemcpy(tiled_codes.data(), x_both.data, n, cudaMemcpyDeviceToHost));
  AddRow(ctx, "gelu cast+amax (no T) bf16->e4m3", shape, fwd, 2.0 * n + n, false,
         flat_codes == tiled_codes ? "" : "codes differ from the cast+transpose's");
  const double apart_x =
      MedianMs(ctx, [&] { FP8RT_CHECK_OK(cuda::QuantizeGelu(pre, x, nullptr, ctx.stream)); });
  AddRow(ctx, "gelu recast (T only) bf16->e4m3", shape, apart_x, 2.0 * n + n, false, "");
  std::vector<uint8_t> want(3 * n), got(3 * n);
  FP8RT_CUDA_CHECK(cudaMemcpy(want.data(), bytes, 3 * n, cudaMemcpyDeviceToHost));
  FP8RT_CUDA_CHECK(cudaMemset(bytes, 0, 3 * n));
  const double fused = MedianMs(ctx, [&] {
    FP8RT_CHECK_OK(cuda::QuantizeDbiasGeluGrad(dout, pre, dy, dbias, nullptr, scratch,
                                               scratch_bytes, ctx.stream, &x));
  });
  FP8RT_CUDA_CHECK(cudaMemcpy(got.data(), bytes, 3 * n, cudaMemcpyDeviceToHost));
  // (the two rows above add up to the separate casts' time)
  AddRow(ctx, "dbias+gelu bwd cast+T + gelu recast T, one pass", shape, fused, 4.0 * n + 3.0 * n,
         false, got == want ? "" : "codes differ from the separate casts'");
  for (void* p : {static_cast<void*>(bytes), static_cast<void*>(scalars), static_cast<void*>(dbias),
                  scratch}) {
    DeviceFree(p);
  }
}

}  // namespace

void BenchQuantize(Context& ctx) {
  const int64_t n = kRows * kCols;
  void* in_f32 = DeviceAlloc(n * sizeof(float));
  void* in_bf16 = DeviceAlloc(n * sizeof(bf16));
  auto* data = static_cast<uint8_t*>(DeviceAlloc(n));
  auto* data_t = static_cast<uint8_t*>(DeviceAlloc(n));
  void* deq = DeviceAlloc(n * sizeof(float));
  auto* scalars = static_cast<float*>(DeviceAlloc(4 * sizeof(float)));
  auto* saturated = static_cast<unsigned long long*>(DeviceAlloc(sizeof(unsigned long long)));
  FP8RT_CUDA_CHECK(cudaMemsetAsync(saturated, 0, sizeof(unsigned long long), ctx.stream));
  FillUniform(static_cast<float*>(in_f32), n, -kRange, kRange, 11, ctx.stream);
  FillUniformBf16(in_bf16, n, -kRange, kRange, 12, ctx.stream);
  FP8RT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));

  BenchCasts<float>(ctx, in_f32, data, data_t, scalars, saturated, static_cast<float*>(deq));
  BenchCasts<bf16>(ctx, in_bf16, data, data_t, scalars, saturated, static_cast<bf16*>(deq));
  {
    void* pre = DeviceAlloc(n * sizeof(bf16));
    FillUniformBf16(pre, n, -4.f, 4.f, 13, ctx.stream);
    BenchGeluGradCasts(ctx, static_cast<const bf16*>(in_bf16), static_cast<const bf16*>(pre));
    DeviceFree(pre);
  }
  BenchScalingUpdate(ctx);

  for (void* p : {in_f32, in_bf16, static_cast<void*>(data), static_cast<void*>(data_t), deq,
                  static_cast<void*>(scalars), static_cast<void*>(saturated)}) {
    DeviceFree(p);
  }
}

}  // namespace fp8rt::bench
