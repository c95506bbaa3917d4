// GemmRunner (cuBLASLt) against the CPU reference on the same bytes: FP32/BF16 over the awkward
// shapes and every transpose, batches, beta and epilogues, and the FP8 linear-layer GEMMs.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/gemm.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

size_t ElemBytes(DType t) { return t == DType::kFloat32 ? 4 : t == DType::kBFloat16 ? 2 : 1; }

// Host bytes of `v` in dtype t (FP8: encoded with no scaling).
std::vector<uint8_t> Encode(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * ElemBytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else if (t == DType::kBFloat16) {
      const bf16 b(v[i]);
      std::memcpy(&out[2 * i], &b.bits, 2);
    } else {
      out[i] = Fp8Encode(v[i], t == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
    }
  }
  return out;
}

std::vector<float> Decode(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out(bytes.size() / ElemBytes(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      bf16 b;
      std::memcpy(&b.bits, &bytes[2 * i], 2);
      out[i] = ToFloat(b);
    }
  }
  return out;
}

// One runner for the whole suite (its cache sees every problem). Deliberately never destroyed:
// at exit the CUDA runtime may already be gone.
GemmRunner& Runner() {
  static GemmRunner* runner = [] {
    auto r = GemmRunner::Create();
    FP8RT_CHECK_OK(r.status());
    return std::move(r).value().release();
  }();
  return *runner;
}

// Host and device copies of every buffer a GemmArgs touches; runs both sides and compares.
struct GemmHarness {
  GemmArgs host;  // pointers into the host vectors below
  bool separate_c = false;  // beta reads the `c` buffer (GemmArgs::c) instead of D
  std::vector<uint8_t> a, b, c, d, bias, aux;
  float scale_a = 1.f, scale_b = 1.f;

