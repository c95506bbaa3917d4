// What a run will allocate, per rank, before it runs (fp8train --plan): the model's own set-up
// code (Gpt<Ops, T>::Setup, the code a run executes) is run over memory that is only reserved,
// never touched, with groups of ranks that only know their size, so the plan is the allocation
// by construction, category by category (--memory-report's names). For a GPU the attention is
// planned as cuDNN's or fp8rt's flash kernels run it (a log-sum-exp saved per query); what the
// plan leaves out is said in `left_out`.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"
#include "runtime/gpt.h"

namespace fp8rt {

// The model options a run of `c` in precision `p` builds (without its groups of ranks and the
// attention choice): the trainer's and the plan's.
ModelOptions ModelOptionsFor(const RunConfig& c, Precision p);

struct MemoryPlan {
  int ranks = 1, dp = 1, tp = 1;
  bool gpu = true;
  Precision precision = Precision::kFp8;
  std::vector<std::pair<std::string, size_t>> categories;  // as GptModel::MemoryReport
  size_t total = 0;                                        // their sum: model_gib's bytes
  std::string left_out;  // what a rank uses besides, not in the plan
};

// The plan of rank 0 of `ranks` (dp x parallel.tp; every rank's is the same size) running `c` in
// `precision` on a GPU (`gpu`) or the CPU. Refusals are the run's own (a shape ZeRO-1 cannot
// split, a tp that does not divide the ranks).
Result<MemoryPlan> PlanMemory(const RunConfig& c, Precision precision, int ranks, bool gpu);

// The plan as a table (GiB), with the total and what is left out.
std::string FormatMemoryPlan(const MemoryPlan& plan, const RunConfig& c);

}  // namespace fp8rt
