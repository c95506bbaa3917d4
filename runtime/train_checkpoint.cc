// fp8train's checkpoints (runtime/train_checkpoint.h).
#include "runtime/train_checkpoint.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/crc32c.h"
#include "runtime/checkpoint_saver.h"
#include "runtime/gpt_layout.h"

namespace fp8rt {
namespace {

Result<std::vector<float>> Floats(const Checkpoint& ck, const char* name) {
  const CheckpointBlob* b = ck.Find(name);
  if (b == nullptr || b->bytes.size() % 4 != 0) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, " lacks a valid ", name));
  }
  std::vector<float> v(b->bytes.size() / 4);
  std::memcpy(v.data(), b->bytes.data(), b->bytes.size());
  return v;
}

}  // namespace

std::string ScaleStorePath(const std::string& dir) {
  return (std::filesystem::path(dir) / "scales").string();
}

std::map<std::string, std::string> Fingerprint(const RunConfig& c, Precision p) {
  std::map<std::string, std::string> f = {
      {"model.n_layer", std::to_string(c.model.n_layer)},
      {"model.n_embd", std::to_string(c.model.n_embd)},
      {"model.n_head", std::to_string(c.model.n_head)},
      {"model.block_size", std::to_string(c.model.block_size)},
      {"model.vocab_size", std::to_string(c.model.vocab_size)},
      // (absent from checkpoints older than model.arch: those are gpt2 with F = 4C)
      {"model.arch", ArchName(c.model.arch)},
      {"model.n_kv_head", std::to_string(c.model.kv_heads())},
      {"model.ffn_hidden", std::to_string(c.model.ffn())},
      {"model.rope_theta", StrCat(c.model.rope_theta)},
      {"train.batch_size", std::to_string(c.train.batch_size)},
      {"train.seq_len", std::to_string(c.train.seq_len)},
      {"train.grad_accum", std::to_string(c.train.grad_accum)},
      {"train.seed", std::to_string(c.train.seed)},
  };
  if (p == Precision::kFp8) {
    f["fp8.recipe"] = Fp8RecipeName(c.fp8.scaling.recipe);
    f["fp8.history_len"] = std::to_string(c.fp8.scaling.history_len);
    f["fp8.amax_algo"] = AmaxAlgoName(c.fp8.scaling.algo);
    f["fp8.margin"] = std::to_string(c.fp8.scaling.margin);
    f["fp8.layers"] = StrCat(c.fp8.qkv, c.fp8.attn_proj, c.fp8.fc, c.fp8.fc_proj, c.fp8.lm_head);
  }
  return f;
}

// CRC-32C over every record's name, ring position, scale, scale_inv and history, bit for bit.
// Not the amax being accumulated for the next update: under ZeRO-1 each rank has cast only its
// rows of the weights when the check runs, and the next amax reduction makes those agree.
uint32_t HashScaleRecords(const std::vector<TensorScaleRecord>& recs) {
  uint32_t crc = 0;
  for (const auto& r : recs) {
    crc = Crc32c(r.name.data(), r.name.size(), crc);
    crc = Crc32c(&r.pos, sizeof r.pos, crc);
    crc = Crc32c(&r.scale, sizeof r.scale, crc);
    crc = Crc32c(&r.scale_inv, sizeof r.scale_inv, crc);
    crc = Crc32c(r.amax_history.data(), r.amax_history.size() * sizeof(float), crc);
  }
  return crc;
}

// One checkpoint, written now: the saver's snapshot, write and commit, waited for
// (runtime/checkpoint_saver.h). A failed write is this function's error.
Status SaveCheckpoint(const TrainOptions& o, Precision p, GptModel& model, int64_t step,
                      const DataCursor& cursor, const RankPlace& place) {
  if (!(place.tp > 1 || place.zero) && !place.lead) return Status::Ok();
  CheckpointSaver saver(o, p, place, &model);
  std::optional<SaveReport> done;
  FP8RT_RETURN_IF_ERROR(saver.Begin(step, cursor, &done));
  FP8RT_RETURN_IF_ERROR(saver.Finish(&done));
  if (done && !done->error.empty()) return Status::IOError(done->error);
  return Status::Ok();
}

