// ZeRO-3 (parallel.zero: 3) in fp8train, with real processes: mpirun (Open MPI collectives) and
// the FP8RT_* environment (Gloo) on loopback. ZeRO-3 equals plain data parallelism on the same
// ranks and global batch (the weights and gradients only travel differently: FP32 sums in another
// order), gpt2 and llama, FP32, BF16 and emulated FP8, one and four micro-batches, with TP 2; the
// FP8 amaxes stay ONE collective per step; resume is exact, and a ZeRO-3 checkpoint at dp 4 resumes
// at dp 2, on one rank without sharding, and back at dp 4.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/train_config.h"
#include "runtime/gpt_layout.h"
#include "runtime/memory_plan.h"
#include "tests/unit/parallel_run.h"

namespace fp8rt {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

class ZeroThree : public ParallelRun {
 protected:
  const std::string llama_ =
      "{arch: llama, n_layer: 3, n_embd: 32, n_head: 4, n_kv_head: 2, ffn_hidden: 64, "
      "block_size: 32}";
};

// Against plain DP on the same ranks (same batch per rank): the losses and the master weights
// within 1e-5 after 5 steps (measured: identical to the printed digits), the FP8 weights cast
// once per step (step 1 also casts the whole weights, as ZeRO-1 does), one amax collective a step,
// and each layer's reduce-scatter counted with the buckets.
TEST_F(ZeroThree, EqualsPlainDataParallelismGpt2AndLlamaOneAndFourMicroBatches) {
  struct Case {
    std::string model, precision;
    int ranks, accum;
    std::string reduce;
  };
  const Case cases[] = {
      {small_, "fp32", 2, 1, "fp32"}, {small_, "fp8", 4, 4, "fp32"},
      {small_, "bf16", 2, 1, "fp32"}, {llama_, "fp8", 2, 1, "fp32"},
      {llama_, "fp32", 4, 4, "fp32"}, {llama_, "fp8", 2, 4, "bf16"},
  };
  train_extra_ = ", share_gradient_memory: false";
  int k = 0;
  for (const Case& c : cases) {
    const std::string plain = StrCat("p", k), zero = StrCat("z", k);
    ++k;
    const bool fp8 = c.precision == "fp8", b16 = c.reduce == "bf16";
    SCOPED_TRACE(StrCat(c.model == small_ ? "gpt2 " : "llama ", c.precision, " dp ", c.ranks,
                        " accum ", c.accum, " reduce ", c.reduce));
    const int batch = 4 / c.ranks;
    const TrainRun a =
        Mpirun(c.ranks, Config(plain, batch, c.model, c.precision, c.accum, false, 0, c.reduce),
               plain, 5);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b =
        Mpirun(c.ranks, Config(zero, batch, c.model, c.precision, c.accum, false, 3, c.reduce),
               zero, 5);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    // (BF16 sums round each micro-batch's part under ZeRO-3, the accumulated gradient under
    // plain DP: as close as BF16 reduction is to FP32, Bf16GradientReductionStaysCloseToFp32.)
    ExpectSame(a, plain, b, zero, b16 ? 1e-3 : 1e-5, b16 ? 2 * 0.003 * 5 : 1e-5);
    const int layers = c.model == small_ ? 2 : 3;
    const int casts = a.metrics[0]["fp8_weight_casts"];
    for (size_t i = 0; i < b.metrics.size(); ++i) {
      const auto& j = b.metrics[i];
      EXPECT_EQ(j["amax_collectives"], fp8 ? 1 : 0) << "step " << i + 1;
      EXPECT_EQ(j["fp8_weight_casts"], i == 0 ? 2 * casts : casts) << "step " << i + 1;
      // The tensors outside the layers in their buckets, every layer once per micro-batch.
      EXPECT_GE(j["grad_buckets"].get<int>(), layers * c.accum + 1);
      EXPECT_GT(j["grad_reduce_ms"].get<double>(), 0.0);
    }
  }
}

// TP 2 x dp 2: every TP rank's part sharded over its data-parallel group, against ZeRO-1 on the
// same grid (which CurrentScaling and TensorParallel tests hold to plain DP and one rank).
// parallel.keep_gathered_weights: each layer gathered once per step (the first micro-batch's
// forward) and kept to the last backward: the same training, the same amax collective count.
TEST_F(ZeroThree, KeepingTheGatheredWeightsChangesNoNumber) {
  for (const std::string& model : {small_, llama_}) {
    const std::string a_tag = model == small_ ? "kg0" : "kl0", b_tag = model == small_ ? "kg1"
                                                                                          : "kl1";
    const TrainRun a = Mpirun(2, Config(a_tag, 2, model, "fp8", 3, false, 3), a_tag, 4);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b = Mpirun(
        2, Config(b_tag, 2, model, "fp8", 3, false, 3, "fp32", ", keep_gathered_weights: true"),
        b_tag, 4);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    ExpectIdentical(a, a_tag, b, b_tag);
    for (const auto& j : b.metrics) EXPECT_EQ(j["amax_collectives"], 1);
  }
  auto c =
      ParseRunConfig("data: {train: x}\nparallel: {zero: true, keep_gathered_weights: true}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(c.status().message(), "needs parallel.zero: 3")) << c.status().message();
}

// The whole-model export under ZeRO-3 (every rank gathers the shards, tensor by tensor through
// its gradient memory): train.sample_every's samples are ZeRO-1's, letter for letter (FP32, the
// same weights bit for bit); and train.recompute (the norms recomputed from the gathered layer's
// weights in the backward) changes nothing against plain DP.
TEST_F(ZeroThree, SamplesFromTheGatheredWeightsAndRecomputeMatch) {
  train_extra_ = ", sample_every: 2, sample_tokens: 16";
  const TrainRun one = Mpirun(2, Config("sz1", 2, small_, "fp32", 1, false, 1), "sz1", 4);
  const TrainRun three = Mpirun(2, Config("sz3", 2, small_, "fp32", 1, false, 3), "sz3", 4);
  ASSERT_EQ(one.ranks[0].code, 0) << one.output;
  ASSERT_EQ(three.ranks[0].code, 0) << three.output;
  auto samples = [](const std::string& out) {
    std::string s;
    for (size_t at = out.find("sample: "); at != std::string::npos;
         at = out.find("sample: ", at + 1)) {
      s += out.substr(at, out.find('\n', at) - at) + "\n";
    }
    return s;
  };
  EXPECT_FALSE(samples(one.output).empty()) << one.output;
  EXPECT_EQ(samples(one.output), samples(three.output));
  train_extra_ = ", recompute: true";
  const TrainRun a = Mpirun(2, Config("rp", 2, llama_, "fp8", 2, false, 0), "rp", 4);
  const TrainRun b = Mpirun(2, Config("rz", 2, llama_, "fp8", 2, false, 3), "rz", 4);
  ASSERT_EQ(a.ranks[0].code, 0) << a.output;
  ASSERT_EQ(b.ranks[0].code, 0) << b.output;
  ExpectSame(a, "rp", b, "rz", 1e-5, 1e-5);
  train_extra_.clear();
}

// An evaluation pass under ZeRO (whose weights were cast by the last step's update, for the next
// step) keeps the weights' amaxes: with the most recent amax deciding the scales, training with
// an evaluation after every step is training without one, bit for bit, under ZeRO-1 and ZeRO-3.
TEST_F(ZeroThree, AnEvaluationAfterEveryStepChangesNoStep) {
  fp8_extra_ = ", amax_algo: most_recent";
  for (const int zero : {1, 3}) {
    const std::string quiet = StrCat("nq", zero), eval = StrCat("ne", zero);
    train_extra_.clear();
    const TrainRun a = Mpirun(2, Config(quiet, 2, small_, "fp8", 1, false, zero), quiet, 4);
    train_extra_ = ", eval_every: 1, eval_tokens: 256";
    const std::string path = Config(eval, 2, small_, "fp8", 1, false, zero);
    {
      std::ifstream in(path);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string from = "data: {train: corpus.txt}";
      text.replace(text.find(from), from.size(), "data: {train: corpus.txt, val: corpus.txt}");
      std::ofstream(path) << text;
    }
    const TrainRun b = Mpirun(2, path, eval, 4);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, "val_loss") || Has(b.output, "validation")) << b.output;
    ExpectIdentical(a, quiet, b, eval);
  }
  fp8_extra_.clear();
  train_extra_.clear();
}

