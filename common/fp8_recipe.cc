// Names of the FP8 recipe's enums and the delayed-scaling config check (common/fp8_recipe.h).
#include "common/fp8_recipe.h"

namespace fp8rt {

const char* ScalingModeName(ScalingMode s) {
  return s == ScalingMode::kCurrent ? "current" : s == ScalingMode::kBlock ? "block" : "delayed";
}
const char* AmaxAlgoName(AmaxAlgo a) { return a == AmaxAlgo::kMax ? "max" : "most_recent"; }
const char* Fp8RecipeName(Fp8Recipe r) { return r == Fp8Recipe::kE4M3 ? "e4m3" : "hybrid"; }

Status DelayedScalingConfig::Validate() const {
  if (history_len < 1 || history_len > 1024) {
    return Status::InvalidArgument(StrCat("DelayedScalingConfig: history_len=", history_len,
                                          " is outside the allowed range 1..1024"));
  }
  if (margin < 0 || margin > 32) {
    return Status::InvalidArgument(
        StrCat("DelayedScalingConfig: margin=", margin, " is outside the allowed range 0..32"));
  }
  if (algo != AmaxAlgo::kMax && algo != AmaxAlgo::kMostRecent) {
    return Status::InvalidArgument(StrCat("DelayedScalingConfig: algo=", static_cast<int>(algo),
                                          " is not kMax (0) or kMostRecent (1)"));
  }
  if (recipe != Fp8Recipe::kE4M3 && recipe != Fp8Recipe::kHybrid) {
    return Status::InvalidArgument(StrCat("DelayedScalingConfig: recipe=", static_cast<int>(recipe),
                                          " is not kE4M3 (0) or kHybrid (1)"));
  }
  return Status::Ok();
}

}  // namespace fp8rt
