// fp8.attention in fp8train, with real processes on the CPU (FP8 attention emulated as cuDNN's
// graphs define it): it trains like BF16-precision attention within FP8 noise, gpt2 and llama
// with grouped-query attention; its six tensors per layer are in the scale state (named, with
// their formats) and their amaxes travel in the step's ONE amax collective; resume is exact; a
// checkpoint taken without it resumes with it (the attention scales start fresh); TP 2 (each rank
// its heads) and ZeRO-1 train as one rank does; delayed scaling only.
#include <gtest/gtest.h>

#include <string>

#include "common/train_config.h"
#include "tests/unit/parallel_run.h"

namespace fp8rt {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

class Fp8AttentionModel : public ParallelRun {
 protected:
  const std::string llama_ =
      "{arch: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, ffn_hidden: 64, "
      "block_size: 32}";
  std::string Inspect(const std::string& tag) {
    const ProcessResult r = test::RunProcess(
        {FP8TRAIN_PATH, "--inspect-scales", dir_.str() + "/" + tag + ".ckpt"}, {},
        dir_.str() + "/" + tag + ".inspect.log", std::chrono::seconds(60));
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output;
  }
};

// Against the same runs with attention in the run's T (FP32 here): close (the FP8 roundings of
// Q/K/V, P, O, dO, dS and dQ/dK/dV), not the same; six named tensors per layer in the scale
// state; one amax collective a step at dp 2.
TEST_F(Fp8AttentionModel, TrainsLikeUnquantizedAttentionWithItsScalesInTheOneReduction) {
  for (const std::string& model : {small_, llama_}) {
    SCOPED_TRACE(model == small_ ? "gpt2" : "llama (GQA 4/2)");
    const std::string tag = model == small_ ? "g" : "l";
    fp8_extra_ = "";
    const TrainRun plain = Single(Config(tag + "plain", 4, model, "fp8"), tag + "plain", 6);
    ASSERT_EQ(plain.ranks[0].code, 0) << plain.output;
    fp8_extra_ = ", attention: true";
    const TrainRun att = Single(Config(tag + "att", 4, model, "fp8"), tag + "att", 6);
    ASSERT_EQ(att.ranks[0].code, 0) << att.output;
    EXPECT_TRUE(Has(att.output, "FP8 attention")) << att.output;
    ExpectSame(plain, tag + "plain", att, tag + "att", 0.03, 0.05);
    EXPECT_NE(Master(tag + "plain"), Master(tag + "att")) << "fp8.attention changed nothing";
    const std::string scales = Inspect(tag + "att");
    for (const char* t : {"h0.attention.qkv", "h1.attention.probs", "h0.attention.output",
                          "h1.attention.grad_output", "h0.attention.grad_scores",
                          "h1.attention.grad_qkv"}) {
      EXPECT_TRUE(Has(scales, t)) << t << " not in\n" << scales;
    }
    EXPECT_FALSE(Has(Inspect(tag + "plain"), "attention")) << "without fp8.attention";
    const TrainRun dp = Mpirun(2, Config(tag + "dp", 2, model, "fp8"), tag + "dp", 4);
    ASSERT_EQ(dp.ranks[0].code, 0) << dp.output;
    for (size_t i = 0; i < dp.metrics.size(); ++i) {
      EXPECT_EQ(dp.metrics[i]["amax_collectives"], 1) << "step " << i + 1;
    }
  }
  fp8_extra_ = "";
}

// Resume is bit for bit; a checkpoint without attention scales resumes with fp8.attention (its
// linears' scales carry on, the attention's start fresh) and one with them resumes without it
// refused only as any state with tensors this model lacks is (--reset-fp8-history).
TEST_F(Fp8AttentionModel, ResumesExactlyAndFromCheckpointsWithoutIt) {
  fp8_extra_ = ", attention: true";
  ExpectResumeIsExact(llama_);

  fp8_extra_ = "";
  const std::string before = Config("old", 4, llama_, "fp8");
  ASSERT_EQ(Single(before, "old", 3).ranks[0].code, 0);
  fp8_extra_ = ", attention: true";
  const std::string after = Config("old", 4, llama_, "fp8");
  const TrainRun resumed = Single(after, "old", 5, "--resume");
  ASSERT_EQ(resumed.ranks[0].code, 0) << resumed.output;
  ASSERT_FALSE(resumed.metrics.empty());
  EXPECT_EQ(resumed.metrics.back()["step"], 5) << resumed.output;
  EXPECT_TRUE(Has(resumed.output, "resum")) << resumed.output;
  EXPECT_TRUE(Has(Inspect("old"), "h1.attention.grad_qkv"));
  fp8_extra_ = "";
  const TrainRun back = Single(Config("old", 4, llama_, "fp8"), "old", 6, "--resume");
  EXPECT_NE(back.ranks[0].code, 0) << "a state with attention scales loaded into a model without";
  EXPECT_TRUE(Has(back.output, "not in this model")) << back.output;
}

// TP 2 (each rank its heads: NH/2 and KV/2) and ZeRO-1 at dp 2 train as their one-rank and plain
// DP counterparts do with fp8.attention.
TEST_F(Fp8AttentionModel, TensorParallelAndZeroOneMatch) {
  fp8_extra_ = ", attention: true";
  const TrainRun one = Single(Config("t1", 4, llama_, "fp8"), "t1", 4);
  ASSERT_EQ(one.ranks[0].code, 0) << one.output;
  const TrainRun tp = Mpirun(2, Config("t2", 4, llama_, "fp8", 1, false, 0, "fp32", ", tp: 2"),
                             "t2", 4);
  ASSERT_EQ(tp.ranks[0].code, 0) << tp.output;
  ExpectSame(one, "t1", tp, "t2", 2e-3, 2e-3);
  const TrainRun dp = Mpirun(2, Config("z0", 2, llama_, "fp8"), "z0", 4);
  ASSERT_EQ(dp.ranks[0].code, 0) << dp.output;
  const TrainRun z1 = Mpirun(2, Config("z1", 2, llama_, "fp8", 1, false, 1), "z1", 4);
  ASSERT_EQ(z1.ranks[0].code, 0) << z1.output;
  ExpectSame(dp, "z0", z1, "z1", 1e-5, 1e-5);
  fp8_extra_ = "";
}

TEST(Fp8AttentionConfig, NeedsDelayedScaling) {
  for (const char* mode : {"current", "block"}) {
    auto c = ParseRunConfig(StrCat("data: {train: x}\nfp8: {attention: true, scaling: ", mode,
                                   "}\n"));
    ASSERT_FALSE(c.ok()) << mode;
    EXPECT_TRUE(Has(c.status().message(), "fp8.attention needs fp8.scaling: delayed"))
        << c.status().ToString();
  }
  auto ok = ParseRunConfig("data: {train: x}\nfp8: {attention: true}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->fp8.attention);
}

}  // namespace
}  // namespace fp8rt
