// Tensor parallelism in fp8train (Megatron-style: QKV and FC column-parallel, the attention
// projection and FC2 row-parallel, heads split), with real processes on the CPU: TP = 2 equals
// TP = 1, DP = 2 x TP = 2 equals 1 x 1, ZeRO-1 under TP equals TP without it, the FP8 amaxes
// still take ONE all-reduce per step (over every rank), a resumed TP run continues exactly, and
// its whole-model checkpoint resumes at another TP.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <set>

#include "common/train_config.h"
#include "runtime/gpt_layout.h"
#include "runtime/huggingface.h"
#include "runtime/train_checkpoint.h"
#include "tests/unit/parallel_run.h"

namespace fp8rt {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// ---- the split (no processes) ----

// Every element of the whole model lands in exactly one TP rank's part of a split tensor, and in
// every rank's part of a whole one; Extract then Insert gives the whole model back.
TEST(TpLayout, EveryElementIsInExactlyOnePartAndTheRoundTripIsExact) {
  ModelConfig gpt;
  gpt.n_layer = 3, gpt.n_embd = 32, gpt.n_head = 4, gpt.block_size = 16, gpt.vocab_size = 200;
  ModelConfig llama = gpt;  // 4 query heads sharing 4 / 2 / 1 key/value heads at tp 1 / 2 / 4
  llama.arch = Arch::kLlama, llama.n_kv_head = 4, llama.ffn_hidden = 48;
  for (const ModelConfig& m : {gpt, llama}) {
  SCOPED_TRACE(ArchName(m.arch));
  const gpt_detail::Layout whole(m);
  std::vector<float> w(static_cast<size_t>(whole.total));
  std::iota(w.begin(), w.end(), 1.0f);
  for (const int tp : {1, 2, 4}) {
    const gpt_detail::Layout part(m, tp);
    std::vector<float> back(w.size(), 0.0f);
    std::vector<int> hits(w.size(), 0);
    for (int r = 0; r < tp; ++r) {
      std::vector<float> mine(static_cast<size_t>(part.total), -1.0f);
      gpt_detail::TpExtract(m, tp, r, w.data(), mine.data());
      gpt_detail::TpInsert(m, tp, r, mine.data(), back.data());
      for (int p = 0; p < gpt_detail::kNumParams; ++p) {
        for (int64_t i = 0; i < part.size[p]; ++i) {
          const float v = mine[static_cast<size_t>(part.offset[p] + i)];
          ASSERT_GE(v, 1.0f) << gpt_detail::kParamNames[p] << " tp " << tp << " rank " << r;
          ++hits[static_cast<size_t>(v) - 1];
        }
      }
    }
    for (int p = 0; p < gpt_detail::kNumParams; ++p) {  // (the alignment gaps hold nothing)
      const int want = gpt_detail::TpSplit(p) ? 1 : tp;
      for (int64_t i = 0; i < whole.size[p]; ++i) {
        ASSERT_EQ(back[static_cast<size_t>(whole.offset[p] + i)],
                  w[static_cast<size_t>(whole.offset[p] + i)])
            << gpt_detail::kParamNames[p] << " element " << i << " tp " << tp;
        ASSERT_EQ(hits[static_cast<size_t>(whole.offset[p] + i)], want)
            << gpt_detail::kParamNames[p] << " element " << i << " tp " << tp;
      }
    }
  }
  }
}

// llama's QKV: rank r keeps its query heads' rows and its share of the key/value heads' rows
// (8 query heads of 2, 4 key/value heads: at tp 2 rank 1 has query heads 4..7, kv heads 2..3);
// gate and up each give their rows r.
TEST(TpLayout, LlamaQkvRowsAreTheRanksQueryAndKeyValueHeadsAndGateUpRowsSplitEach) {
  ModelConfig m;
  m.arch = Arch::kLlama, m.n_layer = 1, m.n_embd = 16, m.n_head = 8, m.n_kv_head = 4;
  m.ffn_hidden = 12, m.block_size = 4, m.vocab_size = 16;
  const auto runs = gpt_detail::TpRuns(m, 2, 1, gpt_detail::kQkvW);
  ASSERT_EQ(runs.size(), 3u);  // Q rows 8..15, K rows 16 + 4..7, V rows 24 + 4..7; 16 columns
  EXPECT_EQ(runs[0].whole, 8 * 16);
  EXPECT_EQ(runs[0].n, 8 * 16);
  EXPECT_EQ(runs[1].whole, (16 + 4) * 16);
  EXPECT_EQ(runs[1].part, 8 * 16);
  EXPECT_EQ(runs[1].n, 4 * 16);
  EXPECT_EQ(runs[2].whole, (24 + 4) * 16);
  EXPECT_EQ(runs[2].part, 12 * 16);
  const auto fc = gpt_detail::TpRuns(m, 2, 1, gpt_detail::kFcW);
  ASSERT_EQ(fc.size(), 2u);  // gate rows 6..11, up rows 12 + 6..11
  EXPECT_EQ(fc[0].whole, 6 * 16);
  EXPECT_EQ(fc[1].whole, (12 + 6) * 16);
  EXPECT_EQ(fc[1].part, 6 * 16);
  EXPECT_TRUE(gpt_detail::TpRuns(m, 2, 1, gpt_detail::kQkvB).empty());  // no biases
}

// Rank r's QKV rows are its heads' rows of Q, of K and of V, in that order: what the attention
// kernels read as (3, heads / tp, head size).
TEST(TpLayout, QkvRowsAreTheRanksHeadsOfQKAndV) {
  ModelConfig m;
  m.n_layer = 1, m.n_embd = 8, m.n_head = 4, m.block_size = 4, m.vocab_size = 16;
  const auto runs = gpt_detail::TpRuns(m, 2, 1, gpt_detail::kQkvW);
  ASSERT_EQ(runs.size(), 3u);
  for (int b = 0; b < 3; ++b) {  // rows 4..7 of each 8-row block, 8 columns each
    EXPECT_EQ(runs[b].whole, (b * 8 + 4) * 8);
    EXPECT_EQ(runs[b].part, b * 4 * 8);
    EXPECT_EQ(runs[b].n, 4 * 8);
  }
  const auto cols = gpt_detail::TpRuns(m, 2, 1, gpt_detail::kAttProjW);
  ASSERT_EQ(cols.size(), 8u);  // columns 4..7 of each of the 8 rows
  EXPECT_EQ(cols[3].whole, 3 * 8 + 4);
  EXPECT_EQ(cols[3].part, 3 * 4);
  EXPECT_EQ(cols[3].n, 4);
}

TEST(ParallelConfig, TpMustDivideTheHeadsAndBeAtLeastOne) {
  auto bad = ParseRunConfig(
      "data: {train: x}\nmodel: {n_embd: 48, n_head: 4}\nparallel: {tp: 3}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(), "parallel.tp = 3 does not divide model.n_head = 4"))
      << bad.status().message();
  auto zero = ParseRunConfig("data: {train: x}\nparallel: {tp: 0}\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Has(zero.status().message(), "parallel.tp")) << zero.status().message();
  auto good = ParseRunConfig("data: {train: x}\nmodel: {n_head: 4}\nparallel: {tp: 2, dp: 3}\n");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->parallel.tp, 2);
}

// ---- fp8train ranks ----

class TensorParallel : public ParallelRun {
 protected:
  const std::string model_ = "{n_layer: 2, n_embd: 32, n_head: 4, block_size: 32}";
};

// Tolerances. FP32: a row-parallel layer's output is the sum of the ranks' partial products,
// added in another order than one GEMM adds them; over 6 AdamW steps losses agree to 1e-5 and
// weights to 1e-5, as under DP. FP8 (emulated, delayed scaling from the first step): the amaxes
// are MAX-reduced over every rank, so each tensor's scale is TP = 1's; the casts' inputs differ
// in their last FP32 bits, which can move a value across an FP8 rounding boundary: losses within
// 1e-3, weights within 1e-3 (measured: 1.2e-7). BF16: the partial sums are rounded to BF16
// before the sum: losses within 1e-2; a weight whose gradient is mostly rounding noise takes
// AdamW steps of about lr (3e-3) either way, so weights within 2e-2 (measured: 1.1e-2).
TEST_F(TensorParallel, TpTwoEqualsTpOne) {
  for (const std::string precision : {"fp32", "bf16", "fp8"}) {
    const double tol = precision == "fp32" ? 1e-5 : precision == "fp8" ? 1e-3 : 1e-2;
    const double wtol = precision == "bf16" ? 2e-2 : tol;
    const std::string one = "one" + precision, two = "tp2" + precision;
    const TrainRun a = Single(Config(one, 4, model_, precision), one, 6);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b =
        Mpirun(2, Config(two, 4, model_, precision, 1, false, false, "fp32", ", tp: 2"), two, 6);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, "tensor parallel: 2 ranks per replica")) << b.output;
    EXPECT_TRUE(Has(b.output, "global batch: 1 (dp) x 4")) << b.output;
    ASSERT_EQ(b.metrics.size(), 6u) << b.output;
    for (const auto& j : b.metrics) {
      EXPECT_EQ(j["tp"], 2);
      EXPECT_EQ(j["dp"], 1);
      EXPECT_EQ(j["amax_collectives"], precision == "fp8" ? 1 : 0);
    }
    ExpectSame(a, one, b, two, tol, wtol);
  }
}