TEST_F(ZeroThree, WithTensorParallelismEqualsZeroOne) {
  for (const std::string& model : {small_, llama_}) {
    const std::string one = model == small_ ? "tz1g" : "tz1l", three = model == small_ ? "tz3g"
                                                                                         : "tz3l";
    const TrainRun a =
        Mpirun(4, Config(one, 2, model, "fp8", 2, false, 1, "fp32", ", tp: 2"), one, 4);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b =
        Mpirun(4, Config(three, 2, model, "fp8", 2, false, 3, "fp32", ", tp: 2"), three, 4);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, "tensor parallel: 2 ranks per replica")) << b.output;
    ExpectSame(a, one, b, three, 1e-5, 1e-5);
    for (const auto& j : b.metrics) EXPECT_EQ(j["amax_collectives"], 1);
  }
}

// The FP8RT_* environment (fp8d's launcher, Gloo collectives), with the calibrating first step
// (each FP8 weight's scale from its whole tensor, as one rank computes it) and current scaling
// (each weight's amax all-reduced over its shards before its cast).
TEST_F(ZeroThree, Fp8rtLauncherOverGlooEqualsPlainDp) {
  for (const std::string mode : {"delayed", "current"}) {
    fp8_extra_ = ", scaling: " + mode;
    const std::string plain = "ep" + mode, zero = "ez" + mode;
    const TrainRun a = Env(2, Config(plain, 2, small_, "fp8", 2, true, 0), plain, 4);
    for (const auto& r : a.ranks) ASSERT_EQ(r.code, 0) << a.output;
    const TrainRun b = Env(2, Config(zero, 2, small_, "fp8", 2, true, 3), zero, 4);
    for (const auto& r : b.ranks) ASSERT_EQ(r.code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, "collectives on gloo")) << b.output;
    ExpectSame(a, plain, b, zero, 1e-5, 1e-5);
  }
  fp8_extra_.clear();
}

