// The CUDA delayed-scaling update (and state init) against the CPU reference: the whole state
// blob must match byte for byte after every step, also when replayed from a CUDA graph.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/scaling.h"
#include "tests/common/gpu_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

// One state of n tensors x h history on both sides, in the ScalingStateLayout blob.
struct StatePair {
  ScalingStateLayout layout;
  std::vector<uint8_t> host;
  DeviceBuffer<uint8_t> dev;
  ScalingState h_state, d_state;

  StatePair(int n, int h, int scale_inv_stride = 1)
      : layout(ScalingStateLayout::For(n, h, scale_inv_stride)),
        host(layout.total_bytes, 0xff),
        dev(layout.total_bytes) {
    dev.Poison();
    h_state = layout.Bind(host.data());
    d_state = layout.Bind(dev.get());
    // Mixed formats, written on both sides: every third tensor E5M2.
    for (int i = 0; i < n; ++i) {
      host[layout.formats + i] =
          static_cast<uint8_t>(i % 3 == 0 ? Fp8Format::kE5M2 : Fp8Format::kE4M3);
    }
    FP8RT_CUDA_CHECK(cudaMemcpy(dev.get() + layout.formats, host.data() + layout.formats, n,
                                cudaMemcpyHostToDevice));
  }

  // Sets this step's amax on both sides.
  void SetAmax(const std::vector<float>& amax) {
    std::copy(amax.begin(), amax.end(), h_state.amax);
    FP8RT_CUDA_CHECK(
        cudaMemcpy(d_state.amax, amax.data(), amax.size() * sizeof(float), cudaMemcpyHostToDevice));
  }

  // Byte-for-byte comparison of the blobs, naming the array and element of the first mismatch.
  ::testing::AssertionResult Same(const std::string& when) const {
    const std::vector<uint8_t> got = dev.Download();
    for (size_t b = 0; b < got.size(); ++b) {
      if (got[b] == host[b]) continue;
      const char* what = "padding";
      size_t base = 0;
      const std::pair<const char*, size_t> arrays[] = {
          {"amax", layout.amax},       {"amax_history", layout.amax_history},
          {"scale", layout.scale},     {"scale_inv", layout.scale_inv},
          {"formats", layout.formats}, {"pos", layout.pos}};
      for (const auto& [name, off] : arrays) {
        if (b >= off) what = name, base = off;
      }
      const size_t elem = (b - base) / 4;
      float g, w;
      std::memcpy(&g, &got[base + 4 * elem], 4);
      std::memcpy(&w, &host[base + 4 * elem], 4);
      return ::testing::AssertionFailure()
             << when << ": " << what << "[" << elem << "] differs (byte " << b << "): gpu " << g
             << " / int " << FloatBits(g) << ", cpu " << w << " / int " << FloatBits(w);
    }
    return ::testing::AssertionSuccess();
  }
};

// Amaxes with the cases that matter: 0, inf, NaN (keep the old scale) and a subnormal
// (the scale overflows to FLT_MAX), otherwise log-uniform over 1e-3..1e3.
std::vector<float> StepAmaxes(int n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> a(n);
  for (float& x : a) {
    const float r = u(rng);
    if (r < 0.08f) {
      x = 0.f;
    } else if (r < 0.12f) {
      x = INFINITY;
    } else if (r < 0.16f) {
      x = std::numeric_limits<float>::quiet_NaN();
    } else if (r < 0.20f) {
      x = std::numeric_limits<float>::denorm_min() * 3;
    } else {
      x = std::pow(10.f, -3.f + 6.f * u(rng));
    }
  }
  return a;
}

using Params = std::tuple<int, int, AmaxAlgo, int>;  // N, H, algo, margin

class ScalingGpu : public test::GpuTest, public ::testing::WithParamInterface<Params> {};

TEST_P(ScalingGpu, UpdateMatchesReferenceEveryStep) {
  const auto [n, h, algo, margin] = GetParam();
  StatePair st(n, h);
  ASSERT_TRUE(cpu::InitScalingState(st.h_state).ok());
  ASSERT_TRUE(cuda::InitScalingState(st.d_state, nullptr).ok());
  ASSERT_TRUE(st.Same("after init"));

  DelayedScalingConfig config;
  config.history_len = h;
  config.algo = algo;
  config.margin = margin;
  // Enough steps to wrap the ring twice; at H = 1024 wrap once for few tensors, else 40 steps.
  const int steps = h < 1024 ? 2 * h + 5 : (n <= 7 ? h + 6 : 40);
  std::mt19937 rng(n * 1000 + h);
  for (int step = 0; step < steps; ++step) {
    st.SetAmax(StepAmaxes(n, rng));
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.h_state, config).ok());
    ASSERT_TRUE(cuda::UpdateDelayedScaling(st.d_state, config, nullptr).ok());
    ASSERT_TRUE(st.Same("step " + std::to_string(step)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ScalingGpu,
    ::testing::Combine(::testing::Values(1, 7, 300), ::testing::Values(1, 3, 1024),
                       ::testing::Values(AmaxAlgo::kMax, AmaxAlgo::kMostRecent),
                       ::testing::Values(0, 3)),
    [](const auto& info) {
      return "N" + std::to_string(std::get<0>(info.param)) + "_H" +
             std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) == AmaxAlgo::kMax ? "_max" : "_recent") + "_margin" +
             std::to_string(std::get<3>(info.param));
    });

class ScalingGpuMisc : public test::GpuTest {};

