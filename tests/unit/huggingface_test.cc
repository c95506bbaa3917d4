// Hugging Face in and out (runtime/huggingface.h) on a real checkpoint of a CPU run.
// Out (--export-hf): the tensors transformers' GPT2LMHeadModel has, with their shapes, every
// value where the mapping says (the Conv1D weights transposed, the vocabulary padding dropped),
// BF16 rounding, config.json; a missing or corrupted checkpoint refused with nothing written.
// (transformers itself loads the export and matches our logits in scripts/hf_check.py, on the
// GPU node.) In (train.init_from): the export read back is the checkpoint's weights bit for bit,
// also in the hub's naming; a run starts from them; every mismatch refused naming the tensor or
// key, before anything is written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/dtype.h"
#include "runtime/checkpoint.h"
#include "runtime/gpt_layout.h"
#include "runtime/huggingface.h"
#include "runtime/train_checkpoint.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

class HuggingFaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fp8rt_huggingface_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    corpus_ = test::EnglishCorpus((dir_ / "corpus.txt").string());
    ASSERT_FALSE(corpus_.empty());
    TrainOptions o;
    o.config = test::TinyRunConfig(corpus_, Precision::kFp8, 3);
    o.checkpoint_dir = ckpt();
    ASSERT_TRUE(RunTraining(o, DeviceInfo{}).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string ckpt() const { return (dir_ / "ckpt").string(); }
  std::string out() const { return (dir_ / "hf").string(); }
  ModelConfig Model() const { return test::TinyRunConfig(corpus_, Precision::kFp8, 3).model; }
  // The export with config.json edited by `edit`, or without it.
  void EditConfig(const std::function<void(nlohmann::json&)>& edit) const {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(out() + "/config.json"));
    edit(j);
    std::ofstream(out() + "/config.json") << j.dump();
  }
  // Rewrites the export's model.safetensors with `edit` applied to its tensors.
  void EditTensors(const std::function<void(std::vector<SafetensorsOut>&)>& edit) const {
    auto f = SafetensorsFile::Read(out() + "/model.safetensors");
    ASSERT_TRUE(f.ok());
    std::vector<SafetensorsOut> ts;
    for (const auto& t : f->tensors()) ts.push_back({t.name, t.shape, *f->Floats(t.name)});
    edit(ts);
    ASSERT_TRUE(WriteSafetensors(out() + "/model.safetensors", ts, "F32").ok());
  }
  static void ExpectRefused(const Result<std::vector<float>>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << "accepted; wanted: " << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  }

  fs::path dir_;
  std::string corpus_;
};