TEST_F(ZeroThree, ResumeIsExactAndCheckpointsReshardToOtherGridsAndBack) {
  const std::string z3 = Config("z3", 1, llama_, "fp8", 1, false, 3);
  const std::string plain = Config("z0", 1, llama_, "fp8", 1, false, 0);
  // Resume at the same grid: bit for bit.
  const TrainRun whole = Mpirun(2, z3, "zwhole", 6);
  ASSERT_EQ(whole.ranks[0].code, 0) << whole.output;
  ASSERT_EQ(Mpirun(2, z3, "zparts", 3).ranks[0].code, 0);
  const TrainRun second = Mpirun(2, z3, "zparts", 6, "--resume");
  ASSERT_EQ(second.ranks[0].code, 0) << second.output;
  ExpectIdentical(whole, "zwhole", second, "zparts");
  // ZeRO-3 at dp 4 -> ZeRO-3 at dp 2 -> one rank (no sharding) -> ZeRO-3 at dp 4, each resumed
  // from the checkpoint the grid before wrote, beside the same chain without ZeRO (whose
  // checkpoints are whole-model ones): the same steps within 1e-5 at every grid.
  struct Leg {
    int ranks, to;
  };
  for (const Leg& leg : {Leg{4, 2}, Leg{2, 4}, Leg{1, 5}, Leg{4, 7}}) {
    SCOPED_TRACE(StrCat(leg.ranks, " rank(s) to step ", leg.to));
    const std::string extra = leg.to == 2 ? "" : "--resume";
    auto run = [&](const std::string& config, const std::string& tag) {
      return leg.ranks == 1 ? Single(config, tag, leg.to, extra)
                            : Mpirun(leg.ranks, config, tag, leg.to, extra);
    };
    // (one rank: dp 1, where parallel.zero has nothing to shard)
    const TrainRun a = run(z3, "zchain"), b = run(plain, "pchain");
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    ASSERT_EQ(a.metrics.size(), static_cast<size_t>(leg.to)) << a.output;
    ExpectSame(b, "pchain", a, "zchain", 1e-5, 1e-5);
  }
}

