// Precision names and the compute-capability rule.
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

}  // namespace fp8rt
