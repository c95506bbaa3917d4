// fp8train on the CPU: learning real text, exact resume, refused checkpoints, FP8 weight
// caching across micro-batches, and the precision fallback rules.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "kernels/quantize.h"
#include "runtime/checkpoint.h"
#include "common/rng.h"
#include "runtime/gpt.h"
#include "runtime/gpt_layout.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fp8rt_trainer_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    corpus_ = test::EnglishCorpus((dir_ / "corpus.txt").string());
    ASSERT_FALSE(corpus_.empty()) << "no English text in /usr/share/common-licenses";
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunConfig Tiny(Precision p, int total_steps) {
    RunConfig c = test::TinyRunConfig(corpus_, p, total_steps);
    EXPECT_TRUE(c.Validate().ok());
    return c;
  }
  std::string ckpt() const { return (dir_ / "ckpt").string(); }

  // Tiny's model on the CPU backend (B = 2, T = 32), initialised from `seed`, and token ids and
  // targets for `micro_batches` micro-batches: x[i] = i * kx % V, y[i] = i * ky % V.
  struct TinyModel {
    std::unique_ptr<GptModel> model;
    std::vector<int32_t> x, y;
  };
  static Result<TinyModel> TinyCpuModel(Precision p, int micro_batches, uint64_t seed, int kx,
                                        int ky) {
    ModelOptions mo;
    mo.model = {2, 64, 4, 64, 256};
    mo.precision = p;
    mo.B = 2, mo.T = 32, mo.grad_accum = micro_batches;
    auto model = CreateCpuGpt(mo);
    if (!model.ok()) return model.status();
    FP8RT_RETURN_IF_ERROR((*model)->InitRandom(seed));
    TinyModel t{std::move(*model), std::vector<int32_t>(micro_batches * 64),
                std::vector<int32_t>(micro_batches * 64)};
    for (size_t i = 0; i < t.x.size(); ++i) {
      t.x[i] = int32_t(i * kx % 256), t.y[i] = int32_t(i * ky % 256);
    }
    return t;
  }

  fs::path dir_;
  std::string corpus_;
  DeviceInfo cpu_;
};

TEST_F(TrainerTest, TinyModelLearnsEnglishInFp8) {
  TrainOptions o;
  o.config = Tiny(Precision::kFp8, 200);
  auto r = RunTraining(o, cpu_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->losses.size(), 200u);
  const float first = r->losses.front();
  float last10 = 0;
  for (int i = 190; i < 200; ++i) last10 += r->losses[i] / 10;
  // ln(256) = 5.55 at the start (uniform over bytes); 200 steps of 256 tokens take a 2-layer
  // byte model to about 3 nats, more than 2 nats below the start.
  EXPECT_GT(first, 5.0f);
  EXPECT_LT(last10, first - 2.0f);
  EXPECT_LT(last10, 3.3f);
  // One cast per FP8 weight per step: 4 linears x 2 layers.
  EXPECT_EQ(r->fp8_weights, 8);
  for (int64_t c : r->weight_casts) ASSERT_EQ(c, 8);
}

