// Delayed-scaling config checks, the state layout, and the reference (CPU) state init and
// per-step amax-history/scale update.
#include "kernels/scaling.h"

#include <cmath>
#include <limits>

namespace fp8rt {
namespace {

size_t AlignUp(size_t x) { return (x + 15) & ~size_t{15}; }

}  // namespace

Status ValidateScalingState(const char* op, const ScalingState& s) {
  if (s.num_tensors < 0) {
    return Status::InvalidArgument(StrCat(op, ": num_tensors=", s.num_tensors, " must be >= 0"));
  }
  if (s.history_len < 1 || s.history_len > 1024) {
    return Status::InvalidArgument(
        StrCat(op, ": history_len=", s.history_len, " is outside the allowed range 1..1024"));
  }
  if (s.pos == nullptr) return Status::InvalidArgument(StrCat(op, ": pos is null"));
  if (s.scale_inv_stride < 1) {
    return Status::InvalidArgument(
        StrCat(op, ": scale_inv_stride=", s.scale_inv_stride, " must be >= 1"));
  }
  if (s.num_tensors > 0 && (s.amax == nullptr || s.amax_history == nullptr || s.scale == nullptr ||
                            s.scale_inv == nullptr || s.formats == nullptr)) {
    return Status::InvalidArgument(
        StrCat(op, ": amax, amax_history, scale, scale_inv and formats must be non-null for ",
               s.num_tensors, " tensors"));
  }
  return Status::Ok();
}

Status ValidateScalingUpdate(const char* op, const ScalingState& s,
                             const DelayedScalingConfig& config) {
  FP8RT_RETURN_IF_ERROR(config.Validate());
  FP8RT_RETURN_IF_ERROR(ValidateScalingState(op, s));
  if (s.history_len != config.history_len) {
    return Status::InvalidArgument(StrCat(op, ": state history_len=", s.history_len,
                                          " differs from config history_len=", config.history_len,
                                          "; they must be equal"));
  }
  return Status::Ok();
}

ScalingStateLayout ScalingStateLayout::For(int num_tensors, int history_len, int scale_inv_stride) {
  ScalingStateLayout l;
  l.num_tensors = num_tensors;
  l.history_len = history_len;
  l.scale_inv_stride = scale_inv_stride;
  const size_t stride = scale_inv_stride > 0 ? static_cast<size_t>(scale_inv_stride) : 1;
  const size_t n = num_tensors > 0 ? static_cast<size_t>(num_tensors) : 0;
  const size_t h = history_len > 0 ? static_cast<size_t>(history_len) : 0;
  size_t off = 0;
  l.amax = off;
  off = AlignUp(off + n * sizeof(float));
  l.amax_history = off;
  off = AlignUp(off + h * n * sizeof(float));
  l.scale = off;
  off = AlignUp(off + n * sizeof(float));
  l.scale_inv = off;
  off = AlignUp(off + n * stride * sizeof(float));
  l.formats = off;
  off = AlignUp(off + n * sizeof(uint8_t));
  l.pos = off;
  off = AlignUp(off + sizeof(int));
  l.total_bytes = off;
  return l;
}

ScalingState ScalingStateLayout::Bind(void* base) const {
  char* b = static_cast<char*>(base);
  ScalingState s;
  s.num_tensors = num_tensors;
  s.history_len = history_len;
  s.amax = reinterpret_cast<float*>(b + amax);
  s.amax_history = reinterpret_cast<float*>(b + amax_history);
  s.scale = reinterpret_cast<float*>(b + scale);
  s.scale_inv = reinterpret_cast<float*>(b + scale_inv);
  s.scale_inv_stride = scale_inv_stride;
  s.formats = reinterpret_cast<const uint8_t*>(b + formats);
  s.pos = reinterpret_cast<int*>(b + pos);
  return s;
}

namespace cpu {

Status InitScalingState(const ScalingState& s) {
  FP8RT_RETURN_IF_ERROR(ValidateScalingState("InitScalingState", s));
  const int64_t n = s.num_tensors;
  for (int64_t i = 0; i < n * s.history_len; ++i) s.amax_history[i] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s.amax[i] = 0.0f;
    s.scale[i] = 1.0f;
    s.scale_inv[static_cast<size_t>(i) * s.scale_inv_stride] = 1.0f;
  }
  *s.pos = 0;
  return Status::Ok();
}

Status AmaxNanToInf(float* amax, int64_t n) {
  if (n < 0 || (n > 0 && amax == nullptr)) {
    return Status::InvalidArgument(
        StrCat("AmaxNanToInf: n=", n, " with amax=", amax == nullptr ? "null" : "set"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(amax[i])) amax[i] = std::numeric_limits<float>::infinity();
  }
  return Status::Ok();
}

Status UpdateDelayedScaling(const ScalingState& s, const DelayedScalingConfig& config) {
  FP8RT_RETURN_IF_ERROR(ValidateScalingUpdate("UpdateDelayedScaling", s, config));
  const int h_len = s.history_len;
  const int p = *s.pos;
  if (p < 0 || p >= h_len) {
    return Status::InvalidArgument(
        StrCat("UpdateDelayedScaling: pos=", p, " is outside the ring 0..", h_len - 1));
  }
  const int64_t n = s.num_tensors;
  for (int64_t i = 0; i < n; ++i) {
    const float a = s.amax[i];
    s.amax_history[p * n + i] = a;
    float used = a;
    if (config.algo == AmaxAlgo::kMax) {
      // fmax ignores NaN entries: one NaN step must not freeze the scale for H steps.
      used = s.amax_history[i];
      for (int h = 1; h < h_len; ++h) used = std::fmax(used, s.amax_history[h * n + i]);
    }
    const float fp8_max = Fp8MaxFinite(static_cast<Fp8Format>(s.formats[i]));
    const float scale = ComputeScale(used, s.scale[i], fp8_max, config.margin);
    s.scale[i] = scale;
    s.scale_inv[static_cast<size_t>(i) * s.scale_inv_stride] = ScaleInv(scale);
    s.amax[i] = 0.0f;
  }
  *s.pos = p + 1 == h_len ? 0 : p + 1;
  return Status::Ok();
}

}  // namespace cpu
}  // namespace fp8rt
