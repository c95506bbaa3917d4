// YAML -> RunConfig with strict keys.
#include "runtime/config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace fp8rt {
namespace {

// Reads a mapping, calling the handler registered for each key; unknown keys are an error.
using Handler = std::function<Status(const YAML::Node&, const std::string& path)>;

Status ReadMap(const YAML::Node& node, const std::string& path,
               const std::map<std::string, Handler>& handlers) {
  if (!node.IsMap()) {
    return Status::InvalidArgument(StrCat(path.empty() ? "config" : path, ": expected a mapping"));
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = path.empty() ? key : path + "." + key;
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      std::string allowed;
      for (const auto& h : handlers) allowed += (allowed.empty() ? "" : ", ") + h.first;
      return Status::InvalidArgument(
          StrCat("unknown key '", full, "'; allowed here: ", allowed));
    }
    FP8RT_RETURN_IF_ERROR(it->second(kv.second, full));
  }
  return Status::Ok();
}

template <typename T>
Handler Scalar(T* out) {
  return [out](const YAML::Node& n, const std::string& path) -> Status {
    if (!n.IsScalar()) return Status::InvalidArgument(StrCat(path, ": expected a scalar"));
    try {
      *out = n.as<T>();
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(
          StrCat(path, ": '", n.Scalar(), "' is not a valid ",
                 std::is_same_v<T, bool> ? "boolean" : std::is_integral_v<T> ? "integer"
                 : std::is_floating_point_v<T> ? "number" : "string"));
    }
    return Status::Ok();
  };
}

Status Range(const char* key, double v, double lo, double hi) {
  if (v < lo || v > hi) {
    return Status::InvalidArgument(StrCat(key, " = ", v, " is out of range [", lo, ", ", hi, "]"));
  }
  return Status::Ok();
}

Status OneOf(const char* key, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Status::InvalidArgument(StrCat(key, " = '", v, "' is not one of: ", list));
}

}  // namespace

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp8: return "fp8";
    case Precision::kBf16: return "bf16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& s) {
  if (s == "fp8") return Precision::kFp8;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp32") return Precision::kFp32;
  return Status::InvalidArgument(StrCat("precision '", s, "' is not one of: fp8, bf16, fp32"));
}

int64_t ModelConfig::num_params() const {
  const int64_t C = n_embd, L = n_layer;
  const int64_t Vp = padded_vocab();
  const int64_t per_layer = 2 * C            // ln1
                            + 3 * C * C + 3 * C  // qkv
                            + C * C + C          // attn proj
                            + 2 * C              // ln2
                            + 4 * C * C + 4 * C  // fc
                            + 4 * C * C + C;     // fc proj
  return Vp * C + int64_t{block_size} * C + L * per_layer + 2 * C;
}