TEST_F(TrainerTest, Bf16AndFp32AlsoTrain) {
  for (Precision p : {Precision::kBf16, Precision::kFp32}) {
    TrainOptions o;
    o.config = Tiny(p, 40);
    auto r = RunTraining(o, cpu_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_LT(r->losses.back(), r->losses.front() - 1.0f) << PrecisionName(p);
    for (int64_t c : r->weight_casts) ASSERT_EQ(c, 0);
  }
}

// --profile-ops: every op of the step is timed from the third step on; the report names the
// ops, their time adds up to about the step, and profiling leaves the losses unchanged.
TEST_F(TrainerTest, ProfileOpsReportsEveryOpOfTheStepWithoutChangingTheRun) {
  TrainOptions plain;
  plain.config = Tiny(Precision::kFp8, 6);
  auto base = RunTraining(plain, cpu_);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_TRUE(base->op_profile.empty());

  TrainOptions o = plain;
  o.profile_ops = true;
  auto r = RunTraining(o, cpu_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->losses, base->losses);
  std::map<std::string, OpTime> by_name;
  for (const OpTime& t : r->op_profile) by_name[t.op] = t;
  for (const char* op : {"embedding fwd", "layernorm fwd", "attention fwd", "fp8 cast x (+T)",
                         "gemm fprop qkv", "softmax-xent", "attention bwd", "layernorm bwd",
                         "embedding bwd", "adamw", "fp8 scaling update"}) {
    ASSERT_TRUE(by_name.count(op)) << "no '" << op << "' in the profile";
    EXPECT_GT(by_name[op].ms_per_step, 0.0) << op;
  }
  // Two layers: two attention forwards per step; weights are cast once per step.
  EXPECT_EQ(by_name["attention fwd"].calls_per_step, 2.0);
  EXPECT_EQ(by_name["fp8 cast w (+T)"].calls_per_step, 8.0);
  for (size_t i = 1; i < r->op_profile.size(); ++i) {
    EXPECT_GE(r->op_profile[i - 1].ms_per_step, r->op_profile[i].ms_per_step) << "not sorted";
  }
}

// train.recompute under delayed scaling: FC2's input is cast again by FC's output-gradient cast
// (one read of FC's output for both), not by a cast of its own; outside the calibrating first
// step, in every layer.
TEST_F(TrainerTest, RecomputeCastsFc2sInputAgainInFcsGradientCast) {
  TrainOptions o;
  o.config = Tiny(Precision::kFp8, 6);
  o.config.train.recompute = true;
  o.profile_ops = true;
  auto r = RunTraining(o, cpu_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<std::string, OpTime> by_name;
  for (const OpTime& t : r->op_profile) by_name[t.op] = t;
  const char* fused = "fp8 cast dy (+T, +dbias, +gelu bwd, +recast x)";
  ASSERT_TRUE(by_name.count(fused)) << "no '" << fused << "' in the profile";
  EXPECT_EQ(by_name[fused].calls_per_step, 2.0);  // two layers
  EXPECT_EQ(by_name.count("fp8 recast x (T only, +gelu)"), 0u);
  EXPECT_EQ(by_name.count("fp8 cast dy (+T, +dbias, +gelu bwd)"), 0u);
}

// A fresh scale state has scale 1 everywhere. At 4096 tokens per step the first step's output
// gradients are mostly below E5M2's smallest subnormal at that scale and flush to zero, so the
// first gradient comes out too small; fp8.first_step_current casts step 1 with each tensor's own
// amax instead, and its gradient norm matches FP32's.
TEST_F(TrainerTest, FirstStepCurrentScalingKeepsTheFirstGradient) {
  auto first_grad_norm = [&](Precision p, bool current) {
    TrainOptions o;
    o.config = Tiny(p, 10);
    o.config.train.batch_size = 64;
    o.config.fp8.first_step_current = current;
    o.stop_step = 1;
    auto r = RunTraining(o, cpu_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->grad_norms.size() == 1 ? r->grad_norms[0] : -1.0f;
  };
  const float fp32 = first_grad_norm(Precision::kFp32, true);
  const float current = first_grad_norm(Precision::kFp8, true);
  const float unit = first_grad_norm(Precision::kFp8, false);
  ASSERT_GT(fp32, 0.0f);
  EXPECT_NEAR(current / fp32, 1.0f, 0.01f) << "fp32 " << fp32 << " fp8 " << current;
  EXPECT_LT(unit / fp32, 0.98f) << "scale 1 no longer flushes: fp32 " << fp32 << " fp8 " << unit;
}

TEST_F(TrainerTest, ResumeIsBitIdenticalWithGradientAccumulation) {
  RunConfig c = Tiny(Precision::kFp8, 16);
  c.train.grad_accum = 2;
  c.fp8.scaling.history_len = 4;  // wraps during the run
  TrainOptions full;
  full.config = c;
  auto whole = RunTraining(full, cpu_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();

  TrainOptions first = full;
  first.stop_step = 7;
  first.checkpoint_dir = ckpt();
  auto a = RunTraining(first, cpu_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->last_step, 7);

  TrainOptions second = first;
  second.stop_step = 16;
  second.resume = true;
  auto b = RunTraining(second, cpu_);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->first_step, 8);
  ASSERT_EQ(b->losses.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(b->losses[i], whole->losses[7 + i]) << "step " << 8 + i;  // bit-identical
  }
  auto latest = LatestCheckpointStep(ckpt());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 16);
  std::ostringstream inspect;
  ASSERT_TRUE(InspectScales(ckpt(), 7, inspect).ok());
  EXPECT_NE(inspect.str().find("h1.fc_proj.grad_output"), std::string::npos) << inspect.str();
}

// Reads every file under a directory (to prove a refused resume changed nothing).
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    m[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return m;
}

TEST_F(TrainerTest, CorruptedTruncatedMissingAndMismatchedCheckpointsAreRefused) {
  TrainOptions o;
  o.config = Tiny(Precision::kFp8, 20);
  o.stop_step = 3;
  o.checkpoint_dir = ckpt();
  ASSERT_TRUE(RunTraining(o, cpu_).ok());
  const std::string master = CheckpointStepDir(ckpt(), 3) + "/master.bin";

  TrainOptions resume = o;
  resume.resume = true;
  resume.stop_step = 6;

  auto expect_refused = [&](const TrainOptions& opt, const std::string& needle) {
    const auto before = Snapshot(ckpt());
    auto r = RunTraining(opt, cpu_);
    ASSERT_FALSE(r.ok()) << "resume accepted; expected an error mentioning '" << needle << "'";
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_EQ(Snapshot(ckpt()), before) << "a refused resume changed the checkpoint directory";
  };

  {
    TrainOptions other = resume;
    other.config.model.n_layer = 3;
    expect_refused(other, "model.n_layer is 2");
  }
  {
    TrainOptions other = resume;
    other.config.fp8.scaling.history_len = 32;
    expect_refused(other, "fp8.history_len");
  }
  {
    std::fstream f(master, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x42');
  }
  expect_refused(resume, "checksum");
  fs::resize_file(master, 64);
  expect_refused(resume, "truncated");
  fs::remove(master);
  expect_refused(resume, "missing");
  fs::remove_all(ckpt());
  fs::create_directories(ckpt());
  expect_refused(resume, "no checkpoint");
}

TEST_F(TrainerTest, HistoryMismatchCanBeRecalibratedOnPurpose) {
  TrainOptions o;
  o.config = Tiny(Precision::kFp8, 20);
  o.stop_step = 3;
  o.checkpoint_dir = ckpt();
  ASSERT_TRUE(RunTraining(o, cpu_).ok());
  TrainOptions r = o;
  r.resume = true;
  r.stop_step = 5;
  r.config.fp8.scaling.history_len = 32;
  r.reset_fp8_history = true;
  auto res = RunTraining(r, cpu_);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->first_step, 4);
}

// Weight gradients are written by the first micro-batch's wgrad GEMMs, not zeroed and added to:
// nothing of an earlier batch may leak into the next gradient, and micro-batches 2..M add to the
// first. Gradients(a), Gradients(b), Gradients(a) gives a's gradient twice, bit for bit; a Step
// over micro-batches (a, b) reports the norm of their mean.
TEST_F(TrainerTest, GradientsStartFreshEachStepAndAccumulateOverMicroBatches) {
  auto tiny = TinyCpuModel(Precision::kFp32, 2, 9, 13, 5);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  GptModel& g = *tiny->model;
  const std::vector<int32_t>&x = tiny->x, &y = tiny->y;
  const size_t M = 2 * 32;
  float loss = 0;
  std::vector<float> ga, gb, ga2;
  ASSERT_TRUE(g.Gradients(x.data(), y.data(), &loss, &ga).ok());
  ASSERT_TRUE(g.Gradients(x.data() + M, y.data() + M, &loss, &gb).ok());
  ASSERT_TRUE(g.Gradients(x.data(), y.data(), &loss, &ga2).ok());
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_TRUE(ga == ga2) << "the second batch's gradient leaked into the third call";
  EXPECT_FALSE(ga == gb);
  double norm_sq = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    const double mean = 0.5 * (static_cast<double>(ga[i]) + gb[i]);
    norm_sq += mean * mean;
  }
  StepStats st;
  ASSERT_TRUE(g.Step(1, 1e-3f, x.data(), y.data(), &st).ok());
  EXPECT_NEAR(st.grad_norm, std::sqrt(norm_sq), 1e-5 * std::sqrt(norm_sq));
}

// The drift diagnostics (FP8RT_STATE_HASHES): equal state hashes equally, and each hash moves
// with its own part of the state.
TEST_F(TrainerTest, StateHashesFollowEachPartOfTheState) {
  auto a = TinyCpuModel(Precision::kFp8, 1, 9, 13, 5);
  auto b = TinyCpuModel(Precision::kFp8, 1, 9, 13, 5);
  auto c = TinyCpuModel(Precision::kFp8, 1, 10, 13, 5);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto hashes = [](GptModel& m) {
    auto h = m.StateHashes();
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    std::map<std::string, uint64_t> out(h->begin(), h->end());
    return out;
  };
  auto ha = hashes(*a->model), hb = hashes(*b->model), hc = hashes(*c->model);
  EXPECT_EQ(ha.size(), 5u);
  for (const char* k : {"grads", "master", "adam_m", "adam_v", "scales"}) EXPECT_TRUE(ha.count(k)) << k;
  EXPECT_EQ(ha, hb);
  EXPECT_NE(ha["master"], hc["master"]);  // another seed
  EXPECT_EQ(ha["adam_m"], hc["adam_m"]);  // zero moments either way
  StepStats st;
  ASSERT_TRUE(a->model->Step(1, 1e-3f, a->x.data(), a->y.data(), &st).ok());
  const auto after = hashes(*a->model);
  for (const char* k : {"grads", "master", "adam_m", "adam_v", "scales"}) {
    EXPECT_NE(after.at(k), ha[k]) << k << " did not change with a step";
  }
  ASSERT_TRUE(b->model->Step(1, 1e-3f, b->x.data(), b->y.data(), &st).ok());
  EXPECT_EQ(hashes(*b->model), after) << "the same step from the same state hashes the same";
}

TEST_F(TrainerTest, LaterMicroBatchesUseThisStepsFp8WeightBytes) {
  auto tiny = TinyCpuModel(Precision::kFp8, 3, 5, 7, 11);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  GptModel& g = *tiny->model;
  const std::vector<int32_t>&x = tiny->x, &y = tiny->y;
  StepStats st;
  ASSERT_TRUE(g.Step(1, 1e-2f, x.data(), y.data(), &st).ok());
  const auto step1_bytes = g.CachedFp8Weight("h0.fc.weight");
  ASSERT_TRUE(step1_bytes.ok());

  // The weights and scales that step 2 starts from.
  std::vector<float> master, m, v;
  ASSERT_TRUE(g.ExportState(&master, &m, &v).ok());
  auto scales = g.ExportScales();
  ASSERT_TRUE(scales.ok());
  float scale = 0;
  for (const auto& r : *scales) {
    if (r.name == "h0.fc.weight") scale = r.scale;
  }
  ASSERT_GT(scale, 0);

  ASSERT_TRUE(g.Step(2, 1e-2f, x.data(), y.data(), &st).ok());
  EXPECT_EQ(st.weight_casts, g.num_fp8_weights());  // once per weight, not once per micro-batch
  auto cached = g.CachedFp8Weight("h0.fc.weight");
  ASSERT_TRUE(cached.ok());

  // Expected: step 2's weights, cast with the scale step 2 started with.
  int64_t off = 0, n = 0;
  for (const auto& [name, size] : g.ParamTensors()) {
    if (name == "fc.weight") n = (size / 2);  // layer 0 of (L, 4C, C)
    if (n) break;
    off += (size + 63) / 64 * 64;
  }
  ASSERT_EQ(n, 4 * 64 * 64);
  std::vector<uint8_t> want(n), want_t(n);
  float s = scale, si = 0, amax = 0;
  Fp8Tensor t;
  t.data = want.data(), t.data_t = want_t.data(), t.rows = 256, t.cols = 64;
  t.scale = &s, t.scale_inv = &si, t.amax = &amax;
  ASSERT_TRUE(cpu::Quantize(master.data() + off, t).ok());
  EXPECT_EQ(*cached, want) << "micro-batches used bytes that are not this step's cast";
  EXPECT_NE(*cached, *step1_bytes) << "the cache did not change between steps";
  EXPECT_EQ(g.CachedFp8Weight("h9.fc.weight").status().code(), StatusCode::kNotFound);

  // Telemetry: one row per FP8 tensor, in the order of the scale records.
  auto rows = g.Telemetry();
  ASSERT_TRUE(rows.ok());
  auto recs = g.ExportScales();
  ASSERT_EQ(rows->size(), recs->size());
  ASSERT_EQ(rows->size(), 24u);
  for (size_t i = 0; i < rows->size(); ++i) {
    EXPECT_EQ((*rows)[i].name, (*recs)[i].name);
    EXPECT_EQ((*rows)[i].scale, (*recs)[i].scale);
    EXPECT_GT((*rows)[i].amax_history_max, 0.0f) << (*rows)[i].name;
  }
  // The counters were read and cleared.
  auto again = g.Telemetry();
  for (const auto& r : *again) EXPECT_EQ(r.saturated, 0u) << r.name;
}

TEST(PrecisionFallback, FollowsComputeCapability) {
  auto gpu = [](int cc) {
    DeviceInfo d;
    d.is_cpu = false;
    d.compute_capability = cc;
    d.name = "GPU";
    return d;
  };
  struct Case {
    int cc;
    Precision asked, got;
    bool fallback;
  } cases[] = {
      {70, Precision::kFp8, Precision::kFp32, true},  {80, Precision::kFp8, Precision::kBf16, true},
      {86, Precision::kFp8, Precision::kBf16, true},  {89, Precision::kFp8, Precision::kFp8, false},
      {90, Precision::kFp8, Precision::kFp8, false},  {70, Precision::kBf16, Precision::kFp32, true},
      {80, Precision::kBf16, Precision::kBf16, false}, {70, Precision::kFp32, Precision::kFp32, false},
  };
  for (const auto& c : cases) {
    const auto d =
        DecidePrecision({c.asked, PrecisionSource::kConfig}, ScalingMode::kDelayed, gpu(c.cc));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->precision, c.got) << "cc " << c.cc << " asked " << PrecisionName(c.asked);
    EXPECT_EQ(d->source == PrecisionSource::kFallback, c.fallback) << d->reason;
  }
  const auto fell =
      DecidePrecision({Precision::kFp8, PrecisionSource::kConfig}, ScalingMode::kDelayed, gpu(86));
  EXPECT_EQ(fell->reason, "FP8 needs compute capability 8.9 (GPU: 8.6); running bf16 (fallback)");
  // Block scaling: Hopper only (the rule beside the FP8 one, in common/precision.h).
  const auto block =
      DecidePrecision({Precision::kFp8, PrecisionSource::kOverride}, ScalingMode::kBlock, gpu(89));
  EXPECT_EQ(block->precision, Precision::kBf16);
  EXPECT_EQ(block->reason,
            "fp8.scaling: block needs compute capability 9.0 (Hopper) (GPU: 8.9); running bf16 "
            "(fallback)");
  EXPECT_EQ(
      DecidePrecision({Precision::kFp8, PrecisionSource::kConfig}, ScalingMode::kBlock, gpu(90))
          ->precision,
      Precision::kFp8);
  DeviceInfo cpu;
  const auto emulated =
      DecidePrecision({Precision::kFp8, PrecisionSource::kOverride}, ScalingMode::kBlock, cpu);
  EXPECT_EQ(emulated->precision, Precision::kFp8);  // emulated
  EXPECT_EQ(emulated->reason, "running fp8 (from the override)");
}