  // Sizes each buffer from the args (pitches, strides, batches) and fills it with random values.
  void Fill(uint64_t seed) {
    const GemmArgs& g = host;
    auto span = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      const int64_t pitch = ld != 0 ? ld : cols;
      const int64_t bs = stride != 0 ? stride : rows * pitch;
      return (g.batch - 1) * bs + (rows - 1) * pitch + cols;
    };
    const int64_t na = g.a.trans ? span(g.K, g.M, g.a.ld, g.a.batch_stride)
                                 : span(g.M, g.K, g.a.ld, g.a.batch_stride);
    const int64_t nb = g.b.trans ? span(g.N, g.K, g.b.ld, g.b.batch_stride)
                                 : span(g.K, g.N, g.b.ld, g.b.batch_stride);
    const int64_t nd = span(g.M, g.N, g.ldd, g.d_batch_stride);
    // FP8 values are drawn in the format's range through a scale, as the cast would.
    auto values = [&](int64_t n, DType t, uint64_t s, float* scale_inv) {
      std::vector<float> v = test::RandomUniform(n, s);
      if (t == DType::kE4M3 || t == DType::kE5M2) {
        const float scale = t == DType::kE4M3 ? 256.f : 4096.f;
        for (float& x : v) x *= scale;
        *scale_inv = 1.f / scale;
      }
      return Encode(v, t);
    };
    a = values(na, g.a.dtype, seed, &scale_a);
    b = values(nb, g.b.dtype, seed + 1, &scale_b);
    d = Encode(test::RandomUniform(nd, seed + 2), g.d_dtype);
    if (separate_c) c = Encode(test::RandomUniform(nd, seed + 5), g.d_dtype);
    bias = Encode(test::RandomUniform(g.N, seed + 3), GemmBiasDType(g));
    aux.assign(
        g.epilogue == Epilogue::kBiasGeluAux ? g.batch * g.M * g.N * ElemBytes(g.d_dtype) : 0, 0);
    if (g.epilogue == Epilogue::kDGelu) {  // an input: pre-activations in [-3, 3)
      aux = Encode(test::RandomUniform(g.batch * g.M * g.N, seed + 4, -3.f, 3.f), g.d_dtype);
    }
  }

  // Runs GemmRunner on device copies and the reference on the host copies; compares D's
  // elements (and aux), and checks that D's pitch and batch padding were left alone.
  void RunAndCompare(const std::string& what) {
    GemmArgs h = host;
    if (h.beta == 0.0f || separate_c) {
      std::fill(d.begin(), d.end(), uint8_t{0xff});  // poison: D is output only
    }
    const std::vector<uint8_t> d_before = d;
    h.a.ptr = a.data(), h.b.ptr = b.data(), h.d = d.data();
    h.c = separate_c ? c.data() : nullptr;
    h.a.scale_inv = IsFp8(h.a.dtype) ? &scale_a : nullptr;
    h.b.scale_inv = IsFp8(h.b.dtype) ? &scale_b : nullptr;
    const bool has_bias = h.epilogue == Epilogue::kBias || h.epilogue == Epilogue::kBiasGelu ||
                          h.epilogue == Epilogue::kBiasGeluAux;
    h.bias = has_bias ? bias.data() : nullptr;
    h.aux = aux.empty() ? nullptr : aux.data();

    DeviceBuffer<uint8_t> da(a), db(b), dd(d), dbias(bias), daux(std::max<size_t>(aux.size(), 1));
    DeviceBuffer<uint8_t> dc(separate_c ? c : std::vector<uint8_t>(1));
    DeviceBuffer<float> dsa(std::vector<float>{scale_a}), dsb(std::vector<float>{scale_b});
    if (h.epilogue == Epilogue::kDGelu) {
      daux.Upload(aux);  // read by the GEMM
    } else {
      daux.Poison();  // written by the GEMM
    }
    GemmArgs g = h;
    g.a.ptr = da.get(), g.b.ptr = db.get(), g.d = dd.get();
    g.c = separate_c ? dc.get() : nullptr;
    g.a.scale_inv = h.a.scale_inv ? dsa.get() : nullptr;
    g.b.scale_inv = h.b.scale_inv ? dsb.get() : nullptr;
    g.bias = has_bias ? dbias.get() : nullptr;
    g.aux = h.aux ? daux.get() : nullptr;

    const Status st = Runner().Run(g, nullptr);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    const std::vector<uint8_t> got_d = dd.Download();
    ASSERT_TRUE(cpu::Gemm(h).ok());
    const DType tol_dtype = IsFp8(h.a.dtype) ? DType::kE4M3 : h.d_dtype;
    const test::Tolerance tol = test::ToleranceFor(test::OpKind::kGemm, tol_dtype);

    // Split D into its M x N elements per batch and everything else (padding).
    const size_t es = ElemBytes(h.d_dtype);
    const int64_t ldd = h.ldd != 0 ? h.ldd : h.N;
    const int64_t sd = h.d_batch_stride != 0 ? h.d_batch_stride : h.M * ldd;
    std::vector<uint8_t> got_el, want_el;
    std::vector<bool> is_el(d.size() / es, false);
    for (int bi = 0; bi < h.batch; ++bi) {
      for (int64_t i = 0; i < h.M; ++i) {
        const size_t first = bi * sd + i * ldd;
        std::fill(is_el.begin() + first, is_el.begin() + first + h.N, true);
        got_el.insert(got_el.end(), got_d.begin() + first * es, got_d.begin() + (first + h.N) * es);
        want_el.insert(want_el.end(), d.begin() + first * es, d.begin() + (first + h.N) * es);
      }
    }
    EXPECT_TRUE(
        test::RelL2Close(Decode(got_el, h.d_dtype), Decode(want_el, h.d_dtype), tol, what + " D"));
    ::testing::Test::RecordProperty(
        "rel_l2_d",
        std::to_string(test::RelL2(Decode(got_el, h.d_dtype), Decode(want_el, h.d_dtype))));
    size_t touched = 0;
    for (size_t e = 0; e < is_el.size(); ++e) {
      if (!is_el[e] && std::memcmp(&got_d[e * es], &d_before[e * es], es) != 0) ++touched;
    }
    EXPECT_EQ(touched, 0u) << what << ": padding elements of D were written";
    if (separate_c) EXPECT_TRUE(dc.Download() == c) << what << ": C was written";
    if (h.aux && h.epilogue != Epilogue::kDGelu) {
      std::vector<uint8_t> got_aux = daux.Download();
      got_aux.resize(aux.size());
      EXPECT_TRUE(
          test::RelL2Close(Decode(got_aux, h.d_dtype), Decode(aux, h.d_dtype), tol, what + " aux"));
    }
  }

  static bool IsFp8(DType t) { return t == DType::kE4M3 || t == DType::kE5M2; }
};

// ---- FP32 / BF16 over the awkward shapes (as (M, K)), a few N, every transpose ----

struct HpCase {
  DType in, out;
  int64_t M, N, K;
  bool ta, tb;
  std::string name;
};