// The ring position lives on the device, so a captured update advances it on every replay.
TEST_F(ScalingGpuMisc, GraphReplayAdvancesTheRing) {
  const int n = 45, h = 3;
  StatePair st(n, h);
  ASSERT_TRUE(cpu::InitScalingState(st.h_state).ok());
  ASSERT_TRUE(cuda::InitScalingState(st.d_state, nullptr).ok());
  FP8RT_CUDA_CHECK(cudaDeviceSynchronize());
  DelayedScalingConfig config;
  config.history_len = h;

  cudaStream_t stream;
  FP8RT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  FP8RT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = cuda::UpdateDelayedScaling(st.d_state, config, stream);
  FP8RT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  cudaGraphExec_t exec;
  FP8RT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::mt19937 rng(1);
  for (int step = 0; step < 8; ++step) {
    st.SetAmax(StepAmaxes(n, rng));
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.h_state, config).ok());
    FP8RT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FP8RT_CUDA_CHECK(cudaStreamSynchronize(stream));
    ASSERT_TRUE(st.Same("replay " + std::to_string(step)));
  }
  EXPECT_EQ(*st.h_state.pos, 8 % h);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The model's layout: scale_inv every 16 floats (the GEMMs read it there); the gaps stay untouched.
TEST_F(ScalingGpuMisc, StridedScaleInvMatchesReference) {
  for (const int n : {1, 7, 300}) {
    StatePair st(n, 5, 16);
    ASSERT_TRUE(cpu::InitScalingState(st.h_state).ok());
    ASSERT_TRUE(cuda::InitScalingState(st.d_state, nullptr).ok());
    ASSERT_TRUE(st.Same("after init"));
    DelayedScalingConfig config;
    config.history_len = 5;
    std::mt19937 rng(n);
    for (int step = 0; step < 12; ++step) {
      st.SetAmax(StepAmaxes(n, rng));
      ASSERT_TRUE(cpu::UpdateDelayedScaling(st.h_state, config).ok());
      ASSERT_TRUE(cuda::UpdateDelayedScaling(st.d_state, config, nullptr).ok());
      ASSERT_TRUE(st.Same("N " + std::to_string(n) + " step " + std::to_string(step)));
    }
    // Tensor i's scale_inv lives at i * 16 (written: finite, 1 / scale), the gaps stay as poisoned.
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(std::isfinite(st.h_state.scale_inv[16 * i])) << "n " << n << " tensor " << i;
      EXPECT_EQ(st.h_state.scale_inv[16 * i], ScaleInv(st.h_state.scale[i])) << "tensor " << i;
    }
    EXPECT_EQ(FloatBits(st.h_state.scale_inv[1]), 0xffffffffu) << "the gap was written";
  }
}

TEST_F(ScalingGpuMisc, NoTensorsStillAdvancesThePosition) {
  StatePair st(0, 5);
  ASSERT_TRUE(cpu::InitScalingState(st.h_state).ok());
  ASSERT_TRUE(cuda::InitScalingState(st.d_state, nullptr).ok());
  DelayedScalingConfig config;
  config.history_len = 5;
  for (int step = 0; step < 7; ++step) {
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.h_state, config).ok());
    ASSERT_TRUE(cuda::UpdateDelayedScaling(st.d_state, config, nullptr).ok());
  }
  ASSERT_TRUE(st.Same("after 7 steps"));
  EXPECT_EQ(*st.h_state.pos, 2);
}

// Awkward lengths (1, a warp and one, more than one block of 256, more than the grid covers in
// one pass), NaNs of both signs and payloads, infinities, denormals, zeros and negatives.
TEST_F(ScalingGpuMisc, AmaxNanToInfMatchesReference) {
  for (const int64_t n : {int64_t{1}, int64_t{33}, int64_t{257}, int64_t{300001}}) {
    std::vector<float> host(static_cast<size_t>(n));
    std::mt19937 rng(static_cast<unsigned>(n));
    for (int64_t i = 0; i < n; ++i) {
      switch (rng() % 7) {
        case 0: host[i] = std::numeric_limits<float>::quiet_NaN(); break;
        case 1: host[i] = -std::numeric_limits<float>::quiet_NaN(); break;
        case 2: { uint32_t b = 0x7fa00001u; std::memcpy(&host[i], &b, 4); break; }  // signalling
        case 3: host[i] = (rng() % 2 ? 1.f : -1.f) * std::numeric_limits<float>::infinity(); break;
        case 4: host[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 9); break;
        default: host[i] = std::ldexp(static_cast<float>(rng() % 1000) - 100.f, static_cast<int>(rng() % 40) - 20);
      }
    }
    std::vector<float> want = host;
    ASSERT_TRUE(cpu::AmaxNanToInf(want.data(), n).ok());
    DeviceBuffer<float> dev(host);
    ASSERT_TRUE(cuda::AmaxNanToInf(dev.get(), n, nullptr).ok());
    const std::vector<float> got = dev.Download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(FloatBits(got[i]), FloatBits(want[i])) << "n " << n << " i " << i;
      ASSERT_FALSE(std::isnan(got[i]));
    }
  }
  EXPECT_FALSE(cuda::AmaxNanToInf(nullptr, 3, nullptr).ok());
}

TEST_F(ScalingGpuMisc, RejectsAMismatchedConfig) {
  StatePair st(4, 16);
  DelayedScalingConfig config;  // history_len 1024
  const Status s = cuda::UpdateDelayedScaling(st.d_state, config, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("history_len=16"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp8rt