TEST_F(HuggingFaceTest, TheCheckpointAsGpt2LMHeadModelTensors) {
  auto ck = ReadCheckpoint(ckpt(), -1, {});
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  auto master = CheckpointArray(*ck, "master");
  ASSERT_TRUE(master.ok());
  const ModelConfig m = *CheckpointModelConfig(*ck);
  const int64_t C = m.n_embd;
  const gpt_detail::Layout L(m);

  for (const std::string dtype : {"F32", "BF16"}) {
    SCOPED_TRACE(dtype);
    ASSERT_TRUE(ExportHuggingFace(ckpt(), -1, out(), dtype).ok());
    auto f = SafetensorsFile::Read(out() + "/model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->tensors().size(), 2u + 12u * m.n_layer + 2u);
    EXPECT_EQ(f->metadata().at("fp8rt.checkpoint_step"), "3");
    auto round = [&](float v) { return dtype == "F32" ? v : ToFloat(bf16(v)); };
    auto expect = [&](const std::string& name, std::vector<int64_t> shape,
                      const std::function<float(int64_t, int64_t)>& ours) {
      const SafetensorsTensor* t = f->Find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->dtype, dtype);
      ASSERT_EQ(t->shape, shape) << name;
      const std::vector<float> v = *f->Floats(name);
      const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(v[r * cols + c], round(ours(r, c))) << name << "[" << r << "][" << c << "]";
        }
      }
    };
    const auto& w = *master;
    using namespace gpt_detail;  // NOLINT: the layout's parameter names
    expect("transformer.wte.weight", {m.vocab_size, C},
           [&](int64_t r, int64_t c) { return w[L.offset[kWte] + r * C + c]; });
    expect("transformer.wpe.weight", {m.block_size, C},
           [&](int64_t r, int64_t c) { return w[L.offset[kWpe] + r * C + c]; });
    // Layer 1's: Conv1D (in, out) = our (out, in) transposed.
    expect("transformer.h.1.attn.c_attn.weight", {C, 3 * C}, [&](int64_t i, int64_t o) {
      return w[L.offset[kQkvW] + 3 * C * C + o * C + i];
    });
    expect("transformer.h.1.attn.c_attn.bias", {3 * C},
           [&](int64_t, int64_t o) { return w[L.offset[kQkvB] + 3 * C + o]; });
    expect("transformer.h.1.attn.c_proj.weight", {C, C}, [&](int64_t i, int64_t o) {
      return w[L.offset[kAttProjW] + C * C + o * C + i];
    });
    expect("transformer.h.1.mlp.c_fc.weight", {C, 4 * C}, [&](int64_t i, int64_t o) {
      return w[L.offset[kFcW] + 4 * C * C + o * C + i];
    });
    expect("transformer.h.1.mlp.c_proj.weight", {4 * C, C}, [&](int64_t i, int64_t o) {
      return w[L.offset[kFcProjW] + 4 * C * C + o * 4 * C + i];
    });
    expect("transformer.h.1.mlp.c_proj.bias", {C},
           [&](int64_t, int64_t o) { return w[L.offset[kFcProjB] + C + o]; });
    expect("transformer.h.0.ln_2.weight", {C},
           [&](int64_t, int64_t c) { return w[L.offset[kLn2W] + c]; });
    expect("transformer.ln_f.bias", {C}, [&](int64_t, int64_t c) { return w[L.offset[kLnfB] + c]; });

    std::ifstream cfg(out() + "/config.json");
    const nlohmann::json j = nlohmann::json::parse(cfg);
    EXPECT_EQ(j["architectures"][0], "GPT2LMHeadModel");
    EXPECT_EQ(j["n_layer"], m.n_layer);
    EXPECT_EQ(j["n_embd"], C);
    EXPECT_EQ(j["n_head"], m.n_head);
    EXPECT_EQ(j["vocab_size"], m.vocab_size);
    EXPECT_EQ(j["n_positions"], m.block_size);
    EXPECT_EQ(j["activation_function"], "gelu_new");
    EXPECT_EQ(j["torch_dtype"], dtype == "F32" ? "float32" : "bfloat16");
  }
}

TEST_F(HuggingFaceTest, MissingOrCorruptCheckpointsAreRefusedAndNothingIsWritten) {
  const Status missing = ExportHuggingFace((dir_ / "nope").string(), -1, out(), "F32");
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(fs::exists(out()));
  // Flip one byte of the master weights: the checksum refuses the checkpoint.
  const std::string master = CheckpointStepDir(ckpt(), 3) + "/master.bin";
  ASSERT_TRUE(fs::exists(master));
  {
    std::fstream f(master, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  const Status corrupt = ExportHuggingFace(ckpt(), -1, out(), "F32");
  EXPECT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.message().find("master.bin"), std::string::npos) << corrupt.message();
  EXPECT_FALSE(fs::exists(out() + "/model.safetensors"));
  EXPECT_FALSE(ExportHuggingFace(ckpt(), -1, out(), "F16").ok());
}

TEST_F(HuggingFaceTest, TheExportReadBackIsTheCheckpointsWeightsAlsoInTheHubsNaming) {
  auto ck = ReadCheckpoint(ckpt(), -1, {});
  ASSERT_TRUE(ck.ok());
  const std::vector<float> master = *CheckpointArray(*ck, "master");
  ASSERT_TRUE(ExportHuggingFace(ckpt(), -1, out(), "F32").ok());
  auto back = MasterFromHf(Model(), out());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, master);  // bit for bit, the padding (zero) included

  // The hub's files: no "transformer." prefix, the tied lm_head and the old mask buffers saved.
  EditTensors([](std::vector<SafetensorsOut>& ts) {
    for (auto& t : ts) t.name = t.name.substr(std::string("transformer.").size());
    SafetensorsOut head = ts[0];
    head.name = "lm_head.weight";
    ts.push_back(head);
    ts.push_back({"h.0.attn.bias", {1, 1, 4, 4}, std::vector<float>(16, 1.0f)});
  });
  fs::remove(out() + "/config.json");
  back = MasterFromHf(Model(), out());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, master);
}

