// Hugging Face in and out: our GPT-2 as transformers' GPT2LMHeadModel, our llama as
// LlamaForCausalLM, and back (runtime/huggingface.h).
#include "runtime/huggingface.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_file.h"
#include "common/read_file.h"
#include "runtime/checkpoint.h"
#include "runtime/gpt_layout.h"
#include "runtime/train_checkpoint.h"

namespace fp8rt {

std::vector<int64_t> HfEntry::HfShape() const {
  if (vector) return {cols};
  return transpose ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
}

namespace {

// LlamaForCausalLM's tensors: nn.Linear keeps (out, in) as we do, so nothing is transposed; our
// fused QKV and gate/up weights are row blocks of transformers' separate projections.
std::vector<HfEntry> LlamaHfMap(const ModelConfig& m) {
  using namespace gpt_detail;  // NOLINT: the layout's parameter names
  const Layout L(m);
  const int64_t C = m.n_embd, F = m.ffn(), Q = C, KV = int64_t{m.kv_heads()} * m.head_size();
  std::vector<HfEntry> e;
  auto mat = [&](std::string name, int64_t off, int64_t rows, int64_t cols) {
    e.push_back({std::move(name), off, rows, cols, false, false});
  };
  auto vec = [&](std::string name, int64_t off, int64_t n) {
    e.push_back({std::move(name), off, 1, n, false, true});
  };
  mat("model.embed_tokens.weight", L.offset[kWte], m.vocab_size, C);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string h = StrCat("model.layers.", l, ".");
    const int64_t qkv = L.offset[kQkvW] + l * (Q + 2 * KV) * C, fc = L.offset[kFcW] + l * 2 * F * C;
    vec(h + "input_layernorm.weight", L.offset[kLn1W] + l * C, C);
    mat(h + "self_attn.q_proj.weight", qkv, Q, C);
    mat(h + "self_attn.k_proj.weight", qkv + Q * C, KV, C);
    mat(h + "self_attn.v_proj.weight", qkv + (Q + KV) * C, KV, C);
    mat(h + "self_attn.o_proj.weight", L.offset[kAttProjW] + l * C * Q, C, Q);
    vec(h + "post_attention_layernorm.weight", L.offset[kLn2W] + l * C, C);
    mat(h + "mlp.gate_proj.weight", fc, F, C);
    mat(h + "mlp.up_proj.weight", fc + F * C, F, C);
    mat(h + "mlp.down_proj.weight", L.offset[kFcProjW] + l * C * F, C, F);
  }
  vec("model.norm.weight", L.offset[kLnfW], C);
  mat("lm_head.weight", L.offset[kLmHeadW], m.vocab_size, C);
  return e;
}

// What else a LlamaForCausalLM config.json must agree on for its weights to mean what they meant:
// the RoPE base and no frequency scaling, RMSNorm's eps, SiLU, an untied LM head.
Status CheckLlamaHfConfig(const ModelConfig& m, const nlohmann::json& cfg, const std::string& where) {
  auto refuse = [&](const std::string& what) {
    return Status::InvalidArgument(StrCat(where, ": config.json has ", what));
  };
  const nlohmann::json* rp = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object()
                                 ? &cfg["rope_parameters"]
                                 : nullptr;
  const nlohmann::json* theta = cfg.contains("rope_theta") ? &cfg["rope_theta"]
                                : rp != nullptr && rp->contains("rope_theta") ? &(*rp)["rope_theta"]
                                                                              : nullptr;
  if (theta != nullptr && (!theta->is_number() ||
                           std::fabs(theta->get<double>() - m.rope_theta) > 1e-6 * m.rope_theta)) {
    return refuse(StrCat("rope_theta ", theta->dump(), ", this run's model.rope_theta ",
                         m.rope_theta));
  }
  if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
    return refuse(StrCat("rope_scaling ", cfg["rope_scaling"].dump(),
                         "; this model's RoPE has no frequency scaling"));
  }
  if (rp != nullptr && rp->contains("rope_type") && (*rp)["rope_type"] != "default") {
    return refuse(StrCat("rope_parameters.rope_type ", (*rp)["rope_type"].dump(),
                         "; this model's RoPE is the default one"));
  }
  if (cfg.contains("rms_norm_eps") &&
      (!cfg["rms_norm_eps"].is_number() ||
       std::fabs(cfg["rms_norm_eps"].get<double>() - 1e-5) > 1e-12)) {
    return refuse(StrCat("rms_norm_eps ", cfg["rms_norm_eps"].dump(), "; this model's is 1e-5"));
  }
  if (cfg.contains("hidden_act") && cfg["hidden_act"] != "silu") {
    return refuse(StrCat("hidden_act ", cfg["hidden_act"].dump(), "; this model's MLP is SwiGLU"));
  }
  if (cfg.contains("tie_word_embeddings") && cfg["tie_word_embeddings"] == true) {
    return refuse("tie_word_embeddings true; this model's LM head is untied (its own "
                  "lm_head.weight)");
  }
  if ((cfg.contains("attention_bias") && cfg["attention_bias"] == true) ||
      (cfg.contains("mlp_bias") && cfg["mlp_bias"] == true)) {
    return refuse("attention_bias or mlp_bias true; this model has no biases");
  }
  return Status::Ok();
}

}  // namespace