std::vector<HpCase> HpCases() {
  std::vector<HpCase> cases;
  const std::pair<DType, DType> types[] = {{DType::kFloat32, DType::kFloat32},
                                           {DType::kBFloat16, DType::kBFloat16},
                                           {DType::kBFloat16, DType::kFloat32}};
  for (const auto& [in, out] : types) {
    for (const test::Shape2D& s : test::AwkwardShapes()) {
      for (int64_t n : {16, 48, 256}) {
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          cases.push_back({in, out, s.rows, n, s.cols, ta, tb,
                           StrCat(DTypeName(in), "_to_", DTypeName(out), "_", s.name, "xN", n,
                                  ta ? "_At" : "_An", tb ? "Bt" : "Bn")});
        }
      }
    }
  }
  return cases;
}

class GemmHighPrecisionGpu : public test::GpuTest, public ::testing::WithParamInterface<HpCase> {};

TEST_P(GemmHighPrecisionGpu, MatchesReference) {
  const HpCase& c = GetParam();
  if (c.in == DType::kBFloat16 && test::ComputeCapability() < 80)
    GTEST_SKIP() << "bf16 needs sm_80";
  GemmHarness h;
  h.host.M = c.M, h.host.N = c.N, h.host.K = c.K;
  h.host.a.dtype = h.host.b.dtype = c.in;
  h.host.a.trans = c.ta, h.host.b.trans = c.tb;
  h.host.d_dtype = c.out;
  h.Fill(7);
  h.RunAndCompare(c.name);
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, GemmHighPrecisionGpu, ::testing::ValuesIn(HpCases()),
                         [](const auto& info) { return info.param.name; });

// ---- batches with pitches and strides, beta, and every epilogue ----

class GemmBatchedEpilogueGpu
    : public test::GpuTest,
      public ::testing::WithParamInterface<std::tuple<std::pair<DType, DType>, Epilogue>> {};

TEST_P(GemmBatchedEpilogueGpu, MatchesReference) {
  const auto [types, epi] = GetParam();
  if (types.first == DType::kBFloat16 && test::ComputeCapability() < 80) GTEST_SKIP();
  GemmHarness h;
  GemmArgs& g = h.host;
  g.M = 37, g.N = 48, g.K = 40, g.batch = 3;
  g.a = {nullptr, types.first, false, 48, 48 * 37 + 16, nullptr};  // padded pitch and stride
  g.b = {nullptr, types.first, true, 0, 0, nullptr};               // packed (N, K) per batch
  g.d_dtype = types.second;
  g.ldd = 56, g.d_batch_stride = 56 * 37 + 8;
  g.epilogue = epi;
  g.alpha = 0.75f;
  h.Fill(11);
  h.RunAndCompare(StrCat("batched ", EpilogueName(epi)));
}

INSTANTIATE_TEST_SUITE_P(
    All, GemmBatchedEpilogueGpu,
    ::testing::Combine(::testing::Values(std::make_pair(DType::kFloat32, DType::kFloat32),
                                         std::make_pair(DType::kBFloat16, DType::kBFloat16),
                                         std::make_pair(DType::kBFloat16, DType::kFloat32)),
                       ::testing::Values(Epilogue::kNone, Epilogue::kBias, Epilogue::kGelu,
                                         Epilogue::kBiasGelu, Epilogue::kBiasGeluAux,
                                         Epilogue::kDGelu)),
    [](const auto& info) {
      std::string e = EpilogueName(std::get<1>(info.param));
      for (char& ch : e) ch = ch == '+' ? '_' : ch;
      return StrCat(DTypeName(std::get<0>(info.param).first), "_to_",
                    DTypeName(std::get<0>(info.param).second), "_", e);
    });

class GemmGpu : public test::GpuTest {};

TEST_F(GemmGpu, BetaAccumulatesIntoExistingOutput) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    GemmHarness h;
    h.host.M = 64, h.host.N = 40, h.host.K = 72, h.host.batch = 2;
    h.host.a.dtype = h.host.b.dtype = t;
    h.host.a.trans = true;
    h.host.d_dtype = t;
    h.host.alpha = 1.5f, h.host.beta = 0.5f;
    h.Fill(13);
    h.RunAndCompare(StrCat("beta ", DTypeName(t)));
  }
}