// 4 ranks as 2 replicas of 2 TP ranks, on the same global batch as one rank; and ZeRO-1 over the
// data-parallel groups of that grid against plain DP x TP.
TEST_F(TensorParallel, DpTwoByTpTwoEqualsOneByOneAndZeroOneEqualsPlain) {
  for (const std::string precision : {"fp32", "fp8"}) {
    const double tol = precision == "fp32" ? 1e-5 : 1e-3;
    const std::string one = "g1" + precision, grid = "g22" + precision, zero = "z22" + precision;
    const TrainRun a = Single(Config(one, 4, model_, precision), one, 5);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b =
        Mpirun(4, Config(grid, 2, model_, precision, 1, false, false, "fp32", ", tp: 2"), grid, 5);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    EXPECT_TRUE(Has(b.output, "global batch: 2 (dp) x 2")) << b.output;
    for (const auto& j : b.metrics) {
      EXPECT_EQ(j["dp"], 2);
      EXPECT_EQ(j["tp"], 2);
      EXPECT_EQ(j["amax_collectives"], precision == "fp8" ? 1 : 0);
    }
    ExpectSame(a, one, b, grid, tol, tol);
    const TrainRun c =
        Mpirun(4, Config(zero, 2, model_, precision, 1, false, true, "fp32", ", tp: 2"), zero, 5);
    ASSERT_EQ(c.ranks[0].code, 0) << c.output;
    ExpectSame(b, grid, c, zero, 1e-5, precision == "fp32" ? 1e-5 : 1e-3);
  }
}