TEST_F(HuggingFaceTest, AMismatchedDirectoryIsRefusedNamingWhatDiffers) {
  ASSERT_TRUE(ExportHuggingFace(ckpt(), -1, out(), "F32").ok());
  ModelConfig wider = Model();
  wider.n_embd = 128;
  ExpectRefused(MasterFromHf(wider, out()), "config.json has n_embd 64, this run's model 128");
  EditConfig([](nlohmann::json& j) { j["model_type"] = "llama"; });
  ExpectRefused(MasterFromHf(Model(), out()), "model_type 'llama'; this run's model is gpt2");
  std::ofstream(out() + "/config.json") << "[1, 2]";
  ExpectRefused(MasterFromHf(Model(), out()), "config.json is not a JSON object");
  fs::remove(out() + "/config.json");
  ExpectRefused(MasterFromHf(wider, out()),
                "tensor 'transformer.wte.weight' is (256, 64), this run's model needs (256, 128)");
  EditTensors([](std::vector<SafetensorsOut>& ts) { ts.pop_back(); });
  ExpectRefused(MasterFromHf(Model(), out()), "no tensor 'transformer.ln_f.bias'");
  ASSERT_TRUE(ExportHuggingFace(ckpt(), -1, out(), "F32").ok());
  EditTensors([](std::vector<SafetensorsOut>& ts) {
    SafetensorsOut head = ts[0];
    head.name = "lm_head.weight";
    head.values[5] += 1.0f;
    ts.push_back(head);
  });
  ExpectRefused(MasterFromHf(Model(), out()), "an untied LM head");
  EditTensors([](std::vector<SafetensorsOut>& ts) {
    ts.back() = {"transformer.h.0.mlp.gate_proj.weight", {2}, {1.0f, 2.0f}};
  });
  ExpectRefused(MasterFromHf(Model(), out()), "tensor 'transformer.h.0.mlp.gate_proj.weight'");
  ExpectRefused(MasterFromHf(Model(), (dir_ / "none").string()), "none/model.safetensors");
}

// train.init_from starts a run from the export's weights: its first loss is the trained model's
// (well below a random start's), and a refused directory stops the run before anything is written.
TEST_F(HuggingFaceTest, ARunStartsFromTheExportsWeights) {
  TrainOptions longer;
  longer.config = test::TinyRunConfig(corpus_, Precision::kFp8, 40);
  longer.checkpoint_dir = (dir_ / "long").string();
  auto trained = RunTraining(longer, DeviceInfo{});
  ASSERT_TRUE(trained.ok());
  ASSERT_TRUE(ExportHuggingFace(longer.checkpoint_dir, -1, out(), "F32").ok());

  TrainOptions fresh;
  fresh.config = test::TinyRunConfig(corpus_, Precision::kFp8, 40);
  fresh.stop_step = 1;
  auto random = RunTraining(fresh, DeviceInfo{});
  fresh.config.train.init_from = out();
  auto from = RunTraining(fresh, DeviceInfo{});
  ASSERT_TRUE(random.ok() && from.ok()) << from.status().ToString();
  EXPECT_LT(from->losses[0], trained->losses.front() - 1.0) << "random start: " << random->losses[0];
  EXPECT_LT(from->losses[0], random->losses[0] - 1.0);

  fresh.config.train.init_from = (dir_ / "none").string();
  fresh.checkpoint_dir = (dir_ / "refused").string();
  auto refused = RunTraining(fresh, DeviceInfo{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("train.init_from"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(fresh.checkpoint_dir));
}

}  // namespace
}  // namespace fp8rt

