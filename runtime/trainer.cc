// The training loop.
#include "runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/gpt.h"
#include "runtime/scale_store.h"

namespace fp8rt {
namespace {

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

std::vector<uint8_t> Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Result<std::vector<float>> Floats(const Checkpoint& ck, const char* name) {
  const CheckpointBlob* b = ck.Find(name);
  if (b == nullptr || b->bytes.size() % 4 != 0) {
    return Status::Corruption(StrCat("checkpoint step ", ck.step, " lacks a valid ", name));
  }
  std::vector<float> v(b->bytes.size() / 4);
  std::memcpy(v.data(), b->bytes.data(), b->bytes.size());
  return v;
}

// Every rank calls it under ZeRO-1 or TP (ExportState all-gathers the parts); only `write`
// writes. The checkpoint is the whole model whatever the parallelism, so a run resumes with
// another dp or tp.
Status SaveCheckpoint(const TrainOptions& o, Precision p, GptModel& model, int64_t step,
                      const DataCursor& cursor, bool write = true) {
  Checkpoint ck;
  ck.step = step;
  ck.fingerprint = Fingerprint(o.config, p);
  ck.state = {{"step", std::to_string(step)},
              {"data.epoch", std::to_string(cursor.epoch)},
              {"data.index", std::to_string(cursor.index)},
              {"precision", PrecisionName(p)}};
  std::vector<float> master, m, v;
  FP8RT_RETURN_IF_ERROR(model.ExportState(&master, &m, &v));
  if (!write) return Status::Ok();
  ck.blobs.push_back({"master.bin", Bytes(master)});
  ck.blobs.push_back({"adam_m.bin", Bytes(m)});
  ck.blobs.push_back({"adam_v.bin", Bytes(v)});
  if (p == Precision::kFp8) {
    // Scales first: a checkpoint that LATEST names always has its scale state.
    std::filesystem::create_directories(o.checkpoint_dir);
    FP8RT_ASSIGN_OR_RETURN(auto store, ScaleStore::Open(ScaleStorePath(o.checkpoint_dir), true));
    FP8RT_ASSIGN_OR_RETURN(auto scales, model.ExportScales());
    FP8RT_RETURN_IF_ERROR(store->Put(step, scales));
  }
  return CheckpointWriter(o.checkpoint_dir).Write(ck);
}

// Restores weights, moments, data cursor and FP8 scale state; returns the checkpoint's step.
Result<int64_t> Restore(const TrainOptions& o, Precision p, GptModel& model, DataLoader& loader) {
  auto fp = Fingerprint(o.config, p);
  if (o.reset_fp8_history) {
    for (auto it = fp.begin(); it != fp.end();) {
      it = it->first.rfind("fp8.", 0) == 0 ? fp.erase(it) : std::next(it);
    }
  }
  FP8RT_ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(o.checkpoint_dir, -1, fp));
  FP8RT_ASSIGN_OR_RETURN(auto master, Floats(ck, "master.bin"));
  FP8RT_ASSIGN_OR_RETURN(auto m, Floats(ck, "adam_m.bin"));
  FP8RT_ASSIGN_OR_RETURN(auto v, Floats(ck, "adam_v.bin"));
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
  return ck.step;
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

}  // namespace

float LearningRate(const TrainConfig& t, int64_t step) {
  if (t.warmup_steps > 0 && step <= t.warmup_steps) {
    return t.lr * static_cast<float>(step) / static_cast<float>(t.warmup_steps);
  }
  const double span = std::max<int64_t>(1, t.total_steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return static_cast<float>(t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

Result<TrainResult> RunTraining(const TrainOptions& o, const DeviceInfo& device) {
  const RunConfig& c = o.config;
  TrainResult result;
  const PrecisionDecision pd = DecidePrecision(o.precision.value_or(c.precision), device);
  result.precision = pd.precision;
  result.fallback_reason = pd.fallback_reason;
  const int ranks = o.world != nullptr ? o.world->size() : 1;
  const int rank = o.world != nullptr ? o.world->rank() : 0;
  const bool lead = rank == 0;  // writes metrics, progress and checkpoints
  std::ostream* const progress = lead ? o.progress : nullptr;
  std::ostream* const metrics = lead ? o.metrics : nullptr;
  if (!pd.fallback_reason.empty() && progress) {
    *progress << "warning: " << pd.fallback_reason << "\n";
  }

  FP8RT_ASSIGN_OR_RETURN(TokenDataset data, TokenDataset::Load(c.data.train_path, c.data.format));
  if (data.max_token() >= c.model.vocab_size) {
    return Status::InvalidArgument(StrCat("corpus '", c.data.train_path, "' has token ",
                                          data.max_token(), " >= model.vocab_size ",
                                          c.model.vocab_size));
  }
  const int tp = c.parallel.tp;
  if (ranks % tp != 0) {
    return Status::InvalidArgument(StrCat("parallel.tp is ", tp, " but the launcher started ",
                                          ranks, " rank(s), not a multiple of it"));
  }
  const int dp = c.parallel.dp == 0 ? ranks / tp : c.parallel.dp;
  if (dp * tp != ranks) {
    return Status::InvalidArgument(StrCat("parallel.dp is ", dp, " but the launcher started ",
                                          ranks, " rank(s); dp x tp (tp = ", tp,
                                          ") must equal the number of ranks (or leave dp at 0)"));
  }
  // The grid: rank = dp_rank * tp + tp_rank, so a replica's TP ranks are neighbours (one node).
  const int dp_rank = rank / tp;
  const bool zero = c.parallel.zero && dp > 1;
  const bool all_save = zero || tp > 1;  // every rank takes part in a checkpoint (all-gathers)
  std::unique_ptr<comm::Communicator> dp_group, tp_group;
  if (tp > 1) {
    FP8RT_ASSIGN_OR_RETURN(tp_group, o.world->comm().Split(dp_rank, rank, "tp"));
    if (dp > 1) {
      FP8RT_ASSIGN_OR_RETURN(dp_group, o.world->comm().Split(rank % tp, rank, "dp"));
    }
  }
  DataLoader loader(&data, c.train.batch_size, c.train.seq_len, c.train.seed, dp_rank, dp);
  FP8RT_RETURN_IF_ERROR(loader.Init());
  if (progress) {
    if (tp > 1) *progress << "tensor parallel: " << tp << " ranks per replica\n";
    *progress << "global batch: " << dp << " (dp) x " << c.train.batch_size << " (batch_size) x "
              << c.train.grad_accum
              << " (grad_accum) = " << int64_t{dp} * c.train.batch_size * c.train.grad_accum
              << " sequences of " << c.train.seq_len << " tokens per step";
    if (o.world != nullptr) {
      *progress << "; " << ranks << " rank(s) via " << LauncherName(o.world->launch().launcher)
                << ", collectives on " << o.world->comm().backend();
    }
    *progress << "\n";
    if (c.parallel.zero && dp == 1) {
      *progress << "parallel.zero: a single rank has no peers to shard the optimizer state with; "
                   "running without ZeRO-1\n";
    }
  }

  ModelOptions mo;
  mo.model = c.model;
  mo.precision = pd.precision;
  mo.fp8 = c.fp8;
  mo.B = c.train.batch_size, mo.T = c.train.seq_len, mo.grad_accum = c.train.grad_accum;
  mo.grad_clip = c.train.grad_clip, mo.weight_decay = c.train.weight_decay;
  mo.beta1 = c.train.beta1, mo.beta2 = c.train.beta2, mo.eps = c.train.eps;
  mo.attention = o.attention;
  mo.world = o.world != nullptr && ranks > 1 ? &o.world->comm() : nullptr;
  mo.dp = dp == 1 ? nullptr : tp > 1 ? dp_group.get() : mo.world;
  mo.tp = tp_group.get();
  mo.grad_bucket_bytes = static_cast<int64_t>(c.parallel.bucket_mb * 1048576.0);
  mo.zero = c.parallel.zero;
  mo.grad_reduce_bf16 = c.parallel.grad_reduce_dtype == "bf16";
  std::unique_ptr<GptModel> model;
  if (device.is_cpu) {
    FP8RT_ASSIGN_OR_RETURN(model, CreateCpuGpt(mo));
  } else {
    FP8RT_ASSIGN_OR_RETURN(model, CreateCudaGpt(mo, device.ordinal));
  }
  FP8RT_RETURN_IF_ERROR(model->InitRandom(c.train.seed));
  result.fp8_weights = model->num_fp8_weights();
  result.attention_kernel = model->attention_kernel();
  if (progress) *progress << "attention: " << result.attention_kernel << "\n";

  int64_t step = 0;
  if (o.resume) {
    if (o.checkpoint_dir.empty()) {
      return Status::InvalidArgument("--resume needs --checkpoint-dir");
    }
    FP8RT_ASSIGN_OR_RETURN(step, Restore(o, pd.precision, *model, loader));
  }
  const int64_t stop = o.stop_step >= 0 ? o.stop_step : c.train.total_steps;
  result.first_step = step + 1;
  result.last_step = step;

  const int64_t M = int64_t{c.train.batch_size} * c.train.seq_len;
  std::vector<int32_t> x(static_cast<size_t>(M * c.train.grad_accum)), y(x.size());
  const double flops_per_token = 6.0 * static_cast<double>(c.model.num_params()) +
                                 12.0 * c.model.n_layer * c.model.n_embd * c.train.seq_len;
  while (step < stop) {
    // Alone, a signal stops before the next step; with several ranks the ranks vote in the
    // step (StepStats::stop) and all stop after the same one, so none waits on a stopped peer.
    if (ranks == 1 && o.stop_flag && o.stop_flag->load()) {
      result.stopped_by_signal = true;
      break;
    }
    ++step;
    // --profile-ops skips this invocation's first two steps (cuBLASLt heuristics, warm caches).
    if (o.profile_ops && step == result.first_step + 2) model->EnableOpProfile(true);
    for (int micro = 0; micro < c.train.grad_accum; ++micro) {
      loader.NextBatch(x.data() + micro * M, y.data() + micro * M);
    }
    const float lr = LearningRate(c.train, step);
    const auto t0 = std::chrono::steady_clock::now();
    StepStats st;
    st.stop = o.stop_flag != nullptr && o.stop_flag->load();
    {
      // A step that waits on a dead or hung peer ends the job at the collective timeout.
      comm::FailureMonitor::Scope scope(o.world != nullptr ? o.world->monitor() : nullptr,
                                        StrCat("training step ", step));
      FP8RT_RETURN_IF_ERROR(model->Step(static_cast<int>(step), lr, x.data(), y.data(), &st));
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.last_step = step;
    result.losses.push_back(st.loss);
    result.grad_norms.push_back(st.grad_norm);
    result.weight_casts.push_back(st.weight_casts);
    if (!std::isfinite(st.loss)) {
      return Status::Internal(StrCat("loss is ", st.loss, " at step ", step));
    }
    const double tok_s = static_cast<double>(M * c.train.grad_accum * dp) / sec;
    // tokens_per_s is the job's (every replica's tokens); MFU is per GPU (rank).
    const double mfu = device.bf16_peak_flops > 0
                           ? tok_s / ranks * flops_per_token / device.bf16_peak_flops
                           : 0.0;
    // Every rank's scales and histories must be bit-identical: compare a hash of them.
    const int every = c.parallel.scale_check_every;
    if (ranks > 1 && pd.precision == Precision::kFp8 && every > 0 &&
        (step % every == 0 || step == stop)) {
      FP8RT_ASSIGN_OR_RETURN(auto recs, model->ExportScales());
      FP8RT_ASSIGN_OR_RETURN(auto hashes, model->GatherAcrossReplicas(HashScaleRecords(recs)));
      std::string differ;
      for (size_t r = 1; r < hashes.size(); ++r) {
        if (hashes[r] != hashes[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
      }
      if (!differ.empty()) {
        return Status::Internal(
            StrCat("after step ", step, " the FP8 scales and amax histories of rank(s) ", differ,
                   " differ from rank 0's (a missed amax reduction or a rank that skipped a step); "
                   "stopping rather than training replicas that have drifted apart"));
      }
    }
    if (metrics && (step % c.train.log_every == 0 || step == stop)) {
      nlohmann::json j = {{"step", step},
                          {"loss", st.loss},
                          {"lr", lr},
                          {"grad_norm", st.grad_norm},
                          {"tokens_per_s", tok_s},
                          {"mfu", device.bf16_peak_flops > 0 ? nlohmann::json(mfu) : nullptr},
                          {"precision", PrecisionName(pd.precision)},
                          {"step_ms", sec * 1e3},
                          {"fp8_weight_casts", st.weight_casts},
                          {"fp8_weights", model->num_fp8_weights()},
                          {"model_gib", model->allocated_bytes() / 1073741824.0}};
      if (ranks > 1) {
        j["dp"] = dp;
        j["tp"] = tp;
        j["amax_collectives"] = st.amax_collectives;
        j["amax_reduce_ms"] = st.amax_reduce_ms;
        j["grad_reduce_ms"] = st.grad_reduce_ms;
        j["grad_buckets"] = st.grad_buckets;
      }
      if (!device.is_cpu) j["device_used_gib"] = DeviceMemoryUsedBytes(device) / 1073741824.0;
      if (!pd.fallback_reason.empty()) j["fallback_reason"] = pd.fallback_reason;
      *metrics << j.dump() << "\n" << std::flush;
    }
    if (progress && (step % c.train.log_every == 0 || step == stop)) {
      *progress << "step " << step << "/" << stop << "  loss " << std::fixed << std::setprecision(4)
                << st.loss << "  lr " << std::scientific << std::setprecision(2) << lr
                << std::defaultfloat << "  " << std::setprecision(4) << tok_s << " tok/s  "
                << sec * 1e3 << " ms\n";
    }
    if (c.fp8.telemetry_every > 0 && pd.precision == Precision::kFp8 &&
        step % c.fp8.telemetry_every == 0 && metrics) {
      FP8RT_ASSIGN_OR_RETURN(auto rows, model->Telemetry());
      nlohmann::json t = nlohmann::json::array();
      for (const auto& r : rows) {
        t.push_back({{"tensor", r.name},
                     {"amax", r.amax_history_max},
                     {"scale", r.scale},
                     {"saturated", r.saturated}});
      }
      *metrics << nlohmann::json({{"step", step}, {"fp8_telemetry", t}}).dump() << "\n";
    }
    if (ranks > 1 && st.stop) {
      result.stopped_by_signal = true;
      break;
    }
    if ((lead || all_save) && !o.checkpoint_dir.empty() && c.train.checkpoint_every > 0 &&
        step % c.train.checkpoint_every == 0 && step < stop) {
      FP8RT_RETURN_IF_ERROR(SaveCheckpoint(o, pd.precision, *model, step, loader.cursor(), lead));
    }
  }
  if (o.profile_ops) result.op_profile = model->OpProfile();
  if ((lead || all_save) && !o.checkpoint_dir.empty() && result.last_step >= result.first_step) {
    FP8RT_RETURN_IF_ERROR(
        SaveCheckpoint(o, pd.precision, *model, result.last_step, loader.cursor(), lead));
  }
  return result;
}

Status InspectScales(const std::string& dir, int64_t step, std::ostream& out) {
  FP8RT_ASSIGN_OR_RETURN(auto store, ScaleStore::OpenReadOnly(ScaleStorePath(dir)));
  FP8RT_ASSIGN_OR_RETURN(auto steps, store->Steps());
  if (steps.empty()) return Status::NotFound(StrCat("no FP8 scale state in '", dir, "'"));
  if (step < 0) step = steps.back();
  FP8RT_ASSIGN_OR_RETURN(auto recs, store->Get(step));
  out << "checkpointed steps with FP8 scale state:";
  for (int64_t s : steps) out << " " << s;
  out << "\n" << FormatScaleRecords(step, recs);
  return Status::Ok();
}

}  // namespace fp8rt