std::vector<HfEntry> HfMap(const ModelConfig& m) {
  if (m.llama()) return LlamaHfMap(m);
  using namespace gpt_detail;  // NOLINT: the layout's parameter names
  const Layout L(m);
  const int64_t C = m.n_embd, F = m.ffn();
  std::vector<HfEntry> e;
  auto mat = [&](std::string name, int64_t off, int64_t rows, int64_t cols, bool transpose) {
    e.push_back({std::move(name), off, rows, cols, transpose, false});
  };
  auto vec = [&](std::string name, int64_t off, int64_t n) {
    e.push_back({std::move(name), off, 1, n, false, true});
  };
  mat("transformer.wte.weight", L.offset[kWte], m.vocab_size, C, false);
  mat("transformer.wpe.weight", L.offset[kWpe], m.block_size, C, false);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string h = StrCat("transformer.h.", l, ".");
    vec(h + "ln_1.weight", L.offset[kLn1W] + l * C, C);
    vec(h + "ln_1.bias", L.offset[kLn1B] + l * C, C);
    mat(h + "attn.c_attn.weight", L.offset[kQkvW] + l * 3 * C * C, 3 * C, C, true);
    vec(h + "attn.c_attn.bias", L.offset[kQkvB] + l * 3 * C, 3 * C);
    mat(h + "attn.c_proj.weight", L.offset[kAttProjW] + l * C * C, C, C, true);
    vec(h + "attn.c_proj.bias", L.offset[kAttProjB] + l * C, C);
    vec(h + "ln_2.weight", L.offset[kLn2W] + l * C, C);
    vec(h + "ln_2.bias", L.offset[kLn2B] + l * C, C);
    mat(h + "mlp.c_fc.weight", L.offset[kFcW] + l * F * C, F, C, true);
    vec(h + "mlp.c_fc.bias", L.offset[kFcB] + l * F, F);
    mat(h + "mlp.c_proj.weight", L.offset[kFcProjW] + l * F * C, C, F, true);
    vec(h + "mlp.c_proj.bias", L.offset[kFcProjB] + l * C, C);
  }
  vec("transformer.ln_f.weight", L.offset[kLnfW], C);
  vec("transformer.ln_f.bias", L.offset[kLnfB], C);
  return e;
}