TEST_F(GemmGpu, Fp8BatchedWithBetaAccumulates) {
  if (test::ComputeCapability() < 89) GTEST_SKIP() << "FP8 GEMMs need sm_89 or newer";
  for (DType out : {DType::kFloat32, DType::kBFloat16}) {
    GemmHarness h;
    h.host.M = 32, h.host.N = 48, h.host.K = 64, h.host.batch = 2;
    h.host.a.dtype = DType::kE4M3, h.host.b.dtype = DType::kE5M2;
    h.host.b.trans = true;
    h.host.d_dtype = out;
    h.host.alpha = 2.f, h.host.beta = 0.5f;
    h.Fill(17);
    h.RunAndCompare(StrCat("fp8 batched beta ", DTypeName(out)));
  }
}

// D = A B + bias + C with C a separate matrix (a residual added in the projection's epilogue):
// C is read, D written, C left alone; high precision and FP8 fprop.
TEST_F(GemmGpu, SeparateCIsAddedAndLeftUnchanged) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    GemmHarness h;
    h.separate_c = true;
    h.host.M = 96, h.host.N = 48, h.host.K = 80;
    h.host.a.dtype = h.host.b.dtype = t;
    h.host.b.trans = true;
    h.host.d_dtype = t;
    h.host.beta = 1.0f;
    h.host.epilogue = Epilogue::kBias;
    h.Fill(19);
    h.RunAndCompare(StrCat("separate C ", DTypeName(t)));
  }
  if (test::ComputeCapability() < 89) GTEST_SKIP() << "FP8 GEMMs need sm_89 or newer";
  GemmHarness h;
  h.separate_c = true;
  h.host.M = 64, h.host.N = 48, h.host.K = 64;
  h.host.a.dtype = h.host.b.dtype = DType::kE4M3;
  h.host.b.trans = true;
  h.host.d_dtype = DType::kBFloat16;
  h.host.beta = 1.0f;
  h.host.fast_accum = true;
  h.host.epilogue = Epilogue::kBias;
  h.Fill(23);
  h.RunAndCompare("separate C fp8 fprop");
}

TEST_F(GemmGpu, RunnerCachesOneAlgorithmPerProblem) {
  auto r = GemmRunner::Create();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  GemmRunner& runner = **r;
  DeviceBuffer<float> a(64 * 64), b(64 * 64), d(64 * 64);
  a.Poison(), b.Poison();
  GemmArgs g;
  g.M = 32, g.N = 32, g.K = 32;
  g.a = {a.get(), DType::kFloat32, false, 0, 0, nullptr};
  g.b = {b.get(), DType::kFloat32, false, 0, 0, nullptr};
  g.d = d.get();
  ASSERT_TRUE(runner.Run(g, nullptr).ok());
  ASSERT_TRUE(runner.Run(g, nullptr).ok());
  EXPECT_EQ(runner.CachedAlgorithms(), 1u);
  g.K = 48;
  ASSERT_TRUE(runner.Run(g, nullptr).ok());
  EXPECT_EQ(runner.CachedAlgorithms(), 2u);
  g.a.ptr = a.get() + 1;  // 4-byte aligned only: a different algorithm class
  ASSERT_TRUE(runner.Run(g, nullptr).ok());
  EXPECT_EQ(runner.CachedAlgorithms(), 3u);
  FP8RT_CUDA_CHECK(cudaDeviceSynchronize());
  // Preconditions come back as InvalidArgument before cuBLASLt is called.
  g.a.dtype = g.b.dtype = DType::kE4M3;
  g.a.ptr = a.get(), g.b.trans = true;
  float* one = d.get();
  g.a.scale_inv = g.b.scale_inv = one;
  g.K = 17;
  const Status s = runner.Run(g, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("K=17"), std::string::npos) << s.ToString();
  EXPECT_EQ(runner.CachedAlgorithms(), 3u);
}

// ---- FP8 ----

struct Fp8Case {
  int64_t M, N, K;  // linear layer: X (M, K), W (N, K), Y (M, N)
  DType out;
  bool fast;
  std::string name;
};

// One FP8 tensor with host and device copies of data and data_t. `rows_valid` of the `rows`
// rows hold values; the rest are zero padding, as a caller pads the token count to 16.
struct Fp8Pair {
  std::vector<uint8_t> h_data, h_data_t;
  float h_scale_inv = 1.f;
  DeviceBuffer<uint8_t> data, data_t;
  DeviceBuffer<float> scale_inv;
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::kE4M3;