// llama under TP (query heads with their key/value heads, gate and up rows split) and on a
// dp 2 x tp 2 grid with ZeRO-1 equals one rank, as gpt2 does (the same tolerances).
TEST_F(TensorParallel, LlamaTpTwoAndAZeroOneGridEqualOneRank) {
  const std::string llama =
      "{arch: llama, n_layer: 2, n_embd: 32, n_head: 4, n_kv_head: 2, ffn_hidden: 64, "
      "block_size: 32}";
  for (const std::string precision : {"fp32", "fp8"}) {
    const double tol = precision == "fp32" ? 1e-5 : 1e-3;
    const std::string one = "l1" + precision, two = "l2" + precision, grid = "lz" + precision;
    const TrainRun a = Single(Config(one, 4, llama, precision), one, 5);
    ASSERT_EQ(a.ranks[0].code, 0) << a.output;
    const TrainRun b =
        Mpirun(2, Config(two, 4, llama, precision, 1, false, false, "fp32", ", tp: 2"), two, 5);
    ASSERT_EQ(b.ranks[0].code, 0) << b.output;
    ExpectSame(a, one, b, two, tol, tol);
    const TrainRun c =
        Mpirun(4, Config(grid, 2, llama, precision, 1, false, true, "fp32", ", tp: 2"), grid, 5);
    ASSERT_EQ(c.ranks[0].code, 0) << c.output;
    for (const auto& j : c.metrics) EXPECT_EQ(j["amax_collectives"], precision == "fp8" ? 1 : 0);
    // (ExpectSame also puts the grid's sharded checkpoint together, llama's split rows included,
    // and compares it with the one-rank run's weights.)
    ExpectSame(a, one, c, grid, tol, tol);
  }
}