Result<std::vector<SafetensorsOut>> HfTensors(const ModelConfig& m,
                                                  const std::vector<float>& master) {
  const gpt_detail::Layout L(m);
  if (master.size() != static_cast<size_t>(L.total)) {
    return Status::InvalidArgument(StrCat("export: the master weights have ", master.size(),
                                          " values, a ", m.n_layer, " x ", m.n_embd,
                                          " model has ", L.total));
  }
  std::vector<SafetensorsOut> out;
  for (const HfEntry& e : HfMap(m)) {
    SafetensorsOut t{e.name, e.HfShape(), std::vector<float>(static_cast<size_t>(e.rows * e.cols))};
    for (int64_t r = 0; r < e.rows; ++r) {
      for (int64_t c = 0; c < e.cols; ++c) {
        t.values[e.transpose ? c * e.rows + r : r * e.cols + c] = master[e.offset + r * e.cols + c];
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<float>> MasterFromHf(const ModelConfig& m, const std::string& dir) {
  const std::string where = StrCat("train.init_from ", dir);
  // config.json, when there, must describe this model.
  auto cfg_text = ReadRegularFile(dir + "/config.json", "train.init_from's config.json",
                                  {.max_bytes = size_t{1} << 24});
  if (!cfg_text.ok() && cfg_text.status().code() != StatusCode::kNotFound) {
    return cfg_text.status();
  }
  if (cfg_text.ok()) {
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(*cfg_text);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(StrCat(where, ": config.json is not JSON (", e.what(), ")"));
    }
    if (!cfg.is_object()) {
      return Status::InvalidArgument(StrCat(where, ": config.json is not a JSON object"));
    }
    const std::string type = cfg.contains("model_type") && cfg["model_type"].is_string()
                                 ? cfg["model_type"].get<std::string>()
                                 : std::string("(none)");
    if (type != ArchName(m.arch)) {
      return Status::InvalidArgument(StrCat(where, ": config.json says model_type '", type,
                                            "'; this run's model is ", ArchName(m.arch)));
    }
    struct Dim {
      const char* key;
      int ours;
    };
    const std::vector<Dim> dims =
        m.llama() ? std::vector<Dim>{{"num_hidden_layers", m.n_layer},
                                     {"hidden_size", m.n_embd},
                                     {"num_attention_heads", m.n_head},
                                     {"num_key_value_heads", m.kv_heads()},
                                     {"intermediate_size", m.ffn()},
                                     {"vocab_size", m.vocab_size}}
                  : std::vector<Dim>{{"n_layer", m.n_layer}, {"n_embd", m.n_embd},
                                     {"n_head", m.n_head}, {"vocab_size", m.vocab_size},
                                     {"n_positions", m.block_size}};
    for (const auto& d : dims) {
      if (cfg.contains(d.key) && cfg[d.key] != d.ours) {
        return Status::InvalidArgument(StrCat(where, ": config.json has ", d.key, " ",
                                              cfg[d.key].dump(), ", this run's model ", d.ours));
      }
    }
    if (m.llama()) FP8RT_RETURN_IF_ERROR(CheckLlamaHfConfig(m, cfg, where));
  }
  auto read = SafetensorsFile::Read(dir + "/model.safetensors");
  if (!read.ok()) return Status(read.status().code(), StrCat(where, ": ", read.status().message()));
  const SafetensorsFile& f = *read;
  const gpt_detail::Layout L(m);
  std::vector<float> master(static_cast<size_t>(L.total), 0.0f);
  std::set<std::string> used;  // every tensor must be one of the model's, or a known extra
  auto find = [&](const std::string& name) -> const SafetensorsTensor* {
    const SafetensorsTensor* t = f.Find(name);
    if (t == nullptr && name.rfind("transformer.", 0) == 0) t = f.Find(name.substr(12));
    return t;
  };
  for (const HfEntry& e : HfMap(m)) {
    const SafetensorsTensor* t = find(e.name);
    if (t == nullptr) {
      return Status::InvalidArgument(StrCat(where, ": model.safetensors has no tensor '", e.name,
                                            "' (this run's model needs it)"));
    }
    used.insert(t->name);
    if (t->shape != e.HfShape()) {
      auto shape = [](const std::vector<int64_t>& v) {
        std::string s = "(";
        for (size_t i = 0; i < v.size(); ++i) s += StrCat(i ? ", " : "", v[i]);
        return s + ")";
      };
      return Status::InvalidArgument(StrCat(where, ": tensor '", t->name, "' is ", shape(t->shape),
                                            ", this run's model needs ", shape(e.HfShape())));
    }
    FP8RT_ASSIGN_OR_RETURN(const std::vector<float> v, f.Floats(t->name));
    for (int64_t r = 0; r < e.rows; ++r) {
      for (int64_t c = 0; c < e.cols; ++c) {
        master[e.offset + r * e.cols + c] = v[e.transpose ? c * e.rows + r : r * e.cols + c];
      }
    }
  }
  for (const SafetensorsTensor& t : f.tensors()) {
    if (used.count(t.name)) continue;
    const bool mask = t.name.size() > 10 && (t.name.ends_with(".attn.bias") ||
                                             t.name.ends_with(".attn.masked_bias"));
    if (mask) continue;  // the causal-mask buffers old transformers versions saved
    if (t.name == "lm_head.weight" && !m.llama()) {
      // Tied to wte in GPT-2: accepted only when it is wte.
      FP8RT_ASSIGN_OR_RETURN(const std::vector<float> head, f.Floats(t.name));
      FP8RT_ASSIGN_OR_RETURN(const std::vector<float> wte,
                             f.Floats(find("transformer.wte.weight")->name));
      if (head != wte) {
        return Status::InvalidArgument(StrCat(where, ": lm_head.weight differs from wte: an untied "
                                              "LM head, which GPT-2 (and this model) does not have"));
      }
      continue;
    }
    if (m.llama() && t.name.ends_with(".rotary_emb.inv_freq")) continue;  // old files' buffer
    return Status::InvalidArgument(StrCat(where, ": model.safetensors has tensor '", t.name,
                                          "', which a ", m.llama() ? "llama" : "GPT-2",
                                          " of this shape does not"));
  }
  return master;
}

std::string HfConfig(const ModelConfig& m, const std::string& dtype) {
  if (m.llama()) {
    nlohmann::ordered_json j = {
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"vocab_size", m.vocab_size},
        {"hidden_size", m.n_embd},
        {"intermediate_size", m.ffn()},
        {"num_hidden_layers", m.n_layer},
        {"num_attention_heads", m.n_head},
        {"num_key_value_heads", m.kv_heads()},
        {"head_dim", m.head_size()},
        {"hidden_act", "silu"},
        {"max_position_embeddings", m.block_size},
        {"rms_norm_eps", 1e-5},
        // transformers 4 reads rope_theta, 5 rope_parameters (and converts rope_theta).
        {"rope_theta", m.rope_theta},
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", m.rope_theta}}},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"mlp_bias", false},
        {"tie_word_embeddings", false},
        {"initializer_range", 0.02},
        {"use_cache", true},
        {"torch_dtype", dtype == "BF16" ? "bfloat16" : "float32"},
    };
    return j.dump(2) + "\n";
  }
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", m.vocab_size},
      {"n_positions", m.block_size},
      {"n_ctx", m.block_size},
      {"n_embd", m.n_embd},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"n_inner", m.ffn_hidden > 0 ? nlohmann::ordered_json(m.ffn_hidden) : nullptr},
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
  FP8RT_ASSIGN_OR_RETURN(const std::vector<SafetensorsOut> tensors, HfTensors(m, master));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::IOError(StrCat("--export-hf: cannot create ", out_dir, ": ", ec.message()));
  FP8RT_RETURN_IF_ERROR(WriteSafetensors(
      out_dir + "/model.safetensors", tensors, dtype,
      {{"format", "pt"}, {"fp8rt.checkpoint_step", std::to_string(ck.step)}}));
  return WriteFileAtomic(out_dir + "/config.json", HfConfig(m, dtype));
}

}  // namespace fp8rt