  Fp8Pair(int64_t r, int64_t c, int64_t rows_valid, Fp8Format f, float scale, uint64_t seed)
      : data(r * c), data_t(r * c), scale_inv(1), rows(r), cols(c), format(f) {
    const std::vector<float> v = test::RandomUniform(r * c, seed);
    h_data.assign(r * c, 0);
    h_data_t.assign(r * c, 0);
    for (int64_t i = 0; i < rows_valid; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        const uint8_t q = Fp8Encode(v[i * c + j] * scale, f);
        h_data[i * c + j] = q;
        h_data_t[j * r + i] = q;
      }
    }
    h_scale_inv = 1.f / scale;
    data.Upload(h_data);
    data_t.Upload(h_data_t);
    scale_inv.Upload({h_scale_inv});
  }
  Fp8Tensor Host() {
    Fp8Tensor t;
    t.data = h_data.data(), t.data_t = h_data_t.data(), t.scale_inv = &h_scale_inv;
    t.rows = rows, t.cols = cols, t.format = format;
    return t;
  }
  Fp8Tensor Device() {
    Fp8Tensor t;
    t.data = data.get(), t.data_t = data_t.get(), t.scale_inv = scale_inv.get();
    t.rows = rows, t.cols = cols, t.format = format;
    return t;
  }
};

class GemmFp8Gpu : public test::GpuTest, public ::testing::WithParamInterface<Fp8Case> {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    if (test::ComputeCapability() < 89) GTEST_SKIP() << "FP8 GEMMs need sm_89 or newer";
  }

  // Runs `dev` on the GPU and `host` on the CPU; compares the outputs (bytes of dtype out).
  void Compare(const GemmArgs& dev, const GemmArgs& host, std::vector<uint8_t>& host_out,
               DeviceBuffer<uint8_t>& dev_out, const std::string& what) {
    const Status st = Runner().Run(dev, nullptr);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    const std::vector<uint8_t> got = dev_out.Download();
    ASSERT_TRUE(cpu::Gemm(host).ok());
    ::testing::Test::RecordProperty(
        "rel_l2_" + what,
        std::to_string(test::RelL2(Decode(got, host.d_dtype), Decode(host_out, host.d_dtype))));
    EXPECT_TRUE(test::RelL2Close(Decode(got, host.d_dtype), Decode(host_out, host.d_dtype),
                                 test::ToleranceFor(test::OpKind::kGemm, DType::kE4M3), what));
  }
};

TEST_P(GemmFp8Gpu, FpropDgradWgradMatchReferenceOnSameBytes) {
  const Fp8Case& c = GetParam();
  // Callers pad the token count to a multiple of 16: the last rows of X and dY are zeros.
  const int64_t valid = c.M - (c.M > 16 ? 7 : 0);
  Fp8Pair x(c.M, c.K, valid, Fp8Format::kE4M3, 200.f, 1);
  Fp8Pair w(c.N, c.K, c.N, Fp8Format::kE4M3, 300.f, 2);
  Fp8Pair dy(c.M, c.N, valid, Fp8Format::kE5M2, 5000.f, 3);
  const size_t ob = ElemBytes(c.out);

  {  // fprop Y = X W^T + bias
    std::vector<uint8_t> y(c.M * c.N * ob);
    DeviceBuffer<uint8_t> dev_y(y.size());
    dev_y.Poison();
    std::vector<uint8_t> bias = Encode(test::RandomUniform(c.N, 4), DType::kBFloat16);
    DeviceBuffer<uint8_t> dev_bias(bias);
    auto host = Fp8Fprop(x.Host(), w.Host(), y.data(), c.out, bias.data(), c.fast);
    auto dev = Fp8Fprop(x.Device(), w.Device(), dev_y.get(), c.out, dev_bias.get(), c.fast);
    ASSERT_TRUE(host.ok() && dev.ok()) << dev.status().ToString();
    Compare(*dev, *host, y, dev_y, "fprop");
    // The padded rows are the bias alone.
    const std::vector<float> got = Decode(dev_y.Download(), c.out);
    const std::vector<float> b = Decode(bias, DType::kBFloat16);
    for (int64_t i = valid; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) ASSERT_EQ(got[i * c.N + j], b[j]) << i << "," << j;
    }
  }
  {  // dgrad dX = dY W
    std::vector<uint8_t> dx(c.M * c.K * ob);
    DeviceBuffer<uint8_t> dev_dx(dx.size());
    dev_dx.Poison();
    auto host = Fp8Dgrad(dy.Host(), w.Host(), dx.data(), c.out, c.fast);
    auto dev = Fp8Dgrad(dy.Device(), w.Device(), dev_dx.get(), c.out, c.fast);
    ASSERT_TRUE(host.ok() && dev.ok()) << dev.status().ToString();
    Compare(*dev, *host, dx, dev_dx, "dgrad");
  }
  {  // wgrad dW += dY^T X, FP32, onto an existing gradient
    std::vector<float> dw0 = test::RandomUniform(c.N * c.K, 5);
    std::vector<uint8_t> dw = Encode(dw0, DType::kFloat32);
    DeviceBuffer<uint8_t> dev_dw(dw);
    auto host = Fp8Wgrad(dy.Host(), x.Host(), reinterpret_cast<float*>(dw.data()), true, c.fast);
    auto dev =
        Fp8Wgrad(dy.Device(), x.Device(), reinterpret_cast<float*>(dev_dw.get()), true, c.fast);
    ASSERT_TRUE(host.ok() && dev.ok()) << dev.status().ToString();
    Compare(*dev, *host, dw, dev_dw, "wgrad");
  }
}