// Restores weights, moments, data cursor and FP8 scale state; returns the checkpoint's step.
// Whatever dp, tp and ZeRO wrote the checkpoint, the whole model is put together first and the
// model takes its part (so a run resumes at another dp or tp).
Result<int64_t> Restore(const TrainOptions& o, Precision p, GptModel& model, DataLoader& loader,
                        const std::function<void()>& on_progress, LoadTimes* times,
                        const RankPlace* place) {
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  LoadTimes lt;
  auto t0 = clock::now();
  auto fp = Fingerprint(o.config, p);
  if (o.reset_fp8_history) {
    for (auto it = fp.begin(); it != fp.end();) {
      it = it->first.rfind("fp8.", 0) == 0 ? fp.erase(it) : std::next(it);
    }
  }
  // Written by this grid: only the parts this rank takes. (Any other grid: every part, put
  // together whole first.)
  WantedFile wanted;
  if (place != nullptr) {
    wanted = [place](const std::map<std::string, std::string>& state, const std::string& name) {
      auto at = [&state](const char* key) {
        auto it = state.find(key);
        return it == state.end() ? std::string() : it->second;
      };
      if (at("shards.dp") != std::to_string(place->dp) ||
          at("shards.tp") != std::to_string(place->tp) ||
          at("shards.zero") != (place->zero ? "1" : "0")) {
        return true;
      }
      for (const char* a : {"master", "adam_m", "adam_v"}) {
        for (int d = 0; d < place->dp; ++d) {
          for (int t = 0; t < place->tp; ++t) {
            if (name != ShardFileName(a, d, t)) continue;
            if (t != place->tp_rank) return false;
            return std::string(a) == "master" || !place->zero || d == place->dp_rank;
          }
        }
      }
      return true;
    };
  }
  FP8RT_ASSIGN_OR_RETURN(Checkpoint ck,
                         ReadCheckpoint(o.checkpoint_dir, -1, fp, on_progress, wanted));
  lt.read_s = since(t0);
  for (const auto& b : ck.blobs) lt.bytes += static_cast<int64_t>(b.bytes.size());
  t0 = clock::now();
  FP8RT_ASSIGN_OR_RETURN(auto master, CheckpointArray(ck, "master"));
  FP8RT_ASSIGN_OR_RETURN(auto m, CheckpointArray(ck, "adam_m"));
  FP8RT_ASSIGN_OR_RETURN(auto v, CheckpointArray(ck, "adam_v"));
  ck.blobs.clear();
  ck.blobs.shrink_to_fit();
  lt.assemble_s = since(t0);
  if (on_progress) on_progress();
  t0 = clock::now();
  if (static_cast<int64_t>(master.size()) != model.num_params()) {
    return Status::FailedPrecondition(StrCat("checkpoint step ", ck.step, " holds ", master.size(),
                                             " parameters, this model has ", model.num_params()));
  }
  DataCursor cursor;
  try {
    cursor.epoch = std::stoull(ck.state.at("data.epoch"));
    cursor.index = std::stoull(ck.state.at("data.index"));
  } catch (...) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": data cursor missing"));
  }
  if (cursor.epoch >= (uint64_t{1} << 62) || cursor.index >= (uint64_t{1} << 62)) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": data cursor out of range"));
  }
  // The cursor counts windows of the shards it was written over (checkpoints from before the
  // shard record have none: not checked).
  if (auto it = ck.state.find("data.shards"); it != ck.state.end()) {
    const std::string changed = loader.data().CompareShardList(it->second);
    if (!changed.empty() && o.config.data.on_change != "new_epoch") {
      return Status::FailedPrecondition(
          StrCat("checkpoint step ", ck.step, " was written over other training data: ", changed,
                 ". Its data cursor means nothing over these shards; to go on over them from a new "
                 "epoch, set data.on_change: new_epoch"));
    }
    if (!changed.empty()) {
      lt.data_changed = changed;
      cursor = DataCursor{cursor.epoch + 1, 0, ""};
    }
  }
  const bool ckpt_fp8 = ck.state.count("precision") && ck.state.at("precision") == "fp8";
  std::vector<TensorScaleRecord> scales;
  if (p == Precision::kFp8 && ckpt_fp8 && !o.reset_fp8_history) {
    auto store = ScaleStore::OpenReadOnly(ScaleStorePath(o.checkpoint_dir));
    if (!store.ok()) {
      return Status::Corruption(StrCat("checkpoint step ", ck.step, ": ", store.status().message(),
                                       " (use --reset-fp8-history to recalibrate)"));
    }
    auto got = (*store)->Get(ck.step);
    if (!got.ok()) {
      return Status(got.status().code(),
                    StrCat(got.status().message(), " in ", ScaleStorePath(o.checkpoint_dir),
                           " (use --reset-fp8-history to recalibrate)"));
    }
    scales = std::move(*got);
  }
  // Everything is read and checked; only now is the model touched.
  FP8RT_RETURN_IF_ERROR(model.ImportState(master, m, v));
  if (!scales.empty()) FP8RT_RETURN_IF_ERROR(model.ImportScales(scales));
  if (o.reset_fp8_history) FP8RT_RETURN_IF_ERROR(model.ResetFp8History());
  loader.set_cursor(cursor);
  lt.import_s = since(t0);
  if (times != nullptr) *times = lt;
  return ck.step;
}