namespace fp8rt {
namespace {

// model.arch llama: LlamaForCausalLM's tensors (the fused QKV and gate/up split into their
// projections, nothing transposed, the untied lm_head) and config.json; read back bit for bit;
// a gpt2 directory or a shape that differs refused naming it.
TEST_F(HuggingFaceTest, LlamaExportsAsLlamaForCausalLMAndReadsBack) {
  TrainOptions o;
  o.config = test::TinyRunConfig(corpus_, Precision::kFp8, 3);
  ModelConfig& m = o.config.model;
  m.arch = Arch::kLlama, m.n_kv_head = 2, m.ffn_hidden = 96;  // C 64, 4 heads of 16
  o.checkpoint_dir = (dir_ / "llama").string();
  ASSERT_TRUE(RunTraining(o, DeviceInfo{}).ok());
  const std::string hf = (dir_ / "llama-hf").string();
  ASSERT_TRUE(ExportHuggingFace(o.checkpoint_dir, -1, hf, "F32").ok());
  auto ck = ReadCheckpoint(o.checkpoint_dir, -1, {});
  ASSERT_TRUE(ck.ok());
  const std::vector<float> master = *CheckpointArray(*ck, "master");
  auto f = SafetensorsFile::Read(hf + "/model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {256, 64}},
      {"model.layers.1.input_layernorm.weight", {64}},
      {"model.layers.1.self_attn.q_proj.weight", {64, 64}},
      {"model.layers.1.self_attn.k_proj.weight", {32, 64}},
      {"model.layers.1.self_attn.v_proj.weight", {32, 64}},
      {"model.layers.1.self_attn.o_proj.weight", {64, 64}},
      {"model.layers.1.post_attention_layernorm.weight", {64}},
      {"model.layers.1.mlp.gate_proj.weight", {96, 64}},
      {"model.layers.1.mlp.up_proj.weight", {96, 64}},
      {"model.layers.1.mlp.down_proj.weight", {64, 96}},
      {"model.norm.weight", {64}},
      {"lm_head.weight", {256, 64}}};
  EXPECT_EQ(f->tensors().size(), 2 + 2 * 9 + 1u);
  for (const auto& [name, shape] : want) {
    const SafetensorsTensor* t = f->Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  // Layer 1's v_proj row 3 is our QKV row Q + KV + 3; up_proj row 5 is FC row F + 5.
  const gpt_detail::Layout L(m);
  const int64_t C = 64, QKV = 64 + 2 * 32;
  auto v = *f->Floats("model.layers.1.self_attn.v_proj.weight");
  for (int64_t c = 0; c < C; ++c) {
    ASSERT_EQ(v[3 * C + c], master[L.offset[gpt_detail::kQkvW] + (QKV + 64 + 32 + 3) * C + c]);
  }
  auto up = *f->Floats("model.layers.1.mlp.up_proj.weight");
  for (int64_t c = 0; c < C; ++c) {
    ASSERT_EQ(up[5 * C + c], master[L.offset[gpt_detail::kFcW] + (2 * 96 + 96 + 5) * C + c]);
  }
  const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["intermediate_size"], 96);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["rope_theta"], 10000.0);

  auto back = MasterFromHf(m, hf);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, master);
  // A run continues from it.
  TrainOptions next = o;
  next.checkpoint_dir = (dir_ / "llama2").string();
  next.config.train.init_from = hf;
  ASSERT_TRUE(RunTraining(next, DeviceInfo{}).ok());

  // What else the weights' meaning depends on: RoPE's base and scaling, eps, SiLU, the untied head.
  const nlohmann::json exported = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
  const std::pair<std::function<void(nlohmann::json&)>, std::string> edits[] = {
      {[](nlohmann::json& j) { j["rope_theta"] = 500000.0; },
       "rope_theta 500000.0, this run's model.rope_theta 10000"},
      {[](nlohmann::json& j) {
         j.erase("rope_theta");
         j["rope_parameters"]["rope_theta"] = 500000.0;
       },
       "rope_theta 500000.0"},
      {[](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}}; },
       "this model's RoPE has no frequency scaling"},
      {[](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "llama3"; },
       "rope_parameters.rope_type \"llama3\""},
      {[](nlohmann::json& j) { j["rms_norm_eps"] = 1e-6; }, "rms_norm_eps"},
      {[](nlohmann::json& j) { j["hidden_act"] = "gelu"; }, "hidden_act \"gelu\""},
      {[](nlohmann::json& j) { j["tie_word_embeddings"] = true; }, "tie_word_embeddings true"},
      {[](nlohmann::json& j) { j["mlp_bias"] = true; }, "no biases"},
  };
  for (const auto& [change, want] : edits) {
    nlohmann::json j = exported;
    change(j);
    std::ofstream(hf + "/config.json") << j.dump();
    ExpectRefused(MasterFromHf(m, hf), want);
  }
  std::ofstream(hf + "/config.json") << exported.dump();
  ASSERT_TRUE(MasterFromHf(m, hf).ok());

  ModelConfig fewer = m;
  fewer.n_kv_head = 4;
  ExpectRefused(MasterFromHf(fewer, hf), "config.json has num_key_value_heads 2, this run's model 4");
  ExpectRefused(MasterFromHf(m, out() + "-none"), "model.safetensors");
  ASSERT_TRUE(ExportHuggingFace(ckpt(), -1, out(), "F32").ok());  // the fixture's gpt2
  ExpectRefused(MasterFromHf(m, out()), "model_type 'gpt2'; this run's model is llama");
  fs::remove(hf + "/config.json");
  ExpectRefused(MasterFromHf(fewer, hf),
                "tensor 'model.layers.0.self_attn.k_proj.weight' is (32, 64), this run's model "
                "needs (64, 64)");
}

}  // namespace
}  // namespace fp8rt