// The FP8RT_* environment launcher (Gloo, what fp8d starts) splits into TP groups too.
TEST_F(TensorParallel, EnvironmentLauncherTpTwoOverGlooEqualsTpOne) {
  const TrainRun a = Single(Config("e1", 4, model_, "fp8"), "e1", 4);
  ASSERT_EQ(a.ranks[0].code, 0) << a.output;
  const TrainRun b = Env(2, Config("e2", 4, model_, "fp8", 1, false, false, "fp32", ", tp: 2"),
                         "e2", 4);
  for (const auto& r : b.ranks) ASSERT_EQ(r.code, 0) << b.output;
  EXPECT_TRUE(Has(b.output, "collectives on gloo")) << b.output;
  ExpectSame(a, "e1", b, "e2", 1e-3, 1e-3);
}

// The checkpoint is the whole model: a TP = 2 run resumes exactly at TP = 2, and at TP = 1 it
// continues the same run (to FP32 tolerance).
TEST_F(TensorParallel, ResumeIsExactAndTheCheckpointResumesAtAnotherTp) {
  const std::string tp2 = Config("r2", 4, model_, "fp32", 1, false, false, "fp32", ", tp: 2");
  const TrainRun whole = Mpirun(2, tp2, "whole", 6);
  ASSERT_EQ(whole.ranks[0].code, 0) << whole.output;
  ASSERT_EQ(Mpirun(2, tp2, "parts", 3).ranks[0].code, 0);
  const TrainRun second = Mpirun(2, tp2, "parts", 6, "--resume");
  ASSERT_EQ(second.ranks[0].code, 0) << second.output;
  ASSERT_EQ(second.metrics.size(), 6u) << second.output;
  ExpectIdentical(whole, "whole", second, "parts");
  // Steps 1..3 at TP = 2, then 4..6 at TP = 1 from the same checkpoint.
  ASSERT_EQ(Mpirun(2, tp2, "mixed", 3).ranks[0].code, 0);
  const TrainRun at1 = Single(Config("r1", 4, model_, "fp32"), "mixed", 6, "--resume");
  ASSERT_EQ(at1.ranks[0].code, 0) << at1.output;
  ASSERT_EQ(at1.metrics.size(), 6u) << at1.output;
  ExpectLossesNear(whole, at1, 3, 6, 1e-5);
}

// Sharded checkpoints: under TP or ZeRO-1 every rank writes the part it owns (without ZeRO only
// replica 0's TP ranks: the replicas are identical) and rank 0 one manifest listing them; put
// together they are the whole model, and a run resumes from them at another dp and tp.
TEST_F(TensorParallel, ShardedCheckpointsHoldEachRanksPartAndResumeAtAnotherGrid) {
  namespace fs = std::filesystem;
  const std::string zero = Config("sz", 2, model_, "fp8", 1, false, true, "fp32", ", tp: 2");
  const std::string plain = Config("sp", 2, model_, "fp8", 1, false, false, "fp32", ", tp: 2");
  ASSERT_EQ(Mpirun(4, zero, "sz", 3).ranks[0].code, 0);
  ASSERT_EQ(Mpirun(4, plain, "sp", 3).ranks[0].code, 0);
  auto files = [&](const std::string& tag) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(CheckpointStepDir(dir_.str() + "/" + tag + ".ckpt", 3))) {
      out.insert(e.path().filename().string());
    }
    return out;
  };
  std::set<std::string> want_zero = {"manifest.json"}, want_plain = {"manifest.json"};
  for (const char* a : {"master", "adam_m", "adam_v"}) {
    for (int t = 0; t < 2; ++t) {
      want_plain.insert(ShardFileName(a, 0, t));
      for (int d = 0; d < 2; ++d) want_zero.insert(ShardFileName(a, d, t));
    }
  }
  EXPECT_EQ(files("sz"), want_zero);
  EXPECT_EQ(files("sp"), want_plain);
  const auto wz = Master("sz"), wp = Master("sp");
  ASSERT_EQ(wz.size(), wp.size());
  for (size_t i = 0; i < wz.size(); ++i) ASSERT_NEAR(wz[i], wp[i], 1e-5) << "element " << i;
  // fp8train --export-hf of the sharded (dp 2 x tp 2, ZeRO-1) checkpoint: the whole model, the
  // same weights a reader of the Hugging Face directory gets back.
  const std::string hf = dir_.str() + "/sz.hf";
  ASSERT_TRUE(ExportHuggingFace(dir_.str() + "/sz.ckpt", 3, hf, "F32").ok());
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 32, m.n_head = 4, m.block_size = 32;  // model_ (vocabulary 256)
  auto back = MasterFromHf(m, hf);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, wz);
  // Both resume at 1 x 1 (and the ZeRO one at dp 2 x tp 1 with ZeRO): the same steps 4..5.
  const std::string one = Config("s1", 2, model_, "fp8");
  const TrainRun from_plain = Single(one, "sp", 5, "--resume");
  const TrainRun from_zero = Single(one, "sz", 5, "--resume");
  ASSERT_EQ(from_plain.ranks[0].code, 0) << from_plain.output;
  ASSERT_EQ(from_zero.ranks[0].code, 0) << from_zero.output;
  ASSERT_EQ(from_zero.metrics.size(), 5u);
  ExpectLossesNear(from_plain, from_zero, 3, 5, 1e-5);
}