// Hybrid sharding (parallel.shard_group): world 4 as two groups of 2, each sharding one copy of
// the state; gradients reduce-scattered within a group, then all-reduced across the groups. The
// same training as plain DP on the 4 ranks, ZeRO-3 and ZeRO-1, gpt2 and llama, one and four
// micro-batches; with TP 2 (world 8: dp 4 as two groups of 2); one amax collective a step.
TEST_F(ZeroThree, HybridShardGroupsEqualPlainDataParallelism) {
  struct Case {
    std::string model, precision;
    int zero, accum, ranks;
    std::string extra;
  };
  const Case cases[] = {
      {small_, "fp8", 3, 4, 4, ""},         {llama_, "fp32", 3, 1, 4, ""},
      {small_, "fp32", 1, 1, 4, ""},        {llama_, "fp8", 3, 2, 8, ", tp: 2"},
  };
  int k = 0;
  for (const Case& c : cases) {
    const std::string plain = StrCat("hp", k), hybrid = StrCat("hz", k);
    ++k;
    SCOPED_TRACE(StrCat(c.model == small_ ? "gpt2 " : "llama ", c.precision, " ZeRO-", c.zero,
                        " accum ", c.accum, " ranks ", c.ranks, c.extra));
    const int dp = c.ranks / (c.extra.empty() ? 1 : 2);
    const int batch = 4 / dp;
    const TrainRun a = Mpirun(
        c.ranks, Config(plain, batch, c.model, c.precision, c.accum, false, 0, "fp32", c.extra),
        plain, 4);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b = Mpirun(c.ranks,
                              Config(hybrid, batch, c.model, c.precision, c.accum, false, c.zero,
                                     "fp32", c.extra + ", shard_group: 2"),
                              hybrid, 4);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, StrCat("hybrid sharding: ZeRO-", c.zero, " within groups of 2 ",
                                     "data-parallel ranks, ", dp / 2, " groups")))
        << b.output;
    ExpectSame(a, plain, b, hybrid, 1e-5, 1e-5);
    for (const auto& j : b.metrics) EXPECT_EQ(j["amax_collectives"], c.precision == "fp8" ? 1 : 0);
  }
}

// A hybrid run's checkpoint holds one group's shards (group 0 writes them: the files of a ZeRO
// checkpoint at dp 2), and resumes without hybrid sharding at dp 2 and back.
TEST_F(ZeroThree, HybridCheckpointsHoldOneGroupsShardsAndResumeElsewhere) {
  namespace fs = std::filesystem;
  const std::string hybrid =
      Config("hh", 1, llama_, "fp8", 1, false, 3, "fp32", ", shard_group: 2");
  const std::string plain = Config("hq", 1, llama_, "fp8", 1, false, 0);
  const std::string z2 = Config("h2", 1, llama_, "fp8", 1, false, 3);
  ASSERT_EQ(Mpirun(4, hybrid, "hchain", 2).ranks[0].code, 0);
  ASSERT_EQ(Mpirun(4, plain, "qchain", 2).ranks[0].code, 0);
  std::set<std::string> files, want = {"manifest.json"};
  for (const auto& e : fs::directory_iterator(CheckpointStepDir(dir_.str() + "/hchain.ckpt", 2))) {
    files.insert(e.path().filename().string());
  }
  for (const char* a : {"master", "adam_m", "adam_v"}) {
    for (int d = 0; d < 2; ++d) want.insert(ShardFileName(a, d, 0));
  }
  EXPECT_EQ(files, want);
  ExpectSame(Mpirun(2, z2, "hchain", 4, "--resume"), "hchain",
             Mpirun(2, plain, "qchain", 4, "--resume"), "qchain", 1e-5, 1e-5);
  ExpectSame(Mpirun(4, hybrid, "hchain", 6, "--resume"), "hchain",
             Mpirun(4, plain, "qchain", 6, "--resume"), "qchain", 1e-5, 1e-5);
}

