// Validation loss: the mean loss of the model over held-out tokens (data.val), the same tokens
// at every evaluation, forward only. Reported as val_loss every train.eval_every steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"
#include "runtime/data.h"
#include "runtime/gpt.h"

namespace fp8rt {

class Validator {
 public:
  // Loads data.val (in data.format). Null when the config names no validation set. Refuses a set
  // with a token outside the vocabulary or fewer tokens than one (batch_size x seq_len + 1)
  // micro-batch, naming the file.
  // `exact`: data.val lists the shards input confinement checked (OpenDataset).
  static Result<std::unique_ptr<Validator>> Create(const RunConfig& config, bool exact = false);

  // The mean loss over the held-out micro-batches: consecutive windows of seq_len + 1 tokens
  // from the start of the file, batch_size windows per micro-batch. Every rank evaluates all of
  // them (tensor-parallel ranks together), so every rank gets the same number. Does not touch the
  // FP8 scaling state (GptModel::Forward leaves no amax behind).
  // `tick`, when given, is called after each held-out micro-batch (the trainer's liveness).
  Result<double> Evaluate(GptModel& model, const std::function<void()>& tick = {});

  int64_t tokens() const { return int64_t{batches_} * B_ * T_; }  // predicted per evaluation
  int micro_batches() const { return batches_; }

 private:
  Validator(TokenDataset data, int B, int T, int batches)
      : data_(std::move(data)), B_(B), T_(T), batches_(batches) {}
  TokenDataset data_;
  int B_, T_, batches_;
};

// Is `step` an evaluation step? Every eval_every steps (0: never mid-run) and the run's last.
inline bool IsEvalStep(const TrainConfig& t, int64_t step, int64_t last) {
  return step == last || (t.eval_every > 0 && step % t.eval_every == 0);
}

}  // namespace fp8rt
