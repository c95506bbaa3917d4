// fp8train's checkpoints: what is saved (master weights, AdamW moments, data cursor, the FP8 scale
// state) and how several ranks share the writing: whole-model files from one rank, or one shard
// per rank under TP or ZeRO-1 with one manifest, put together again on resume whatever the new dp
// and tp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/gpt.h"
#include "runtime/scale_store.h"
#include "runtime/trainer.h"

namespace fp8rt {

// Where this rank sits in the job: dp x tp ranks, rank = dp_rank * tp + tp_rank; rank 0 leads.
// dp, dp_rank: the ranks that hold one copy of the (ZeRO-sharded) state and this rank's place
// among them; under hybrid sharding (parallel.shard_group) one group of them, replica saying
// which (group 0 writes the shards; every group reads them).
struct RankPlace {
  int dp = 1, tp = 1, dp_rank = 0, tp_rank = 0, replica = 0;
  bool zero = false;
  bool lead = true;
};

std::string ScaleStorePath(const std::string& checkpoint_dir);
// What must match on resume (model shape, batch, seed, the FP8 recipe).
std::map<std::string, std::string> Fingerprint(const RunConfig& c, Precision p);
// A CRC-32C of every FP8 tensor's scale state, compared across ranks.
uint32_t HashScaleRecords(const std::vector<TensorScaleRecord>& recs);

// Every rank calls it when the checkpoint is sharded (tp > 1 or ZeRO-1); otherwise only the lead
// needs to (others return at once).
Status SaveCheckpoint(const TrainOptions& o, Precision p, GptModel& model, int64_t step,
                      const DataCursor& cursor, const RankPlace& place);
// Where a resume's checkpoint load went (seconds), and what it read.
struct LoadTimes {
  int64_t bytes = 0;      // the checkpoint files read (all of them: every rank reads every part)
  double read_s = 0;      // reading and checking them
  double assemble_s = 0;  // putting the whole model's arrays together from the parts
  double import_s = 0;    // the scale state, and this rank's part into the model
  // With data.on_change new_epoch: what changed in the training shards since the checkpoint
  // (the run goes on at the next epoch); "" when nothing did.
  std::string data_changed;
};
// `on_progress`: called as the checkpoint is read (runtime/checkpoint.h); `times`: filled when
// given. `place`: this rank's place in the grid; when the checkpoint was written by the same grid
// only the parts this rank takes are read (all of its TP part's master shards, its own moments).
// Null: every part.
Result<int64_t> Restore(const TrainOptions& o, Precision p, GptModel& model, DataLoader& loader,
                        const std::function<void()>& on_progress = {}, LoadTimes* times = nullptr,
                        const RankPlace* place = nullptr);

// The model's shape a checkpoint was written for (from its fingerprint), or Corruption.
Result<ModelConfig> CheckpointModelConfig(const Checkpoint& ck);

// The names of the saved arrays, and the file of one rank's shard of one of them.
inline const char* const kArrayNames[3] = {"master", "adam_m", "adam_v"};
inline std::string ShardFileName(const std::string& which, int dp_rank, int tp_rank) {
  return StrCat(which, ".dp", dp_rank, ".tp", tp_rank, ".bin");
}
// The whole-model array `which` (master, adam_m or adam_v; gpt_detail::Layout order) of a
// checkpoint, whatever wrote it: the whole-model file, or every shard put together (the model's
// shape from the fingerprint, the shard layout from the state).
// A part the reader skipped (Checkpoint::skipped) reads as zeros; one the manifest does not
// list is an error.
Result<std::vector<float>> CheckpointArray(const Checkpoint& ck, const std::string& which);

}  // namespace fp8rt