Status RunConfig::Validate() const {
  FP8RT_RETURN_IF_ERROR(Range("model.n_layer", model.n_layer, 1, 1024));
  FP8RT_RETURN_IF_ERROR(Range("model.n_embd", model.n_embd, 8, 65536));
  FP8RT_RETURN_IF_ERROR(Range("model.n_head", model.n_head, 1, 1024));
  if (model.n_embd % model.n_head != 0) {
    return Status::InvalidArgument(StrCat("model.n_embd = ", model.n_embd,
                                          " must be a multiple of model.n_head = ", model.n_head));
  }
  FP8RT_RETURN_IF_ERROR(Range("model.block_size", model.block_size, 1, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("model.vocab_size", model.vocab_size, 2, 1 << 24));
  if (data.train_path.empty()) return Status::InvalidArgument("data.train is required");
  FP8RT_RETURN_IF_ERROR(OneOf("data.format", data.format, {"text", "tokens"}));
  if (data.format == "text" && model.vocab_size < 256) {
    return Status::InvalidArgument(StrCat("model.vocab_size = ", model.vocab_size,
                                          " is too small for data.format text (needs >= 256)"));
  }
  FP8RT_RETURN_IF_ERROR(Range("train.batch_size", train.batch_size, 1, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("train.seq_len", train.seq_len, 1, model.block_size));
  FP8RT_RETURN_IF_ERROR(Range("train.grad_accum", train.grad_accum, 1, 1 << 16));
  FP8RT_RETURN_IF_ERROR(Range("train.total_steps", train.total_steps, 1, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.lr", train.lr, 0, 10));
  FP8RT_RETURN_IF_ERROR(Range("train.min_lr", train.min_lr, 0, train.lr));
  FP8RT_RETURN_IF_ERROR(Range("train.warmup_steps", train.warmup_steps, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.weight_decay", train.weight_decay, 0, 10));
  FP8RT_RETURN_IF_ERROR(Range("train.beta1", train.beta1, 0, 0.999999));
  FP8RT_RETURN_IF_ERROR(Range("train.beta2", train.beta2, 0, 0.999999));
  FP8RT_RETURN_IF_ERROR(Range("train.eps", train.eps, 0, 1));
  FP8RT_RETURN_IF_ERROR(Range("train.checkpoint_every", train.checkpoint_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.log_every", train.log_every, 1, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("fp8.history_len", fp8.history_len, 1, 1024));
  FP8RT_RETURN_IF_ERROR(OneOf("fp8.amax_algo", fp8.amax_algo, {"max", "most_recent"}));
  FP8RT_RETURN_IF_ERROR(Range("fp8.margin", fp8.margin, 0, 32));
  FP8RT_RETURN_IF_ERROR(OneOf("fp8.recipe", fp8.recipe, {"hybrid", "e4m3"}));
  FP8RT_RETURN_IF_ERROR(Range("fp8.telemetry_every", fp8.telemetry_every, 0, 1e9));
  return Status::Ok();
}

Result<RunConfig> ParseRunConfig(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(StrCat("config is not valid YAML: ", e.what()));
  }
  RunConfig c;
  std::string precision = "fp8";
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.train;
  auto& f = c.fp8;
  const std::map<std::string, Handler> model = {
      {"n_layer", Scalar(&m.n_layer)},       {"n_embd", Scalar(&m.n_embd)},
      {"n_head", Scalar(&m.n_head)},         {"block_size", Scalar(&m.block_size)},
      {"vocab_size", Scalar(&m.vocab_size)},
  };
  const std::map<std::string, Handler> data = {
      {"train", Scalar(&d.train_path)}, {"val", Scalar(&d.val_path)}, {"format", Scalar(&d.format)}};
  const std::map<std::string, Handler> train = {
      {"batch_size", Scalar(&t.batch_size)},
      {"seq_len", Scalar(&t.seq_len)},
      {"grad_accum", Scalar(&t.grad_accum)},
      {"total_steps", Scalar(&t.total_steps)},
      {"lr", Scalar(&t.lr)},
      {"min_lr", Scalar(&t.min_lr)},
      {"warmup_steps", Scalar(&t.warmup_steps)},
      {"weight_decay", Scalar(&t.weight_decay)},
      {"beta1", Scalar(&t.beta1)},
      {"beta2", Scalar(&t.beta2)},
      {"eps", Scalar(&t.eps)},
      {"grad_clip", Scalar(&t.grad_clip)},
      {"seed", Scalar(&t.seed)},
      {"checkpoint_every", Scalar(&t.checkpoint_every)},
      {"log_every", Scalar(&t.log_every)},
  };
  const std::map<std::string, Handler> fp8_layers = {
      {"qkv", Scalar(&f.qkv)},         {"attn_proj", Scalar(&f.attn_proj)},
      {"fc", Scalar(&f.fc)},           {"fc_proj", Scalar(&f.fc_proj)},
      {"lm_head", Scalar(&f.lm_head)},
  };
  const std::map<std::string, Handler> fp8 = {
      {"history_len", Scalar(&f.history_len)},
      {"amax_algo", Scalar(&f.amax_algo)},
      {"margin", Scalar(&f.margin)},
      {"recipe", Scalar(&f.recipe)},
      {"telemetry_every", Scalar(&f.telemetry_every)},
      {"first_step_current", Scalar(&f.first_step_current)},
      {"layers", [&](const YAML::Node& n, const std::string& p) { return ReadMap(n, p, fp8_layers); }},
  };
  auto sub = [](const std::map<std::string, Handler>& h) {
    return [&h](const YAML::Node& n, const std::string& p) { return ReadMap(n, p, h); };
  };
  const std::map<std::string, Handler> top = {
      {"name", Scalar(&c.name)},   {"model", sub(model)}, {"data", sub(data)},
      {"train", sub(train)},       {"fp8", sub(fp8)},     {"precision", Scalar(&precision)},
  };
  if (root.IsNull()) return Status::InvalidArgument("config is empty");
  FP8RT_RETURN_IF_ERROR(ReadMap(root, "", top));
  FP8RT_ASSIGN_OR_RETURN(c.precision, ParsePrecision(precision));
  FP8RT_RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<RunConfig> LoadRunConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(StrCat("cannot open config file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = ParseRunConfig(ss.str());
  if (!r.ok()) return Status(r.status().code(), StrCat(path, ": ", r.status().message()));
  // Data paths are relative to the config file's directory.
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  for (std::string* p : {&r->data.train_path, &r->data.val_path}) {
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (base / *p).string();
  }
  return r;
}

}  // namespace fp8rt