Result<ModelConfig> CheckpointModelConfig(const Checkpoint& ck) {
  ModelConfig m;
  try {
    const auto& f = ck.fingerprint;
    m.n_layer = std::stoi(f.at("model.n_layer"));
    m.n_embd = std::stoi(f.at("model.n_embd"));
    m.n_head = std::stoi(f.at("model.n_head"));
    m.block_size = std::stoi(f.at("model.block_size"));
    m.vocab_size = std::stoi(f.at("model.vocab_size"));
    if (f.count("model.arch")) {
      const std::string arch = f.at("model.arch");
      if (arch != "gpt2" && arch != "llama") throw std::invalid_argument(arch);
      m.arch = arch == "llama" ? Arch::kLlama : Arch::kGpt2;
      m.n_kv_head = std::stoi(f.at("model.n_kv_head"));
      m.ffn_hidden = std::stoi(f.at("model.ffn_hidden"));
      m.rope_theta = std::stof(f.at("model.rope_theta"));
    }
  } catch (...) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": the model shape is missing"));
  }
  if (m.n_layer < 1 || m.n_embd < 1 || m.n_head < 1 || m.n_embd % m.n_head != 0 ||
      m.block_size < 1 || m.vocab_size < 1 || m.kv_heads() < 1 || m.n_head % m.kv_heads() != 0 ||
      m.ffn() < 1 || !(m.rope_theta > 0)) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": model shape ", m.n_layer,
                                     " x ", m.n_embd, " (", m.n_head, " heads, T ", m.block_size,
                                     ", V ", m.vocab_size, ") is not a model"));
  }
  return m;
}

Result<std::vector<float>> CheckpointArray(const Checkpoint& ck, const std::string& which) {
  if (ck.state.count("shards.tp") == 0) return Floats(ck, (which + ".bin").c_str());
  FP8RT_ASSIGN_OR_RETURN(const ModelConfig m, CheckpointModelConfig(ck));
  int dp = 0, tp = 0;
  bool zero = false;
  try {
    dp = std::stoi(ck.state.at("shards.dp"));
    tp = std::stoi(ck.state.at("shards.tp"));
    zero = ck.state.at("shards.zero") == "1";
  } catch (...) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": the shard layout is missing"));
  }
  if (dp < 1 || tp < 1 || m.n_head % tp != 0) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, ": shard layout dp ", dp,
                                     " x tp ", tp, " does not fit the model"));
  }
  const gpt_detail::Layout part(m, tp);
  const int64_t n = zero ? gpt_detail::ZeroShards(m, part, dp).total : part.total;
  // Each part is read where it lies in its blob (no copy; a blob's bytes are allocated with the
  // alignment of any scalar).
  std::map<std::pair<int, int>, const float*> owned;
  for (int t = 0; t < tp; ++t) {
    for (int d = 0; d < (zero ? dp : 1); ++d) {
      const std::string name = ShardFileName(which, d, t);
      const CheckpointBlob* b = ck.Find(name);
      if (b == nullptr && ck.skipped.count(name) != 0) {
        owned[{d, t}] = nullptr;  // (not this rank's: zeros it never reads)
        continue;
      }
      if (b == nullptr || b->bytes.size() % 4 != 0) {
        return Status::Corruption(StrCat("checkpoint step ", ck.step, " lacks a valid ", name));
      }
      const auto values = static_cast<int64_t>(b->bytes.size() / 4);
      if (values != n) {
        return Status::Corruption(StrCat("checkpoint step ", ck.step, ": ", name, " holds ", values,
                                         " values, the shard layout needs ", n));
      }
      owned[{d, t}] = reinterpret_cast<const float*>(b->bytes.data());
    }
  }
  std::vector<float> whole(static_cast<size_t>(gpt_detail::Layout(m).total), 0.0f);
  gpt_detail::AssembleWhole(
      m, dp, tp, zero,
      [&](int d, int t) {
        return owned.at({d, t});
      },
      whole.data());
  return whole;
}

}  // namespace fp8rt
