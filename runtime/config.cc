// YAML -> RunConfig through the strict reader (common/strict_yaml.h), then range checks.
#include "runtime/config.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

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
    const int64_t per_layer = C                  // ln1
                              + QKV * C          // qkv
                              + C * C            // attn proj
                              + C                // ln2
                              + 2 * F * C        // gate/up
                              + F * C;           // down
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
    return Status::InvalidArgument(StrCat("model.arch llama: the head size n_embd / n_head = ",
                                          model.head_size(),
                                          " must be even and at most 256 (rotary embeddings)"));
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
  FP8RT_RETURN_IF_ERROR(Range("train.eval_every", train.eval_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.eval_tokens", train.eval_tokens, 1, 1e12));
  FP8RT_RETURN_IF_ERROR(Range("train.sample_every", train.sample_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("train.sample_tokens", train.sample_tokens, 1, 1e6));
  FP8RT_RETURN_IF_ERROR(Range("fp8.history_len", fp8.scaling.history_len, 1, 1024));
  FP8RT_RETURN_IF_ERROR(Range("fp8.margin", fp8.scaling.margin, 0, 32));
  FP8RT_RETURN_IF_ERROR(Range("fp8.telemetry_every", fp8.telemetry_every, 0, 1e9));
  FP8RT_RETURN_IF_ERROR(Range("parallel.dp", parallel.dp, 0, 1 << 20));
  FP8RT_RETURN_IF_ERROR(Range("parallel.tp", parallel.tp, 1, 1024));
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
  FP8RT_RETURN_IF_ERROR(Range("parallel.collective_timeout_s", parallel.collective_timeout_s, 1, 1e7));
  FP8RT_RETURN_IF_ERROR(Range("parallel.scale_check_every", parallel.scale_check_every, 0, 1e9));
  if (parallel.grad_reduce_dtype != "fp32" && parallel.grad_reduce_dtype != "bf16") {
    return Status::InvalidArgument(StrCat("parallel.grad_reduce_dtype: '",
                                          parallel.grad_reduce_dtype, "' is not one of: fp32, bf16"));
  }
  if (parallel.cpu_backend != "auto" && parallel.cpu_backend != "mpi" &&
      parallel.cpu_backend != "gloo") {
    return Status::InvalidArgument(StrCat("parallel.cpu_backend: '", parallel.cpu_backend,
                                          "' is not one of: auto, mpi, gloo"));
  }
  return Status::Ok();
}

Result<RunConfig> ParseRunConfig(const std::string& yaml_text) {
  using namespace strict;
  FP8RT_ASSIGN_OR_RETURN(const Value root, Parse(yaml_text, "config"));
  if (root.kind == Kind::kNull) return Status::InvalidArgument("config is empty");
  RunConfig c;
  std::string precision = "fp8";
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.train;
  auto& f = c.fp8;
  auto& par = c.parallel;
  int64_t seed = static_cast<int64_t>(t.seed);
  auto fields = [](std::vector<std::pair<std::string, Reader>> readers) -> Reader {
    return [readers = std::move(readers)](const Value& v, const std::string& path) {
      return ReadFields(v, path, readers);
    };
  };
  const Status read =
      ReadFields(root, "",
                 {{"name", String(&c.name)},
                  {"precision", String(&precision)},
                  {"model", fields({{"n_layer", Integer(&m.n_layer)},
                                    {"n_embd", Integer(&m.n_embd)},
                                    {"n_head", Integer(&m.n_head)},
                                    {"block_size", Integer(&m.block_size)},
                                    {"vocab_size", Integer(&m.vocab_size)},
                                    {"arch", Enum(&m.arch, {Arch::kGpt2, Arch::kLlama}, ArchName)},
                                    {"n_kv_head", Integer(&m.n_kv_head)},
                                    {"ffn_hidden", Integer(&m.ffn_hidden)},
                                    {"rope_theta", Number(&m.rope_theta)}})},
                  {"data", fields({{"train", String(&d.train_path)},
                                   {"val", String(&d.val_path)},
                                   {"format", String(&d.format)}})},
                  {"train", fields({{"batch_size", Integer(&t.batch_size)},
                                    {"seq_len", Integer(&t.seq_len)},
                                    {"grad_accum", Integer(&t.grad_accum)},
                                    {"total_steps", Integer(&t.total_steps)},
                                    {"lr", Number(&t.lr)},
                                    {"min_lr", Number(&t.min_lr)},
                                    {"warmup_steps", Integer(&t.warmup_steps)},
                                    {"weight_decay", Number(&t.weight_decay)},
                                    {"beta1", Number(&t.beta1)},
                                    {"beta2", Number(&t.beta2)},
                                    {"eps", Number(&t.eps)},
                                    {"grad_clip", Number(&t.grad_clip)},
                                    {"seed", Integer(&seed, 0)},
                                    {"checkpoint_every", Integer(&t.checkpoint_every)},
                                    {"log_every", Integer(&t.log_every)},
                                    {"eval_every", Integer(&t.eval_every)},
                                    {"eval_tokens", Integer(&t.eval_tokens)},
                                    {"init_from", String(&t.init_from)},
                                    {"sample_every", Integer(&t.sample_every)},
                                    {"sample_tokens", Integer(&t.sample_tokens)},
                                    {"recompute", Bool(&t.recompute)},
                                    {"share_gradient_memory", Bool(&t.share_gradient_memory)}})},
                  {"fp8", fields({{"scaling", Enum(&f.mode, {ScalingMode::kDelayed,
                                                             ScalingMode::kCurrent,
                                                             ScalingMode::kBlock},
                                                   ScalingModeName)},
                                  {"history_len", Integer(&f.scaling.history_len)},
                                  {"amax_algo", Enum(&f.scaling.algo, {AmaxAlgo::kMax,
                                                                       AmaxAlgo::kMostRecent},
                                                     AmaxAlgoName)},
                                  {"margin", Integer(&f.scaling.margin)},
                                  {"recipe", Enum(&f.scaling.recipe,
                                                  {Fp8Recipe::kHybrid, Fp8Recipe::kE4M3},
                                                  Fp8RecipeName)},
                                  {"telemetry_every", Integer(&f.telemetry_every)},
                                  {"first_step_current", Bool(&f.first_step_current)},
                                  {"keep_weight_transpose", Bool(&f.keep_weight_transpose)},
                                  {"cache_weights", Bool(&f.cache_weights)},
                                  {"gelu_input_fp8", Bool(&f.gelu_input_fp8)},
                                  {"layers", fields({{"qkv", Bool(&f.qkv)},
                                                     {"attn_proj", Bool(&f.attn_proj)},
                                                     {"fc", Bool(&f.fc)},
                                                     {"fc_proj", Bool(&f.fc_proj)},
                                                     {"lm_head", Bool(&f.lm_head)}})}})},
                  {"parallel", fields({{"dp", Integer(&par.dp)},
                                       {"tp", Integer(&par.tp)},
                                       {"zero", Bool(&par.zero)},
                                       {"grad_reduce_dtype", String(&par.grad_reduce_dtype)},
                                       {"sparse_embedding_grad", Bool(&par.sparse_embedding_grad)},
                                       {"bucket_mb", Number(&par.bucket_mb)},
                                       {"collective_timeout_s", Integer(&par.collective_timeout_s)},
                                       {"cpu_backend", String(&par.cpu_backend)},
                                       {"scale_check_every", Integer(&par.scale_check_every)}})}});
  FP8RT_RETURN_IF_ERROR(read);
  t.seed = static_cast<uint64_t>(seed);
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
  // Data paths and train.init_from (common/config_paths.h's keys) are relative to the config
  // file's directory.
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  for (std::string* p : {&r->data.train_path, &r->data.val_path, &r->train.init_from}) {
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (base / *p).string();
  }
  return r;
}

}  // namespace fp8rt