TEST(SplitMix64, SkipLandsWhereDrawingWould) {
  SplitMix64 drawn(42), skipped(42);
  for (int i = 0; i < 1001; ++i) drawn.Normal();
  skipped.Skip(2002);
  EXPECT_EQ(skipped.state(), drawn.state());
  EXPECT_EQ(skipped.Normal(), drawn.Normal());
}

// The initialisation is drawn in 1M-value chunks on several threads; it must equal one sequential
// stream of normals in parameter order (wte's real rows, wpe, then per tensor), LayerNorm weights
// one, everything else zero. Several chunks per tensor here (wte: 2.1M values).
TEST(GptInit, ChunkedDrawEqualsOneSequentialStream) {
  using namespace gpt_detail;  // NOLINT: the layout's parameter names
  ModelOptions mo;
  mo.model = {2, 512, 4, 64, 4100};
  mo.precision = Precision::kFp32;
  mo.B = 1, mo.T = 64;
  auto model = CreateCpuGpt(mo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_TRUE((*model)->InitRandom(7).ok());
  std::vector<float> master, m, v;
  ASSERT_TRUE((*model)->ExportState(&master, &m, &v).ok());
  const Layout L(mo.model);
  ASSERT_EQ(master.size(), static_cast<size_t>(L.total));
  std::vector<float> want(master.size(), 0.0f);
  SplitMix64 rng(7);
  const float proj_std = 0.02f / std::sqrt(2.0f * mo.model.n_layer);
  for (int p = 0; p < kNumParams; ++p) {
    float* t = want.data() + L.offset[p];
    int64_t n = L.size[p];
    if (p == kWte) n = int64_t{mo.model.vocab_size} * mo.model.n_embd;
    if (p == kWte || p == kWpe || p == kQkvW || p == kFcW) {
      for (int64_t i = 0; i < n; ++i) t[i] = 0.02f * rng.Normal();
    } else if (p == kAttProjW || p == kFcProjW) {
      for (int64_t i = 0; i < n; ++i) t[i] = proj_std * rng.Normal();
    } else if (p == kLn1W || p == kLn2W || p == kLnfW) {
      std::fill(t, t + n, 1.0f);
    }
  }
  ASSERT_GT(L.size[kWte], int64_t{2} << 20);
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += master[i] != want[i];
  EXPECT_EQ(differ, 0u) << "of " << want.size();
  EXPECT_EQ(m, std::vector<float>(want.size(), 0.0f));
  std::vector<float> weights;
  ASSERT_TRUE((*model)->ExportWeights(&weights).ok());
  EXPECT_EQ(weights, master);
}

TEST(LearningRate, WarmupThenCosine) {
  TrainConfig t;
  t.lr = 1.0f, t.min_lr = 0.1f, t.warmup_steps = 10, t.total_steps = 110;
  EXPECT_FLOAT_EQ(LearningRate(t, 5), 0.5f);
  EXPECT_FLOAT_EQ(LearningRate(t, 10), 1.0f);
  EXPECT_NEAR(LearningRate(t, 60), 0.55f, 1e-6);
  EXPECT_NEAR(LearningRate(t, 110), 0.1f, 1e-6);
  EXPECT_NEAR(LearningRate(t, 500), 0.1f, 1e-6);
}

}  // namespace
}  // namespace fp8rt
