// YAML -> RunConfig through the strict reader (common/strict_yaml.h), then range checks.
#include "common/train_config.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/read_file.h"
#include "common/strict_yaml.h"

namespace fp8rt {
namespace {

Status Range(const char* key, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) {  // NaN too
    return Status::InvalidArgument(StrCat(key, " = ", v, " is out of range [", lo, ", ", hi, "]"));
  }
  return Status::Ok();
}

// A string naming one of `values` (by `name`), stored as the enum.
template <typename E>
strict::Reader Enum(E* out, std::vector<E> values, const char* (*name)(E)) {
  return [out, values, name](const strict::Value& v, const std::string& path) -> Status {
    std::vector<std::string> names;
    for (E e : values) names.push_back(name(e));
    std::string s;
    FP8RT_RETURN_IF_ERROR(strict::OneOf(&s, names)(v, path));
    for (E e : values) {
      if (s == name(e)) *out = e;
    }
    return Status::Ok();
  };
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

int64_t ModelConfig::num_params() const {
  const int64_t C = n_embd, L = n_layer, F = ffn(), HS = head_size();
  const int64_t Vp = padded_vocab(), QKV = (int64_t{n_head} + 2 * kv_heads()) * HS;
  if (llama()) {
    const int64_t per_layer = C            // ln1
                              + QKV * C    // qkv
                              + C * C      // attn proj
                              + C          // ln2
                              + 2 * F * C  // gate/up
                              + F * C;     // down
    return 2 * Vp * C + L * per_layer + C;
  }
  const int64_t per_layer = 2 * C                // ln1
                            + 3 * C * C + 3 * C  // qkv
                            + C * C + C          // attn proj
                            + 2 * C              // ln2
                            + F * C + F          // fc
                            + F * C + C;         // fc proj
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
  FP8RT_RETURN_IF_ERROR(Range("model.n_kv_head", model.n_kv_head, 0, model.n_head));
  if (model.kv_heads() < 1 || model.n_head % model.kv_heads() != 0) {
    return Status::InvalidArgument(StrCat("model.n_kv_head = ", model.n_kv_head,
                                          " must divide model.n_head = ", model.n_head,
                                          " (each key/value head serves n_head / n_kv_head "
                                          "query heads)"));
  }
  if (!model.llama() && model.kv_heads() != model.n_head) {
    return Status::InvalidArgument(StrCat("model.n_kv_head = ", model.n_kv_head,
                                          ": grouped-query attention needs model.arch: llama "
                                          "(gpt2 has one key/value head per query head)"));
  }
  FP8RT_RETURN_IF_ERROR(Range("model.ffn_hidden", model.ffn_hidden, 0, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("model.rope_theta", model.rope_theta, 1, 1e9));
  if (model.llama() && (model.head_size() % 2 != 0 || model.head_size() > 256)) {
    return Status::InvalidArgument(
        StrCat("model.arch llama: the head size n_embd / n_head = ", model.head_size(),
               " must be even and at most 256 (rotary embeddings)"));
  }
  FP8RT_RETURN_IF_ERROR(Range("model.block_size", model.block_size, 1, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("model.vocab_size", model.vocab_size, 2, 1 << 24));
  if (data.train.empty()) return Status::InvalidArgument("data.train is required");
  for (const auto* list : {&data.train, &data.val}) {
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i].empty()) {
        return Status::InvalidArgument(StrCat(list == &data.train ? "data.train" : "data.val", "[",
                                              i,
                                              "] is empty; name a file, a directory or "
                                              "a glob"));
      }
    }
  }
  FP8RT_RETURN_IF_ERROR(OneOf("data.format", data.format, {"text", "tokens", "megatron"}));
  FP8RT_RETURN_IF_ERROR(OneOf("data.on_change", data.on_change, {"refuse", "new_epoch"}));
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
  FP8RT_RETURN_IF_ERROR(OneOf("train.moments_dtype", train.moments_dtype, {"fp32", "bf16"}));
  FP8RT_RETURN_IF_ERROR(Range("train.checkpoint_every", train.checkpoint_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(
      OneOf("train.on_checkpoint_error", train.on_checkpoint_error, {"stop", "continue"}));
  FP8RT_RETURN_IF_ERROR(Range("train.keep_checkpoints", train.keep_checkpoints, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(
      Range("train.keep_checkpoints_every", train.keep_checkpoints_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.log_every", train.log_every, 1, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.eval_every", train.eval_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.eval_tokens", train.eval_tokens, 1, 1e12));
  FP8RT_RETURN_IF_ERROR(Range("train.sample_every", train.sample_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.sample_tokens", train.sample_tokens, 1, 1e6));
  FP8RT_RETURN_IF_ERROR(Range("fp8.history_len", fp8.scaling.history_len, 1, 1024));
  FP8RT_RETURN_IF_ERROR(Range("fp8.margin", fp8.scaling.margin, 0, 32));
  FP8RT_RETURN_IF_ERROR(Range("fp8.telemetry_every", fp8.telemetry_every, 0, 1e9));
  if (fp8.attention && fp8.mode != ScalingMode::kDelayed) {
    return Status::InvalidArgument(
        StrCat("fp8.attention needs fp8.scaling: delayed (cuDNN's FP8 attention takes the scales "
               "of its outputs before it runs), not ", ScalingModeName(fp8.mode)));
  }
  FP8RT_RETURN_IF_ERROR(Range("parallel.dp", parallel.dp, 0, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("parallel.tp", parallel.tp, 1, 1024));
  FP8RT_RETURN_IF_ERROR(Range("parallel.shard_group", parallel.shard_group, 0, 1 << 20));
  if (parallel.keep_gathered_weights && parallel.zero.stage != 3) {
    return Status::InvalidArgument(
        "parallel.keep_gathered_weights keeps ZeRO-3's gathered layers; it needs parallel.zero: 3");
  }
  if (parallel.shard_group > 0 && !parallel.zero) {
    return Status::InvalidArgument(
        StrCat("parallel.shard_group = ", parallel.shard_group,
               " shards the model's state within groups of ranks, which needs parallel.zero "
               "(true or 3)"));
  }
  if (model.n_head % parallel.tp != 0) {
    return Status::InvalidArgument(StrCat("parallel.tp = ", parallel.tp,
                                          " does not divide model.n_head = ", model.n_head,
                                          " (tensor parallelism splits the attention heads)"));
  }
  if (model.kv_heads() % parallel.tp != 0) {
    return Status::InvalidArgument(StrCat("parallel.tp = ", parallel.tp,
                                          " does not divide model.n_kv_head = ", model.kv_heads(),
                                          " (tensor parallelism splits the key/value heads)"));
  }
  if (model.ffn() % parallel.tp != 0) {
    return Status::InvalidArgument(StrCat("parallel.tp = ", parallel.tp,
                                          " does not divide model.ffn_hidden = ", model.ffn(),
                                          " (tensor parallelism splits the MLP)"));
  }
  FP8RT_RETURN_IF_ERROR(Range("parallel.bucket_mb", parallel.bucket_mb, 0.001, 1 << 16));
  FP8RT_RETURN_IF_ERROR(
      Range("parallel.collective_timeout_s", parallel.collective_timeout_s, 1, 1e7));
  FP8RT_RETURN_IF_ERROR(Range("parallel.scale_check_every", parallel.scale_check_every, 0, 1e9));
  if (parallel.grad_reduce_dtype != "fp32" && parallel.grad_reduce_dtype != "bf16") {
    return Status::InvalidArgument(StrCat("parallel.grad_reduce_dtype: '",
                                          parallel.grad_reduce_dtype,
                                          "' is not one of: fp32, bf16"));
  }
  if (parallel.cpu_backend != "auto" && parallel.cpu_backend != "mpi" &&
      parallel.cpu_backend != "gloo") {
    return Status::InvalidArgument(StrCat("parallel.cpu_backend: '", parallel.cpu_backend,
                                          "' is not one of: auto, mpi, gloo"));
  }
  return Status::Ok();
}

namespace {

// The one list of a config's keys, walked by the reader (ConfigReader) and the writer
// (ConfigWriter) alike: a key is read exactly when it is written. `v` gets Field(key, &member)
// for every value and Section(key, body) for every mapping.
template <typename V>
void Schema(RunConfig& c, V& v) {
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.train;
  auto& f = c.fp8;
  auto& par = c.parallel;
  v.Field("name", &c.name);
  v.Field("precision", &c.precision);
  v.Section("model", [&] {
    v.Field("n_layer", &m.n_layer);
    v.Field("n_embd", &m.n_embd);
    v.Field("n_head", &m.n_head);
    v.Field("block_size", &m.block_size);
    v.Field("vocab_size", &m.vocab_size);
    v.Field("arch", &m.arch);
    v.Field("n_kv_head", &m.n_kv_head);
    v.Field("ffn_hidden", &m.ffn_hidden);
    v.Field("rope_theta", &m.rope_theta);
  });
  v.Section("data", [&] {
    v.Field("train", &d.train);
    v.Field("val", &d.val);
    v.Field("format", &d.format);
    v.Field("on_change", &d.on_change);
    v.Field("tokenizer", &d.tokenizer);
  });
  v.Section("train", [&] {
    v.Field("batch_size", &t.batch_size);
    v.Field("seq_len", &t.seq_len);
    v.Field("grad_accum", &t.grad_accum);
    v.Field("total_steps", &t.total_steps);
    v.Field("lr", &t.lr);
    v.Field("min_lr", &t.min_lr);
    v.Field("warmup_steps", &t.warmup_steps);
    v.Field("weight_decay", &t.weight_decay);
    v.Field("beta1", &t.beta1);
    v.Field("beta2", &t.beta2);
    v.Field("eps", &t.eps);
    v.Field("moments_dtype", &t.moments_dtype);
    v.Field("grad_clip", &t.grad_clip);
    v.Field("seed", &t.seed);
    v.Field("checkpoint_every", &t.checkpoint_every);
    v.Field("async_checkpoint", &t.async_checkpoint);
    v.Field("on_checkpoint_error", &t.on_checkpoint_error);
    v.Field("keep_checkpoints", &t.keep_checkpoints);
    v.Field("keep_checkpoints_every", &t.keep_checkpoints_every);
    v.Field("log_every", &t.log_every);
    v.Field("eval_every", &t.eval_every);
    v.Field("eval_tokens", &t.eval_tokens);
    v.Field("init_from", &t.init_from);
    v.Field("sample_every", &t.sample_every);
    v.Field("sample_tokens", &t.sample_tokens);
    v.Field("recompute", &t.recompute);
    v.Field("share_gradient_memory", &t.share_gradient_memory);
  });
  v.Section("fp8", [&] {
    v.Field("scaling", &f.mode);
    v.Field("history_len", &f.scaling.history_len);
    v.Field("amax_algo", &f.scaling.algo);
    v.Field("margin", &f.scaling.margin);
    v.Field("recipe", &f.scaling.recipe);
    v.Field("telemetry_every", &f.telemetry_every);
    v.Field("first_step_current", &f.first_step_current);
    v.Field("keep_weight_transpose", &f.keep_weight_transpose);
    v.Field("cache_weights", &f.cache_weights);
    v.Field("gelu_input_fp8", &f.gelu_input_fp8);
    v.Field("attention", &f.attention);
    v.Section("layers", [&] {
      v.Field("qkv", &f.qkv);
      v.Field("attn_proj", &f.attn_proj);
      v.Field("fc", &f.fc);
      v.Field("fc_proj", &f.fc_proj);
      v.Field("lm_head", &f.lm_head);
    });
  });
  v.Section("parallel", [&] {
    v.Field("dp", &par.dp);
    v.Field("tp", &par.tp);
    v.Field("zero", &par.zero);
    v.Field("shard_group", &par.shard_group);
    v.Field("keep_gathered_weights", &par.keep_gathered_weights);
    v.Field("grad_reduce_dtype", &par.grad_reduce_dtype);
    v.Field("sparse_embedding_grad", &par.sparse_embedding_grad);
    v.Field("bucket_mb", &par.bucket_mb);
    v.Field("collective_timeout_s", &par.collective_timeout_s);
    v.Field("cpu_backend", &par.cpu_backend);
    v.Field("scale_check_every", &par.scale_check_every);
  });
}

// Schema -> strict readers, one list per mapping.
class ConfigReader {
 public:
  using Readers = std::vector<std::pair<std::string, strict::Reader>>;
  template <typename T>
  void Field(const char* key, T* out) {
    frames_.back().emplace_back(key, ReaderFor(out));
  }
  void Section(const char* key, const std::function<void()>& body) {
    frames_.emplace_back();
    body();
    Readers readers = std::move(frames_.back());
    frames_.pop_back();
    frames_.back().emplace_back(
        key, [readers = std::move(readers)](const strict::Value& v, const std::string& path) {
          return strict::ReadFields(v, path, readers);
        });
  }
  const Readers& top() const { return frames_.front(); }

 private:
  static strict::Reader ReaderFor(std::string* out) { return strict::String(out); }
  // A list of strings, or one string for a list of one.
  static strict::Reader ReaderFor(std::vector<std::string>* out) {
    return [out](const strict::Value& v, const std::string& path) -> Status {
      out->clear();
      if (v.kind != strict::Kind::kSeq) {
        std::string one;
        FP8RT_RETURN_IF_ERROR(strict::String(&one)(v, path));
        out->push_back(std::move(one));
        return Status::Ok();
      }
      if (v.items.size() > kMaxListEntries) {
        return Status::InvalidArgument(StrCat(path, " lists ", v.items.size(), " entries; at most ",
                                              kMaxListEntries,
                                              " (name a directory or a glob instead)"));
      }
      for (size_t i = 0; i < v.items.size(); ++i) {
        std::string one;
        FP8RT_RETURN_IF_ERROR(strict::String(&one)(v.items[i], StrCat(path, "[", i, "]")));
        out->push_back(std::move(one));
      }
      return Status::Ok();
    };
  }
  static strict::Reader ReaderFor(int* out) { return strict::Integer(out); }
  static strict::Reader ReaderFor(int64_t* out) { return strict::Integer(out); }
  static strict::Reader ReaderFor(uint64_t* out) {
    return [out](const strict::Value& v, const std::string& path) -> Status {
      int64_t x = 0;
      FP8RT_RETURN_IF_ERROR(strict::Integer(&x, 0)(v, path));
      *out = static_cast<uint64_t>(x);
      return Status::Ok();
    };
  }
  static strict::Reader ReaderFor(float* out) { return strict::Number(out); }
  static strict::Reader ReaderFor(double* out) { return strict::Number(out); }
  static strict::Reader ReaderFor(bool* out) { return strict::Bool(out); }
  static strict::Reader ReaderFor(ZeroStage* out) {
    return [out](const strict::Value& v, const std::string& path) -> Status {
      if (v.kind == strict::Kind::kBool) {
        out->stage = v.b ? 1 : 0;
        return Status::Ok();
      }
      if (v.kind == strict::Kind::kInt && !v.overflow && (v.i == 0 || v.i == 1 || v.i == 3)) {
        out->stage = static_cast<int>(v.i);
        return Status::Ok();
      }
      return Status::InvalidArgument(
          StrCat(path, " = ", v.Describe(), " is not a ZeRO stage; expected false (none), true "
                 "or 1 (ZeRO-1: the optimizer state sharded) or 3 (ZeRO-3: the weights, gradients "
                 "and optimizer state sharded)"));
    };
  }
  static strict::Reader ReaderFor(Precision* out) {
    return Enum(out, {Precision::kFp8, Precision::kBf16, Precision::kFp32}, PrecisionName);
  }
  static strict::Reader ReaderFor(Arch* out) {
    return Enum(out, {Arch::kGpt2, Arch::kLlama}, ArchName);
  }
  static strict::Reader ReaderFor(ScalingMode* out) {
    return Enum(out, {ScalingMode::kDelayed, ScalingMode::kCurrent, ScalingMode::kBlock},
                ScalingModeName);
  }
  static strict::Reader ReaderFor(AmaxAlgo* out) {
    return Enum(out, {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}, AmaxAlgoName);
  }
  static strict::Reader ReaderFor(Fp8Recipe* out) {
    return Enum(out, {Fp8Recipe::kHybrid, Fp8Recipe::kE4M3}, Fp8RecipeName);
  }

  std::vector<Readers> frames_{1};
};

// Schema -> JSON, every key (defaults included), in the schema's order. Floats are written as
// their shortest decimal form, so they read back as the same float and look as a person wrote
// them (0.0003, not 0.00030000001424923539).
class ConfigWriter {
 public:
  template <typename T>
  void Field(const char* key, T* v) {
    (*frames_.back())[key] = Json(*v);
  }
  void Section(const char* key, const std::function<void()>& body) {
    nlohmann::ordered_json& parent = *frames_.back();
    parent[key] = nlohmann::ordered_json::object();
    frames_.push_back(&parent[key]);
    body();
    frames_.pop_back();
  }
  nlohmann::ordered_json root = nlohmann::ordered_json::object();

 private:
  static nlohmann::ordered_json Json(const std::string& s) { return s; }
  // A list of one is written as its string (as most configs give it).
  static nlohmann::ordered_json Json(const std::vector<std::string>& v) {
    if (v.size() == 1) return v[0];
    return nlohmann::ordered_json(v);
  }
  static nlohmann::ordered_json Json(int x) { return x; }
  static nlohmann::ordered_json Json(int64_t x) { return x; }
  static nlohmann::ordered_json Json(uint64_t x) { return x; }
  static nlohmann::ordered_json Json(bool x) { return x; }
  static nlohmann::ordered_json Json(ZeroStage z) {
    return z.stage == 3 ? nlohmann::ordered_json(3) : nlohmann::ordered_json(z.stage == 1);
  }
  static nlohmann::ordered_json Json(double x) { return x; }
  static nlohmann::ordered_json Json(float x) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
    return ec == std::errc() ? std::strtod(std::string(buf, end).c_str(), nullptr)
                             : static_cast<double>(x);
  }
  static nlohmann::ordered_json Json(Precision p) { return PrecisionName(p); }
  static nlohmann::ordered_json Json(Arch a) { return ArchName(a); }
  static nlohmann::ordered_json Json(ScalingMode m) { return ScalingModeName(m); }
  static nlohmann::ordered_json Json(AmaxAlgo a) { return AmaxAlgoName(a); }
  static nlohmann::ordered_json Json(Fp8Recipe r) { return Fp8RecipeName(r); }

  std::vector<nlohmann::ordered_json*> frames_{&root};
};

}  // namespace

std::vector<InputPath> RunConfig::Inputs() {
  std::vector<InputPath> out;
  for (auto [key, list] :
       {std::pair{"data.train", &data.train}, std::pair{"data.val", &data.val}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      out.push_back({list->size() == 1 ? std::string(key) : StrCat(key, "[", i, "]"),
                     InputKind::kDataShards, &(*list)[i], data.format});
    }
  }
  out.push_back({"data.tokenizer", InputKind::kTokenizer, &data.tokenizer, ""});
  out.push_back({"train.init_from", InputKind::kHfDirectory, &train.init_from, ""});
  return out;
}

std::vector<ConstInputPath> RunConfig::Inputs() const {
  std::vector<ConstInputPath> out;
  for (const InputPath& p : const_cast<RunConfig*>(this)->Inputs()) {
    out.push_back({p.key, p.kind, p.path, p.format});
  }
  return out;
}

void RunConfig::ResolveInputs(const std::string& base_dir) {
  // ("" is the current directory: a config named without a directory.)
  std::error_code ec;
  const std::filesystem::path base =
      std::filesystem::absolute(base_dir.empty() ? std::string(".") : base_dir, ec);
  for (const InputPath& p : Inputs()) {
    if (!p.path->empty() && std::filesystem::path(*p.path).is_relative()) {
      *p.path = (base / *p.path).lexically_normal().string();
    }
  }
}

Result<RunConfig> ReadRunConfig(const strict::Value& root, const std::string& what) {
  if (root.kind == strict::Kind::kNull) return Status::InvalidArgument(StrCat(what, " is empty"));
  if (root.kind != strict::Kind::kMap) {
    return Status::InvalidArgument(
        StrCat(what, " is ", strict::KindName(root.kind), "; expected a mapping of fields"));
  }
  RunConfig c;
  ConfigReader reader;
  Schema(c, reader);
  FP8RT_RETURN_IF_ERROR(strict::ReadFields(root, "", reader.top()));
  FP8RT_RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<RunConfig> ParseRunConfig(const std::string& yaml_text, const std::string& what) {
  FP8RT_ASSIGN_OR_RETURN(const strict::Value root, strict::Parse(yaml_text, what));
  return ReadRunConfig(root, what);
}

std::string RunConfigToJson(const RunConfig& config) {
  RunConfig c = config;
  ConfigWriter writer;
  Schema(c, writer);
  return writer.root.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Result<RunConfig> LoadRunConfig(const std::string& path) {
  FP8RT_ASSIGN_OR_RETURN(const std::string text,
                         ReadRegularFile(path, "config file", {.max_bytes = kMaxConfigBytes}));
  auto r = ParseRunConfig(text, "config");
  if (!r.ok()) return Status(r.status().code(), StrCat(path, ": ", r.status().message()));
  // Input paths (RunConfig::Inputs) are relative to the config file's directory.
  r->ResolveInputs(std::filesystem::path(path).parent_path().string());
  return r;
}

}  // namespace fp8rt
