// Precision names, the compute-capability rules and the precision decision (common/precision.h).
#include "common/precision.h"

namespace fp8rt {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp8:
      return "fp8";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& s, const char* field) {
  for (Precision p : {Precision::kFp8, Precision::kBf16, Precision::kFp32}) {
    if (s == PrecisionName(p)) return p;
  }
  return Status::InvalidArgument(StrCat(field, " = '", s, "' is not one of: fp8, bf16, fp32"));
}

int MinComputeCapability(Precision p) {
  switch (p) {
    case Precision::kFp8:
      return kFp8MinComputeCapability;
    case Precision::kBf16:
      return kBf16MinComputeCapability;
    case Precision::kFp32:
      return 0;
  }
  return 0;
}

std::string FormatComputeCapability(int cc) { return StrCat(cc / 10, ".", cc % 10); }

CcRange ComputeCapabilities(Precision p, ScalingMode scaling) {
  if (p == Precision::kFp8 && scaling == ScalingMode::kBlock) {
    return {kFp8BlockComputeCapability, kFp8BlockComputeCapability};
  }
  return {MinComputeCapability(p)};
}

std::string PrecisionNeeds(Precision p, ScalingMode scaling) {
  if (p == Precision::kFp8 && scaling == ScalingMode::kBlock) {
    return StrCat("fp8.scaling: block needs compute capability ",
                  FormatComputeCapability(kFp8BlockComputeCapability), " (Hopper)");
  }
  if (p == Precision::kFp32) return "FP32 runs anywhere";
  return StrCat(p == Precision::kFp8 ? "FP8" : "BF16", " needs compute capability ",
                FormatComputeCapability(MinComputeCapability(p)));
}

const char* FallbackName(Fallback f) {
  switch (f) {
    case Fallback::kBf16:
      return "bf16";
    case Fallback::kWait:
      return "wait";
    case Fallback::kFail:
      return "fail";
  }
  return "?";
}

Result<Fallback> ParseFallback(const std::string& s, const char* field) {
  for (Fallback f : {Fallback::kBf16, Fallback::kWait, Fallback::kFail}) {
    if (s == FallbackName(f)) return f;
  }
  return Status::InvalidArgument(StrCat(field, " = '", s, "' is not one of: bf16, wait, fail"));
}

const char* PrecisionSourceName(PrecisionSource s) {
  switch (s) {
    case PrecisionSource::kConfig:
      return "config";
    case PrecisionSource::kOverride:
      return "override";
    case PrecisionSource::kFallback:
      return "fallback";
  }
  return "?";
}

PrecisionRequest RequestPrecision(Precision config, std::optional<Precision> override_precision) {
  if (override_precision) return {*override_precision, PrecisionSource::kOverride};
  return {config, PrecisionSource::kConfig};
}

Result<PrecisionDecision> DecidePrecision(const PrecisionRequest& request, ScalingMode scaling,
                                          int cc, const std::string& gpus, bool fallback_allowed) {
  PrecisionDecision d;
  d.precision = request.precision;
  d.source = request.source;
  // CPU slots (cc 0) run every precision: FP8 is emulated.
  const auto runs = [&](Precision p) {
    return cc == 0 || ComputeCapabilities(p, scaling).Contains(cc);
  };
  if (runs(request.precision)) {
    d.reason = StrCat("running ", PrecisionName(request.precision), " (from the ",
                      PrecisionSourceName(request.source), ")");
    return d;
  }
  const std::string why = StrCat(PrecisionNeeds(request.precision, scaling), " (", gpus, ": ",
                                 FormatComputeCapability(cc), ")");
  if (!fallback_allowed) return Status::FailedPrecondition(why);
  d.precision = request.precision == Precision::kFp8 && runs(Precision::kBf16) ? Precision::kBf16
                                                                               : Precision::kFp32;
  d.source = PrecisionSource::kFallback;
  d.reason = StrCat(why, "; running ", PrecisionName(d.precision), " (fallback)");
  return d;
}

}  // namespace fp8rt
