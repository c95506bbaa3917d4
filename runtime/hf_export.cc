// fp8train --export-hf: our GPT-2 as transformers' GPT2LMHeadModel (runtime/hf_export.h).
#include "runtime/hf_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "runtime/checkpoint.h"
#include "runtime/gpt_layout.h"
#include "runtime/train_checkpoint.h"

namespace fp8rt {

Result<std::vector<SafetensorsOut>> Gpt2HfTensors(const ModelConfig& m,
                                                  const std::vector<float>& master) {
  using namespace gpt_detail;  // NOLINT: the layout's parameter names
  const Layout L(m);
  if (master.size() != static_cast<size_t>(L.total)) {
    return Status::InvalidArgument(StrCat("export: the master weights have ", master.size(),
                                          " values, a ", m.n_layer, " x ", m.n_embd,
                                          " model has ", L.total));
  }
  const int64_t C = m.n_embd;
  std::vector<SafetensorsOut> out;
  // rows x cols starting at `from`, as is or transposed (Conv1D's (in, out)).
  auto take = [&](const std::string& name, int64_t from, int64_t rows, int64_t cols,
                  bool transpose) {
    SafetensorsOut t;
    t.name = name;
    t.shape = transpose ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
    if (rows == 1) t.shape = {cols};
    t.values.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        t.values[transpose ? c * rows + r : r * cols + c] = master[from + r * cols + c];
      }
    }
    out.push_back(std::move(t));
  };
  take("transformer.wte.weight", L.offset[kWte], m.vocab_size, C, false);
  take("transformer.wpe.weight", L.offset[kWpe], m.block_size, C, false);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string h = StrCat("transformer.h.", l, ".");
    take(h + "ln_1.weight", L.offset[kLn1W] + l * C, 1, C, false);
    take(h + "ln_1.bias", L.offset[kLn1B] + l * C, 1, C, false);
    take(h + "attn.c_attn.weight", L.offset[kQkvW] + l * 3 * C * C, 3 * C, C, true);
    take(h + "attn.c_attn.bias", L.offset[kQkvB] + l * 3 * C, 1, 3 * C, false);
    take(h + "attn.c_proj.weight", L.offset[kAttProjW] + l * C * C, C, C, true);
    take(h + "attn.c_proj.bias", L.offset[kAttProjB] + l * C, 1, C, false);
    take(h + "ln_2.weight", L.offset[kLn2W] + l * C, 1, C, false);
    take(h + "ln_2.bias", L.offset[kLn2B] + l * C, 1, C, false);
    take(h + "mlp.c_fc.weight", L.offset[kFcW] + l * 4 * C * C, 4 * C, C, true);
    take(h + "mlp.c_fc.bias", L.offset[kFcB] + l * 4 * C, 1, 4 * C, false);
    take(h + "mlp.c_proj.weight", L.offset[kFcProjW] + l * 4 * C * C, C, 4 * C, true);
    take(h + "mlp.c_proj.bias", L.offset[kFcProjB] + l * C, 1, C, false);
  }
  take("transformer.ln_f.weight", L.offset[kLnfW], 1, C, false);
  take("transformer.ln_f.bias", L.offset[kLnfB], 1, C, false);
  return out;
}

std::string Gpt2HfConfig(const ModelConfig& m, const std::string& dtype) {
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", m.vocab_size},
      {"n_positions", m.block_size},
      {"n_ctx", m.block_size},
      {"n_embd", m.n_embd},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"torch_dtype", dtype == "BF16" ? "bfloat16" : "float32"},
  };
  return j.dump(2) + "\n";
}

Status ExportHuggingFace(const std::string& checkpoint_dir, int64_t step,
                         const std::string& out_dir, const std::string& dtype) {
  if (dtype != "F32" && dtype != "BF16") {
    return Status::InvalidArgument(StrCat("--export-hf: dtype ", dtype, "; fp32 or bf16"));
  }
  FP8RT_ASSIGN_OR_RETURN(const Checkpoint ck, ReadCheckpoint(checkpoint_dir, step, {}));
  FP8RT_ASSIGN_OR_RETURN(const ModelConfig m, CheckpointModelConfig(ck));
  FP8RT_ASSIGN_OR_RETURN(const std::vector<float> master, CheckpointArray(ck, "master"));
  FP8RT_ASSIGN_OR_RETURN(const std::vector<SafetensorsOut> tensors, Gpt2HfTensors(m, master));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::IOError(StrCat("--export-hf: cannot create ", out_dir, ": ", ec.message()));
  FP8RT_RETURN_IF_ERROR(WriteSafetensors(
      out_dir + "/model.safetensors", tensors, dtype,
      {{"format", "pt"}, {"fp8rt.checkpoint_step", std::to_string(ck.step)}}));
  return WriteFileAtomic(out_dir + "/config.json", Gpt2HfConfig(m, dtype));
}

}  // namespace fp8rt
