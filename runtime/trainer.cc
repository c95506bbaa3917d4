// The training loop.
#include "runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "runtime/checkpoint.h"
#include "runtime/checkpoint_saver.h"
#include "runtime/data.h"
#include "runtime/evaluate.h"
#include "runtime/generate.h"
#include "runtime/gpt.h"
#include "runtime/huggingface.h"
#include "runtime/memory_plan.h"
#include "runtime/scale_store.h"
#include "runtime/train_checkpoint.h"

namespace fp8rt {

float LearningRate(const TrainConfig& t, int64_t step) {
  if (t.warmup_steps > 0 && step <= t.warmup_steps) {
    return t.lr * static_cast<float>(step) / static_cast<float>(t.warmup_steps);
  }
  const double span = std::max<int64_t>(1, t.total_steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return static_cast<float>(t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

namespace {

// Every rank's FP8 scales and amax histories must be bit-identical: compares a hash of them and
// stops the job naming the ranks that differ from rank 0.
Status CheckScalesAgree(GptModel& model, int64_t step) {
  FP8RT_ASSIGN_OR_RETURN(auto recs, model.ExportScales());
  FP8RT_ASSIGN_OR_RETURN(auto hashes, model.GatherAcrossReplicas(HashScaleRecords(recs)));
  std::string differ;
  for (size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differ.empty()) return Status::Ok();
  return Status::Internal(
      StrCat("after step ", step, " the FP8 scales and amax histories of rank(s) ", differ,
             " differ from rank 0's (a missed amax reduction or a rank that skipped a step); "
             "stopping rather than training replicas that have drifted apart"));
}

// FP8RT_STATE_HASHES diagnostics: every rank's hashes of its state (GptModel::StateHashes), in
// rank order, for the metrics line; under plain data parallelism all must be equal. With
// FP8RT_STATE_DUMP=DIR each rank also writes its scale state as --inspect-scales prints it.
Result<nlohmann::json> StateHashDiagnostics(GptModel& model, int64_t step, int rank) {
  nlohmann::json out;
  FP8RT_ASSIGN_OR_RETURN(auto hashes, model.StateHashes());
  for (const auto& [name, h] : hashes) {
    FP8RT_ASSIGN_OR_RETURN(out[name], model.GatherAcrossReplicas(h));
  }
  if (const char* dump = std::getenv("FP8RT_STATE_DUMP"); dump != nullptr && *dump != '\0') {
    FP8RT_ASSIGN_OR_RETURN(auto recs, model.ExportScales());
    std::ofstream f(StrCat(dump, "/rank", rank, ".step", step, ".txt"));
    f << std::setprecision(9);
    for (const auto& r : recs) {
      f << r.name << " pos " << r.pos << " scale " << r.scale << " scale_inv " << r.scale_inv
        << " history";
      for (int h = 0; h < r.pos && h < static_cast<int>(r.amax_history.size()); ++h) {
        f << " " << r.amax_history[h];
      }
      f << "\n";
    }
  }
  return out;
}

// Where the checkpoint snapshot lives (or will, from the first checkpoint on) and the pinned host
// memory it holds: a line of the memory table.
std::string SnapshotMemoryLine(const GptModel::SnapshotMemory& m, bool cpu) {
  constexpr double kGiB = 1073741824.0;
  std::ostringstream out;
  out << "  " << std::left << std::setw(26) << "checkpoint snapshot" << std::right << std::fixed
      << std::setprecision(3) << std::setw(9) << m.bytes / kGiB << " GiB  ";
  if (!m.taken) {
    out << (cpu ? "(from the first checkpoint on, beside the model)\n"
                : "(from the first checkpoint on: on the device where it keeps 1 GiB free beside "
                  "it, else in pinned host memory)\n");
  } else {
    out << (m.on_device      ? "on the device (counted above)"
            : m.beside_model ? "beside the model (counted above)"
                             : "in pinned host memory")
        << "; pinned host memory " << m.pinned_host_bytes / kGiB << " GiB\n";
  }
  return out.str();
}

// The model's memory by category (GptModel::MemoryReport) and the device's use: a metrics line
// after this invocation's first step, and with --memory-report a table on the progress stream.
// `checkpoints`: this rank will snapshot its state for checkpoints (what that takes is shown).
void ReportMemory(const GptModel& model, const DeviceInfo& device, int64_t step, bool table,
                  bool checkpoints, std::ostream* metrics, std::ostream* progress) {
  constexpr double kGiB = 1073741824.0;
  const auto cats = model.MemoryReport();
  const double used = device.is_cpu ? 0.0 : DeviceMemoryUsedBytes(device);
  const GptModel::SnapshotMemory snap = model.snapshot_memory();
  if (metrics) {
    nlohmann::json by = nlohmann::json::object();
    for (const auto& [name, bytes] : cats) by[name] = bytes;
    nlohmann::json j = {{"step", step},
                        {"memory_bytes", by},
                        {"model_gib", model.allocated_bytes() / kGiB},
                        {"in_gradient_memory_bytes", model.shared_gradient_bytes()}};
    if (!device.is_cpu) j["device_used_gib"] = used / kGiB;
    if (checkpoints) {
      j["checkpoint_snapshot"] = {{"bytes", snap.bytes},
                                  {"taken", snap.taken},
                                  {"on_device", snap.on_device},
                                  {"pinned_host_bytes", snap.pinned_host_bytes}};
    }
    *metrics << j.dump() << "\n" << std::flush;
  }
  if (!table || progress == nullptr) return;
  std::ostream& out = *progress;
  const auto flags = out.flags();
  out << "memory after step " << step << " (bytes the model allocated, by what they hold):\n";
  for (const auto& [name, bytes] : cats) {
    out << "  " << std::left << std::setw(26) << name << std::right << std::fixed
        << std::setprecision(3) << std::setw(9) << bytes / kGiB << " GiB  " << std::setw(5)
        << std::setprecision(1) << 100.0 * static_cast<double>(bytes) / model.allocated_bytes()
        << "%\n";
  }
  out << "  " << std::left << std::setw(26) << "total (model)" << std::right << std::fixed
      << std::setprecision(3) << std::setw(9) << model.allocated_bytes() / kGiB << " GiB\n";
  if (model.shared_gradient_bytes() > 0) {
    out << "  " << std::left << std::setw(26) << "(in gradient memory)" << std::right
        << std::setw(9) << model.shared_gradient_bytes() / kGiB
        << " GiB  (saved activations in the weight gradients' memory, not counted above)\n";
  }
  if (!device.is_cpu) {
    out << "  " << std::left << std::setw(26) << "device in use (all)" << std::right << std::setw(9)
        << used / kGiB
        << " GiB  (adds the CUDA context, cuBLASLt/cuDNN workspaces, NCCL buffers)\n";
  }
  if (checkpoints) out << SnapshotMemoryLine(snap, device.is_cpu);
  out.flags(flags);
}

struct Run;
void Busy(Run& r, const char* phase);

// What one run holds from its set-up to its end; the loop's phases below read and write it.
struct Run {
  Run(const TrainOptions& options, const DeviceInfo& dev)
      : o(options), c(options.config), device(dev), entered(std::chrono::steady_clock::now()) {}
  const TrainOptions& o;
  const RunConfig& c;
  const DeviceInfo& device;
  std::chrono::steady_clock::time_point entered;  // RunTraining's entry
  PrecisionDecision pd;
  std::string fallback_reason;  // the precision's, when it fell back
  int ranks = 1, rank = 0, dp = 1, tp = 1;
  bool lead = true;  // writes metrics, progress and checkpoints
  bool zero = false;
  bool all_save = false;  // every rank writes its shard of a checkpoint
  RankPlace place;
  std::ostream* progress = nullptr;
  std::ostream* metrics = nullptr;
  // Liveness while no steps are made (Busy): the phase of the last busy line and when.
  std::string busy_phase;
  std::chrono::steady_clock::time_point busy_at;
  int64_t at_step = 0;  // the last step trained
  // This start's phases (the start-up line after the first step): set-up since the process
  // started, the checkpoint load (0: a fresh start).
  double init_s = 0, load_s = 0;
  int64_t load_bytes = 0;  // the checkpoint bytes this rank read
  std::unique_ptr<comm::Communicator> dp_group, tp_group;
  // Hybrid sharding (parallel.shard_group < dp): this rank's shard group and its replicas.
  std::unique_ptr<comm::Communicator> shard_group, replica_group;
  std::unique_ptr<TokenDataset> data;
  std::unique_ptr<Tokenizer> tokenizer;  // data.tokenizer (or bytes): decodes the samples
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<Validator> validator;
  std::unique_ptr<GptModel> model;
  // Writes the checkpoints (runtime/checkpoint_saver.h): with --checkpoint-dir, on rank 0, and on
  // every rank of a sharded checkpoint (TP or ZeRO-1).
  std::unique_ptr<CheckpointSaver> saver;
  // What waits on other ranks (a step, a scale check, an evaluation) runs in a scope of it: a
  // dead or hung peer ends the job at the collective timeout.
  comm::FailureMonitor* monitor = nullptr;
  int64_t stop = 0;  // the last step this invocation runs
  int64_t M = 0;     // tokens per micro-batch
  double flops_per_token = 0;
  long hash_every = 0;  // FP8RT_STATE_HASHES
};

// Liveness while no steps are made, for the node's hang detector (node/progress.h): a
// {"busy": phase, "step": N} metrics line when a phase begins (starting, evaluating,
// checkpointing) and, while it makes progress, at most one a second. Only real progress writes
// one: a process that is stopped, or waits on a peer that is, writes none.
void Busy(Run& r, const char* phase) {
  if (r.metrics == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (r.busy_phase == phase && now - r.busy_at < std::chrono::seconds(1)) return;
  r.busy_phase = phase;
  r.busy_at = now;
  *r.metrics << nlohmann::json({{"busy", phase}, {"step", r.at_step}}).dump() << "\n" << std::flush;
}

// The precision, the data, the rank grid and its groups, the loader: what the model is built on.
Status SetUpGrid(Run& r) {
  const TrainOptions& o = r.o;
  const RunConfig& c = r.c;
  FP8RT_ASSIGN_OR_RETURN(
      r.pd, DecidePrecision(RequestPrecision(c.precision, o.precision), c.fp8.mode, r.device));
  r.fallback_reason = r.pd.source == PrecisionSource::kFallback ? r.pd.reason : std::string();
  r.ranks = o.world != nullptr ? o.world->size() : 1;
  r.rank = o.world != nullptr ? o.world->rank() : 0;
  r.lead = r.rank == 0;
  r.progress = r.lead ? o.progress : nullptr;
  r.metrics = r.lead ? o.metrics : nullptr;
  Busy(r, "starting");
  if (!r.fallback_reason.empty() && r.progress) {
    *r.progress << "warning: " << r.fallback_reason << "\n";
  }

  FP8RT_ASSIGN_OR_RETURN(TokenDataset data, OpenDataset(c, false, o.inputs_confined));
  r.tokenizer = std::make_unique<Tokenizer>(Tokenizer::Bytes());
  if (!c.data.tokenizer.empty()) {
    auto tok = Tokenizer::Load(c.data.tokenizer);
    if (!tok.ok()) {
      return Status(tok.status().code(), StrCat("data.tokenizer: ", tok.status().message()));
    }
    if (tok->vocab_size() > c.model.vocab_size) {
      return Status::InvalidArgument(
          StrCat("data.tokenizer '", c.data.tokenizer, "' has ", tok->vocab_size(),
                 " pieces, more than model.vocab_size ", c.model.vocab_size));
    }
    r.tokenizer = std::make_unique<Tokenizer>(std::move(tok).value());
  }
  r.data = std::make_unique<TokenDataset>(std::move(data));
  Busy(r, "starting");
  FP8RT_ASSIGN_OR_RETURN(r.validator, Validator::Create(c, o.inputs_confined));
  const int ranks = r.ranks, rank = r.rank, tp = c.parallel.tp;
  r.tp = tp;
  if (ranks % tp != 0) {
    return Status::InvalidArgument(StrCat("parallel.tp is ", tp, " but the launcher started ",
                                          ranks, " rank(s), not a multiple of it"));
  }
  const int dp = c.parallel.dp == 0 ? ranks / tp : c.parallel.dp;
  r.dp = dp;
  if (dp * tp != ranks) {
    return Status::InvalidArgument(StrCat("parallel.dp is ", dp, " but the launcher started ",
                                          ranks, " rank(s); dp x tp (tp = ", tp,
                                          ") must equal the number of ranks (or leave dp at 0)"));
  }
  // The grid: rank = dp_rank * tp + tp_rank, so a replica's TP ranks are neighbours (one node).
  const int dp_rank = rank / tp;
  r.zero = c.parallel.zero && dp > 1;
  r.all_save = r.zero || tp > 1;
  // Hybrid sharding: groups of `shard` consecutive data-parallel ranks, each a sharded replica.
  const int shard = c.parallel.shard_group == 0 ? dp : c.parallel.shard_group;
  if (r.zero && (dp % shard != 0 || shard < 2)) {
    return Status::InvalidArgument(StrCat(
        "parallel.shard_group = ", shard, " must be at least 2 and divide the data-parallel size ",
        dp, " (", ranks, " rank(s) / tp ", tp, ")"));
  }
  const bool hybrid = r.zero && shard < dp;
  r.place.dp = hybrid ? shard : dp, r.place.tp = tp;
  r.place.dp_rank = hybrid ? dp_rank % shard : dp_rank, r.place.tp_rank = rank % tp;
  r.place.replica = hybrid ? dp_rank / shard : 0;
  r.place.zero = r.zero, r.place.lead = r.lead;
  if (tp > 1) {
    FP8RT_ASSIGN_OR_RETURN(r.tp_group, o.world->comm().Split(dp_rank, rank, "tp"));
    if (dp > 1) {
      FP8RT_ASSIGN_OR_RETURN(r.dp_group, o.world->comm().Split(rank % tp, rank, "dp"));
    }
  }
  if (hybrid) {  // (colours: one per (group, TP rank) and per (place in the group, TP rank))
    FP8RT_ASSIGN_OR_RETURN(
        r.shard_group, o.world->comm().Split(dp_rank / shard * tp + rank % tp, rank, "shard"));
    FP8RT_ASSIGN_OR_RETURN(
        r.replica_group, o.world->comm().Split(dp_rank % shard * tp + rank % tp, rank, "replica"));
  }
  r.loader = std::make_unique<DataLoader>(r.data.get(), c.train.batch_size, c.train.seq_len,
                                          c.train.seed, dp_rank, dp);
  FP8RT_RETURN_IF_ERROR(r.loader->Init());
  if (std::ostream* progress = r.progress) {
    *progress << "data: " << r.data->size() << " tokens in " << r.data->num_shards()
              << " shard(s), " << r.loader->num_windows() << " windows of " << c.train.seq_len
              << " + 1 tokens\n";
    if (tp > 1) *progress << "tensor parallel: " << tp << " ranks per replica\n";
    if (hybrid) {
      *progress << "hybrid sharding: ZeRO-" << c.parallel.zero.stage << " within groups of "
                << shard << " data-parallel ranks, " << dp / shard
                << " groups holding replicas (gradients all-reduced across them; the token "
                   "embedding's gradient reduced densely)\n";
    }
    *progress << "global batch: " << dp << " (dp) x " << c.train.batch_size << " (batch_size) x "
              << c.train.grad_accum
              << " (grad_accum) = " << int64_t{dp} * c.train.batch_size * c.train.grad_accum
              << " sequences of " << c.train.seq_len << " tokens per step";
    if (o.world != nullptr) {
      *progress << "; " << ranks << " rank(s) via " << LauncherName(o.world->launch().launcher)
                << ", collectives on " << o.world->comm().backend();
    }
    *progress << "\n";
    if (r.validator) {
      *progress << "validation: " << r.validator->tokens() << " held-out tokens of data.val every "
                << c.train.eval_every << " steps and at the end\n";
    }
    if (dp > 1) {
      *progress << "token embedding gradient: "
                << (c.parallel.sparse_embedding_grad
                        ? "sparse (its dense part reduced early, every rank's rows gathered and "
                          "added)"
                        : "dense (reduced after the embedding backward)")
                << "\n";
    }
    if (c.parallel.zero && dp == 1) {
      *progress << "parallel.zero: a single rank has no peers to shard the model's state with; "
                   "running without ZeRO\n";
    }
  }
  return Status::Ok();
}

// The model on the grid, its weights (random, train.init_from, or the checkpoint); returns the
// step it resumes after (0: a fresh start).
Result<int64_t> SetUpModel(Run& r, TrainResult* result) {
  const TrainOptions& o = r.o;
  const RunConfig& c = r.c;
  ModelOptions mo = ModelOptionsFor(c, r.pd.precision);
  mo.attention = o.attention;
  mo.world = o.world != nullptr && r.ranks > 1 ? &o.world->comm() : nullptr;
  mo.dp = r.dp == 1 ? nullptr : r.tp > 1 ? r.dp_group.get() : mo.world;
  if (r.shard_group) mo.dp = r.shard_group.get(), mo.replicas = r.replica_group.get();
  mo.tp = r.tp_group.get();
  if (r.device.is_cpu) {
    FP8RT_ASSIGN_OR_RETURN(r.model, CreateCpuGpt(mo));
  } else {
    FP8RT_ASSIGN_OR_RETURN(r.model, CreateCudaGpt(mo, r.device.ordinal));
  }
  if (!c.train.init_from.empty() && !o.resume) {
    // Continued pretraining: a Hugging Face model's weights (of this arch), fresh AdamW moments
    // and scale state; nothing drawn.
    FP8RT_ASSIGN_OR_RETURN(std::vector<float> master, MasterFromHf(c.model, c.train.init_from));
    FP8RT_RETURN_IF_ERROR(r.model->InitFromWeights(std::move(master)));
    if (r.progress) *r.progress << "init: weights from " << c.train.init_from << "\n";
  } else {
    FP8RT_RETURN_IF_ERROR(r.model->InitRandom(c.train.seed));
  }
  Busy(r, "starting");
  result->fp8_weights = r.model->num_fp8_weights();
  result->attention_kernel = r.model->attention_kernel();
  if (r.progress) *r.progress << "attention: " << result->attention_kernel << "\n";
  const auto loading = std::chrono::steady_clock::now();
  const auto started = o.started == std::chrono::steady_clock::time_point{} ? r.entered : o.started;
  r.init_s = std::chrono::duration<double>(loading - started).count();
  if (!o.resume) return int64_t{0};
  if (o.checkpoint_dir.empty()) return Status::InvalidArgument("--resume needs --checkpoint-dir");
  LoadTimes lt;
  FP8RT_ASSIGN_OR_RETURN(const int64_t step, Restore(
                                                 o, r.pd.precision, *r.model, *r.loader,
                                                 [&r] { Busy(r, "starting"); }, &lt, &r.place));
  r.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - loading).count();
  r.load_bytes = lt.bytes;
  // (every rank: ranks that load slower hold the others' first step)
  if (std::ostream* out = o.progress) {
    const auto flags = out->flags();
    *out << std::fixed << std::setprecision(2) << "rank " << r.rank << ": resume: step " << step
         << " loaded in " << r.load_s << " s: read and checked " << lt.bytes / 1e9 << " GB in "
         << lt.read_s << " s (" << (lt.read_s > 0 ? lt.bytes / 1e9 / lt.read_s : 0.0)
         << " GB/s), put together in " << lt.assemble_s << " s, into the model in " << lt.import_s
         << " s\n";
    out->flags(flags);
  }
  if (r.progress && !lt.data_changed.empty()) {
    *r.progress << "warning: the training data changed since the checkpoint (" << lt.data_changed
                << "); data.on_change is new_epoch: going on from the start of a new epoch\n";
  }
  return step;
}

// After this start's first step: how the start went, for the node (the phases of a recovery,
// node/progress.h) and the user. `at` is when the step ended (seconds since the epoch).
void ReportStartup(Run& r, int64_t step, double first_step_s) {
  const double at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (r.metrics) {
    *r.metrics << nlohmann::json({{"startup",
                                   {{"init_s", r.init_s},
                                    {"load_s", r.load_s},
                                    {"first_step_s", first_step_s},
                                    {"load_bytes", r.load_bytes}}},
                                  {"step", step},
                                  {"at", at}})
                      .dump()
               << "\n"
               << std::flush;
  }
  if (r.progress) {
    const auto flags = r.progress->flags();
    *r.progress << std::fixed << std::setprecision(2) << "started: step " << step << " after "
                << r.init_s + r.load_s + first_step_s << " s (set-up " << r.init_s
                << " s, checkpoint load " << r.load_s << " s, first step " << first_step_s
                << " s)\n";
    r.progress->flags(flags);
  }
}

// After a step: the cross-rank scale check, the metrics line (with the state hashes when asked)
// and the progress line.
Status ReportStep(Run& r, int64_t step, const StepStats& st, float lr, double sec) {
  const RunConfig& c = r.c;
  const double tok_s = static_cast<double>(r.M * c.train.grad_accum * r.dp) / sec;
  // tokens_per_s is the job's (every replica's tokens); MFU is per GPU (rank).
  const double mfu = r.device.bf16_peak_flops > 0
                         ? tok_s / r.ranks * r.flops_per_token / r.device.bf16_peak_flops
                         : 0.0;
  // Every rank's scales and histories must be bit-identical: compare a hash of them.
  const int every = c.parallel.scale_check_every;
  if (r.ranks > 1 && r.pd.precision == Precision::kFp8 && every > 0 &&
      (step % every == 0 || step == r.stop)) {
    comm::FailureMonitor::Scope scope(r.monitor, StrCat("scale check after step ", step));
    FP8RT_RETURN_IF_ERROR(CheckScalesAgree(*r.model, step));
  }
  // Diagnostics (FP8RT_STATE_HASHES=N: every N steps): every rank's hashes of its state.
  nlohmann::json state_hash;
  if (r.hash_every > 0 && (step % r.hash_every == 0 || step == r.stop)) {
    FP8RT_ASSIGN_OR_RETURN(state_hash, StateHashDiagnostics(*r.model, step, r.rank));
  }
  const bool logged = step % c.train.log_every == 0 || step == r.stop;
  if (r.metrics && logged) {
    nlohmann::json j = {{"step", step},
                        {"loss", st.loss},
                        {"lr", lr},
                        {"grad_norm", st.grad_norm},
                        {"tokens_per_s", tok_s},
                        {"mfu", r.device.bf16_peak_flops > 0 ? nlohmann::json(mfu) : nullptr},
                        {"precision", PrecisionName(r.pd.precision)},
                        {"step_ms", sec * 1e3},
                        {"fp8_weight_casts", st.weight_casts},
                        {"fp8_weights", r.model->num_fp8_weights()},
                        {"model_gib", r.model->allocated_bytes() / 1073741824.0}};
    if (r.ranks > 1) {
      j["dp"] = r.dp;
      j["tp"] = r.tp;
      j["amax_collectives"] = st.amax_collectives;
      if (c.fp8.mode == ScalingMode::kCurrent) {
        j["current_amax_collectives"] = st.current_amax_collectives;
      }
      j["amax_reduce_ms"] = st.amax_reduce_ms;
      j["grad_reduce_ms"] = st.grad_reduce_ms;
      j["grad_buckets"] = st.grad_buckets;
      if (r.zero) j["weight_gather_ms"] = st.weight_gather_ms;
    }
    if (!r.device.is_cpu) j["device_used_gib"] = DeviceMemoryUsedBytes(r.device) / 1073741824.0;
    if (!state_hash.is_null()) j["state_hash"] = state_hash;
    if (!r.fallback_reason.empty()) j["fallback_reason"] = r.fallback_reason;
    *r.metrics << j.dump() << "\n" << std::flush;
  }
  if (r.progress && logged) {
    *r.progress << "step " << step << "/" << r.stop << "  loss " << std::fixed
                << std::setprecision(4) << st.loss << "  lr " << std::scientific
                << std::setprecision(2) << lr << std::defaultfloat << "  " << std::setprecision(4)
                << tok_s << " tok/s  " << sec * 1e3 << " ms\n";
  }
  return Status::Ok();
}

// After the report: FP8 telemetry, the held-out evaluation and the text sample, when due.
Status AfterStep(Run& r, int64_t step, TrainResult* result) {
  const RunConfig& c = r.c;
  if (c.fp8.telemetry_every > 0 && r.pd.precision == Precision::kFp8 &&
      step % c.fp8.telemetry_every == 0 && r.metrics) {
    FP8RT_ASSIGN_OR_RETURN(auto rows, r.model->Telemetry());
    nlohmann::json t = nlohmann::json::array();
    for (const auto& row : rows) {
      t.push_back({{"tensor", row.name},
                   {"amax", row.amax_history_max},
                   {"scale", row.scale},
                   {"saturated", row.saturated}});
    }
    *r.metrics << nlohmann::json({{"step", step}, {"fp8_telemetry", t}}).dump() << "\n";
  }
  if (r.validator && IsEvalStep(c.train, step, r.stop)) {
    const auto e0 = std::chrono::steady_clock::now();
    // (it may wait on collectives of the step: ZeRO-1's weight all-gather runs on)
    comm::FailureMonitor::Scope scope(r.monitor, StrCat("evaluation after step ", step));
    Busy(r, "evaluating");
    FP8RT_ASSIGN_OR_RETURN(const double val_loss,
                           r.validator->Evaluate(*r.model, [&r] { Busy(r, "evaluating"); }));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    result->val_losses.emplace_back(step, val_loss);
    if (r.metrics) {
      *r.metrics << nlohmann::json({{"step", step},
                                    {"val_loss", val_loss},
                                    {"val_tokens", r.validator->tokens()},
                                    {"eval_s", s}})
                        .dump()
                 << "\n"
                 << std::flush;
    }
    if (r.progress) {
      *r.progress << "step " << step << "/" << r.stop << "  val_loss " << std::fixed
                  << std::setprecision(4) << val_loss << std::defaultfloat << "  ("
                  << r.validator->tokens() << " held-out tokens, " << std::setprecision(3) << s
                  << " s)\n";
    }
  }
  if (c.train.sample_every > 0 && (step % c.train.sample_every == 0 || step == r.stop)) {
    // Every rank exports the weights (under TP and ZeRO-1 the parts are gathered); the lead
    // samples, the others drop them and wait in the next collective (a large model's sample
    // takes a while on the CPU: keep parallel.collective_timeout_s above it).
    std::vector<float> master;
    FP8RT_RETURN_IF_ERROR(r.model->ExportWeights(&master));
    if (r.progress) {
      SampleOptions so;
      so.max_new_tokens = c.train.sample_tokens, so.seed = c.train.seed + step;
      auto start = PromptTokens(*r.tokenizer, "");
      const auto text = start.ok() ? Generate(c.model, std::move(master), *start, so)
                                   : Result<std::vector<int32_t>>(start.status());
      const std::string raw =
          text.ok() ? r.tokenizer->Decode(*text) : StrCat("(none: ", text.status().message(), ")");
      std::string line;  // one log line: newlines and tabs written as \n and \t
      for (char ch : raw) {
        line += ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : std::string(1, ch);
      }
      *r.progress << "step " << step << "/" << r.stop << "  sample: " << line << "\n";
    }
  }
  return Status::Ok();
}

// A save that finished: its times in the metrics (checkpoint_s, from the snapshot to the commit,
// is what a supervisor allows a preempted job; checkpoint_blocked_s what training waited), or its
// failure: a warning, then train.on_checkpoint_error decides (a stale attempt always stops).
Status ReportSave(Run& r, const std::optional<SaveReport>& done) {
  if (!done) return Status::Ok();
  const SaveReport& s = *done;
  if (!s.error.empty()) {
    if (r.metrics) {
      *r.metrics << nlohmann::json({{"step", s.step}, {"checkpoint_error", s.error}}).dump() << "\n"
                 << std::flush;
    }
    if (r.progress) {
      *r.progress << "warning: the checkpoint of step " << s.step << " failed: " << s.error
                  << " (the last committed checkpoint stands)\n";
    }
    if (s.error_code == StatusCode::kFailedPrecondition) return Status::FailedPrecondition(s.error);
    if (r.c.train.on_checkpoint_error == "stop") {
      return Status(StatusCode::kCheckpointFailed,
                    StrCat("the checkpoint of step ", s.step, " failed: ", s.error,
                           "; stopping (train.on_checkpoint_error: stop)"));
    }
    return Status::Ok();
  }
  if (!s.retention_error.empty() && r.progress) {
    *r.progress << "warning: removing old checkpoints (train.keep_checkpoints) failed: "
                << s.retention_error << "\n";
  }
  if (r.metrics) {
    nlohmann::json line = {{"step", s.step},
                           {"checkpoint_s", s.total_s},
                           {"checkpoint_blocked_s", s.blocked_s},
                           {"checkpoint_phases",
                            {{"snapshot_s", s.snapshot_s},
                             {"write_s", s.write_s},
                             {"fsync_s", s.fsync_s},
                             {"commit_s", s.commit_s}}},
                           {"checkpoint_bytes", s.bytes},
                           {"snapshot_on_device", s.on_device}};
    if (s.disk_bytes > 0) line["checkpoint_disk_bytes"] = s.disk_bytes;
    if (!s.removed.empty()) line["checkpoints_removed"] = s.removed;
    if (!s.retention_error.empty()) line["retention_error"] = s.retention_error;
    *r.metrics << line.dump() << "\n" << std::flush;
  }
  return Status::Ok();
}

// A checkpoint of `step`: the snapshot now, the write while training goes on (or now, with
// train.async_checkpoint: false).
Status CheckpointStep(Run& r, int64_t step) {
  std::optional<SaveReport> done;
  const bool first = !r.model->snapshot_memory().taken;
  FP8RT_RETURN_IF_ERROR(r.saver->Begin(step, r.loader->cursor(), &done));
  if (first && r.o.memory_report && r.progress && r.model->snapshot_memory().taken) {
    *r.progress << "memory at the first checkpoint (step " << step << "):\n"
                << SnapshotMemoryLine(r.model->snapshot_memory(), r.device.is_cpu);
  }
  FP8RT_RETURN_IF_ERROR(ReportSave(r, done));
  if (r.c.train.async_checkpoint) return Status::Ok();
  done.reset();
  FP8RT_RETURN_IF_ERROR(r.saver->Finish(&done));
  if (done) done->blocked_s = done->total_s;  // training waited for all of it
  return ReportSave(r, done);
}

// The run's last checkpoint, of `step`, committed before it returns (a preempted run exits 3
// only after it).
Status FinalCheckpoint(Run& r, int64_t step) {
  std::optional<SaveReport> done;
  if (r.saver->pending_step() != step) {
    FP8RT_RETURN_IF_ERROR(r.saver->Begin(step, r.loader->cursor(), &done));
    FP8RT_RETURN_IF_ERROR(ReportSave(r, done));
    done.reset();
  }
  FP8RT_RETURN_IF_ERROR(r.saver->Finish(&done));
  return ReportSave(r, done);
}

}  // namespace

Result<TrainResult> RunTraining(const TrainOptions& o, const DeviceInfo& device) {
  const RunConfig& c = o.config;
  TrainResult result;
  Run r(o, device);
  FP8RT_RETURN_IF_ERROR(SetUpGrid(r));
  result.precision = r.pd.precision;
  result.fallback_reason = r.fallback_reason;
  FP8RT_ASSIGN_OR_RETURN(int64_t step, SetUpModel(r, &result));
  if (!o.checkpoint_dir.empty() && (r.lead || r.all_save)) {
    r.saver = std::make_unique<CheckpointSaver>(o, r.pd.precision, r.place, r.model.get());
    r.saver->set_on_wait([&r] { Busy(r, "checkpointing"); });
  }
  r.stop = o.stop_step >= 0 ? o.stop_step : c.train.total_steps;
  result.first_step = step + 1;
  result.last_step = step;
  r.at_step = step;
  Busy(r, "starting");  // (the first step calibrates FP8 and picks the kernels)
  r.M = int64_t{c.train.batch_size} * c.train.seq_len;
  std::vector<int32_t> x(static_cast<size_t>(r.M * c.train.grad_accum)), y(x.size());
  r.monitor = o.world != nullptr ? o.world->monitor() : nullptr;
  r.flops_per_token = 6.0 * static_cast<double>(c.model.matmul_params()) +
                      12.0 * c.model.n_layer * c.model.n_embd * c.train.seq_len;
  // Diagnostics: FP8RT_STATE_HASHES=N hashes the state every N steps (and the last).
  if (const char* env = std::getenv("FP8RT_STATE_HASHES"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    r.hash_every = std::strtol(env, &end, 10);
    if (*end != '\0' || r.hash_every < 0) {
      return Status::InvalidArgument(
          StrCat("FP8RT_STATE_HASHES = '", env, "': expected a number of steps (0: off)"));
    }
  }
  // forward -> backward -> reduce -> clip -> update, then what the step reports and triggers.
  while (step < r.stop) {
    // Alone, a signal stops before the next step; with several ranks the ranks vote in the
    // step (StepStats::stop) and all stop after the same one, so none waits on a stopped peer.
    if (r.ranks == 1 && o.stop_flag && o.stop_flag->load()) {
      result.stopped_by_signal = true;
      break;
    }
    ++step;
    // --profile-ops skips this invocation's first two steps (cuBLASLt heuristics, warm caches).
    if (o.profile_ops && step == result.first_step + 2) r.model->EnableOpProfile(true);
    for (int micro = 0; micro < c.train.grad_accum; ++micro) {
      FP8RT_RETURN_IF_ERROR(r.loader->NextBatch(x.data() + micro * r.M, y.data() + micro * r.M));
    }
    const float lr = LearningRate(c.train, step);
    const auto t0 = std::chrono::steady_clock::now();
    StepStats st;
    st.stop = o.stop_flag != nullptr && o.stop_flag->load();
    {
      comm::FailureMonitor::Scope scope(r.monitor, StrCat("training step ", step));
      FP8RT_RETURN_IF_ERROR(r.model->Step(static_cast<int>(step), lr, x.data(), y.data(), &st));
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.last_step = step;
    r.at_step = step;
    r.busy_phase.clear();  // a step line is the liveness now
    result.losses.push_back(st.loss);
    result.grad_norms.push_back(st.grad_norm);
    result.weight_casts.push_back(st.weight_casts);
    if (!std::isfinite(st.loss)) {
      return Status::NonFinite(StrCat("loss is ", st.loss, " at step ", step));
    }
    if (step == result.first_step) {
      ReportMemory(*r.model, device, step, o.memory_report, r.saver != nullptr, r.metrics,
                   r.progress);
    }
    FP8RT_RETURN_IF_ERROR(ReportStep(r, step, st, lr, sec));
    if (step == result.first_step) ReportStartup(r, step, sec);
    FP8RT_RETURN_IF_ERROR(AfterStep(r, step, &result));
    if (r.saver && r.saver->pending()) {  // a save in flight: committed yet?
      std::optional<SaveReport> done;
      FP8RT_RETURN_IF_ERROR(r.saver->Poll(&done));
      FP8RT_RETURN_IF_ERROR(ReportSave(r, done));
    }
    if (r.ranks > 1 && st.stop) {
      result.stopped_by_signal = true;
      break;
    }
    if (r.saver && c.train.checkpoint_every > 0 && step % c.train.checkpoint_every == 0 &&
        step < r.stop) {
      FP8RT_RETURN_IF_ERROR(CheckpointStep(r, step));
    }
  }
  if (o.profile_ops) result.op_profile = r.model->OpProfile();
  if (r.saver && result.last_step >= result.first_step) {
    FP8RT_RETURN_IF_ERROR(FinalCheckpoint(r, result.last_step));
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