std::vector<Fp8Case> Fp8Cases() {
  std::vector<Fp8Case> cases;
  const struct {
    int64_t M, N, K;
    const char* name;
  } shapes[] = {{224, 256, 64, "217pad224x256x64"},
                {16, 16, 16, "16x16x16"},
                {4096, 768, 256, "4096x768x256"}};
  for (const auto& s : shapes) {
    for (DType out : {DType::kBFloat16, DType::kFloat32}) {
      for (bool fast : {true, false}) {
        cases.push_back({s.M, s.N, s.K, out, fast,
                         StrCat(s.name, "_", DTypeName(out), fast ? "_fast" : "_split")});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmFp8Gpu, ::testing::ValuesIn(Fp8Cases()),
                         [](const auto& info) { return info.param.name; });

class GemmFp8FormatsGpu
    : public test::GpuTest,
      public ::testing::WithParamInterface<std::tuple<DType, DType, DType, Epilogue>> {};

TEST_P(GemmFp8FormatsGpu, GeneralArgsMatchReference) {
  if (test::ComputeCapability() < 89) GTEST_SKIP() << "FP8 GEMMs need sm_89 or newer";
  const auto [ta, tb, out, epi] = GetParam();
  GemmHarness h;
  h.host.M = 64, h.host.N = 96, h.host.K = 128;
  h.host.a.dtype = ta, h.host.b.dtype = tb;
  h.host.b.trans = true;
  h.host.d_dtype = out;
  h.host.epilogue = epi;
  h.host.fast_accum = true;
  h.Fill(21);
  h.RunAndCompare(StrCat(DTypeName(ta), "x", DTypeName(tb), " ", EpilogueName(epi)));
}

INSTANTIATE_TEST_SUITE_P(
    Combos, GemmFp8FormatsGpu,
    ::testing::Values(
        std::make_tuple(DType::kE4M3, DType::kE4M3, DType::kBFloat16, Epilogue::kNone),
        std::make_tuple(DType::kE5M2, DType::kE4M3, DType::kBFloat16, Epilogue::kNone),
        std::make_tuple(DType::kE4M3, DType::kE5M2, DType::kBFloat16, Epilogue::kNone),
        std::make_tuple(DType::kE4M3, DType::kE5M2, DType::kFloat32, Epilogue::kNone),
        std::make_tuple(DType::kE4M3, DType::kE4M3, DType::kBFloat16, Epilogue::kBiasGeluAux),
        std::make_tuple(DType::kE4M3, DType::kE4M3, DType::kBFloat16, Epilogue::kBiasGelu),
        std::make_tuple(DType::kE4M3, DType::kE4M3, DType::kFloat32, Epilogue::kBias),
        std::make_tuple(DType::kE5M2, DType::kE4M3, DType::kBFloat16, Epilogue::kDGelu)),
    [](const auto& info) {
      std::string e = EpilogueName(std::get<3>(info.param));
      for (char& ch : e) ch = ch == '+' ? '_' : ch;
      return StrCat(DTypeName(std::get<0>(info.param)), "x", DTypeName(std::get<1>(info.param)),
                    "_to_", DTypeName(std::get<2>(info.param)), "_", e);
    });

}  // namespace
}  // namespace fp8rt