TEST_F(ZeroThree, ShardGroupsThatDoNotDivideOrLackZeroAreRefused) {
  const TrainRun a = Mpirun(
      4, Config("hb1", 1, small_, "fp32", 1, false, 3, "fp32", ", shard_group: 3"), "hb1", 2);
  EXPECT_NE(a.ranks[0].code, 0);
  EXPECT_TRUE(Has(a.output,
                  "parallel.shard_group = 3 must be at least 2 and divide the "
                  "data-parallel size 4"))
      << a.output;
  auto c = ParseRunConfig("data: {train: x}\nparallel: {shard_group: 2}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(c.status().message(), "needs parallel.zero")) << c.status().message();
}

TEST_F(ZeroThree, RefusesShapesThatDoNotSplitNamingThem) {
  const std::string path = Config("z3bad", 1, "{n_layer: 1, n_embd: 34, n_head: 2, block_size: 32}",
                                  "fp32", 1, false, 3);
  const TrainRun r = Mpirun(4, path, "z3bad", 2);
  EXPECT_NE(r.ranks[0].code, 0);
  EXPECT_TRUE(Has(r.output, "do not split into 4 equal parts")) << r.output;
}

// train.moments_dtype: bf16. One rank: resume is exact (the checkpoint holds the BF16 moments
// widened to FP32, which round back to themselves), and the run stays close to FP32 moments
// without being the same. ZeRO-1 and ZeRO-3 at dp 2 with BF16 moments: the same training as
// plain DP with them (the moments round the same element-wise values), and ZeRO-3 resumes
// exactly. The memory plan halves the moments.
TEST_F(ZeroThree, Bf16MomentsResumeExactlyAndShardLikeFp32Ones) {
  const std::string fp32 = Config("m32", 4, llama_, "fp8");
  train_extra_ = ", moments_dtype: bf16";
  ExpectResumeIsExact(llama_);  // (its uninterrupted run: tag "whole")
  train_extra_ = "";
  const TrainRun wide = Single(fp32, "m32", 6);
  ASSERT_EQ(wide.ranks[0].code, 0) << wide.output;
  TrainRun whole;
  whole.metrics = Metrics(dir_.str() + "/whole.jsonl");
  ExpectSame(wide, "m32", whole, "whole", 0.01, 1e-2);
  EXPECT_NE(Master("m32"), Master("whole")) << "BF16 moments changed nothing";
  train_extra_ = ", moments_dtype: bf16";
  const std::string plain = Config("m16p", 2, llama_, "fp8", 1, false, 0);
  const TrainRun p = Mpirun(2, plain, "m16p", 5);
  ASSERT_EQ(p.ranks[0].code, 0) << p.output;
  for (int zero : {1, 3}) {
    SCOPED_TRACE(StrCat("ZeRO-", zero));
    const std::string tag = StrCat("m16z", zero);
    const std::string z = Config(tag, 2, llama_, "fp8", 1, false, zero);
    const TrainRun a = Mpirun(2, z, tag, 5);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    ExpectSame(p, "m16p", a, tag, 1e-4, 1e-4);
  }
  const std::string z3 = Config("m16r", 2, llama_, "fp8", 1, false, 3);
  ASSERT_EQ(Mpirun(2, z3, "m16r", 3).ranks[0].code, 0);
  const TrainRun resumed = Mpirun(2, z3, "m16r", 5, "--resume");
  ASSERT_EQ(resumed.ranks[0].code, 0) << resumed.output;
  ExpectIdentical(Mpirun(2, z3, "m16rw", 5), "m16rw", resumed, "m16r");
  train_extra_ = "";
}

TEST(MomentsDtype, ReadsFp32AndBf16AndRefusesTheRestNamingIt) {
  auto bad = ParseRunConfig("data: {train: x}\ntrain: {moments_dtype: fp16}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(), "train.moments_dtype")) << bad.status().ToString();
  EXPECT_TRUE(Has(bad.status().message(), "fp16")) << bad.status().ToString();
  auto ok = ParseRunConfig("data: {train: x}\ntrain: {moments_dtype: bf16}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->train.moments_dtype, "bf16");
}

TEST(ZeroStage, ReadsFalseTrueOneAndThreeAndRefusesTheRest) {
  for (const auto& [text, stage] : std::vector<std::pair<std::string, int>>{
           {"false", 0}, {"true", 1}, {"0", 0}, {"1", 1}, {"3", 3}}) {
    auto c = ParseRunConfig("data: {train: x}\nparallel: {zero: " + text + "}\n");
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().ToString();
    EXPECT_EQ(c->parallel.zero.stage, stage) << text;
  }
  for (const std::string bad : {"2", "4", "-1", "yes", "1.5"}) {
    auto c = ParseRunConfig("data: {train: x}\nparallel: {zero: " + bad + "}\n");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(Has(c.status().message(), "parallel.zero")) << c.status().message();
    EXPECT_TRUE(Has(c.status().message(), "is not a ZeRO stage")) << c.status().message();
  }
}

// The plan of a ZeRO-3 rank against ZeRO-1's, without a GPU: the gradients are the tensors outside
// the layers, two layers' ring and this rank's part of the rest; the FP8 weights are this rank's
// rows plus a ring of two gathered layers.
TEST(ZeroThreePlan, KeepsOneDpthOfTheLayersGradientsAndWeights) {
  auto c = ParseRunConfig(
      "data: {train: x}\nmodel: {n_layer: 8, n_embd: 256, n_head: 4, block_size: 128}\n"
      "train: {batch_size: 2, seq_len: 128, share_gradient_memory: false}\n"
      "parallel: {zero: true}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto one = PlanMemory(*c, Precision::kFp8, 4, true);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  c->parallel.zero = 3;
  auto three = PlanMemory(*c, Precision::kFp8, 4, true);
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  auto bytes = [](const MemoryPlan& p, const std::string& name) -> double {
    for (const auto& [n, b] : p.categories) {
      if (n == name) return static_cast<double>(b);
    }
    return 0;
  };
  const ModelConfig& m = c->model;
  const gpt_detail::Layout layout(m);
  const double layer_params =
      static_cast<double>(layout.offset[gpt_detail::kLnfW] - layout.offset[gpt_detail::kLn1W]);
  const double per_layer = layer_params / m.n_layer;
  // ZeRO-1: all gradients + the shard; ZeRO-3: less by the layers' gradients but two, and one
  // layer's reduced part on its way into the shard.
  const double saved = bytes(*one, "gradients (fp32)") - bytes(*three, "gradients (fp32)");
  EXPECT_NEAR(saved, 4 * (layer_params - 2 * per_layer - per_layer / 4), 4 * 64 * 16 * 3)
      << "bytes";
  // FP8 weights: the four block linears' rows 1/4 per layer (+ the ring of two, both copies).
  const double fp8_layer = 3.0 * 256 * 256 + 256 * 256 + 2 * 4.0 * 256 * 256;  // qkv, proj, fc, fc2
  EXPECT_NEAR(bytes(*three, "gathered layers (ring)"), 2 * 2 * fp8_layer + 2 * 2 * 4 * 256,
              64 * 1024);
  EXPECT_LT(bytes(*three, "fp8 weights (+T)"), bytes(*one, "fp8 weights (+T)") / 3);
  EXPECT_LT(three->total, one->total);
  // train.moments_dtype: bf16 halves the optimizer state (the master stays FP32).
  c->train.moments_dtype = "bf16";
  auto half = PlanMemory(*c, Precision::kFp8, 4, true);
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_GT(bytes(*three, "optimizer moments (fp32)"), 0.0);
  EXPECT_EQ(bytes(*half, "optimizer moments (bf16)"), bytes(*three, "optimizer moments (fp32)") / 2);
  EXPECT_EQ(bytes(*half, "optimizer moments (fp32)"), 0.0);
}

}  // namespace
}  // namespace fp8rt