// Retention under ZeRO-1 x TP: rank 0 removes whole old checkpoints (every rank's shards) once
// the newest has committed; what is left resumes.
TEST_F(TensorParallel, RetentionRemovesOldShardedCheckpointsWhole) {
  namespace fs = std::filesystem;
  train_extra_ = ", checkpoint_every: 1, keep_checkpoints: 2";
  const std::string zero = Config("keep", 2, model_, "fp8", 1, false, true, "fp32", ", tp: 2");
  ASSERT_EQ(Mpirun(4, zero, "keep", 4).ranks[0].code, 0);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_.str() + "/keep.ckpt")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0) left.insert(n);
  }
  EXPECT_EQ(left, (std::set<std::string>{"step_00000003", "step_00000004"}));
  for (const int step : {3, 4}) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(CheckpointStepDir(dir_.str() + "/keep.ckpt", step))) {
      n += e.is_regular_file();
    }
    EXPECT_EQ(n, 13u) << "step " << step << ": the manifest and 4 ranks x 3 arrays";
  }
  const TrainRun resumed = Mpirun(4, zero, "keep", 5, "--resume");
  ASSERT_EQ(resumed.ranks[0].code, 0) << resumed.output;
}

TEST_F(TensorParallel, AMissingOrDamagedShardIsRefusedNamingIt) {
  namespace fs = std::filesystem;
  const std::string zero = Config("bad", 2, model_, "fp32", 1, false, true, "fp32", ", tp: 2");
  ASSERT_EQ(Mpirun(4, zero, "bad", 2).ranks[0].code, 0);
  const std::string step = CheckpointStepDir(dir_.str() + "/bad.ckpt", 2);
  fs::remove(step + "/" + ShardFileName("adam_v", 1, 1));
  const TrainRun r = Mpirun(4, zero, "bad", 4, "--resume");
  EXPECT_NE(r.ranks[0].code, 0);
  EXPECT_TRUE(Has(r.output, ShardFileName("adam_v", 1, 1) + "' is missing")) << r.output;
  EXPECT_TRUE(fs::exists(step + "/manifest.json")) << "nothing is overwritten";
}

TEST_F(TensorParallel, ShapesAndWorldsTpCannotSplitAreRefusedNamingWhy) {
  const TrainRun heads = Mpirun(
      3, Config("heads", 4, "{n_layer: 1, n_embd: 24, n_head: 2, block_size: 32}", "fp32", 1,
                false, false, "fp32", ", tp: 3"),
      "heads", 2);
  EXPECT_NE(heads.ranks[0].code, 0);
  EXPECT_TRUE(Has(heads.output, "parallel.tp = 3 does not divide model.n_head = 2")) << heads.output;
  const TrainRun world =
      Mpirun(3, Config("world", 4, model_, "fp32", 1, false, false, "fp32", ", tp: 2"), "world", 2);
  EXPECT_NE(world.ranks[0].code, 0);
  EXPECT_TRUE(Has(world.output, "parallel.tp is 2 but the launcher started 3 rank(s)"))
      << world.output;
}

}  // namespace
}  // namespace fp8rt
